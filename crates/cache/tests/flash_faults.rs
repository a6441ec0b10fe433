//! Faults under the flash tier (`FaultyDevice` over a `MemoryDevice`): EIO on read fails the
//! request that needed flash with `Error::Flash` while RAM items are still served; EIO or
//! ENOSPC on write never fails a store: the failed chunk's items stay in RAM without a flash
//! copy (appended again when RAM evicts them) or, if RAM had already let them go, are removed
//! and counted lost; stores go to RAM while the device is out; the device comes back and
//! takes writes again. Nothing wrong is ever served; stats show each step.
mod common;

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use flashtier_cache::flash::{Device, Faults, FaultyDevice, FlashConfig, IoBackend, MemoryDevice};
use flashtier_cache::{Cache, Error, ItemWrite, KvStore};

const N: u64 = 300;

fn open() -> (Cache, Arc<Faults>) {
    open_with(FlashConfig::small())
}

fn open_with(base: FlashConfig) -> (Cache, Arc<Faults>) {
    let faults = Faults::new();
    let mem: Arc<dyn Device> = Arc::new(MemoryDevice::new("faulty", 16 << 20));
    let dev: Arc<dyn Device> = Arc::new(FaultyDevice::new(mem, faults.clone()));
    let engine = FlashConfig {
        io_backend: IoBackend::Psync,
        background_reclaim: false,
        device_retry_max: Duration::from_millis(200),
        ..base
    };
    let cfg = common::small_flash_config(dev, engine)
        .sweep_interval(None)
        .build()
        .unwrap();
    // These tests are about write-through appends failing under live RAM copies.
    let c = Cache::new(cfg).unwrap();
    c.set_knob("write_back_ms", "0").unwrap();
    (c, faults)
}

fn key(i: u64) -> Vec<u8> {
    format!("k{i}").into_bytes()
}

fn load(c: &Cache) {
    for i in 0..N {
        c.set_now(&key(i), ItemWrite::new(common::value(i, 4000), 0, 0))
            .unwrap();
    }
    c.flash().unwrap().flush().wait().unwrap();
}

use common::ext_stat as ext;

#[test]
fn read_eio_fails_flash_requests_and_ram_keeps_serving() {
    let (c, faults) = open();
    load(&c);
    assert!(c.flash_items() > N / 2);
    faults.read_eio.store(true, Ordering::SeqCst);
    let (mut served, mut failed) = (0, 0);
    for i in 0..N {
        match c.get_now(&key(i)) {
            Ok(Some(it)) => {
                assert_eq!(it.value, common::value(i, 4000), "nothing wrong is served");
                served += 1;
            }
            Err(Error::Flash(_)) => failed += 1,
            other => panic!("key {i}: {other:?}"),
        }
    }
    assert!(served > 0, "RAM-resident items are still served");
    assert!(failed > 0, "flash-resident items fail with Error::Flash");
    // An update of a flash item fails too and changes nothing.
    let first_flash = (0..N).find(|&i| c.get_now(&key(i)).is_err()).unwrap();
    let r = c.update_now(&key(first_flash), |_| (flashtier_cache::Update::Delete, ()));
    assert!(matches!(r, Err(Error::Flash(_))));
    assert!(ext(&c, "extstore_errors") > 0);
    faults.read_eio.store(false, Ordering::SeqCst);
    for i in 0..N {
        let it = c.get_now(&key(i)).unwrap().unwrap();
        assert_eq!(it.value, common::value(i, 4000));
    }
}

fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !cond() {
        assert!(t0.elapsed() < Duration::from_secs(10), "timed out: {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Every key reads as its value or as a miss, never as anything else; returns the hits.
fn served(c: &Cache, keys: std::ops::Range<u64>) -> u64 {
    let mut hits = 0;
    for i in keys {
        match c.get_now(&key(i)) {
            Ok(Some(it)) => {
                assert_eq!(
                    it.value,
                    common::value(i, 4000),
                    "key {i}: wrong value served"
                );
                hits += 1;
            }
            Ok(None) => {}
            Err(e) => panic!("key {i}: {e}"),
        }
    }
    hits
}

fn write_fault(arm: impl Fn(&Faults), disarm: impl Fn(&Faults)) {
    let (c, faults) = open();
    load(&c);
    arm(&faults);
    // Every store succeeds: into RAM (and the write buffer, until the device fails).
    for i in N..N + 40 {
        c.set_now(&key(i), ItemWrite::new(common::value(i, 4000), 0, 0))
            .unwrap();
    }
    assert!(
        c.flash().unwrap().flush().wait().is_err(),
        "the flush reports the failed write"
    );
    wait_until("failed write reported", || {
        ext(&c, "extstore_write_failed_in_ram") + ext(&c, "extstore_write_failed_lost") > 0
    });
    c.set_now(b"after", ItemWrite::new(common::value(1, 100), 0, 0))
        .unwrap();
    assert_eq!(ext(&c, "flash_devices_failed"), 1);
    assert!(ext(&c, "flash_write_errors") >= 3);
    assert!(ext(&c, "flash_records_lost") > 0);
    assert!(
        ext(&c, "extstore_write_skipped") > 0,
        "stores went to RAM only"
    );
    // Whatever is served is right; the newest stores are served from RAM.
    served(&c, 0..N);
    assert!(
        served(&c, N + 30..N + 40) == 10,
        "recent stores stay in RAM"
    );
    // The device comes back and takes writes again.
    disarm(&faults);
    wait_until("device back", || ext(&c, "flash_device_recoveries") == 1);
    let written = ext(&c, "extstore_objects_written");
    for i in N + 40..N + 80 {
        c.set_now(&key(i), ItemWrite::new(common::value(i, 4000), 0, 0))
            .unwrap();
    }
    c.flash().unwrap().flush().wait().unwrap();
    assert!(ext(&c, "extstore_objects_written") >= written + 40);
    assert_eq!(served(&c, N + 40..N + 80), 40);
    served(&c, 0..N + 40);
}

#[test]
fn enospc_on_write_keeps_stores_going_and_the_device_comes_back() {
    write_fault(
        |f| f.write_enospc.store(true, Ordering::SeqCst),
        |f| f.write_enospc.store(false, Ordering::SeqCst),
    );
}

#[test]
fn eio_on_write_keeps_stores_going_and_the_device_comes_back() {
    write_fault(
        |f| f.write_eio.store(true, Ordering::SeqCst),
        |f| f.write_eio.store(false, Ordering::SeqCst),
    );
}

/// A chunk large enough to hold more items than RAM: when its write fails, the items RAM
/// still holds lose their flash home (and are appended again when RAM evicts them, once the
/// device is back), the ones RAM had let go are removed and counted lost.
#[test]
fn failed_chunk_keeps_ram_copies_and_counts_flash_only_items_lost() {
    let (c, faults) = open_with(FlashConfig {
        segment_size: 1 << 20,
        chunk_size: 512 << 10,
        flush_interval: None,
        ..FlashConfig::small()
    });
    // 100 items of 4000 bytes: all in one unwritten chunk; RAM (256 KiB) keeps the newest.
    for i in 0..100 {
        c.set_now(&key(i), ItemWrite::new(common::value(i, 4000), 0, 0))
            .unwrap();
    }
    assert!(
        c.flash_items() > 0,
        "RAM let some items go to their flash home"
    );
    faults.write_eio.store(true, Ordering::SeqCst);
    assert!(c.flash().unwrap().flush().wait().is_err());
    wait_until("failed write reported", || {
        ext(&c, "extstore_write_failed_in_ram") > 0 && ext(&c, "extstore_write_failed_lost") > 0
    });
    let in_ram = ext(&c, "extstore_write_failed_in_ram");
    let lost = ext(&c, "extstore_write_failed_lost");
    assert_eq!(in_ram + lost, 100);
    assert_eq!(ext(&c, "flash_records_lost"), 100);
    assert_eq!(c.flash_items(), 0, "no index slot points at the lost chunk");
    assert_eq!(
        served(&c, 0..100),
        in_ram,
        "RAM copies are served, lost ones miss"
    );
    // Back in service: RAM copies without a home are appended when RAM evicts them.
    faults.write_eio.store(false, Ordering::SeqCst);
    wait_until("device back", || ext(&c, "flash_devices_failed") == 0);
    let before = ext(&c, "extstore_objects_written");
    for i in 1000..1100 {
        c.set_now(&key(i), ItemWrite::new(common::value(i, 4000), 0, 0))
            .unwrap();
    }
    assert!(ext(&c, "extstore_objects_written") >= before + 100 + in_ram.min(1));
    assert_eq!(
        served(&c, 0..100),
        in_ram,
        "kept items survive RAM eviction via flash"
    );
    assert_eq!(served(&c, 1000..1100), 100);
}
