//! A fill that outruns flash (issue 26): once a SET has spent its `append_wait_ms`, RAM
//! keeps the items flash refuses for back-pressure (deferred copies), and where the only way
//! on would be a *forced* eviction dropping them, the SET waits instead, holding no lock,
//! up to ten times `append_wait_ms` more (`extstore_drop_waits`). Nothing is lost while flash
//! is only behind; with flash waits off, or a device that never takes the write, the forced
//! eviction still happens (counted in `items:1:evicted_forced`) and writes go on; a failing
//! device does not hold writes either.
mod common;

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use flashtier_cache::flash::{Device, Faults, FaultyDevice, MemoryDevice};
use flashtier_cache::{Cache, ItemWrite, KvStore};

use common::ext_stat as ext;
use common::gated::Gated;

const N: u64 = 400;
const LEN: usize = 4000;

/// `common::one_chunk_cache` over `dev` (256 KiB of RAM, 16 MiB); versions stay in
/// RAM (a write-back window of 10 minutes) until RAM evicts them, so every eviction needs
/// an append; cold items are not dropped for a busy flash (`evict_when_busy` 0).
fn open(dev: Arc<dyn Device>, append_wait_ms: u64) -> Cache {
    let c = common::one_chunk_cache(dev);
    c.set_knob("write_back_ms", "600000").unwrap();
    c.set_knob("evict_when_busy", "0").unwrap();
    c.set_knob("append_wait_ms", &append_wait_ms.to_string())
        .unwrap();
    c
}

fn gated() -> Arc<Gated> {
    Gated::new(Arc::new(MemoryDevice::new("gated", 16 << 20)))
}

fn key(i: u64) -> Vec<u8> {
    format!("k{i}").into_bytes()
}

/// A `stats items` value of class 1 (RAM).
fn items_stat(c: &Cache, name: &str) -> u64 {
    let want = format!("items:1:{name}");
    c.stats_section("items")
        .unwrap()
        .into_iter()
        .find(|(k, _)| *k == want)
        .map(|(_, v)| v.parse().unwrap())
        .unwrap_or_else(|| panic!("no {want} in stats items"))
}

/// SET keys 0..N from another thread.
fn fill(c: &Arc<Cache>) -> std::thread::JoinHandle<()> {
    let w = c.clone();
    std::thread::spawn(move || {
        for i in 0..N {
            w.set_now(&key(i), ItemWrite::new(common::value(i, LEN), 0, 0))
                .unwrap();
        }
    })
}

/// Keys still held; each must read its own value.
fn held(c: &Cache) -> u64 {
    let mut held = 0;
    for i in 0..N {
        if let Some(it) = c.get_now(&key(i)).unwrap() {
            assert_eq!(it.value, common::value(i, LEN), "k{i}: another value");
            held += 1;
        }
    }
    held
}

fn join_within(writer: std::thread::JoinHandle<()>, limit: Duration) {
    let t = Instant::now();
    while !writer.is_finished() {
        assert!(t.elapsed() < limit, "the writes never got through");
        std::thread::sleep(Duration::from_millis(5));
    }
    writer.join().unwrap();
}

#[test]
fn a_fill_that_outruns_flash_waits_rather_than_drop_deferred_items() {
    let g = gated();
    // 100 ms, then up to 1 s more before a drop.
    let c = Arc::new(open(g.clone(), 100));
    g.set(true);
    let writer = fill(&c);
    let t = Instant::now();
    while ext(&c, "extstore_drop_waits") == 0 {
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "no SET held out against a forced drop"
        );
        assert!(!writer.is_finished(), "the fill never met a forced drop");
        std::thread::sleep(Duration::from_millis(1));
    }
    // Flash catches up while the SET waits.
    g.set(false);
    join_within(writer, Duration::from_secs(60));
    assert!(
        ext(&c, "extstore_evictions_deferred") > 0,
        "flash deferred evictions"
    );
    assert_eq!(ext(&c, "extstore_drop_wait_timeouts"), 0);
    assert_eq!(items_stat(&c, "evicted_forced"), 0);
    assert_eq!(c.stats().evictions, 0, "an item was dropped");
    assert_eq!(held(&c), N);
}

#[test]
fn with_flash_waits_off_the_same_fill_drops_deferred_items_by_force() {
    let g = gated();
    let c = Arc::new(open(g.clone(), 0));
    g.set(true);
    join_within(fill(&c), Duration::from_secs(60));
    let forced = items_stat(&c, "evicted_forced");
    assert!(forced > 0, "no forced eviction");
    assert!(c.stats().evictions >= forced);
    assert_eq!(ext(&c, "extstore_drop_waits"), 0);
    g.set(false);
    assert_eq!(held(&c) + c.stats().evictions, N);
}

#[test]
fn a_device_that_never_takes_the_write_still_lets_writes_through() {
    let g = gated();
    // 20 ms, then up to 200 ms more, per SET that would drop.
    let c = Arc::new(open(g.clone(), 20));
    g.set(true);
    join_within(fill(&c), Duration::from_secs(120));
    assert!(ext(&c, "extstore_drop_waits") > 0);
    assert!(ext(&c, "extstore_drop_wait_timeouts") > 0, "a wait ran out");
    let forced = items_stat(&c, "evicted_forced");
    assert!(forced > 0, "RAM made room by force");
    assert!(c.stats().evictions >= forced);
    assert!(c.get_now(&key(N - 1)).unwrap().is_some(), "the last SET");
    g.set(false);
    assert_eq!(held(&c) + c.stats().evictions, N);
}

#[test]
fn a_failing_device_does_not_hold_writes() {
    let faults = Faults::new();
    let mem: Arc<dyn Device> = Arc::new(MemoryDevice::new("faulty", 16 << 20));
    let dev: Arc<dyn Device> = Arc::new(FaultyDevice::new(mem, faults.clone()));
    let c = Arc::new(open(dev, 200));
    faults.write_eio.store(true, Ordering::SeqCst);
    join_within(fill(&c), Duration::from_secs(120));
    assert_eq!(
        ext(&c, "extstore_drop_wait_timeouts"),
        0,
        "no write waited out its second budget"
    );
    assert!(c.get_now(&key(N - 1)).unwrap().is_some(), "the last SET");
    assert_eq!(
        held(&c) + c.stats().evictions + ext(&c, "extstore_write_failed_lost"),
        N,
        "every key held, evicted, or lost with its failed write"
    );
    faults.write_eio.store(false, Ordering::SeqCst);
}
