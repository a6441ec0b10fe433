//! Fault injection (`FaultyDevice` over `MemoryDevice`): a failed write is retried, and when
//! it keeps failing only its chunk is lost — the user hears which records through `lost`,
//! with their content — while the device goes *failing* (out of allocation, data still
//! readable), is probed and comes back once it works; a device that keeps failing goes
//! *offline*; with two devices the other keeps taking writes. EIO on read fails that read
//! only; EIO on sync fails that flush. Nothing wrong is ever served; stats show each step.
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

mod common;

use common::{stat, wait_until, Losses};
use flashtier_flash::{
    Device, Error, Faults, FaultyDevice, Flash, FlashConfig, FlashStats, Location, MemoryDevice,
};

impl Losses {
    fn keys(&self) -> Vec<u64> {
        let mut v: Vec<u64> = self.0.lock().iter().map(|r| r.meta.key_id).collect();
        v.sort_unstable();
        v
    }
}

fn open(n: usize) -> (Flash, Vec<Arc<Faults>>, Arc<Losses>) {
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
        device_retry_max: Duration::from_millis(200),
        ..FlashConfig::small()
    };
    let losses = Arc::new(Losses::default());
    let (f, _) = Flash::open(devices, cfg, losses.clone(), |_| {}).unwrap();
    (f, faults, losses)
}

fn value(i: u64) -> Vec<u8> {
    (0..1000).map(|j| (i * 31 + j) as u8).collect()
}

fn put(f: &Flash, i: u64) -> Result<Location, Error> {
    let v = value(i);
    f.append_blocking(0, &common::put_record(i, 0, &v), Duration::from_secs(5))
}

/// Reads back exactly `value(i)`, or fails: never other bytes.
fn check(f: &Flash, l: Location, i: u64) -> bool {
    match f.read(l).wait() {
        Ok(r) => {
            assert_eq!(r.header.key_id, i, "served another record");
            assert_eq!(&r.value[..], &value(i)[..], "served wrong bytes");
            true
        }
        Err(_) => false,
    }
}

#[test]
fn transient_write_error_is_retried_and_loses_nothing() {
    let (f, faults, losses) = open(1);
    faults[0].fail_next_writes.store(2, Ordering::SeqCst);
    let locs: Vec<_> = (0..10).map(|i| put(&f, i).unwrap()).collect();
    f.flush().wait().unwrap();
    assert_eq!(stat(&f, "write_errors"), 2);
    assert_eq!(stat(&f, "write_retries"), 2);
    assert_eq!(stat(&f, "records_lost"), 0);
    assert_eq!(stat(&f, "devices_failed"), 0);
    assert!(losses.keys().is_empty());
    for (i, l) in locs.iter().enumerate() {
        assert!(check(&f, *l, i as u64));
    }
}

/// A write that keeps failing loses its chunk only; the device fails, is probed, comes back.
fn write_fault_heals(arm: impl Fn(&Faults), disarm: impl Fn(&Faults), msg: &str) {
    let (f, faults, losses) = open(1);
    let ok: Vec<_> = (0..10).map(|i| put(&f, i).unwrap()).collect();
    f.flush().wait().unwrap();
    arm(&faults[0]);
    let bad: Vec<_> = (10..20).map(|i| put(&f, i).unwrap()).collect();
    let err = f.flush().wait().unwrap_err();
    assert!(err.is_internal(), "{err}");
    assert!(err.to_string().contains(msg), "{err}");
    assert!(stat(&f, "write_errors") >= 3, "three tries");
    assert_eq!(stat(&f, "chunks_lost"), 1);
    assert_eq!(stat(&f, "records_lost"), 10);
    assert_eq!(stat(&f, "devices_failing"), 1);
    assert_eq!(stat(&f, "device_failures"), 1);
    // The user hears of exactly the records of the failed chunk, with their content.
    wait_until("lost reported", Duration::from_secs(10), || {
        losses.0.lock().len() == 10
    });
    assert_eq!(losses.keys(), (10..20).collect::<Vec<_>>());
    for r in losses.0.lock().iter() {
        let rec = r.record.as_ref().expect("content");
        assert_eq!(&rec.value[..], &value(r.meta.key_id)[..]);
    }
    // Out of allocation: appends are refused (the kv face then keeps items in RAM).
    assert!(matches!(put(&f, 99), Err(Error::DeviceFailed(_))));
    // Lost records are never served; durable ones still are.
    for (i, l) in bad.iter().enumerate() {
        assert!(!check(&f, *l, 10 + i as u64));
    }
    for (i, l) in ok.iter().enumerate() {
        assert!(check(&f, *l, i as u64));
    }
    disarm(&faults[0]);
    wait_until("device back", Duration::from_secs(10), || {
        stat(&f, "device_recoveries") == 1
    });
    assert_eq!(stat(&f, "devices_failed"), 0);
    let again: Vec<_> = (30..40).map(|i| put(&f, i).unwrap()).collect();
    f.flush().wait().unwrap();
    for (i, l) in again.iter().enumerate() {
        assert!(check(&f, *l, 30 + i as u64));
    }
    assert!(stat(&f, "device_probes") >= 1);
}

#[test]
fn eio_on_write_loses_one_chunk_and_the_device_comes_back() {
    write_fault_heals(
        |f| f.write_eio.store(true, Ordering::SeqCst),
        |f| f.write_eio.store(false, Ordering::SeqCst),
        "Input/output error",
    );
}

#[test]
fn enospc_on_write_loses_one_chunk_and_the_device_comes_back() {
    write_fault_heals(
        |f| f.write_enospc.store(true, Ordering::SeqCst),
        |f| f.write_enospc.store(false, Ordering::SeqCst),
        "space",
    );
}

#[test]
fn eio_on_one_device_of_two_moves_writes_to_the_other() {
    let (f, faults, _) = open(2);
    faults[0].write_eio.store(true, Ordering::SeqCst);
    for i in 0..10 {
        put(&f, i).unwrap();
    }
    assert!(
        f.flush().wait().is_err(),
        "first stream segment was on the failing device"
    );
    assert_eq!(stat(&f, "devices_failed"), 1);
    // The other device takes every write, and its flushes succeed.
    let good: Vec<_> = (100..300).map(|i| put(&f, i).unwrap()).collect();
    f.flush().wait().unwrap();
    for (i, l) in good.iter().enumerate() {
        assert!(check(&f, *l, 100 + i as u64));
    }
    faults[0].write_eio.store(false, Ordering::SeqCst);
    wait_until("device back", Duration::from_secs(10), || {
        stat(&f, "devices_failed") == 0
    });
    let more: Vec<_> = (300..700).map(|i| put(&f, i).unwrap()).collect();
    f.flush().wait().unwrap();
    for (i, l) in more.iter().enumerate() {
        assert!(check(&f, *l, 300 + i as u64));
    }
    assert!(
        faults[0].writes.load(Ordering::SeqCst) > 5,
        "the healed device takes writes again"
    );
}

#[test]
fn device_that_keeps_failing_goes_offline_and_its_data_stays_readable() {
    let (f, faults, _) = open(1);
    let ok: Vec<_> = (0..50).map(|i| put(&f, i).unwrap()).collect();
    f.flush().wait().unwrap();
    faults[0].write_eio.store(true, Ordering::SeqCst);
    faults[0].sync_eio.store(true, Ordering::SeqCst);
    put(&f, 50).unwrap();
    assert!(f.flush().wait().is_err());
    wait_until("offline", Duration::from_secs(10), || {
        stat(&f, "devices_offline") == 1
    });
    assert_eq!(stat(&f, "device_offlines"), 1);
    assert!(stat(&f, "device_probe_failures") >= 4);
    for (i, l) in ok.iter().enumerate() {
        assert!(
            check(&f, *l, i as u64),
            "data on an offline device stays served"
        );
    }
    faults[0].write_eio.store(false, Ordering::SeqCst);
    faults[0].sync_eio.store(false, Ordering::SeqCst);
    wait_until("back", Duration::from_secs(10), || {
        stat(&f, "devices_failed") == 0
    });
    assert_eq!(stat(&f, "devices_offline"), 0);
    let l = put(&f, 60).unwrap();
    f.flush().wait().unwrap();
    assert!(check(&f, l, 60));
}

#[test]
fn eio_on_read_fails_that_read_only() {
    let (f, faults, _) = open(1);
    let l = put(&f, 7).unwrap();
    f.flush().wait().unwrap();
    faults[0].read_eio.store(true, Ordering::SeqCst);
    match f.read(l).wait() {
        Err(Error::Io { op: "read", .. }) => {}
        other => panic!("expected a read error, got {other:?}"),
    }
    assert_eq!(FlashStats::get(&f.stats().read_errors), 1);
    faults[0].read_eio.store(false, Ordering::SeqCst);
    assert!(check(&f, l, 7));
    // A read error does not fail the device.
    assert_eq!(stat(&f, "devices_failed"), 0);
    put(&f, 8).unwrap();
    f.flush().wait().unwrap();
}

#[test]
fn eio_on_sync_fails_that_flush_once() {
    let (f, faults, losses) = open(1);
    let l = put(&f, 1).unwrap();
    faults[0].sync_eio.store(true, Ordering::SeqCst);
    assert!(f.flush().wait().is_err());
    assert_eq!(stat(&f, "sync_errors"), 1);
    assert_eq!(stat(&f, "devices_failing"), 1);
    // The written record is not lost (the write completed); the error is reported once.
    assert!(check(&f, l, 1));
    f.flush().wait().unwrap();
    assert!(losses.keys().is_empty());
    faults[0].sync_eio.store(false, Ordering::SeqCst);
    wait_until("back", Duration::from_secs(10), || {
        stat(&f, "devices_failed") == 0
    });
}

#[test]
fn unreadable_reclaim_victim_is_retired_not_retried_forever() {
    let (f, faults, _) = open(1);
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
    assert_eq!(stat(&f, "devices_failed"), 0);
}

/// Random appends, flushes and reads over two devices while every 3rd to 9th write fails
/// (retried, so nothing is lost) and now and then one device fails every write (its chunks
/// are lost, the device fails and comes back): every read is the exact record or an error,
/// a record reported lost never reads, and once the faults stop, every record not reported
/// lost reads back exactly.
#[test]
fn random_write_faults_never_serve_wrong_data() {
    let (f, faults, losses) = open(2);
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut rnd = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut index: HashMap<u64, Location> = HashMap::new();
    let mut next = 0u64;
    for round in 0..40 {
        let every = [0, 3, 5, 9][(rnd() % 4) as usize];
        let broken = rnd() % 5 == 0;
        for (d, fl) in faults.iter().enumerate() {
            fl.fail_every_nth_write.store(every, Ordering::SeqCst);
            fl.write_eio
                .store(broken && d == (round % 2), Ordering::SeqCst);
        }
        for _ in 0..(rnd() % 60) {
            match put(&f, next) {
                Ok(l) => {
                    index.insert(next, l);
                }
                Err(Error::DeviceFailed(_) | Error::NoSpace) => {}
                Err(e) => panic!("round {round}: {e}"),
            }
            next += 1;
        }
        let _ = f.flush().wait();
        for _ in 0..20 {
            if next == 0 {
                break;
            }
            let k = rnd() % next;
            if let Some(l) = index.get(&k) {
                check(&f, *l, k);
            }
        }
        if f.free_segments() < 4 {
            break;
        }
    }
    for fl in &faults {
        fl.fail_every_nth_write.store(0, Ordering::SeqCst);
        fl.write_eio.store(false, Ordering::SeqCst);
    }
    let _ = f.flush().wait();
    wait_until("devices back", Duration::from_secs(10), || {
        stat(&f, "devices_failed") == 0
    });
    // The flusher thread hands lost records to the handler in its own time: wait until it
    // has handed all of them (a fixed 50 ms sleep assumed it had run by then).
    wait_until(
        "every lost record reported",
        Duration::from_secs(60),
        || {
            let lost: std::collections::HashSet<u64> = losses.keys().into_iter().collect();
            lost.len() as u64 >= stat(&f, "records_lost")
        },
    );
    let lost: std::collections::HashSet<u64> = losses.keys().into_iter().collect();
    assert_eq!(lost.len() as u64, stat(&f, "records_lost"));
    assert!(!lost.is_empty(), "some chunks lost every try");
    assert!(stat(&f, "write_retries") > stat(&f, "chunks_lost"));
    for (k, l) in &index {
        let read = check(&f, *l, *k);
        assert_eq!(
            read,
            !lost.contains(k),
            "key {k}: read {read}, lost {}",
            lost.contains(k)
        );
    }
}
