//! Listing the live items for the dump commands (`lru_crawler metadump`, `stats
//! cachedump`): one index shard at a time. RAM items are read from their records under the
//! shard lock; flash-only items are collected as locations, the lock is released, and each
//! is read from flash (the record carries key, flags, exptime and the value prefix with CAS
//! and store time). A flash record that no longer verifies or is not a live item (moved,
//! overwritten, reclaimed meanwhile) is left out: a dump is a snapshot, not a transaction.
//!
//! The small-object tier's items have no index slot: they are listed after the shards, a
//! range of sets a part (`small`), each set's page read once; the tier's staged state
//! shadows its pages, and expiry and `flush_all` are judged here as for the other tiers. A
//! key the tier holds has no index slot (`small_tier`'s invariant) — or a RAM slot whose version
//! the tier's write-back copied, skipped here — so no key is listed
//! twice.
//!
//! Threads: the caller's task; takes one shard lock at a time and never holds it across IO.
use bytes::Bytes;

use crate::engine::Core;
use crate::flash_tier::kv_record::FlashItem;
use crate::item::ItemInfo;
use crate::meta::Meta;
use crate::ram::index::Tier;
use crate::ram::record::F_FETCHED;

/// Record header bytes counted in an item's size.
const HEADER: u32 = 40;
/// The live items of index shard `shard` of `core` (see the module docs).
pub(crate) async fn shard(core: &Core, shard: usize) -> Vec<ItemInfo> {
    if shard >= core.slots.shard_count() {
        return Vec::new();
    }
    let now = core.cfg.clock.now();
    let mut items = Vec::new();
    let mut on_flash: Vec<(u64, u8)> = Vec::new();
    {
        let table = core.slots.lock_nth(shard);
        table.for_each(|e| {
            if e.tier == Tier::Flash {
                on_flash.push((e.loc, e.freq));
                return;
            }
            let Some(rec) = core.ram.record(e.loc) else {
                return;
            };
            let h = rec.header;
            if core.meta.dead_at(h.exptime, h.stored, now) {
                return;
            }
            let mut key = Vec::with_capacity(usize::from(h.klen));
            rec.read_key(&mut key);
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
    // Reads are issued in batches so they overlap on the device, within the engine's read
    // queue bound.
    core.lower
        .read_batch(&on_flash, |rec, freq| {
            if let Some(info) = flash_info(&core.meta, rec, freq, now) {
                items.push(info);
            }
        })
        .await;
    items
}

/// The dump line of a flash record, if it is a live item.
fn flash_info(meta: &Meta, rec: &flashtier_flash::Record, freq: u8, now: u32) -> Option<ItemInfo> {
    let item = FlashItem::decode(rec)?;
    if meta.dead_at(item.exptime, item.stored, now) {
        return None;
    }
    let value_len = item.value.len() as u32;
    Some(ItemInfo {
        key: item.key,
        exptime: item.exptime,
        last_access: item.stored,
        cas: item.cas,
        fetched: freq > 0,
        value_len,
        size: HEADER + rec.key.len() as u32 + value_len,
        flash_only: true,
    })
}

/// The live items of the small tier's dump part `part` (see the module docs). A page entry
/// is `flash_only` (class 2); a staged one is in RAM (class 1).
pub(crate) async fn small(core: &Core, part: usize) -> Vec<ItemInfo> {
    let listed = core.small.dump_part(part).await;
    let now = core.cfg.clock.now();
    listed
        .into_iter()
        .filter(|l| {
            !core
                .meta
                .dead_at(l.item.meta.exptime, l.item.meta.stored, now)
        })
        // A copy the small tier's write-back made of a version RAM still holds is listed
        // with the RAM slot, not twice.
        .filter(|l| {
            let hash = core.slots.hash(&l.key);
            let shard = core.slots.lock(hash);
            core.ram.find_key(&shard, hash, &l.key).is_none()
        })
        .map(|l| {
            let value_len = l.item.value.len() as u32;
            ItemInfo {
                size: HEADER + l.key.len() as u32 + value_len,
                key: l.key,
                exptime: l.item.meta.exptime,
                last_access: l.item.meta.stored,
                cas: l.item.meta.cas,
                fetched: false,
                value_len,
                flash_only: !l.staged,
            }
        })
        .collect()
}
