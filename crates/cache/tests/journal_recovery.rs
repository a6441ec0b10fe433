//! The crash journal at open, on crash images of a memory device (what a process crash
//! leaves: every completed device write, no RAM buffer). A delete or overwrite of a key on
//! flash that never reached the log is still honoured after the crash (the journal replays
//! it); a power cut under `journal_mode=write` (the run record's boot id differs) starts the
//! flash tier empty, and what it held never comes back, not even after a later crash.
mod common;

use std::sync::Arc;

use flashtier_cache::flash::format::journal::{RunRecord, RunState, RUN_RECORD_LEN};
use flashtier_cache::flash::{Device, FlashConfig, IoBackend, MemoryDevice};
use flashtier_cache::{Cache, ItemWrite, KvStore};

use common::ext_stat;

const DEV: u64 = 8 << 20;
/// Device offset of the journal (global segment 0, after the superblock page).
const JOURNAL: u64 = 4096;

fn open(dev: &Arc<MemoryDevice>) -> Cache {
    let engine = FlashConfig {
        io_backend: IoBackend::Psync,
        // No interval flush: nothing reaches the log unless a test flushes.
        flush_interval: None,
        ..FlashConfig::small()
    };
    let d: Arc<dyn Device> = dev.clone();
    let cfg = common::small_flash_config(d, engine)
        .sweep_interval(None)
        .build()
        .unwrap();
    let c = Cache::new(cfg).unwrap();
    c.set_knob("write_back_ms", "0").unwrap();
    c
}

fn put(c: &Cache, k: &str, v: u64) {
    c.set_now(k.as_bytes(), ItemWrite::new(common::value(v, 3000), 0, 0))
        .unwrap();
}

fn got(c: &Cache, k: &str) -> Option<bytes::Bytes> {
    c.get_now(k.as_bytes()).unwrap().map(|it| it.value)
}

/// A crash image of `dev` now (a process killed: only completed device writes).
fn crash(dev: &Arc<MemoryDevice>) -> Arc<MemoryDevice> {
    Arc::new(MemoryDevice::from_image("crashed", dev.image()))
}

#[test]
fn deletes_and_overwrites_missing_from_the_log_are_replayed() {
    let dev = Arc::new(MemoryDevice::new("j", DEV));
    let c = open(&dev);
    for i in 0..40 {
        put(&c, &format!("k{i}"), i);
    }
    c.flash().unwrap().flush().wait().unwrap();
    // Past the log's last flush: delete some, overwrite others (their tombstones wait in
    // a write buffer; the journal has them).
    for i in 0..10 {
        assert!(c.delete_now(format!("k{i}").as_bytes()));
    }
    c.set_knob("write_back_ms", "60000").unwrap();
    for i in 10..20 {
        put(&c, &format!("k{i}"), 1000 + i);
    }
    let image = crash(&dev);
    drop(c);
    let c = open(&image);
    for i in 0..20 {
        assert_eq!(got(&c, &format!("k{i}")), None, "k{i}: replaced or deleted");
    }
    for i in 20..40 {
        assert_eq!(got(&c, &format!("k{i}")), Some(common::value(i, 3000)));
    }
    assert_eq!(ext_stat(&c, "extstore_journal_replayed"), 20);
    // The replayed tombstones are in the log now: a second crash keeps them.
    let again = crash(&image);
    drop(c);
    let c = open(&again);
    for i in 0..20 {
        assert_eq!(got(&c, &format!("k{i}")), None, "k{i} after a second crash");
    }
    assert_eq!(ext_stat(&c, "extstore_journal_replayed"), 0);
}

#[test]
fn a_power_cut_under_write_mode_starts_empty_for_good() {
    let dev = Arc::new(MemoryDevice::new("j", DEV));
    let c = open(&dev);
    for i in 0..30 {
        put(&c, &format!("k{i}"), i);
    }
    c.flash().unwrap().flush().wait().unwrap();
    let image = crash(&dev);
    drop(c);
    // The run record as a run on another boot would have left it.
    let bytes = image.image();
    let at = JOURNAL as usize;
    let mut run = RunRecord::decode(&bytes[at..at + RUN_RECORD_LEN]).expect("a run record");
    assert_eq!(run.state, RunState::Running);
    run.boot_id = [0x42; 16];
    image.poke(JOURNAL, &run.encode());
    let c = open(&image);
    assert_eq!(ext_stat(&c, "extstore_journal_cold_starts"), 1);
    for i in 0..30 {
        assert_eq!(
            got(&c, &format!("k{i}")),
            None,
            "k{i} served after a power cut"
        );
    }
    put(&c, "new", 7);
    c.flash().unwrap().flush().wait().unwrap();
    // A crash later (same boot): the old items stay gone, the new one is served.
    let later = crash(&image);
    drop(c);
    let c = open(&later);
    assert_eq!(ext_stat(&c, "extstore_journal_cold_starts"), 0);
    for i in 0..30 {
        assert_eq!(got(&c, &format!("k{i}")), None, "k{i} came back");
    }
    assert_eq!(got(&c, "new"), Some(common::value(7, 3000)));
}
