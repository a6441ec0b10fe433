//! A clean shutdown keeps every acknowledged item RAM holds without a flash copy, also a new
//! key (no older version on flash) whose write-through append the engine refused: for
//! back-pressure (all chunk writes in flight: a slow device, small chunks) or because the
//! device was out. One refused for back-pressure is marked dirty and appended by the
//! write-back pass once the engine has room; `Cache::close` appends whatever RAM still holds
//! without a flash copy (waiting out back-pressure), so they are hits after a reopen.
mod common;

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use flashtier_cache::flash::{Device, Faults, FaultyDevice, MemoryDevice};
use flashtier_cache::{Cache, ItemWrite, KvStore};

use common::ext_stat as ext;
use common::gated::Gated;

fn open(dev: Arc<dyn Device>) -> Cache {
    let c = common::one_chunk_cache(dev);
    c.set_knob("write_back_ms", "0").unwrap();
    c
}

fn key(i: u64) -> Vec<u8> {
    format!("k{i}").into_bytes()
}

fn set(c: &Cache, i: u64) {
    c.set_now(&key(i), ItemWrite::new(common::value(i, 4000), 0, 0))
        .unwrap();
}

/// After a clean close and a reopen on `mem`, every key of `keys` is a hit with its value.
fn all_back(c: Cache, mem: &Arc<MemoryDevice>, keys: std::ops::Range<u64>) {
    c.close().ok();
    drop(c);
    let c = open(mem.clone());
    for i in keys {
        let got = c.get_now(&key(i)).unwrap().map(|it| it.value);
        let want = common::value(i, 4000);
        assert!(
            got == Some(want),
            "k{i} after a clean restart: a miss or wrong bytes"
        );
    }
}

#[test]
fn items_refused_for_back_pressure_survive_a_clean_restart() {
    let mem = Arc::new(MemoryDevice::new("gated", 16 << 20));
    let gated = Gated::new(mem.clone());
    let c = open(gated.clone());
    gated.set(true);
    // Appends under a lock never wait: with the device stalled, write-through is refused
    // once the one chunk write allowed in flight is out and the next chunk is full.
    c.set_knob("append_wait_ms", "0").unwrap();
    let n = 40;
    for i in 0..n {
        set(&c, i);
    }
    let skipped = ext(&c, "extstore_write_skipped");
    assert!(skipped > 0, "no write-through was refused");
    assert!(ext(&c, "extstore_objects_written") > 0);
    gated.set(false);
    // The refused versions wait as dirty ones: the write-back pass appends them once the
    // engine has room, without waiting for an eviction or a shutdown.
    let t0 = Instant::now();
    while ext(&c, "extstore_written_back") == 0 {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "refused items written back"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    all_back(c, &mem, 0..n);
}

#[test]
fn new_items_stored_while_the_device_was_out_survive_a_clean_restart() {
    let mem = Arc::new(MemoryDevice::new("faulty", 16 << 20));
    let faults = Faults::new();
    let c = open(Arc::new(FaultyDevice::new(mem.clone(), faults.clone())));
    for i in 0..10 {
        set(&c, i);
    }
    c.flash().unwrap().flush().wait().unwrap();
    faults.write_eio.store(true, Ordering::SeqCst);
    set(&c, 10);
    assert!(c.flash().unwrap().flush().wait().is_err());
    assert_eq!(ext(&c, "flash_devices_failed"), 1);
    // New keys while the device is out: RAM only, no older version on flash.
    for i in 11..20 {
        set(&c, i);
    }
    assert!(ext(&c, "extstore_write_skipped") >= 9);
    faults.write_eio.store(false, Ordering::SeqCst);
    let t0 = Instant::now();
    while ext(&c, "flash_devices_failed") != 0 {
        assert!(t0.elapsed() < Duration::from_secs(10), "device back");
        std::thread::sleep(Duration::from_millis(10));
    }
    all_back(c, &mem, 0..20);
}
