//! The memory limit holds for the whole process: RSS growth after overfilling a 64 MiB cache
//! with small, then tiny, then large items stays within the limit plus the index, the ghost
//! set and a small fixed overhead.
//! (Its own test binary, so no other test's allocations share the process.)
mod common;

use flashtier_cache::{Cache, CacheConfig, ItemWrite, KvStore};

#[test]
fn rss_stays_within_the_limit_plus_stated_overhead() {
    let limit: u64 = 64 << 20;
    let rss0 = common::rss_bytes();
    let cfg = CacheConfig::builder()
        .memory_limit(limit as usize)
        .max_item_size(4 << 20)
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
            ItemWrite::new(filled(i, 1024), 0, 0),
        )
        .unwrap();
    }
    let rss_big = common::rss_bytes();
    for i in 0..1_000_000u64 {
        c.set_now(
            format!("small:{i}").as_bytes(),
            ItemWrite::new(filled(i, 100), 0, 0),
        )
        .unwrap();
    }
    let rss_small_only = common::rss_bytes();
    let (small_items, small_index) = (c.stats().curr_items, c.index_bytes());
    // Then large items (records over half a segment, spread over whole chunks) mixed with
    // small ones: chunks are recycled, never freed, so the allocator sees no churn.
    let mut x = 1u64;
    for i in 0..1_500u64 {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let len = if i % 3 == 0 {
            600_000 + (x >> 40) as usize % 3_000_000
        } else {
            1000
        };
        c.set_now(
            format!("large:{i}").as_bytes(),
            ItemWrite::new(filled(i, len), 0, 0),
        )
        .unwrap();
        assert!(c.segment_bytes() <= limit);
    }
    let rss_end = common::rss_bytes();
    let s = c.stats();
    let slabs = c.stats_section("slabs").unwrap();
    let ghost: u64 = slabs
        .iter()
        .find(|(k, _)| k == "ghost_bytes")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap();
    let index = c.index_bytes();
    let grow = rss_end.saturating_sub(rss0);
    let fixed = grow as i64 - (limit + index + ghost) as i64;
    println!("memory limit        {:>12} B", limit);
    println!("segments allocated  {:>12} B", c.segment_bytes());
    println!("items               {:>12}", s.curr_items);
    println!(
        "index               {:>12} B ({:.1} B/item with {} small items held)",
        index,
        small_index as f64 / small_items as f64,
        small_items
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
    println!(
        "rss after 100 B     {:>12} B over start",
        rss_small_only.saturating_sub(rss0)
    );
    println!("rss after large     {:>12} B over start", grow);
    println!(
        "fixed overhead      {:>12} B (rss growth − limit − index − ghost)",
        fixed
    );
    // Most of the large phase's share is this test's own multi-MiB value buffers, which
    // glibc keeps after they are freed.
    assert!(c.segment_bytes() <= limit);
    assert!(s.evictions > 0);
    assert!(fixed < 8 << 20, "fixed overhead {fixed} B");
}

/// A cheap value (content does not matter here; other tests check bytes).
fn filled(i: u64, len: usize) -> bytes::Bytes {
    bytes::Bytes::from(vec![(i % 251) as u8; len])
}
