//! Wire codecs: pure functions from `&[u8]` to typed messages and back. No I/O happens here,
//! so every parser is a fuzz entry point (`parse_*` takes untrusted bytes and never panics).
//!
//! # Layout
//! - [`cursor`]: bounds-checked big-endian reader used by every parser.
//! - [`handshake`]: greeting, client flags, options, option replies, information items.
//! - [`transmission`]: request headers, simple reply headers, command classification.
//! - [`fuzz`]: `&[u8]` entry points that drive the parsers like the protocol loops do.
//!
//! Invariant: parsers return [`crate::ParseError::Incomplete`] with the total byte count they
//! need when given a prefix of a valid message, so a caller can read more and retry.

pub mod cursor;
pub mod fuzz;
pub mod handshake;
pub mod transmission;
