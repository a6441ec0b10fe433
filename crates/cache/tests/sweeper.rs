//! Expired items and overwritten versions free their memory without any client touching them.
mod common;

use std::time::{Duration, Instant};

use flashtier_cache::{Cache, CacheConfig, Clock, ItemWrite, KvStore};

fn cache(clock: &Clock, sweep: Option<Duration>) -> Cache {
    let cfg = CacheConfig::builder()
        .memory_limit(8 << 20)
        .segment_size(64 << 10)
        .sweep_interval(sweep)
        .clock(clock.clone())
        .build()
        .unwrap();
    Cache::new(cfg).unwrap()
}

fn fill(c: &Cache, clock: &Clock) {
    let now = clock.now();
    for i in 0..10_000u64 {
        // Every 100th item never expires; the rest expire in 10 s.
        let exp = if i % 100 == 0 { 0 } else { now + 10 };
        c.set_now(
            format!("k{i}").as_bytes(),
            ItemWrite::new(common::value(i, 200), 0, exp),
        )
        .unwrap();
    }
}

#[test]
fn a_sweep_pass_frees_expired_segments_and_keeps_live_items() {
    let clock = Clock::system();
    let c = cache(&clock, None);
    fill(&c, &clock);
    let before = c.stats();
    assert_eq!(before.curr_items, 10_000);
    assert_eq!(c.sweep(), 0, "nothing has expired yet");
    clock.advance(20);
    let swept = c.sweep();
    assert!(swept > 0);
    let after = c.stats();
    assert_eq!(after.curr_items, 100);
    assert_eq!(after.reclaimed, 9_900);
    assert!(
        after.bytes * 20 < before.bytes,
        "{} vs {}",
        after.bytes,
        before.bytes
    );
    for i in (0..10_000u64).step_by(100) {
        let it = c
            .get_now(format!("k{i}").as_bytes())
            .unwrap()
            .expect("live item kept");
        assert_eq!(it.value, common::value(i, 200));
    }
    let free: u64 = c
        .stats_section("slabs")
        .unwrap()
        .into_iter()
        .find(|(k, _)| k == "segments_free")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap();
    assert!(free > 10, "freed segments go back to the free list: {free}");
}

#[test]
fn the_background_thread_sweeps_on_its_own() {
    let clock = Clock::system();
    let c = cache(&clock, Some(Duration::from_millis(20)));
    fill(&c, &clock);
    clock.advance(20);
    let start = Instant::now();
    while c.stats().curr_items > 100 && start.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(c.stats().curr_items, 100);
}

#[test]
fn flush_all_space_is_freed_by_the_sweeper() {
    let clock = Clock::system();
    let c = cache(&clock, None);
    fill(&c, &clock);
    c.flush_all(clock.now() + 5);
    clock.advance(6);
    c.sweep();
    assert_eq!(c.stats().curr_items, 0);
    assert_eq!(c.stats().bytes, 0);
}

fn items_stat(c: &Cache, name: &str) -> u64 {
    c.stats_section("items")
        .unwrap()
        .into_iter()
        .find(|(k, _)| k == &format!("items:1:{name}"))
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or_else(|| panic!("no items:1:{name}"))
}

fn overwrite_every(c: &Cache, step: u64, size: usize) {
    for i in (0..10_000u64).step_by(step as usize) {
        c.set_now(
            format!("k{i}").as_bytes(),
            ItemWrite::new(common::value(i + 1, size), 0, 0),
        )
        .unwrap();
    }
}

#[test]
fn segments_a_quarter_dead_are_compacted_and_less_dead_ones_are_not() {
    let clock = Clock::system();
    let c = cache(&clock, None);
    for i in 0..10_000u64 {
        c.set_now(
            format!("k{i}").as_bytes(),
            ItemWrite::new(common::value(i, 200), 0, 0),
        )
        .unwrap();
    }
    // Every 5th key overwritten with a larger value (an overwrite of the same record size is
    // written in place and leaves nothing dead): its old segments are ~20 % dead, under the
    // threshold.
    overwrite_every(&c, 5, 300);
    assert_eq!(c.sweep(), 0, "segments 20 % dead are left alone");
    assert_eq!(items_stat(&c, "compacted"), 0);
    // Every 3rd key too: the first segments are now ~47 % dead (every 5th or 3rd key).
    overwrite_every(&c, 3, 300);
    let swept = c.sweep();
    assert!(swept > 0, "segments over a quarter dead are compacted");
    let moved = items_stat(&c, "compacted");
    assert!(moved > 0);
    assert_eq!(c.stats().curr_items, 10_000, "compaction keeps every item");
    for i in 0..10_000u64 {
        let it = c
            .get_now(format!("k{i}").as_bytes())
            .unwrap()
            .expect("live item kept");
        let newest = if i % 5 == 0 || i % 3 == 0 {
            common::value(i + 1, 300)
        } else {
            common::value(i, 200)
        };
        assert_eq!(it.value, newest, "k{i}");
    }
}
