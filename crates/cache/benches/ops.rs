//! Operation cost of the RAM tier: ns per GET (hit) and SET on 1 and 2 threads.
//!
//! `cargo bench -p flashtier-cache --bench ops`. Not a server benchmark (no network); it shows
//! what the store itself costs per request.
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use flashtier_cache::{Cache, CacheConfig, ItemWrite};

const KEYS: u64 = 100_000;
const OPS: u64 = 2_000_000;

fn ops() -> u64 {
    std::env::var("OPS_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(OPS)
}

fn key(i: u64) -> String {
    format!("key:{:016x}", i.wrapping_mul(0x9e37_79b9_7f4a_7c15) % KEYS)
}

fn run(c: &Arc<Cache>, threads: u64, get: bool, value: &Bytes) -> f64 {
    let start = Instant::now();
    let hs: Vec<_> = (0..threads)
        .map(|t| {
            let c = c.clone();
            let v = value.clone();
            std::thread::spawn(move || {
                let mut x = t + 1;
                for _ in 0..ops() / threads {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let k = key(x);
                    if get {
                        let _ = c.get_now(k.as_bytes());
                    } else {
                        let _ = c.set_now(k.as_bytes(), ItemWrite::new(v.clone(), 0, 0));
                    }
                }
            })
        })
        .collect();
    for h in hs {
        let _ = h.join();
    }
    start.elapsed().as_nanos() as f64 / ops() as f64
}

fn main() {
    println!("| value  | threads | GET ns/op | SET ns/op |");
    println!("|--------|---------|-----------|-----------|");
    for size in [100usize, 4096] {
        let cfg = CacheConfig::builder()
            .memory_limit(1 << 30)
            .max_item_size(1 << 20)
            .build()
            .expect("config");
        let c = Arc::new(Cache::new(cfg).expect("cache"));
        let v = Bytes::from(vec![1u8; size]);
        for i in 0..KEYS {
            let _ = c.set_now(key(i).as_bytes(), ItemWrite::new(v.clone(), 0, 0));
        }
        // `OPS_ONLY=get` or `OPS_ONLY=set`: one thread, one kind of operation, for counting
        // instructions per operation with `perf stat` (subtract an `OPS_ONLY=none` run).
        match std::env::var("OPS_ONLY").as_deref() {
            Ok("get") => {
                run(&c, 1, true, &v);
                continue;
            }
            Ok("set") => {
                run(&c, 1, false, &v);
                continue;
            }
            Ok(_) => continue,
            Err(_) => {}
        }
        for threads in [1, 2] {
            let set = run(&c, threads, false, &v);
            let get = run(&c, threads, true, &v);
            println!("| {size:>6} | {threads:>7} | {get:>9.0} | {set:>9.0} |");
        }
    }
}
