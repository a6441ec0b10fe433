//! A write outage, then a clean close and a reopen, with the KV face's small geometry (1 MiB
//! segments, 256 KiB chunks): recovery reports every record that was appended and not
//! reported lost — before the outage, during it (until the device failed), and after the
//! device came back — with lost chunks, segments sealed by the failure (their summaries
//! lost, so scanned) and an open segment at close (scanned) all in play.
use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

mod common;

use common::{stat, wait_until, Losses};
use flashtier_flash::{Device, Faults, FaultyDevice, Flash, FlashConfig, MemoryDevice};

/// Append key `i` without waiting (as the KV face does); true if taken.
fn put(f: &Flash, i: u64) -> bool {
    let v = vec![(i % 251) as u8; 4096];
    f.append(0, &common::put_record(i, i, &v)).is_ok()
}

#[test]
fn every_record_not_reported_lost_is_recovered_after_an_outage() {
    for round in 0..3 {
        let mem: Arc<dyn Device> = Arc::new(MemoryDevice::new("mem", 64 << 20));
        let faults = Faults::new();
        let dev: Arc<dyn Device> = Arc::new(FaultyDevice::new(mem.clone(), faults.clone()));
        let cfg = FlashConfig {
            segment_size: 1 << 20,
            chunk_size: 256 << 10,
            device_retry_max: Duration::from_millis(300),
            ..FlashConfig::default()
        };
        let losses = Arc::new(Losses::default());
        let (f, _) = Flash::open(vec![dev], cfg.clone(), losses.clone(), |_| {}).unwrap();
        let mut taken: Vec<u64> = (0..1000).filter(|&i| put(&f, i)).collect();
        std::thread::sleep(Duration::from_millis(100 * round));
        faults.write_eio.store(true, Ordering::SeqCst);
        for i in 1000..2000 {
            if put(&f, i) {
                taken.push(i);
            }
            std::thread::sleep(Duration::from_micros(20));
        }
        wait_until("device offline", Duration::from_secs(20), || {
            stat(&f, "devices_offline") == 1
        });
        faults.write_eio.store(false, Ordering::SeqCst);
        wait_until("device back", Duration::from_secs(20), || {
            stat(&f, "devices_failed") == 0
        });
        let mut after = 0;
        for i in 2000..3000 {
            if put(&f, i) {
                taken.push(i);
                after += 1;
            }
            std::thread::sleep(Duration::from_micros(20));
        }
        assert!(after > 0, "the device takes writes again");
        let _ = f.flush().wait(); // reports the outage's failed writes once
        f.close().unwrap();
        drop(f);
        let lost: HashSet<u64> = losses.0.lock().iter().map(|r| r.meta.key_id).collect();
        assert!(!lost.is_empty(), "the outage lost a chunk");
        let mut recovered = HashSet::new();
        let (f, _) = Flash::open(vec![mem], cfg, Arc::new(Losses::default()), |m| {
            recovered.insert(m.key_id);
        })
        .unwrap();
        assert_eq!(stat(&f, "recovery_damaged_segments"), 0);
        let missing: Vec<u64> = taken
            .iter()
            .copied()
            .filter(|k| !lost.contains(k) && !recovered.contains(k))
            .collect();
        assert!(
            missing.is_empty(),
            "round {round}: not recovered: {missing:?}"
        );
    }
}
