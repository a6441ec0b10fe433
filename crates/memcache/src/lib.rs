//! The memcached text and meta protocol over a [`flashtier_cache::KvStore`].
//!
//! # Layout
//! - [`codec`]: the incremental parser (check before parse; `Incomplete` is a variant),
//!   reproducing memcached 1.6.18's acceptance rules and error strings.
//! - [`request`]: the parsed request types the codec produces.
//! - [`command`]: what each command does to the store and answers, one file per family.
//! - [`reply`]: reply formatting helpers; [`output`]: a connection's pending replies.
//! - [`stats`]: protocol counters (`stats` output); [`latency`]: request latency
//!   histograms per command family (metrics).
//! - [`context`]: what all connections of one server share (store, stats, settings).
//! - [`connection`]: the per-connection read/execute/write loop.
//! - [`server`]: the accept loop over every listener, connection limit and graceful shutdown;
//!   [`stream`]: TCP, unix-socket and TLS streams behind one interface.
//! - [`auth`]: ASCII authentication (memcached -Y); [`detail`]: `stats detail` prefix
//!   counters; [`dump`]: `lru_crawler metadump` and `stats cachedump`.
//! - [`error`]: the crate's error type.
//!
//! Entry point for a binary: build a [`Context`] from a store and [`Settings`], bind
//! [`Listener`]s (TCP, TLS, unix socket), and run [`serve`] with a shutdown future.
//!
//! # Differences from memcached 1.6.18 (intended or known)
//! Replies were compared byte for byte with memcached 1.6.18 on random streams of valid and
//! malformed text and meta commands; these are the differences that remain:
//! - CAS values come from the store's own counter (the sequence differs, not the rules).
//! - `version` answers `VERSION 1.6.18-flashtier-<version>`; `stats` values differ.
//! - A binary-protocol request (first byte 0x80) closes the connection.
//! - An over-limit value is rejected as soon as its command line is read; memcached sends
//!   the same `SERVER_ERROR object too large for cache` only after the data has arrived.
//!   The item limit counts value bytes only (memcached's also counts its ~50-byte header).
//! - A `get` whose key exceeds 250 bytes: memcached also drops the unsent replies of earlier
//!   pipelined commands (its `conn_release_items`); flashtier keeps them.
//! - Meta `k` returns a key in base64 when the request used `b`; memcached decides by how the
//!   item was stored. `me` shows `cls`/`size` as memcached's default slab layout would.
//! - `stats cachedump` and `lru_crawler metadump` list RAM items as class 1 and flash-only
//!   items as class 2 (see [`dump`]); `stats sizes` is disabled;
//!   `cache_memlimit` works only when the binary installed a store hook
//!   ([`Context::set_memory_limit_hook`]), else it answers `MEMLIMIT_ADJUST_FAILED`.
//! - `extstore <knob> <value>` changes the store's runtime knobs ([`Context::set_knob`]);
//!   an unknown knob or a refused value answers `CLIENT_ERROR <why>` where memcached
//!   answers `ERROR`. `stats settings` lists the knobs as `ext_<name>`.
//! - `lru_crawler` tuning sub-commands are accepted (there is no crawler: the sweeper
//!   reclaims expired items all the time); `lru`, `watch`, `slabs` (other than `automove`)
//!   and `debugtime` answer `ERROR`.
#![deny(unsafe_code)]

pub mod auth;
pub mod codec;
pub mod command;
pub mod connection;
pub mod context;
pub mod detail;
pub mod dump;
pub mod error;
pub mod join;
pub mod latency;
pub mod output;
pub mod reply;
pub mod request;
pub mod server;
pub mod stats;
pub mod stream;

pub use codec::{Decoded, Decoder, Limits};
pub use context::{Context, MemoryLimitHook, Settings};
pub use error::Error;
pub use request::Request;
pub use server::serve;
pub use stats::Stats;
pub use stream::Listener;
