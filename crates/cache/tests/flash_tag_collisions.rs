//! Tag collisions on flash (issue 26). The index compares 10 shard bits, a 24-bit tag and
//! the check bits its locations leave free (`extstore_index_hash_width`). With few check bits
//! (here forced: `index_loc_bits(40)`, none, 34 bits in all) two keys whose hashes agree on
//! those bits share every flash slot lookup: a reader skips the other key's record after
//! reading it, and a write that needs no item (SET, `Cache::delete`) reads a tag-matching flash
//! slot before taking it, so it never takes the other key's item (unread, that item was lost).
//! The pair is found by search under the cache's own hash seed, and the test first checks the
//! pair does collide in the index (a GET of one reads the other's record). With the default
//! check bits a blind write reads nothing, as before issue 26.
mod common;

use std::collections::HashMap;
use std::sync::Arc;

use flashtier_cache::flash::{Device, FlashConfig, IoBackend, MemoryDevice};
use flashtier_cache::{Cache, ItemWrite, KvStore};
use xxhash_rust::xxh3::xxh3_64_with_seed;

fn setting(c: &Cache, name: &str) -> u64 {
    c.stats_section("settings")
        .unwrap()
        .into_iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.parse().unwrap())
        .unwrap_or_else(|| panic!("no setting {name}"))
}

/// Two distinct keys whose hashes agree on the shard bits and the 24 tag bits.
fn colliding_pair(seed: u64, shards: u64) -> (Vec<u8>, Vec<u8>) {
    let sig = |h: u64| (h & (shards - 1)) | ((h >> 40) << 32);
    let mut seen: HashMap<u64, u64> = HashMap::new();
    for i in 0u64.. {
        let key = format!("collide-{i}").into_bytes();
        let s = sig(xxh3_64_with_seed(&key, seed));
        if let Some(j) = seen.insert(s, i) {
            return (format!("collide-{j}").into_bytes(), key);
        }
    }
    unreachable!()
}

/// Push everything in RAM out to flash: 1 MiB of RAM, 2 MiB of other items.
fn push_to_flash(c: &Cache, round: u64) {
    for i in 0..1000u64 {
        let w = ItemWrite::new(common::value(i, 2000), 0, 0);
        c.set_now(format!("filler-{round}-{i}").as_bytes(), w)
            .unwrap();
    }
}

/// `common::write_through_cache` with `loc_bits` location bits in the index, if set.
fn open(dev: Arc<dyn Device>, loc_bits: Option<u32>) -> Cache {
    let engine = FlashConfig {
        io_backend: IoBackend::Psync,
        ..FlashConfig::small()
    };
    let mut b = common::small_flash_config(dev, engine)
        .memory_limit(1 << 20)
        .sweep_interval(None);
    if let Some(bits) = loc_bits {
        b = b.index_loc_bits(bits);
    }
    let c = Cache::new(b.build().unwrap()).unwrap();
    c.set_knob("write_back_ms", "0").unwrap();
    c
}

fn value_of(c: &Cache, key: &[u8]) -> Option<bytes::Bytes> {
    c.get_now(key).unwrap().map(|i| i.value)
}

#[test]
fn a_write_never_takes_another_keys_item_on_a_tag_collision() {
    let dev = Arc::new(MemoryDevice::new("collide", 32 << 20));
    let d: Arc<dyn Device> = dev.clone();
    let c = open(d.clone(), Some(40));
    assert_eq!(common::ext_stat(&c, "extstore_index_hash_width"), 34);
    let (a, b) = colliding_pair(setting(&c, "hash_seed"), setting(&c, "index_shards"));
    let va = common::value(1, 3000);
    c.set_now(&a, ItemWrite::new(va.clone(), 0, 0)).unwrap();
    push_to_flash(&c, 0);

    // The pair collides in the index: a GET of `b` reads `a`'s record and rejects it.
    let coll = common::ext_stat(&c, "extstore_tag_collisions");
    assert_eq!(value_of(&c, &b), None);
    assert_eq!(
        common::ext_stat(&c, "extstore_tag_collisions"),
        coll + 1,
        "the pair does not collide: the test proves nothing"
    );

    // A delete of `b` (blind) checks `a`'s slot, leaves it, and says nothing was removed.
    let checks = common::ext_stat(&c, "extstore_write_check_reads");
    assert!(!common::block_on(c.delete(&b)).unwrap());
    assert_eq!(
        common::ext_stat(&c, "extstore_write_check_reads"),
        checks + 1
    );
    assert_eq!(value_of(&c, &a), Some(va.clone()), "a delete of b lost a");

    // A SET of `b` (blind) leaves `a` too.
    let vb = common::value(2, 2500);
    c.set_now(&b, ItemWrite::new(vb.clone(), 0, 0)).unwrap();
    assert_eq!(value_of(&c, &a), Some(va.clone()), "a SET of b lost a");
    assert_eq!(value_of(&c, &b), Some(vb.clone()));

    // Both on flash now; an overwrite of `b` takes `b`'s old slot and only that one.
    push_to_flash(&c, 1);
    let vb2 = common::value(3, 2600);
    c.set_now(&b, ItemWrite::new(vb2.clone(), 0, 0)).unwrap();
    assert_eq!(value_of(&c, &a), Some(va.clone()));
    assert_eq!(value_of(&c, &b), Some(vb2.clone()), "an older b was served");
    push_to_flash(&c, 2);
    assert_eq!(value_of(&c, &b), Some(vb2.clone()), "an older b was served");

    // A delete of `b` on flash removes `b`, not `a`; across a restart too.
    assert!(common::block_on(c.delete(&b)).unwrap());
    assert_eq!(value_of(&c, &b), None);
    assert_eq!(value_of(&c, &a), Some(va.clone()));
    c.close().unwrap();
    drop(c);
    let c = open(d, Some(40));
    assert_eq!(value_of(&c, &b), None, "a deleted b came back");
    assert_eq!(value_of(&c, &a), Some(va));
}

/// A blind write of a key with no tag-matching flash slot reads nothing; with the default
/// check bits (more hash bits than the 41 of the 6-slot index) no blind write reads at all.
#[test]
fn blind_writes_read_only_when_the_index_is_narrow() {
    for (loc_bits, name) in [(Some(40), "narrow"), (None, "default")] {
        let dev = Arc::new(MemoryDevice::new(name, 32 << 20));
        let c = open(dev, loc_bits);
        let bits = common::ext_stat(&c, "extstore_index_hash_width");
        push_to_flash(&c, 0);
        let checks = common::ext_stat(&c, "extstore_write_check_reads");
        for i in 0..200u64 {
            let w = ItemWrite::new(common::value(i, 100), 0, 0);
            c.set_now(format!("fresh-{i}").as_bytes(), w).unwrap();
        }
        // Only a false tag match (about 1,000 slots in 1024 shards × 2^24 tags) could read.
        assert!(common::ext_stat(&c, "extstore_write_check_reads") <= checks + 1);
        // Overwrites of keys on flash: one check each when narrow, none by default.
        for i in 0..100u64 {
            let w = ItemWrite::new(common::value(i, 100), 0, 0);
            c.set_now(format!("filler-0-{i}").as_bytes(), w).unwrap();
        }
        let read = common::ext_stat(&c, "extstore_write_check_reads") - checks;
        if loc_bits.is_some() {
            assert_eq!(bits, 34);
            assert!((90..=101).contains(&read), "{read}");
        } else {
            assert!(bits >= 41, "{bits}");
            assert_eq!(read, 0);
        }
    }
}
