//! Faults under the flash tier (`FaultyDevice` over a `MemoryDevice`): EIO on read fails the
//! request that needed flash with `Error::Flash` while RAM items are still served; ENOSPC or
//! EIO on write fails the flush, marks the device failed, and later stores fail with
//! `Error::Flash` instead of pretending; nothing wrong is ever served; stats show the fault.
mod common;

use std::sync::atomic::Ordering;
use std::sync::Arc;

use flashtier_cache::flash::{Device, Faults, FaultyDevice, FlashConfig, IoBackend, MemoryDevice};
use flashtier_cache::{Cache, Error, ItemWrite, KvStore};

const N: u64 = 300;

fn open() -> (Cache, Arc<Faults>) {
    let faults = Faults::new();
    let mem: Arc<dyn Device> = Arc::new(MemoryDevice::new("faulty", 16 << 20));
    let dev: Arc<dyn Device> = Arc::new(FaultyDevice::new(mem, faults.clone()));
    let engine = FlashConfig {
        io_backend: IoBackend::Psync,
        background_reclaim: false,
        ..FlashConfig::small()
    };
    let cfg = common::small_flash_config(dev, engine)
        .sweep_interval(None)
        .build()
        .unwrap();
    (Cache::new(cfg).unwrap(), faults)
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

fn ext(c: &Cache, name: &str) -> u64 {
    c.stats_section("extstore")
        .unwrap()
        .into_iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.parse().unwrap())
        .unwrap()
}

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

fn write_fault(arm: impl Fn(&Faults)) {
    let (c, faults) = open();
    load(&c);
    arm(&faults);
    // The next chunk write fails; the flush reports it and the device is marked failed.
    for i in N..N + 40 {
        let _ = c.set_now(&key(i), ItemWrite::new(common::value(i, 4000), 0, 0));
    }
    assert!(c.flash().unwrap().flush().wait().is_err());
    let r = c.set_now(b"after", ItemWrite::new(common::value(1, 100), 0, 0));
    assert!(matches!(r, Err(Error::Flash(_))), "{r:?}");
    let st: std::collections::HashMap<String, String> =
        c.stats_section("extstore").unwrap().into_iter().collect();
    assert_ne!(st["flash_write_errors"], "0");
    // Whatever is served is right.
    for i in 0..N + 40 {
        if let Ok(Some(it)) = c.get_now(&key(i)) {
            assert_eq!(it.value, common::value(i, 4000));
        }
    }
}

#[test]
fn enospc_on_write_fails_later_stores_with_flash_error() {
    write_fault(|f| f.write_enospc.store(true, Ordering::SeqCst));
}

#[test]
fn eio_on_write_fails_later_stores_with_flash_error() {
    write_fault(|f| f.write_eio.store(true, Ordering::SeqCst));
}
