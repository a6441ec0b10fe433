//! Listing the live items for the dump commands (`lru_crawler metadump`, `stats
//! cachedump`): one index shard at a time. RAM items are read from their records under the
//! shard lock; flash-only items are collected as locations, the lock is released, and each
//! is read from flash (the record carries key, flags, exptime and the value prefix with CAS
//! and store time). A flash record that no longer verifies or is not a live item (moved,
//! overwritten, reclaimed meanwhile) is left out: a dump is a snapshot, not a transaction.
//!
//! Threads: the caller's task; takes one shard lock at a time and never holds it across IO.
use bytes::Bytes;
use flashtier_flash::{kind, Location};

use crate::cache::Cache;
use crate::index::Tier;
use crate::record::{self, F_FETCHED};
use crate::store::ItemInfo;

/// Bytes before the value in a flash record's value field (CAS, stored, flags).
const FLASH_PREFIX: usize = 16;
/// Record header bytes counted in an item's size.
const HEADER: u32 = 40;
/// Flash reads in flight at once while dumping one shard.
const READ_BATCH: usize = 64;

impl Cache {
    /// The live items of index shard `shard` (see the module docs).
    pub(crate) async fn dump_shard(&self, shard: usize) -> Vec<ItemInfo> {
        let inner: &crate::cache::Inner = &self.inner;
        if shard >= inner.index.shard_count() {
            return Vec::new();
        }
        let now = inner.cfg.clock.now();
        let mut items = Vec::new();
        let mut on_flash: Vec<(u64, u8)> = Vec::new();
        {
            let table = inner.index.lock_nth(shard);
            table.for_each(|e| {
                if e.tier == Tier::Flash {
                    on_flash.push((e.loc, e.freq));
                    return;
                }
                let (seg, off) = inner.arena.split(e.loc);
                let Some(m) = inner.arena.mem(seg) else {
                    return;
                };
                let h = record::header(m, off);
                if inner.dead(&h, now) {
                    return;
                }
                let mut key = Vec::with_capacity(usize::from(h.klen));
                record::read_key(m, off, &h, &mut key);
                items.push(ItemInfo {
                    key: Bytes::from(key),
                    exptime: h.exptime,
                    last_access: h.last_access,
                    cas: h.cas,
                    fetched: h.rflags & F_FETCHED != 0,
                    value_len: h.vlen,
                    size: HEADER + u32::from(h.klen) + h.vlen,
                    flash_only: false,
                });
            });
        }
        let Some(ft) = inner.ft.as_ref() else {
            return items;
        };
        // Reads are issued in batches so they overlap on the device, within the engine's
        // read queue bound.
        let mut reads = Vec::with_capacity(READ_BATCH);
        for chunk in on_flash.chunks(READ_BATCH) {
            reads.clear();
            for &(packed, freq) in chunk {
                reads.push((ft.flash.read(Location::unpack(packed)), freq));
            }
            for (read, freq) in reads.drain(..) {
                if let Ok(rec) = read.await {
                    if let Some(info) = flash_info(inner, &rec, freq, now) {
                        items.push(info);
                    }
                }
            }
        }
        items
    }
}

/// The dump line of a flash record, if it is a live item.
fn flash_info(
    inner: &crate::cache::Inner,
    rec: &flashtier_flash::Record,
    freq: u8,
    now: u32,
) -> Option<ItemInfo> {
    let h = &rec.header;
    let p = rec.value.get(..FLASH_PREFIX)?;
    let cas = u64::from_le_bytes(p.get(0..8)?.try_into().ok()?);
    let stored = u32::from_le_bytes(p.get(8..12)?.try_into().ok()?);
    if h.kind != kind::PUT || inner.dead_at(h.exptime, stored, now) {
        return None;
    }
    let value_len = (rec.value.len() - FLASH_PREFIX) as u32;
    Some(ItemInfo {
        key: rec.key.clone(),
        exptime: h.exptime,
        last_access: stored,
        cas,
        fetched: freq > 0,
        value_len,
        size: HEADER + rec.key.len() as u32 + value_len,
        flash_only: true,
    })
}
