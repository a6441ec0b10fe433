//! GET. Phase 2 finds the key's RAM record under the shard lock (copy the value, mark it
//! fetched, bump the slot's frequency) or checks that the flash item phase 1 read is still
//! the key's; a repeat flash hit is copied back to RAM (`flash_tier::promote`), at once or,
//! when the small log's open segment has no room, after phase 2 with no lock held
//! ([`Op::after`]). An expired or flushed item found on the way is removed. Without flash,
//! phase 1 has nothing to read and returns at once.
use crate::engine::Core;
use crate::flash_tier::promote::Promotion;
use crate::flash_tier::read::View;
use crate::ops::{item_at, item_of, Current, Op, Step};
use crate::ram::arena::RecordRef;
use crate::ram::evict::OnLater;
use crate::ram::index::{Pos, Shard};
use crate::{Error, Item};

/// A GET: the promotion phase 2 left for after it, if any.
#[derive(Default)]
pub(crate) struct Get {
    later: Option<Promotion>,
}

/// A GET of a key with a RAM record, without phase 1 (`Core::current_ram`), shard locked:
/// `None` when the key has no RAM record (or an error the two-phase GET reports too).
/// `Some(None)`: the record was dead and is gone (a miss, as the two-phase GET counts it).
pub(crate) fn ram_now(
    core: &Core,
    shard: &mut Shard<'_>,
    hash: u64,
    key: &[u8],
) -> Option<Result<Option<Item>, Error>> {
    let now = core.now();
    Some(match core.current_ram(shard, hash, key, now)? {
        Ok(Current::Ram { pos, rec, .. }) => Ok(Some(ram_hit(core, shard, pos, &rec, now))),
        Ok(_) => {
            core.meta.ledger.missed(hash);
            Ok(None)
        }
        Err(e) => Err(e),
    })
}

/// A RAM hit: copy the item, mark it fetched (the first read of a promoted copy is counted
/// for promotion's payback), bump the slot's frequency.
fn ram_hit(core: &Core, shard: &mut Shard<'_>, pos: Pos, rec: &RecordRef<'_>, now: u32) -> Item {
    let item = item_at(rec);
    if rec.mark_fetched(now) {
        core.lower.promoted_copy_read();
    }
    shard.touch(pos);
    item
}

impl Op for Get {
    type Out = Option<Item>;
    const WRITE: bool = false;

    fn reads(&self) -> bool {
        true
    }

    fn phase2(
        &mut self,
        core: &Core,
        key: &[u8],
        hash: u64,
        view: &View,
        _on_later: OnLater,
    ) -> Result<Step<Option<Item>>, Error> {
        let now = core.now();
        let mut shard = core.slots.lock(hash);
        match core.current(&mut shard, hash, key, view, now)? {
            Current::Retry => Ok(Step::Retry),
            Current::Absent | Current::Gone(_) | Current::Blind(_) => {
                core.meta.ledger.missed(hash);
                Ok(Step::Done(None))
            }
            Current::Ram { pos, rec, .. } => {
                Ok(Step::Done(Some(ram_hit(core, &mut shard, pos, &rec, now))))
            }
            Current::Small(item) => Ok(Step::Done(Some(crate::small_tier::item_of(&item)))),
            Current::Flash { pos, e, item } => {
                let it = item_of(&item, e.freq);
                self.later = core
                    .lower
                    .flash_hit(core, &mut shard, pos, e, key, item, now);
                Ok(Step::Done(Some(it)))
            }
        }
    }

    fn after(&mut self, core: &Core, key: &[u8], hash: u64) {
        if let Some(p) = self.later.take() {
            core.lower.promote_later(core, key, hash, p);
        }
    }
}

/// Phase 2 skips its RAM probe when phase 1 found the key without a RAM slot and the
/// shard's generation has not moved; a SET or DELETE between the phases still wins.
#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use bytes::Bytes;
    use flashtier_flash::MemoryDevice;

    use super::Get;
    use crate::block::block_on;
    use crate::flash_tier::read::View;
    use crate::ops::{Op, Step};
    use crate::ram::evict::OnLater;
    use crate::small_tier::tests::cache_on;
    use crate::{Cache, ItemWrite};

    /// RAM-only with a small tier; `k0`..`k3999` (150 bytes of `i % 251`) written, most of
    /// them evicted to the tier and merged into its pages.
    fn loaded() -> Cache {
        let c = cache_on(Arc::new(MemoryDevice::new("small", 8 << 20)));
        for i in 0..4000u32 {
            let v = Bytes::from(vec![(i % 251) as u8; 150]);
            c.set_now(format!("k{i}").as_bytes(), ItemWrite::new(v, i, 0))
                .unwrap();
        }
        c.small_flush_staged();
        c
    }

    /// Phase 1 of a GET of `key`.
    fn phase1(c: &Cache, key: &[u8]) -> View {
        let hash = c.core.slots.hash(key);
        block_on(c.core.phase1(key, hash, true, true))
    }

    /// Phase 2 of a GET of `key` over `view`: `Some(answer)`, or `None` for a retry.
    fn phase2(c: &Cache, key: &[u8], view: &View) -> Option<Option<Bytes>> {
        let hash = c.core.slots.hash(key);
        let step = Get::default().phase2(&c.core, key, hash, view, OnLater::KeepOrDrop);
        match step.unwrap() {
            Step::Done(it) => Some(it.map(|i| i.value)),
            Step::Retry => None,
        }
    }

    /// True when phase 2 would skip its probe now.
    fn skips(c: &Cache, key: &[u8], view: &View) -> bool {
        let hash = c.core.slots.hash(key);
        view.not_in_ram == Some(c.core.slots.lock(hash).generation())
    }

    #[test]
    fn an_unchanged_shard_is_not_probed_again() {
        let c = loaded();
        let view = phase1(&c, b"k0");
        assert!(view.not_in_ram.is_some(), "k0 was evicted to the tier");
        assert!(skips(&c, b"k0", &view));
        assert_eq!(
            phase2(&c, b"k0", &view),
            Some(Some(Bytes::from(vec![0; 150])))
        );
        // A key with a RAM slot leaves no generation: phase 2 finds it by its probe.
        let view = phase1(&c, b"k3999");
        assert_eq!(view.not_in_ram, None);
        let want = Bytes::from(vec![(3999 % 251) as u8; 150]);
        assert_eq!(phase2(&c, b"k3999", &view), Some(Some(want)));
    }

    /// A SET between the phases is served: the key had no copy in the tier, so the tier's
    /// stamp does not move — only the shard's generation tells phase 2 to probe again.
    #[test]
    fn a_set_between_the_phases_of_an_absent_key_is_served() {
        let c = loaded();
        let view = phase1(&c, b"new");
        assert!(view.small.as_ref().is_some_and(|s| s.item.is_none()));
        c.set_now(b"new", ItemWrite::new(Bytes::from_static(b"v1"), 0, 0))
            .unwrap();
        assert!(!skips(&c, b"new", &view), "the insert moved the generation");
        assert!(
            c.core.small.still(view.small.as_ref().unwrap()),
            "the stamp did not"
        );
        assert_eq!(
            phase2(&c, b"new", &view),
            Some(Some(Bytes::from_static(b"v1")))
        );
    }

    /// A SET of a key the tier holds, between the phases, is served (or the GET runs
    /// again); a DELETE makes it a miss or a retry; never the tier's older value.
    #[test]
    fn a_set_or_delete_between_the_phases_wins() {
        let c = loaded();
        let old = Some(Some(Bytes::from(vec![1; 150])));
        let view = phase1(&c, b"k1");
        assert_eq!(phase2(&c, b"k1", &view), old);
        c.set_now(b"k1", ItemWrite::new(Bytes::from_static(b"v2"), 0, 0))
            .unwrap();
        let got = phase2(&c, b"k1", &view);
        assert!(
            got.as_ref()
                .is_none_or(|v| v.as_deref() == Some(&b"v2"[..])),
            "{got:?}"
        );
        let view = phase1(&c, b"k2");
        assert!(skips(&c, b"k2", &view));
        assert!(c.delete_now(b"k2"));
        let got = phase2(&c, b"k2", &view);
        assert!(matches!(got, None | Some(None)), "{got:?}");
        // And run whole, both are what was written.
        assert_eq!(&c.get_now(b"k1").unwrap().unwrap().value[..], b"v2");
        assert_eq!(c.get_now(b"k2").unwrap(), None);
    }
}
