//! Several threads at once: atomic read-modify-write, and values never torn under eviction.
mod common;

use std::sync::Arc;

use bytes::Bytes;
use flashtier_cache::{Cache, CacheConfig, ItemWrite, KvStore, Update};

fn cache(limit: usize) -> Arc<Cache> {
    let cfg = CacheConfig::builder()
        .memory_limit(limit)
        .segment_size(64 << 10)
        .sweep_interval(Some(std::time::Duration::from_millis(5)))
        .build()
        .unwrap();
    Arc::new(Cache::new(cfg).unwrap())
}

#[test]
fn concurrent_increments_are_atomic() {
    let c = cache(16 << 20);
    let threads = 4;
    let per = 2_000u64;
    let hs: Vec<_> = (0..threads)
        .map(|t| {
            let c = c.clone();
            std::thread::spawn(move || {
                for i in 0..per {
                    let key = format!("ctr{}", i % 4);
                    c.update_now(key.as_bytes(), |cur| {
                        let n = cur
                            .and_then(|it| std::str::from_utf8(&it.value).ok()?.parse().ok())
                            .unwrap_or(0u64);
                        let w = ItemWrite::new(Bytes::from((n + 1).to_string()), 0, 0);
                        (Update::Put(w), ())
                    })
                    .unwrap();
                    // Unrelated traffic rolls segments underneath the counters.
                    let k = format!("t{t}-{i}");
                    c.set_now(k.as_bytes(), ItemWrite::new(common::value(i, 300), 0, 0))
                        .unwrap();
                }
            })
        })
        .collect();
    for h in hs {
        h.join().unwrap();
    }
    let mut total = 0u64;
    for k in 0..4 {
        let it = c.get_now(format!("ctr{k}").as_bytes()).unwrap().unwrap();
        total += std::str::from_utf8(&it.value)
            .unwrap()
            .parse::<u64>()
            .unwrap();
    }
    assert_eq!(total, threads as u64 * per);
}

#[test]
fn readers_never_see_torn_values_while_evicting() {
    let limit = 1 << 20;
    let c = cache(limit);
    let hs: Vec<_> = (0..4u64)
        .map(|t| {
            let c = c.clone();
            std::thread::spawn(move || {
                let mut x = t + 1;
                for i in 0..20_000u64 {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let k = format!("k{}", x % 2_000);
                    if x % 3 == 0 {
                        let flags = (i as u32) ^ (x as u32);
                        let len = (x >> 40) as usize % 3_000;
                        let v = common::value(u64::from(flags) | t << 32, len);
                        c.set_now(k.as_bytes(), ItemWrite::new(v, flags, 0))
                            .unwrap();
                    } else if let Some(it) = c.get_now(k.as_bytes()).unwrap() {
                        // The value must be exactly what some writer wrote for these flags.
                        let ok = (0..4u64).any(|w| {
                            it.value == common::value(u64::from(it.flags) | w << 32, it.value.len())
                        });
                        assert!(ok, "torn or foreign value for {k}");
                    }
                    assert!(c.segment_bytes() <= limit as u64);
                }
            })
        })
        .collect();
    for h in hs {
        h.join().unwrap();
    }
    assert!(c.stats().evictions > 0);
}

#[test]
fn everything_at_once_stays_consistent_and_bounded() {
    let limit = 2 << 20;
    let cfg = CacheConfig::builder()
        .memory_limit(limit)
        .segment_size(64 << 10)
        .max_item_size(256 << 10)
        .sweep_interval(Some(std::time::Duration::from_millis(1)))
        .build()
        .unwrap();
    let c = Arc::new(Cache::new(cfg).unwrap());
    let clock = c.config().clock.clone();
    let hs: Vec<_> = (0..4u64)
        .map(|t| {
            let c = c.clone();
            let clock = clock.clone();
            std::thread::spawn(move || {
                let mut x = t * 7919 + 1;
                for i in 0..3_000u64 {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let k = format!("k{}", x % 500);
                    let flags = (x >> 20) as u32;
                    match x % 16 {
                        0..=4 => {
                            let len = if x % 64 == 0 {
                                100_000 + (x >> 30) as usize % 100_000
                            } else {
                                (x >> 30) as usize % 2_000
                            };
                            let exp = if x % 5 == 0 { clock.now() + 1 } else { 0 };
                            let v = common::value(u64::from(flags), len);
                            c.set_now(k.as_bytes(), ItemWrite::new(v, flags, exp))
                                .unwrap();
                        }
                        5..=11 => {
                            if let Some(it) = c.get_now(k.as_bytes()).unwrap() {
                                let want = common::value(u64::from(it.flags), it.value.len());
                                assert!(it.value == want, "bad value for {k}");
                            }
                        }
                        12 | 13 => {
                            // Rewrite with a new seed, atomically.
                            c.update_now(k.as_bytes(), |cur| match cur {
                                Some(it) => {
                                    let f = it.flags.wrapping_add(1);
                                    let v = common::value(u64::from(f), it.value.len() + 8);
                                    (Update::Put(ItemWrite::new(v, f, 0)), ())
                                }
                                None => (Update::Keep, ()),
                            })
                            .unwrap();
                        }
                        14 => {
                            c.delete_now(k.as_bytes());
                        }
                        _ => {
                            if i % 500 == 499 && t == 0 {
                                c.flush_all(0);
                                clock.advance(1);
                            }
                        }
                    }
                    assert!(c.segment_bytes() <= limit as u64);
                }
            })
        })
        .collect();
    for h in hs {
        h.join().unwrap();
    }
    c.sweep();
    let s = c.stats();
    assert!(s.bytes <= limit as u64);
}
