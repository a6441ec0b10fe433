//! Past the write budget reclaim drops unhit items, but keeps an unhit item whose record is
//! small next to the mean value size (a GET hits one item whatever its size, so a small one is
//! worth more per byte of flash): with large items wrapping the flash three times and nothing
//! read, the small items written first are all still served, byte-exact, while most large
//! ones are gone.
mod common;

use std::sync::Arc;

use flashtier_cache::flash::{Device, MemoryDevice};
use flashtier_cache::ItemWrite;

use common::ext_stat as ext;

/// A stats section's non-zero counters, for a failure message.
fn stats(c: &flashtier_cache::Cache, section: &str) -> Vec<(String, String)> {
    use flashtier_cache::KvStore as _;
    c.stats_section(section)
        .unwrap_or_default()
        .into_iter()
        .filter(|(_, v)| v != "0")
        .collect()
}

const SMALL: u64 = 300;
const LARGE: u64 = 6000;

#[test]
fn small_unread_items_outlive_the_write_budget() {
    // 4 MiB of segments plus the crash journal's (one 256 KiB segment).
    let d: Arc<dyn Device> = Arc::new(MemoryDevice::new("small-items", (4 << 20) + (256 << 10)));
    // Write-through: every item reaches flash at its SET; nothing is ever read.
    let c = common::write_through_cache(d);
    let small = |i: u64| format!("small{i}");
    for i in 0..SMALL {
        let w = ItemWrite::new(common::value(i, 100), 0, 0);
        c.set_now(small(i).as_bytes(), w).unwrap();
    }
    // Large values wrap the 4 MiB flash three times.
    for j in 0..LARGE {
        let w = ItemWrite::new(common::value(SMALL + j, 2000), 0, 0);
        c.set_now(format!("large{j}").as_bytes(), w).unwrap();
    }
    assert!(
        ext(&c, "extstore_reclaim_dropped_old") + ext(&c, "extstore_reclaim_dropped_young") > 0,
        "reclaim never went past the write budget"
    );
    let lost: Vec<u64> = (0..SMALL)
        .filter(|&i| {
            let got = c.get_now(small(i).as_bytes()).unwrap();
            if let Some(it) = &got {
                assert_eq!(it.value, common::value(i, 100), "small{i} wrong");
            }
            got.is_none()
        })
        .collect();
    assert!(
        lost.is_empty(),
        "small items dropped: {lost:?}\nstats extstore: {:?}\nstats items: {:?}",
        stats(&c, "extstore"),
        stats(&c, "items")
    );
    let large_held = (0..LARGE)
        .filter(|j| {
            let got = c.get_now(format!("large{j}").as_bytes()).unwrap();
            if let Some(it) = &got {
                assert_eq!(it.value, common::value(SMALL + j, 2000), "large{j} wrong");
            }
            got.is_some()
        })
        .count() as u64;
    assert!(
        large_held < LARGE / 2,
        "{large_held} of {LARGE} large items held: the flash never filled"
    );
    assert!(ext(&c, "extstore_reclaim_kept_small") > 0);
}
