//! Fault injection: ENOSPC and EIO on write (the flush fails, the device is marked failed and
//! not reused, stats show it), EIO on read (that read fails, nothing wrong is served), EIO
//! on sync.
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use flashtier_flash::{
    kind, Device, DropAll, Error, Faults, FaultyDevice, Flash, FlashConfig, FlashStats, Location,
    MemoryDevice, RecordWrite,
};

fn open(n: usize) -> (Flash, Vec<Arc<Faults>>) {
    let faults: Vec<_> = (0..n).map(|_| Faults::new()).collect();
    let devices: Vec<Arc<dyn Device>> = faults
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let m: Arc<dyn Device> = Arc::new(MemoryDevice::new(&format!("mem{i}"), 4 << 20));
            Arc::new(FaultyDevice::new(m, Arc::clone(f))) as Arc<dyn Device>
        })
        .collect();
    let cfg = FlashConfig {
        flush_interval: None,
        background_reclaim: false,
        ..FlashConfig::small()
    };
    let (f, _) = Flash::open(devices, cfg, Arc::new(DropAll), |_| {}).unwrap();
    (f, faults)
}

fn put(f: &Flash, i: u64) -> Result<Location, Error> {
    let v = vec![i as u8; 1000];
    let w = RecordWrite {
        kind: kind::PUT,
        key_id: i,
        version: 0,
        flags: 0,
        exptime: 0,
        key: b"k",
        value: &v,
    };
    f.append_blocking(0, &w, Duration::from_secs(5))
}

#[test]
fn enospc_on_write_fails_flush_and_takes_device_offline() {
    let (f, faults) = open(1);
    let ok: Vec<_> = (0..10).map(|i| put(&f, i).unwrap()).collect();
    f.flush().wait().unwrap();
    faults[0].write_enospc.store(true, Ordering::SeqCst);
    let lost: Vec<_> = (10..20).map(|i| put(&f, i).unwrap()).collect();
    let err = f.flush().wait().unwrap_err();
    assert!(err.is_internal(), "{err}");
    assert!(
        err.to_string().contains("No space") || err.to_string().contains("space"),
        "{err}"
    );
    let s = f.stats();
    assert!(FlashStats::get(&s.write_errors) >= 1);
    assert_eq!(FlashStats::get(&s.devices_failed), 1);
    // The only device is offline: further appends fail instead of reusing it.
    faults[0].write_enospc.store(false, Ordering::SeqCst);
    assert!(put(&f, 99).is_err());
    // Records whose write failed are never served as data.
    for l in lost {
        assert!(f.read(l).wait().is_err());
    }
    // Records durable before the fault are still readable.
    for (i, l) in ok.iter().enumerate() {
        assert_eq!(f.read(*l).wait().unwrap().header.key_id, i as u64);
    }
}

#[test]
fn eio_on_one_device_of_two_moves_writes_to_the_other() {
    let (f, faults) = open(2);
    faults[0].write_eio.store(true, Ordering::SeqCst);
    for i in 0..10 {
        put(&f, i).unwrap();
    }
    assert!(
        f.flush().wait().is_err(),
        "first stream segment was on the failing device"
    );
    assert_eq!(FlashStats::get(&f.stats().devices_failed), 1);
    let good: Vec<_> = (100..300).map(|i| put(&f, i).unwrap()).collect();
    f.flush().wait().unwrap();
    for (i, l) in good.iter().enumerate() {
        assert_eq!(f.read(*l).wait().unwrap().header.key_id, 100 + i as u64);
    }
    assert_eq!(FlashStats::get(&f.stats().devices_failed), 1);
}

#[test]
fn eio_on_read_fails_that_read_only() {
    let (f, faults) = open(1);
    let l = put(&f, 7).unwrap();
    f.flush().wait().unwrap();
    faults[0].read_eio.store(true, Ordering::SeqCst);
    match f.read(l).wait() {
        Err(Error::Io { op: "read", .. }) => {}
        other => panic!("expected a read error, got {other:?}"),
    }
    assert_eq!(FlashStats::get(&f.stats().read_errors), 1);
    faults[0].read_eio.store(false, Ordering::SeqCst);
    assert_eq!(f.read(l).wait().unwrap().header.key_id, 7);
    // A read error does not fail the device.
    assert_eq!(FlashStats::get(&f.stats().devices_failed), 0);
    put(&f, 8).unwrap();
    f.flush().wait().unwrap();
}

#[test]
fn eio_on_sync_fails_flush() {
    let (f, faults) = open(1);
    put(&f, 1).unwrap();
    faults[0].sync_eio.store(true, Ordering::SeqCst);
    assert!(f.flush().wait().is_err());
    assert_eq!(FlashStats::get(&f.stats().sync_errors), 1);
    assert_eq!(FlashStats::get(&f.stats().devices_failed), 1);
}

#[test]
fn unreadable_reclaim_victim_is_retired_not_retried_forever() {
    let (f, faults) = open(1);
    let locs: Vec<_> = (0..800).map(|i| put(&f, i).unwrap()).collect();
    f.flush().wait().unwrap();
    faults[0].read_eio.store(true, Ordering::SeqCst);
    assert!(f.reclaim_now(true).is_err());
    faults[0].read_eio.store(false, Ordering::SeqCst);
    // The next pass picks another victim instead of the unreadable one.
    assert_eq!(f.reclaim_now(true).unwrap(), 1);
    assert!(
        f.read(locs[0]).wait().is_err(),
        "retired segment is not served"
    );
    assert_eq!(FlashStats::get(&f.stats().reclaims), 1);
    assert_eq!(FlashStats::get(&f.stats().devices_failed), 0);
}
