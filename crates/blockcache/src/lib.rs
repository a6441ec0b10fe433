//! flashtier's block face: a write-back SSD cache in front of a slow block device, as an NBD
//! [`BlockBackend`](flashtier_backend::BlockBackend).
//!
//! Blocks (default 4 KiB) are records in the flash engine keyed by LBA; a RAM index maps
//! LBA → (location, version, dirty). Knows nothing of NBD sockets or HTTP: the server crate
//! serves a [`BlockCache`] over NBD and exposes its stats and tunables.
//!
//! # Layout
//! - [`cache`]: [`BlockCache`] (the struct, settings, accessors); its `impl` continues in
//!   `open` (open and recovery), `reclaim_handler` (the reclaim callbacks), `block_io`
//!   (stripe locks, record append, backing I/O), `read` and `write` (the request paths) and
//!   `backend` (the [`BlockBackend`](flashtier_backend::BlockBackend) impl).
//! - `writeback`: the writeback task (causes, flush order, coalescing); `rate`: its rate
//!   controller (bcache's writeback_rate); `flush`: explicit flushes;
//!   `retry`: the per-block holds after failed backing writes.
//! - [`index`]: the LBA index and dirty sets; [`lbamap`]: its flat LBA table.
//! - [`tunables`]: runtime settings ([`Mode`], [`FlushOrder`], [`TUNABLES`]).
//! - [`stats`]: counters ([`BlockStats`]).
//! - [`seq`]: sequential stream detection.
//! - [`switch`]: mode switches away from writeback and how they are observed.
//! - [`warm`]: warm restart (the clean-shutdown snapshot of clean blocks).
//! - [`mod@error`]: the [`Error`] type.
#![deny(unsafe_code)]

mod admission;
mod backend;
mod block_io;
pub mod cache;
pub mod error;
pub mod flush;
pub mod index;
pub mod lbamap;
mod log_limit;
mod open;
mod read;
mod reclaim;
pub mod record;
mod retry;
pub mod seq;
mod space;
pub mod stats;
pub mod switch;
pub mod tunables;
pub mod warm;
mod write;
mod writeback;

pub use cache::{BlockCache, BlockCacheConfig, RecoveryInfo};
pub use error::Error;
pub use flush::FlushState;
pub use retry::RETRY_MAX;
pub use stats::BlockStats;
pub use switch::{SwitchPhase, SwitchStatus};
pub use tunables::{FlushOrder, Mode, Refusal, Tunables, TUNABLES};
pub use warm::ShutdownReport;
