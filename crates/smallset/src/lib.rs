//! flashtier's small-object tier: items of a few hundred bytes kept on flash with no RAM
//! entry per object (issue 28). Kangaroo (SOSP 2021): KSet — each key hashes to one 4 KiB
//! set page; RAM holds a 10-byte summary per set (a 64-bit Bloom filter, so most misses cost no read,
//! and 16 hit bits for RRIP eviction) — with KLog in front of it: a small staging
//! buffer builds log pages, appended to an on-flash log whose RAM index costs 1 B a set and
//! 4 B a log entry slot; the log's oldest part is merged into the sets grouped by set, so one
//! page rewrite carries every log object of its set (`klog`). With the log off
//! (`SmallConfig::log_fraction` 0) staged batches go straight to set pages.
//! It knows keys only as bytes; expiry, CAS and flags are the cache's, carried as
//! [`ItemMeta`]. Restarts (`recover`): a clean close merges everything staged and marks the
//! superblock clean, and the next open serves the same items; after a kill the sets that had
//! changes staged in RAM and not yet in the log (the dirty map) are emptied, the rest kept,
//! and the log's recorded window is replayed into its index for the kept sets, so no value a
//! lost staged delete or overwrite had replaced is served; after a power cut it starts empty.
//!
//! # Layout
//! - [`format`]: the set page's byte table, encode and checked decode.
//! - [`superblock`]: page 0's byte table (generation, clean or open, CAS, `flush_all`).
//! - `dirty`: the dirty map (a byte a set on the device: staged changes its page lacks).
//! - `recover`: what an open keeps or empties, the clean close, `flush_all`'s record
//!   ([`Recovered`]).
//! - `summary`: per-set Bloom filters and hit bits.
//! - `staging`: the staging buffer (one entry per key, newest wins, stamps).
//! - `klog`: the on-flash log — append, grouped merge of its oldest segment, lookups.
//! - `logindex`: the log's RAM index (per-set chains of tags over the log's entry slots).
//! - `logscan`: the open-time scan of the log's recorded window after a kill (which pages
//!   are current, which are lost).
//! - `sets`: [`SmallSets`], the tier's handle, and [`SmallStore`], its contract.
//! - `flusher`: the thread that appends to the log (or, without one, merges staged batches
//!   into pages), and the page merge itself (RRIP inside a set).
//! - `walk`: listing the live entries of a range of sets (the cache's dumps, [`Listed`]).
//! - `hugepages`: the fixed arrays of `summary` and `logindex`, optionally on huge pages.
//! - `stats`: the `small_*` counters. [`error`]: [`Error`].
#![deny(unsafe_code)]

mod block_on;
mod config;
mod dirty;
pub mod error;
mod flusher;
pub mod format;
#[allow(unsafe_code)]
mod hugepages;
mod inner;
mod klog;
mod le;
mod logindex;
mod logscan;
mod recover;
mod sets;
mod staging;
mod stats;
mod summary;
pub mod superblock;
mod walk;

pub use block_on::block_on;
pub use config::SmallConfig;
pub use error::Error;
pub use format::ItemMeta;
pub use recover::Recovered;
pub use sets::{CasReserver, Lookup, Room, SmallItem, SmallSets, SmallStore};
pub use staging::Stamp;
pub use summary::BYTES_PER_SET;
pub use walk::Listed;
