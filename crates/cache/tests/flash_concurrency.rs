//! Concurrency over both tiers: threads set, get and read-modify-write overlapping keys while
//! a tiny RAM keeps demoting items to flash, repeat hits promote them back, and background
//! reclaim moves records on a small flash. Every value read must belong to its key, and
//! counters updated with `update` (incr through a flash read when demoted) lose nothing.
mod common;

use std::sync::Arc;

use bytes::Bytes;
use flashtier_cache::flash::{Device, FlashConfig, IoBackend, MemoryDevice};
use flashtier_cache::{Cache, ItemWrite, KvStore, Update};

const THREADS: u64 = 4;
const KEYS: u64 = 400;
const ROUNDS: u64 = 20_000;

fn val(k: u64, n: u64) -> Bytes {
    let mut v = format!("{k}:{n}:").into_bytes();
    v.resize(700 + (k % 5) as usize * 300, b'x');
    v.into()
}

#[test]
fn threads_over_both_tiers_never_see_wrong_values() {
    let (total, expected, evictions, _) = run(32 << 20);
    assert_eq!(evictions, 0);
    assert_eq!(total, expected, "an update was lost");
}

/// A flash of 4 MiB fills up: background reclaim runs concurrently with the requests,
/// relocating hit records and evicting the rest. Values must still always be right.
#[test]
fn concurrent_reclaim_never_serves_wrong_values() {
    let (_, _, evictions, reclaims) = run(4 << 20);
    assert!(reclaims > 0, "reclaim must have run");
    println!("with reclaim: {evictions} evictions, {reclaims} segments reclaimed");
}

fn run(flash_bytes: u64) -> (u64, u64, u64, u64) {
    let dev: Arc<dyn Device> = Arc::new(MemoryDevice::new("conc", flash_bytes));
    let engine = FlashConfig {
        io_backend: IoBackend::Psync,
        ..FlashConfig::small()
    };
    let cfg = common::small_flash_config(dev, engine).build().unwrap();
    let cache = Arc::new(Cache::new(cfg).unwrap());
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let c = cache.clone();
            std::thread::spawn(move || {
                let mut x = t * 7919 + 1;
                for n in 0..ROUNDS {
                    x = x
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    let k = (x >> 33) % KEYS;
                    let key = format!("key:{k}");
                    match n % 4 {
                        0 => {
                            c.set_now(key.as_bytes(), ItemWrite::new(val(k, n), 0, 0))
                                .unwrap();
                        }
                        1 | 2 => {
                            if let Some(it) = c.get_now(key.as_bytes()).unwrap() {
                                let p = format!("{k}:");
                                assert!(
                                    it.value.starts_with(p.as_bytes()),
                                    "key {k} got a foreign value"
                                );
                            }
                        }
                        _ => {
                            let ckey = format!("count:{}", k % 16);
                            c.update_now(ckey.as_bytes(), |cur| {
                                let n = cur
                                    .map(|i| {
                                        String::from_utf8_lossy(&i.value).parse::<u64>().unwrap()
                                    })
                                    .unwrap_or(0);
                                let mut v = (n + 1).to_string().into_bytes();
                                v.resize(20, b' ');
                                let s = String::from_utf8(v).unwrap().trim_end().to_string();
                                (Update::Put(ItemWrite::new(s.into(), 0, 0)), ())
                            })
                            .unwrap();
                        }
                    }
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let total: u64 = (0..16)
        .map(|i| {
            cache
                .get_now(format!("count:{i}").as_bytes())
                .unwrap()
                .map(|it| String::from_utf8_lossy(&it.value).parse::<u64>().unwrap())
                .unwrap_or(0)
        })
        .sum();
    let expected: u64 = THREADS * (ROUNDS / 4);
    let st = cache.stats();
    println!(
        "concurrency: counters {total}/{expected}, evictions {}, flash items {}",
        st.evictions,
        cache.flash_items()
    );
    assert!(
        cache.flash_items() > 0,
        "the test must exercise flash slots"
    );
    let reclaims = cache
        .flash()
        .unwrap()
        .stats()
        .pairs()
        .into_iter()
        .find(|(k, _)| *k == "flash_reclaims")
        .map_or(0, |(_, v)| v);
    (total, expected, st.evictions, reclaims)
}
