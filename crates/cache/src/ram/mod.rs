//! The RAM tier: [`RamTier`](tier::RamTier) owns the log-structured arena (and its record
//! layout), S3-FIFO's ghost set and policy; its methods live in `tier` (the write path and
//! removals), `evict` (S3-FIFO, the segment drain) and `sweeper` (the background pass). The
//! compact index is here too but shared: the core owns it and lends it, with the cache's
//! `Meta` and the tier below, in a `tier::Env` per call. This folder imports neither the core
//! nor the flash tier.
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
pub(crate) mod index_blocks;
pub(crate) mod lower;
pub(crate) mod record;
pub(crate) mod sweeper;
#[cfg(test)]
pub(crate) mod testing;
pub(crate) mod tier;
