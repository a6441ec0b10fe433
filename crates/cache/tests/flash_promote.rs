//! Promotion of flash items back to RAM. A load fills RAM with other items, so the main
//! log's open segment never has room by chance: repeat GETs of a small hot set on flash must
//! still end up served from RAM (promotion reserves space after the shard lock is released).
//! Concurrently with SETs and DELETEs on the same keys, a promotion must never publish a
//! version older than one whose write has completed, nor bring back a deleted item.
mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use flashtier_cache::flash::{Device, FlashConfig, IoBackend, MemoryDevice};
use flashtier_cache::{Cache, ItemWrite, KvStore};

fn open(flash_bytes: u64) -> Cache {
    let d: Arc<dyn Device> = Arc::new(MemoryDevice::new("promote", flash_bytes));
    let engine = FlashConfig {
        io_backend: IoBackend::Psync,
        ..FlashConfig::small()
    };
    let cfg = common::small_flash_config(d, engine)
        .sweep_interval(None)
        .build()
        .unwrap();
    Cache::new(cfg).unwrap()
}

use common::ext_stat as ext;

fn key(i: u64) -> Vec<u8> {
    format!("k{i}").into_bytes()
}

#[test]
fn repeat_hits_after_a_load_are_served_from_ram() {
    const N: u64 = 600;
    const HOT: u64 = 8;
    let c = open(16 << 20);
    // The hot keys are written first, so the rest of the load pushes them out to flash.
    for i in 0..N {
        let w = ItemWrite::new(common::value(i, 2000), 0, 0);
        c.set_now(&key(i), w).unwrap();
    }
    assert!(c.flash_items() > N / 2);
    let read0 = ext(&c, "extstore_objects_read");
    // First round: flash hits (frequency 0 -> 1); second: repeat hits, promoted.
    for _ in 0..2 {
        for i in 0..HOT {
            let it = c.get_now(&key(i)).unwrap().expect("hot key lost");
            assert_eq!(it.value, common::value(i, 2000));
        }
    }
    let read1 = ext(&c, "extstore_objects_read");
    assert!(read1 >= read0 + 2 * HOT, "hot keys were not on flash");
    let promoted = ext(&c, "extstore_objects_promoted");
    assert_eq!(promoted, HOT, "every hot key should be promoted once");
    for _ in 0..10 {
        for i in 0..HOT {
            let it = c.get_now(&key(i)).unwrap().expect("hot key lost");
            assert_eq!(it.value, common::value(i, 2000));
            assert!(it.meta.fetched);
        }
    }
    assert_eq!(
        ext(&c, "extstore_objects_read"),
        read1,
        "promoted keys were read from flash again"
    );
    assert_eq!(ext(&c, "extstore_promotions_abandoned"), 0);
    // The other items are all still there (promotion evicted RAM copies, not items).
    for i in HOT..N {
        let it = c.get_now(&key(i)).unwrap().expect("item lost");
        assert_eq!(it.value, common::value(i, 2000));
    }
}

#[test]
fn recache_rate_zero_still_never_promotes() {
    let c = open(16 << 20);
    c.set_knob("recache_rate", "0").unwrap();
    for i in 0..600 {
        c.set_now(&key(i), ItemWrite::new(common::value(i, 2000), 0, 0))
            .unwrap();
    }
    for _ in 0..5 {
        for i in 0..8 {
            assert!(c.get_now(&key(i)).unwrap().is_some());
        }
    }
    assert_eq!(ext(&c, "extstore_objects_promoted"), 0);
    assert_eq!(ext(&c, "extstore_promotions_abandoned"), 0);
}

/// Per key, operation `n` (from 1) is a DELETE when `n % 4 == 0`, else a SET of version `n`.
fn is_delete(n: u64) -> bool {
    n.is_multiple_of(4)
}

fn versioned(k: u64, n: u64) -> Bytes {
    let mut v = format!("{k}:{n}:").into_bytes();
    v.resize(1500, b'v');
    v.into()
}

fn version_of(k: u64, v: &[u8]) -> u64 {
    let s = std::str::from_utf8(&v[..v.iter().position(|&b| b == b'v').unwrap()]).unwrap();
    let mut parts = s.split(':');
    assert_eq!(
        parts.next().unwrap().parse::<u64>().unwrap(),
        k,
        "value of another key"
    );
    parts.next().unwrap().parse().unwrap()
}

/// One writer per key (so each key's history is a sequence), readers checking every GET
/// against it: a GET that starts after operation `d` completed and ends before operation
/// `s` started may see only a SET version in `[d, s]` (not older than `d`), or a miss if one
/// of the operations `d..=s` is a DELETE. After the run every key holds its last write.
#[test]
fn promotions_racing_sets_and_deletes_never_serve_stale_values() {
    const KEYS: u64 = 24;
    const WRITERS: u64 = 2;
    const OPS: u64 = 600;
    let c = Arc::new(open(64 << 20));
    // Write-through: every SET's version goes to flash at once, so hot keys are on flash
    // often enough for promotions to race with the writers (under write-back they mostly
    // stay in RAM and the race is rarely exercised).
    c.set_knob("write_back_ms", "0").unwrap();
    let done: Arc<Vec<AtomicU64>> = Arc::new((0..KEYS).map(|_| AtomicU64::new(0)).collect());
    let started: Arc<Vec<AtomicU64>> = Arc::new((0..KEYS).map(|_| AtomicU64::new(0)).collect());
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let (c, done, started) = (c.clone(), done.clone(), started.clone());
            std::thread::spawn(move || {
                for n in 1..=OPS {
                    for k in (w..KEYS).step_by(WRITERS as usize) {
                        started[k as usize].store(n, Ordering::SeqCst);
                        if is_delete(n) {
                            c.delete_now(&key(k));
                        } else {
                            c.set_now(&key(k), ItemWrite::new(versioned(k, n), 0, 0))
                                .unwrap();
                        }
                        done[k as usize].store(n, Ordering::SeqCst);
                    }
                    // Other items keep RAM full, so hot keys keep going to flash.
                    let noise = w * 1_000_000 + n;
                    let filler = ItemWrite::new(common::value(noise, 3000), 0, 0);
                    c.set_now(format!("noise{noise}").as_bytes(), filler)
                        .unwrap();
                }
            })
        })
        .collect();
    let readers: Vec<_> = (0..2u64)
        .map(|r| {
            let (c, done, started, stop) = (c.clone(), done.clone(), started.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut x = r + 1;
                let mut checked = 0u64;
                while !stop.load(Ordering::SeqCst) {
                    x = x
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    let k = (x >> 33) % KEYS;
                    let d = done[k as usize].load(Ordering::SeqCst);
                    let got = c.get_now(&key(k)).unwrap();
                    let s = started[k as usize].load(Ordering::SeqCst);
                    match got {
                        Some(it) => {
                            let v = version_of(k, &it.value);
                            assert!(!is_delete(v), "k{k}: a delete's version was served");
                            assert!(
                                v >= d && v <= s,
                                "k{k}: served version {v}, completed {d}, started {s}"
                            );
                        }
                        None => assert!(
                            d == 0 || (d..=s).any(is_delete),
                            "k{k}: miss with no delete in {d}..={s}"
                        ),
                    }
                    checked += 1;
                }
                checked
            })
        })
        .collect();
    for w in writers {
        w.join().unwrap();
    }
    stop.store(true, Ordering::SeqCst);
    let checked: u64 = readers.into_iter().map(|r| r.join().unwrap()).sum();
    for k in 0..KEYS {
        let got = c.get_now(&key(k)).unwrap();
        if is_delete(OPS) {
            assert!(got.is_none(), "k{k}: deleted item came back");
        } else {
            let it = got.unwrap_or_else(|| panic!("k{k}: last write lost"));
            assert_eq!(version_of(k, &it.value), OPS, "k{k}: lost update");
        }
    }
    let promoted = ext(&c, "extstore_objects_promoted");
    let abandoned = ext(&c, "extstore_promotions_abandoned");
    println!("{checked} reads checked, {promoted} promoted, {abandoned} abandoned");
    assert!(promoted > 0, "no promotion happened during the race");
}
