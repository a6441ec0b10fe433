//! flashtier's block face: a write-back SSD cache in front of a slow block device, as a
//! [`BlockBackend`](flashtier_backend::BlockBackend). Blocks (default 4 KiB) are flash engine
//! records keyed by LBA; a RAM index maps LBA → (location, version, dirty). Knows nothing of
//! NBD sockets or HTTP: the server serves a [`BlockCache`] over NBD. Internals in depth:
//! docs/block-cache.md.
//!
//! # Layout
//! - [`cache`]: [`BlockCache`], a composition of the components below, and its public API;
//!   `open` (open and recovery), `request` (read, write, waiting for space), `backend` (the
//!   trait impl). `impl BlockCache` lives in these three files only.
//! - `block_io`: `BlockIo` (stripes, append, checked read, backing I/O, FLUSH through
//!   `barrier`: group commit), owning `blocks`
//!   (`Blocks`: the index behind its mutex); `retry`: the one backing retry policy;
//!   [`record`]: every record kind and the one checked read.
//! - `durability`: `Durability` (persisted watermark, `fence`, `warm` records), shared with
//!   `reclaim` (the engine's reclaim callbacks, which wait at `open_gate` until open has
//!   rebuilt the index).
//! - `writeback`: `Writeback` (task, pick, batch, watermark, rate); [`flush`]: flush jobs.
//! - [`switch`]: `ModeSwitch`; `admission` + [`seq`]: what is cached; [`warm`]: warm restart;
//!   `fence` + `fence_found`: backing-write intents and floors (clean blocks survive a crash).
//! - [`index`] + [`lbamap`] + `lbakey`: the LBA index (private fields, methods only; the
//!   table stores no LBA and no clean block's version); `sketch`: how
//!   often blocks were accessed lately (the admission filter); `shift`: when the working
//!   set moved (the policy forgets the old one).
//! - [`tunables`] ([`Mode`], [`FlushOrder`], [`TUNABLES`]), [`stats`], [`mod@error`].
#![deny(unsafe_code)]

mod admission;
mod backend;
mod barrier;
mod block_io;
mod blocks;
pub mod cache;
mod durability;
pub mod error;
mod fence;
mod fence_found;
pub mod flush;
mod geometry;
pub mod index;
mod lbakey;
pub mod lbamap;
mod loccode;
mod log_limit;
mod meta_log;
mod open;
mod open_gate;
mod reclaim;
pub mod record;
mod request;
mod retry;
pub mod seq;
mod shift;
mod sketch;
pub mod stats;
pub mod switch;
pub mod tunables;
pub mod warm;
mod writeback;

pub use cache::{BlockCache, BlockCacheConfig, RecoveryInfo};
pub use error::Error;
pub use flush::FlushState;
pub use open::planned_index_shape;
pub use retry::RETRY_MAX;
pub use stats::BlockStats;
pub use switch::{SwitchPhase, SwitchStatus};
pub use tunables::{FlushOrder, Mode, Refusal, Tunables, TUNABLES};
pub use warm::ShutdownReport;
