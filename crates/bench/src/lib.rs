//! Load generator for memcached-protocol servers, used to benchmark flashtier side by side
//! with memcached (the runner script is `scripts/bench/compare.sh`; see docs/benchmarks.md).
//!
//! It speaks the text (`get`/`set`) or meta (`mg`/`ms`) protocol over N connections on M
//! worker threads with a pipeline depth, paces requests open-loop at a target offered load
//! (latency measured from the scheduled send time, so no coordinated omission) or closed-loop
//! at maximum throughput, and reports HDR-histogram percentiles, throughput, hit ratio and
//! errors as JSON. Values can carry a key-derived pattern so every GET hit is verified
//! byte-exact.
//!
//! # Layout
//! - [`run`]: a whole run (load phase, one measured phase per rate) and its JSON [`Report`].
//! - [`phase`]: one phase over the connections: the per-thread event loop.
//! - [`conn`]: one connection, its buffers and its queue of requests awaiting replies.
//! - [`schedule`]: open-loop send schedules (Poisson or uniform arrivals).
//! - [`workload`]: the key space, mix and value contents, and per-connection op sources.
//! - [`keydist`]: uniform, zipf (rejection-inversion) and hotspot key samplers.
//! - [`valuesize`]: fixed, range and weighted-mix value sizes.
//! - [`pattern`]: verifiable value bytes derived from key and length.
//! - [`protocol`]: request encoding and incremental reply parsing.
//! - [`serverstats`]: the server's own `stats` counters over each measured window.
//! - [`stats`]: histograms and counters, merged across threads.
//! - [`poll`]: `ppoll` with a nanosecond timeout and timer slack (the crate's only unsafe).
//! - [`rng`]: a small seeded PRNG.
//! - [`error`]: the crate's error type.

pub mod conn;
pub mod error;
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
pub mod valuesize;
pub mod workload;

pub use error::Error;
pub use keydist::KeyDist;
pub use protocol::Protocol;
pub use run::{run, table, Rate, Report, Row, RunConfig};
pub use schedule::Arrival;
pub use valuesize::ValueSizes;
pub use workload::WorkloadSpec;
