//! The RAM tier: the compact index, the log-structured arena and its record layout, S3-FIFO
//! eviction with its ghost set, the sweeper, and the write primitives every write path uses
//! (reserve → write the record → publish it under the key's shard lock).
//!
//! The index slot of a key names its tier; a RAM record carries the location of its lower
//! copy in its home word. Evicted live records, dead lower copies, deletes and `flush_all` are
//! handed to the tier below through one trait (`lower`); without flash that tier does nothing.
//!
//! # Lock order
//! `AllocState` → index shard → arena head; index shard → arena head. The flash engine's
//! locks are leaves under all of them.
pub(crate) mod arena;
pub(crate) mod evict;
pub(crate) mod ghost;
pub(crate) mod index;
pub(crate) mod lower;
pub(crate) mod record;
pub(crate) mod sweeper;
pub(crate) mod write;
