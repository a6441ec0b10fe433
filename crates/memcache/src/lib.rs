//! The memcached text and meta protocol over a [`flashtier_cache::KvStore`]: build a
//! [`Context`] from a store and [`Settings`], bind [`Listener`]s and run [`serve`] with a
//! shutdown future. Replies match memcached 1.6.18 byte for byte except the differences listed
//! in `docs/compat.md` ("Differences the protocol crate keeps").
//!
//! # Layout
//! - [`codec`] (incremental parser, check before parse) → [`request`] → [`command`] (one file
//!   per family) → [`reply`], [`output`] (a connection's pending replies).
//! - [`connection`]: the per-connection loop ([`window`]: its plain reads in flight, replies
//!   in order as they finish); [`server`]: accept loop, limits, shutdown;
//!   [`workers`]: the thread-per-core serving threads connections are handed to;
//!   [`stream`]: TCP, unix and TLS behind one interface ([`rxstamp`]: when bytes arrived);
//!   [`context`]: what connections share.
//! - [`stats`], [`latency`], [`detail`]: counters and histograms; [`auth`]: ASCII auth (-Y);
//!   [`dump`]: `lru_crawler metadump`, `stats cachedump`; [`error`].

#![deny(unsafe_code)]

pub mod access;
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
#[cfg(test)]
mod order_tests;
pub mod output;
pub mod reply;
pub mod request;
pub mod rxstamp;
pub mod server;
pub mod stats;
pub mod stream;
pub mod window;
pub mod workers;

pub use codec::{Decoded, Decoder, Limits};
pub use context::{Context, MemoryLimitHook, Settings};
pub use error::Error;
pub use request::Request;
pub use server::{serve, serve_on};
pub use stats::Stats;
pub use stream::Listener;
pub use workers::Workers;
