//! Eviction under a small memory limit: no panic, memory bounded, hot items survive.
mod common;

use flashtier_cache::{Cache, CacheConfig, EvictionPolicy, ItemWrite, KvStore};

fn small(limit: usize, policy: EvictionPolicy) -> Cache {
    let cfg = CacheConfig::builder()
        .memory_limit(limit)
        .segment_size(64 << 10)
        .max_item_size(limit)
        .eviction(policy)
        .sweep_interval(None)
        .build()
        .unwrap();
    Cache::new(cfg).unwrap()
}

#[test]
fn overfilling_evicts_and_stays_within_the_limit() {
    let limit = 2 << 20;
    let c = small(limit, EvictionPolicy::S3Fifo);
    for i in 0..40_000u64 {
        let k = format!("k{i}");
        c.set_now(k.as_bytes(), ItemWrite::new(common::value(i, 200), 0, 0))
            .unwrap();
        assert!(c.segment_bytes() <= limit as u64);
    }
    let s = c.stats();
    assert!(s.evictions > 0);
    assert!(s.bytes <= limit as u64);
    // The most recent items are present and intact.
    for i in 39_900..40_000u64 {
        let got = c
            .get_now(format!("k{i}").as_bytes())
            .unwrap()
            .expect("recent item");
        assert_eq!(got.value, common::value(i, 200));
    }
    let slabs = c.stats_section("slabs").unwrap();
    assert!(slabs.iter().any(|(k, _)| k == "segments_main"));
}

fn hot_survival(policy: EvictionPolicy) -> (f64, f64) {
    let c = small(2 << 20, policy);
    let hot = 400u64;
    for i in 0..30_000u64 {
        let k = format!("cold{i}");
        c.set_now(k.as_bytes(), ItemWrite::new(common::value(i, 200), 0, 0))
            .unwrap();
        let h = i % hot;
        let hk = format!("hot{h}");
        if c.get_now(hk.as_bytes()).unwrap().is_none() {
            c.set_now(hk.as_bytes(), ItemWrite::new(common::value(h, 200), 0, 0))
                .unwrap();
        }
    }
    let present = |prefix: &str, range: std::ops::Range<u64>| {
        let n = range.end - range.start;
        let hits = range
            .filter(|i| {
                c.get_now(format!("{prefix}{i}").as_bytes())
                    .unwrap()
                    .is_some()
            })
            .count();
        hits as f64 / n as f64
    };
    (present("hot", 0..hot), present("cold", 0..30_000))
}

#[test]
fn frequently_used_items_survive_better() {
    let (hot, cold) = hot_survival(EvictionPolicy::S3Fifo);
    println!("s3fifo: hot {hot:.3} cold {cold:.3}");
    assert!(hot > 0.95, "hot survival {hot}");
    assert!(cold < 0.5, "cold survival {cold}");
    let (fifo_hot, _) = hot_survival(EvictionPolicy::Fifo);
    println!("fifo: hot {fifo_hot:.3}");
    assert!(hot >= fifo_hot);
}

#[test]
fn large_items_up_to_the_memory_limit() {
    let limit = 64 << 20;
    let cfg = CacheConfig::builder()
        .memory_limit(limit)
        .max_item_size(limit)
        .sweep_interval(None)
        .build()
        .unwrap();
    let c = Cache::new(cfg).unwrap();
    for i in 0..200u64 {
        c.set_now(
            format!("s{i}").as_bytes(),
            ItemWrite::new(common::value(i, 100_000), 0, 0),
        )
        .unwrap();
    }
    // A value as large as the limit needs one chunk more than the limit (its header and key
    // spill over): the arena's one spare chunk, documented in `CacheConfig::memory_limit`.
    let big = common::value(7, limit);
    c.set_now(b"big", ItemWrite::new(big.clone(), 3, 0))
        .unwrap();
    assert!(
        c.segment_bytes() <= limit as u64 + (1 << 20),
        "{}",
        c.segment_bytes()
    );
    let got = c.get_now(b"big").unwrap().expect("big item");
    assert_eq!(got.value.len(), big.len());
    assert!(got.value == big);
    // Over the limit is refused with TooLarge.
    let too = common::value(8, limit + 1);
    assert!(matches!(
        c.set_now(b"too", ItemWrite::new(too, 0, 0)),
        Err(flashtier_cache::Error::TooLarge { .. })
    ));
    // Small items push the big one out again without trouble.
    for i in 0..1_500u64 {
        c.set_now(
            format!("t{i}").as_bytes(),
            ItemWrite::new(common::value(i, 50_000), 0, 0),
        )
        .unwrap();
        assert!(c.segment_bytes() <= limit as u64 + (1 << 20));
    }
    assert!(c.get_now(b"big").unwrap().is_none());
    assert!(c.get_now(b"t1499").unwrap().is_some());
}

#[test]
fn mixed_sizes_with_evictions_keep_values_intact() {
    let limit = 4 << 20;
    let c = small(limit, EvictionPolicy::S3Fifo);
    let mut x = 1u64;
    for i in 0..3_000u64 {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let len = match x >> 60 {
            0 => (x >> 20) as usize % 200_000,
            1..=3 => (x >> 20) as usize % 40_000,
            _ => (x >> 20) as usize % 2_000,
        };
        let k = format!("m{}", x % 3_000);
        c.set_now(
            k.as_bytes(),
            ItemWrite::new(common::value(i, len), i as u32, 0),
        )
        .unwrap();
        assert!(c.segment_bytes() <= limit as u64);
        if let Some(it) = common::now(c.get(k.as_bytes())).unwrap() {
            assert_eq!(it.value, common::value(u64::from(it.flags), it.value.len()));
        }
    }
}

#[test]
fn a_panicking_update_closure_does_not_wedge_eviction() {
    let c = small(1 << 20, EvictionPolicy::S3Fifo);
    // On a fresh cache there is no head segment, so the first `Put` takes the slow path:
    // space is reserved, then the closure runs again — and panics while holding it.
    let mut calls = 0;
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        c.update_now(b"k", |_| {
            calls += 1;
            assert!(calls < 2, "closure panics on its second call");
            (
                flashtier_cache::Update::Put(ItemWrite::new(common::value(1, 100), 0, 0)),
                (),
            )
        })
    }));
    assert!(r.is_err());
    // Evicting every segment, including the one holding the abandoned reservation, finishes.
    for i in 0..20_000u64 {
        c.set_now(
            format!("k{i}").as_bytes(),
            ItemWrite::new(common::value(i, 200), 0, 0),
        )
        .unwrap();
    }
    assert!(c.stats().evictions > 0);
}

#[test]
fn memory_limit_changes_at_run_time() {
    let c = small(2 << 20, EvictionPolicy::S3Fifo);
    let fill = |c: &Cache, from: u64, n: u64| {
        for i in from..from + n {
            c.set_now(
                format!("k{i}").as_bytes(),
                ItemWrite::new(common::value(i, 200), 0, 0),
            )
            .unwrap();
        }
    };
    fill(&c, 0, 20_000);
    assert!(c.segment_bytes() <= 2 << 20);
    assert!(c.set_memory_limit(1 << 10).is_err(), "below two segments");
    assert_eq!(c.memory_limit(), 2 << 20, "a failed change changes nothing");
    // Raising lets the store hold more.
    c.set_memory_limit(6 << 20).unwrap();
    assert_eq!(c.memory_limit(), 6 << 20);
    fill(&c, 20_000, 40_000);
    assert!(c.segment_bytes() > 4 << 20);
    assert!(c.segment_bytes() <= 6 << 20);
    assert_eq!(c.stats().limit_maxbytes, 6 << 20);
    // Lowering takes effect as writes evict.
    c.set_memory_limit(1 << 20).unwrap();
    fill(&c, 60_000, 20_000);
    assert!(c.segment_bytes() <= 1 << 20, "{}", c.segment_bytes());
    for i in 79_950..80_000u64 {
        let got = c.get_now(format!("k{i}").as_bytes()).unwrap();
        assert_eq!(got.expect("recent item").value, common::value(i, 200));
    }
}
