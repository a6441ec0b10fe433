//! The RAM tier: the compact index, the log-structured arena and its record layout, S3-FIFO
//! eviction with its ghost set, the sweeper, and the write primitives every write path uses
//! (reserve → write with no lock → publish under the key's shard lock).
//!
//! The index slot of a key names its tier; a RAM record carries the location of its flash
//! copy in its home word. What happens to an evicted live record is the flash tier's choice
//! (`flash_tier::demote`); without flash it is dropped.
//!
//! # Lock order
//! `AllocState` → index shard → arena head; index shard → arena head. The flash engine's
//! locks are leaves under all of them.
pub(crate) mod arena;
pub(crate) mod evict;
pub(crate) mod ghost;
pub(crate) mod index;
pub(crate) mod record;
pub(crate) mod sweeper;
pub(crate) mod write;
