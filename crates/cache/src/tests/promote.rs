//! `promote_later` publishes only over the flash slot the item was read from.
use std::sync::atomic::Ordering;

use bytes::Bytes;

use crate::block::block_on;
use crate::flash_tier::promote::Promotion;
use crate::{Cache, ItemWrite};

fn open() -> Cache {
    super::loaded_flash_cache("promote")
}

/// Phase 1 of a GET of `key` (on flash): the slot read and the item.
fn read(c: &Cache, key: &[u8]) -> (u64, Promotion) {
    let core = c.core();
    let hash = core.slots.hash(key);
    let view = block_on(c.tier().view(core, key, hash, true));
    let (loc, item) = view.found.expect("key not on flash");
    (hash, Promotion { loc, item })
}

fn counts(c: &Cache) -> (u64, u64) {
    let t = &c.tier().counters();
    (
        t.promoted.load(Ordering::Relaxed),
        t.promotions_abandoned.load(Ordering::Relaxed),
    )
}

#[test]
fn unchanged_slot_is_promoted() {
    let c = open();
    let (hash, p) = read(&c, b"k0");
    c.tier().promote_later(c.core(), b"k0", hash, p);
    assert_eq!(counts(&c), (1, 0));
    let t = &c.tier().counters();
    let reads = t.objects_read.load(Ordering::Relaxed);
    let it = c.get_now(b"k0").unwrap().unwrap();
    assert_eq!(it.value, Bytes::from(vec![0u8; 2000]));
    assert_eq!(
        t.objects_read.load(Ordering::Relaxed),
        reads,
        "read flash again"
    );
}

#[test]
fn set_or_delete_in_between_wins() {
    let c = open();
    let (hash, p) = read(&c, b"k0");
    let new = Bytes::from_static(b"new");
    c.set_now(b"k0", ItemWrite::new(new.clone(), 0, 0)).unwrap();
    c.tier().promote_later(c.core(), b"k0", hash, p);
    assert_eq!(counts(&c), (0, 1));
    assert_eq!(c.get_now(b"k0").unwrap().unwrap().value, new);

    let (hash, p) = read(&c, b"k1");
    assert!(c.delete_now(b"k1"));
    c.tier().promote_later(c.core(), b"k1", hash, p);
    assert_eq!(counts(&c), (0, 2));
    assert!(c.get_now(b"k1").unwrap().is_none());
}
