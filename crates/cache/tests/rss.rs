//! The memory limit holds for the whole process: RSS growth after overfilling a 64 MiB cache
//! stays within the limit plus the index, the ghost set and a small fixed overhead.
//! (Its own test binary, so no other test's allocations share the process.)
mod common;

use flashtier_cache::{Cache, CacheConfig, ItemWrite, KvStore};

#[test]
fn rss_stays_within_the_limit_plus_stated_overhead() {
    let limit: u64 = 64 << 20;
    let rss0 = common::rss_bytes();
    let cfg = CacheConfig::builder()
        .memory_limit(limit as usize)
        .sweep_interval(None)
        .build()
        .unwrap();
    let c = Cache::new(cfg).unwrap();
    let rss_empty = common::rss_bytes();
    // 2× the limit in 1 KiB values, then 2× in 100-byte values (many small items: the index
    // grows), all with evictions.
    for i in 0..120_000u64 {
        c.set_now(
            format!("key:{i}").as_bytes(),
            ItemWrite::new(common::value(i, 1024), 0, 0),
        )
        .unwrap();
    }
    let rss_big = common::rss_bytes();
    for i in 0..1_000_000u64 {
        c.set_now(
            format!("small:{i}").as_bytes(),
            ItemWrite::new(common::value(i, 100), 0, 0),
        )
        .unwrap();
    }
    let rss_small = common::rss_bytes();
    let s = c.stats();
    let slabs = c.stats_section("slabs").unwrap();
    let ghost: u64 = slabs
        .iter()
        .find(|(k, _)| k == "ghost_bytes")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap();
    let index = c.index_bytes();
    let grow = rss_small.saturating_sub(rss0);
    let fixed = grow as i64 - (limit + index + ghost) as i64;
    println!("memory limit        {:>12} B", limit);
    println!("segments allocated  {:>12} B", c.segment_bytes());
    println!("items               {:>12}", s.curr_items);
    println!(
        "index               {:>12} B ({:.1} B/item)",
        index,
        index as f64 / s.curr_items as f64
    );
    println!("ghost               {:>12} B", ghost);
    println!(
        "rss empty cache     {:>12} B over start",
        rss_empty.saturating_sub(rss0)
    );
    println!(
        "rss after 1 KiB     {:>12} B over start",
        rss_big.saturating_sub(rss0)
    );
    println!("rss after 100 B     {:>12} B over start", grow);
    println!(
        "fixed overhead      {:>12} B (rss growth − limit − index − ghost)",
        fixed
    );
    assert!(c.segment_bytes() <= limit);
    assert!(s.evictions > 0);
    assert!(fixed < 8 << 20, "fixed overhead {fixed} B");
}
