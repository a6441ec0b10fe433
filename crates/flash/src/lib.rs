//! flashtier's flash engine: a log of self-describing records on one or more devices. Knows
//! nothing of keys' meaning or of protocols; the user supplies a 64-bit `key_id` (key hash,
//! LBA) with every record and keeps its own index of [`Location`]s. Example on [`Flash`].
//!
//! # Layout
//! - [`engine`]: the public handle [`Flash`] (open, record API, knobs, close); record types
//!   and [`ReclaimHandler`] are in `handler`, re-exported there.
//! - `inner` (the shared core: devices, executor, counters, the state mutex), `state` (what
//!   the mutex guards, in four parts: `segment_table` with `segments` rows and free lists,
//!   `write_queue` with each stream's chunk in `stream`, [`health`], reclaim flags).
//! - `writer` (append, chunk writes, seal, flush), `reader` (checksum-verified reads),
//!   `read_queue` (device reads in flight bounded by `read_queue_limit`; the rest wait),
//!   `reclaimer` (victims, keep/drop), `layout` (superblocks, format) and `recovery`
//!   (segment table at open), `flusher` (old chunks, lost records, due probes), `clock`.
//! - [`probe`] (a device before formatting), [`health`] (device states, syncs),
//!   [`format`](mod@format) (on-flash byte tables, as in `docs/format.md`), [`io`] ([`Device`],
//!   uring/psync executors), [`knobs`], [`config`], [`location`], [`completion`], [`stats`].

#![deny(clippy::undocumented_unsafe_blocks)]
#![warn(missing_docs)]

mod clock;
pub mod completion;
pub mod config;
pub mod engine;
pub mod error;
mod flusher;
pub mod format;
mod handler;
pub mod health;
mod inner;
pub mod io;
pub mod journal;
pub mod knobs;
mod layout;
pub mod location;
pub mod probe;
mod read_queue;
mod reader;
mod reclaimer;
mod recovery;
mod segment_table;
mod segments;
mod size;
mod state;
pub mod stats;
mod stream;
#[cfg(test)]
mod test_core;
mod write_queue;
mod writer;

pub use completion::Completion;
pub use config::{format_size, parse_size, DeviceSpec, FlashConfig, IoBackend, ReclaimPolicy};
pub use engine::{
    Decision, DropAll, Flash, FlashInfo, LostRecord, ReclaimHandler, RecordMeta, RecordWrite,
    StreamId, ValueFill,
};
pub use error::{Error, Result};
pub use flashtier_metrics as metrics;
pub use format::record::{kind, Record, RecordHeader};
pub use format::superblock::Role;
pub use health::DeviceState;
pub use io::faulty::{Faults, FaultyDevice};
pub use io::file::FileDevice;
pub use io::memory::MemoryDevice;
pub use io::plug::{
    batch_submissions, defer_submissions_on_this_thread, submit_deferred, submit_deferred_each_turn,
};
pub use io::uring::{use_ring_lane, ReapHandle};
pub use io::uring_setup::{UringSetup, UringSetupError};
pub use io::Device;
pub use journal::{Journal, JournalMode, JournalRecovered, Ticket};
pub use location::Location;
pub use stats::{FlashStats, IoLatency};
