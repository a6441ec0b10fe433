//! Runtime knobs change what the flash tier does: `recache_rate 0` stops flash hits from
//! being copied back to RAM, and `drop_unread 1` makes reclaim drop never-hit items even
//! while flash has room (with `0` it keeps them all); `write_budget` bounds how much
//! reclaim compacts instead of dropping.
mod common;

use std::sync::Arc;

use flashtier_cache::flash::{Device, FlashConfig, IoBackend, MemoryDevice};
use flashtier_cache::{Cache, ItemWrite, KvStore};

const N: u64 = 600;

fn open() -> Cache {
    let d: Arc<dyn Device> = Arc::new(MemoryDevice::new("knobs", 16 << 20));
    let engine = FlashConfig {
        io_backend: IoBackend::Psync,
        background_reclaim: false,
        // Reclaim may rewrite a whole victim: only the knobs decide what is dropped.
        keep_limit: 1.0,
        ..FlashConfig::small()
    };
    let cfg = common::small_flash_config(d, engine)
        .sweep_interval(None)
        .build()
        .unwrap();
    Cache::new(cfg).unwrap()
}

fn load(c: &Cache) {
    for i in 0..N {
        let w = ItemWrite::new(common::value(i, 2000), 0, 0);
        c.set_now(format!("k{i}").as_bytes(), w).unwrap();
    }
}

/// How many of keys `k0..k{n}` `c` serves (each byte-exact).
fn served_of(c: &Cache, n: u64) -> u64 {
    (0..n)
        .filter(|i| {
            let got = c.get_now(format!("k{i}").as_bytes()).unwrap();
            if let Some(it) = &got {
                assert_eq!(it.value, common::value(*i, 2000), "k{i} wrong bytes");
            }
            got.is_some()
        })
        .count() as u64
}

fn served(c: &Cache) -> u64 {
    served_of(c, N)
}

use common::ext_stat as ext;

#[test]
fn recache_rate_zero_never_promotes() {
    for rate in ["1", "0"] {
        let c = open();
        c.set_knob("recache_rate", rate).unwrap();
        load(&c);
        assert!(c.flash_items() > N / 2);
        // Hits on RAM copies send them to S3-FIFO's main log when fresh writes evict them,
        // so the main log has a head for promoted items to land in.
        for _ in 0..2 {
            assert_eq!(served(&c), N);
            for i in 0..N / 4 {
                let w = ItemWrite::new(common::value(i, 2000), 0, 0);
                c.set_now(format!("fresh{i}").as_bytes(), w).unwrap();
            }
        }
        assert_eq!(served(&c), N);
        let promoted = ext(&c, "extstore_objects_promoted");
        if rate == "0" {
            assert_eq!(promoted, 0);
        } else {
            assert!(promoted > 0, "default recache_rate promoted nothing");
        }
    }
}

#[test]
fn drop_unread_decides_what_reclaim_keeps() {
    for drop_unread in [false, true] {
        let c = open();
        if drop_unread {
            c.set_knob("drop_unread", "1").unwrap();
        }
        load(&c);
        c.flash().unwrap().flush().wait().unwrap();
        let freed = c.flash().unwrap().reclaim_now(true).unwrap();
        assert!(freed >= 1, "no segment reclaimed");
        let evicted = ext(&c, "extstore_objects_evicted");
        let served = served(&c);
        if drop_unread {
            assert!(evicted > 0, "drop_unread kept every unhit item");
            assert_eq!(served + evicted, N);
        } else {
            assert_eq!(evicted, 0, "an item was dropped while flash had room");
            assert_eq!(served, N);
        }
    }
}

/// `ram_exclusive 1` (the default): once flash is short of room, reclaim frees the flash
/// copies of items RAM holds (counted) instead of rewriting them, and those items stay
/// served byte-exact; with `0` none is freed that way.
#[test]
fn ram_exclusive_frees_flash_copies_of_ram_items() {
    const HOT: u64 = 40;
    for on in [true, false] {
        let d: Arc<dyn Device> = Arc::new(MemoryDevice::new("exclusive", 4 << 20));
        // Write-through: every RAM item has a flash copy from its SET on.
        let open = || common::write_through_cache(Arc::clone(&d));
        let c = open();
        c.set_knob("ram_exclusive", if on { "1" } else { "0" })
            .unwrap();
        let hot = |i: u64| format!("hot{i}");
        for i in 0..HOT {
            let w = ItemWrite::new(common::value(i, 2000), 0, 0);
            c.set_now(hot(i).as_bytes(), w).unwrap();
        }
        // Cold writes wrap the 4 MiB flash three times; the hot items are read all along,
        // so RAM keeps them while reclaim reaches the segments holding their flash copies.
        for j in 0..6000u64 {
            let w = ItemWrite::new(common::value(HOT + j, 2000), 0, 0);
            c.set_now(format!("cold{j}").as_bytes(), w).unwrap();
            if j % 10 == 0 {
                for i in 0..HOT {
                    let got = c.get_now(hot(i).as_bytes()).unwrap();
                    assert_eq!(
                        got.map(|it| it.value),
                        Some(common::value(i, 2000)),
                        "hot{i} not served right (ram_exclusive {on})"
                    );
                }
            }
        }
        let freed = ext(&c, "extstore_reclaim_dropped_in_ram");
        assert!(
            ext(&c, "extstore_objects_evicted") > 0,
            "flash never filled"
        );
        if on {
            assert!(freed > 0, "no flash copy of a RAM item was freed");
        } else {
            assert_eq!(freed, 0, "freed flash copies with ram_exclusive 0");
        }
        // A clean shutdown writes the RAM copies that lost their flash copy: after a
        // reopen every hot item is there, byte-exact. The reopened cache runs no reclaim
        // (low watermark 0): flash is full, every recovered item starts unhit, and a pass
        // right after the restart may evict any segment's unhit items — a separate rule.
        c.close().unwrap();
        drop(c);
        let c = common::write_through_cache_with(Arc::clone(&d), |e| e.free_low_watermark = 0);
        for i in 0..HOT {
            let got = c.get_now(hot(i).as_bytes()).unwrap();
            assert_eq!(
                got.map(|it| it.value),
                Some(common::value(i, 2000)),
                "hot{i} lost at a clean shutdown (ram_exclusive {on})"
            );
        }
    }
}

/// `write_budget` bounds how much reclaim compacts: at `0` no unhit item is ever rewritten
/// once flash is full (each is dropped), at `3` many are, and reclaim then drops fewer of
/// the items written (every item served byte-exact either way). How many items are held at
/// the end also depends on how many segments reclaim happened to have freed when the loop
/// stopped, which a loaded machine's timing moves by ±20 %: it was seen equal or lower with
/// the budget, so the test compares the drops, not the count held.
#[test]
fn write_budget_decides_how_much_reclaim_compacts() {
    const KEYS: u64 = 6000;
    let mut dropped = Vec::new();
    for budget in ["0", "3"] {
        let d: Arc<dyn Device> = Arc::new(MemoryDevice::new("budget", 4 << 20));
        // Write-through, nothing read: every item is unhit when reclaim meets it.
        let c = common::write_through_cache(d);
        c.set_knob("write_budget", budget).unwrap();
        // The values wrap the 4 MiB flash about three times.
        for i in 0..KEYS {
            let w = ItemWrite::new(common::value(i, 2000), 0, 0);
            c.set_now(format!("k{i}").as_bytes(), w).unwrap();
        }
        let kept = ext(&c, "extstore_reclaim_kept_unhit");
        assert!(
            ext(&c, "extstore_reclaim_dropped_old") > 0,
            "flash never filled"
        );
        if budget == "0" {
            assert_eq!(kept, 0, "an unhit item was compacted with no budget");
        } else {
            assert!(kept > 0, "a budget of 3 compacted nothing");
        }
        served_of(&c, KEYS);
        dropped.push(ext(&c, "extstore_reclaim_dropped_old"));
    }
    assert!(
        dropped[1] < dropped[0],
        "dropped {dropped:?}: compaction dropped no fewer"
    );
}
