//! flashtier's flash engine: a log of self-describing records on one or more devices.
//!
//! Knows nothing of keys' meaning or of protocols; the key-value face (items) and the block
//! face (cache blocks) both sit on it. The user supplies a 64-bit `key_id` (key hash, LBA)
//! with every record and keeps its own index of [`Location`]s (45 bits each when packed).
//!
//! # Layout
//! - [`engine`]: the [`Flash`] handle, public record types, the [`ReclaimHandler`] trait and
//!   the shared state (one mutex; which threads touch it is documented there).
//! - `writer`: append into per-stream RAM chunks, chunk writes, sealing, `flush`.
//! - `reader`: reads from RAM buffers or one aligned device read, checksum-verified.
//! - `reclaimer`: victim choice, keep/drop through the handler, freeing segments.
//! - `recover`: superblock check/format and rebuilding the segment table at open.
//! - [`probe`]: what a device holds before it is formatted (blank, flashtier's, or foreign:
//!   named), and whether two paths are the same storage.
//! - `flusher`: writes chunks older than the flush interval, hands lost records to the
//!   user, starts device probes.
//! - [`health`]: device states (healthy, failing, offline), probes and backoff, sync
//!   bookkeeping.
//! - `segments`: the segment table and free lists.
//! - [`format`](mod@format): the on-flash structs with byte tables (mirrored in `docs/format.md`).
//! - [`io`]: the [`Device`] trait with file, memory and fault-injecting devices, and the
//!   io_uring and psync executors.
//! - [`knobs`]: settings changeable at runtime.
//! - [`config`], [`location`], [`completion`], [`stats`], [`error`].
//!
//! # Use
//! ```no_run
//! use std::sync::Arc;
//! use flashtier_flash::{DeviceSpec, DropAll, Flash, FlashConfig, RecordWrite, kind};
//!
//! let spec = DeviceSpec::parse("/var/tmp/cache.flash:1GiB")?;
//! let (flash, _info) = Flash::open_specs(&[spec], FlashConfig::default(), Arc::new(DropAll), |_rec| {})?;
//! let loc = flash.append(0, &RecordWrite {
//!     kind: kind::PUT, key_id: 42, version: 1, flags: 0, exptime: 0, key: b"k", value: b"v",
//! })?;
//! flash.flush().wait()?;                // durable
//! let rec = flash.read(loc).wait()?;    // or `.await` from async code
//! assert_eq!(&rec.value[..], b"v");
//! # Ok::<(), flashtier_flash::Error>(())
//! ```
#![deny(clippy::undocumented_unsafe_blocks)]
#![warn(missing_docs)]

pub mod completion;
pub mod config;
pub mod engine;
pub mod error;
mod flusher;
pub mod format;
pub mod health;
pub mod io;
pub mod knobs;
pub mod location;
pub mod probe;
mod reader;
mod reclaimer;
mod recover;
mod segments;
pub mod stats;
mod writer;

pub use completion::Completion;
pub use config::{parse_size, DeviceSpec, FlashConfig, IoBackend, ReclaimPolicy};
pub use engine::{
    Decision, DropAll, Flash, FlashInfo, LostRecord, ReclaimHandler, RecordMeta, RecordWrite,
    StreamId,
};
pub use error::{Error, Result};
pub use flashtier_metrics as metrics;
pub use format::record::{kind, Record, RecordHeader};
pub use format::superblock::Role;
pub use health::DeviceState;
pub use io::faulty::{Faults, FaultyDevice};
pub use io::file::FileDevice;
pub use io::memory::MemoryDevice;
pub use io::plug::{batch_submissions, defer_submissions_on_this_thread, submit_deferred};
pub use io::uring::ReapHandle;
pub use io::Device;
pub use location::Location;
pub use stats::{FlashStats, IoLatency};
