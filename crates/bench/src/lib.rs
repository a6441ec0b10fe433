//! Load generator for memcached-protocol servers, to benchmark flashtier side by side with
//! memcached (`scripts/bench/compare.sh`, docs/benchmarks.md): text or meta protocol over N
//! connections on M event-loop threads with a pipeline depth (or, `--client threads`, a
//! sending and a receiving thread per connection), open-loop at a target rate (latency from
//! the scheduled send time: no coordinated omission) or closed-loop, reporting HDR
//! percentiles, throughput, hit ratio and errors as JSON; pattern values verify every hit,
//! and with deletes in the mix a hit on a deleted key must follow a later SET.
//!
//! # Layout
//! - [`run`] (a whole run, its [`Report`]) → [`phase`] (per-thread event loop) or
//!   [`thread_client`] (a sending and a receiving thread per blocking connection) → [`conn`]
//!   (buffers, requests awaiting replies) → [`protocol`] (encoding, reply parsing).
//! - Workload: [`workload`], [`schedule`], [`keydist`], [`valuesize`], [`pattern`], [`rng`].
//! - Measuring: [`stats`], [`serverstats`], [`history`] (what a GET may find after a
//!   DELETE); [`poll`] (`ppoll`, the crate's only unsafe);
//!   [`error`].

pub mod conn;
pub mod error;
pub mod history;
pub mod keydist;
pub mod pattern;
pub mod phase;
pub mod poll;
pub mod protocol;
pub mod rng;
pub mod run;
pub mod schedule;
pub mod serverstats;
pub mod stats;
pub mod thread_client;
pub mod valuesize;
pub mod workload;

pub use error::Error;
pub use keydist::KeyDist;
pub use protocol::Protocol;
pub use run::{run, run_with, table, Client, Rate, Report, Row, RunConfig};
pub use schedule::Arrival;
pub use valuesize::ValueSizes;
pub use workload::WorkloadSpec;
