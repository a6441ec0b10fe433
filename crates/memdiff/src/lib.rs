//! memdiff: a differential tester for memcached-protocol servers.
//!
//! It sends one seeded, random command stream — text and meta commands, valid and malformed —
//! to a reference server (A, memcached) and a server under test (B), over the same number of
//! connections interleaved the same way, and compares every reply byte for byte after
//! normalizing a short, documented list of intended differences (`docs/compat.md`). The first
//! disagreement stops the run and is reported with the seed that reproduces it.
//!
//! # Layout
//! - [`rng`]: the seeded generator of randomness (stable across dependency upgrades).
//! - [`generator`]: stream state, key/value pools, tokens and the command mix; the commands
//!   themselves are in `text_commands` and `meta_commands`.
//! - [`request`]: a command's wire bytes with per-server CAS placeholders.
//! - [`reply`]: reading a request's replies up to the `mn` sentinel.
//! - [`casmap`]: CAS values mapped to first-seen version numbers, per server.
//! - [`normalize`]: the intended differences, taken out before comparing.
//! - [`runner`]: the run loop, connections, [`Summary`] and [`Divergence`].
//! - [`report`]: escaping raw bytes for reports.
//! - [`error`]: the harness's own errors.
#![deny(unsafe_code)]

pub mod casmap;
pub mod error;
pub mod generator;
mod meta_commands;
pub mod normalize;
pub mod reply;
pub mod report;
pub mod request;
pub mod rng;
pub mod runner;
mod text_commands;

pub use error::Error;
pub use generator::{GenConfig, Generator};
pub use runner::{run, Divergence, Outcome, RunConfig, Summary};
