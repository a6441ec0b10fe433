//! `evict_when_busy` (a runtime knob, off by default): while every flash write buffer is in flight (a device
//! slower than the writer), a cold item RAM evicts is dropped at once — counted in
//! `extstore_evictions_flash_busy` and `evictions` — and the SET that evicted it does not
//! wait for flash; every key still held reads its own value. With the knob off the same SET
//! waits for room (`append_wait_ms`).
mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use flashtier_cache::flash::{FlashConfig, IoBackend, MemoryDevice};
use flashtier_cache::{Cache, ItemWrite, KvStore};

use common::ext_stat as ext;
use common::gated::Gated;

/// 256 KiB of RAM over a 16 MiB gated device, one chunk write in flight at most; versions
/// stay in RAM (a write-back window of 10 minutes) until RAM evicts them.
fn open(gated: Arc<Gated>) -> Cache {
    let engine = FlashConfig {
        io_backend: IoBackend::Psync,
        background_reclaim: false,
        flush_interval: None,
        max_chunks_in_flight: 1,
        ..FlashConfig::small()
    };
    let cfg = common::small_flash_config(gated, engine)
        .sweep_interval(None)
        .build()
        .unwrap();
    let c = Cache::new(cfg).unwrap();
    c.set_knob("write_back_ms", "600000").unwrap();
    c.set_knob("append_wait_ms", "60000").unwrap();
    c.set_knob("evict_when_busy", "1").unwrap();
    c
}

fn gated() -> Arc<Gated> {
    Gated::new(Arc::new(MemoryDevice::new("gated", 16 << 20)))
}

fn key(i: u64) -> Vec<u8> {
    format!("k{i}").into_bytes()
}

#[test]
fn cold_evictions_are_dropped_while_the_write_buffers_are_in_flight() {
    let g = gated();
    let c = open(g.clone());
    g.set(true);
    let started = Instant::now();
    for i in 0..400 {
        c.set_now(&key(i), ItemWrite::new(common::value(i, 4000), 0, 0))
            .unwrap();
    }
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "the SETs waited for flash"
    );
    assert_eq!(ext(&c, "extstore_append_waits"), 0);
    let busy = ext(&c, "extstore_evictions_flash_busy");
    assert!(busy > 0, "no eviction met the busy flash");
    assert!(c.stats().evictions >= busy);
    g.set(false);
    let mut held = 0;
    for i in 0..400 {
        if let Some(it) = c.get_now(&key(i)).unwrap() {
            assert_eq!(it.value, common::value(i, 4000), "k{i}: another value");
            held += 1;
        }
    }
    assert!(held > 0);
    assert!(
        c.get_now(&key(399)).unwrap().is_some(),
        "the last SET is in RAM"
    );
}

#[test]
fn with_the_knob_off_the_eviction_waits_for_room() {
    let g = gated();
    let c = Arc::new(open(g.clone()));
    c.set_knob("evict_when_busy", "0").unwrap();
    g.set(true);
    let w = c.clone();
    let writer = std::thread::spawn(move || {
        for i in 0..400 {
            w.set_now(&key(i), ItemWrite::new(common::value(i, 4000), 0, 0))
                .unwrap();
        }
    });
    let t = Instant::now();
    while ext(&c, "extstore_append_waits") == 0 {
        assert!(t.elapsed() < Duration::from_secs(30), "no SET waited");
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(!writer.is_finished());
    g.set(false);
    writer.join().unwrap();
    assert_eq!(ext(&c, "extstore_evictions_flash_busy"), 0);
}
