//! memdiff: a differential tester for memcached-protocol servers. One seeded, random stream
//! of text and meta commands, valid and malformed, goes to a reference server (A, memcached)
//! and a server under test (B) over the same connections interleaved the same way; every reply
//! is compared byte for byte after normalizing a short, documented list of intended
//! differences (`docs/compat.md`). The first disagreement stops the run, reported with its seed.
//!
//! # Layout
//! - [`rng`] (seeded, stable across upgrades) → [`generator`] (state, pools, mix; commands in
//!   `text_commands`, `meta_commands`) → [`request`] (wire bytes, CAS placeholders).
//! - [`reply`] (replies up to the `mn` sentinel), [`casmap`] (CAS → first-seen version),
//!   [`normalize`] (the intended differences), [`report`] (escaping raw bytes).
//! - [`runner`]: the run loop, connections, [`Summary`], [`Divergence`]; [`error`].

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
