//! The memcached text and meta protocol over a [`flashtier_cache::KvStore`].
//!
//! # Layout
//! - [`codec`]: the incremental parser (check before parse; `Incomplete` is a variant),
//!   reproducing memcached 1.6.18's acceptance rules and error strings.
//! - [`request`]: the parsed request types the codec produces.
//! - [`command`]: what each command does to the store and answers, one file per family.
//! - [`reply`]: reply formatting helpers.
//! - [`stats`]: protocol counters (`stats` output).
//! - [`context`]: what all connections of one server share (store, stats, settings).
//! - [`connection`]: the per-connection read/execute/write loop.
//! - [`server`]: the accept loop, connection limit and graceful shutdown.
//! - [`error`]: the crate's error type.
//!
//! Entry point for a binary: build a [`Context`] from a store and [`Settings`], bind a
//! `TcpListener`, and run [`serve`] with a shutdown future.
#![deny(unsafe_code)]

pub mod codec;
pub mod command;
pub mod connection;
pub mod context;
pub mod error;
pub mod reply;
pub mod request;
pub mod server;
pub mod stats;

pub use codec::{Decoded, Decoder, Limits};
pub use context::{Context, Settings};
pub use error::Error;
pub use request::Request;
pub use server::serve;
pub use stats::Stats;
