//! A restart after a crash on a full flash comes up. The crash journal's entries are
//! appended to the log again before serving (`recovery::replay`); on a flash kept full by
//! overwrites those appends need reclaim to free a segment, and reclaim asks the cache,
//! which does not exist yet while it opens. Found by killing `flashtier kv -m 8 --flash
//! F:64MiB` under an unpaced overwrite load: the next start hung for good (the replay's
//! append waited for room, failed, and closing the engine then waited for the reclaimer,
//! which waited for the cache). Here: the same on crash images of a memory device, each
//! restart within a time bound, with nothing deleted or replaced coming back.
mod common;

use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use flashtier_cache::flash::{Device, FlashConfig, IoBackend, MemoryDevice};
use flashtier_cache::{Cache, ItemWrite, KvStore};

const DEV: u64 = 8 << 20;
const KEYS: u64 = 2000;
const VALUE: usize = 6000;

fn config(dev: &Arc<MemoryDevice>, background_reclaim: bool) -> flashtier_cache::CacheConfig {
    let engine = FlashConfig {
        io_backend: IoBackend::Psync,
        background_reclaim,
        // Nothing reaches the log by time: the tombstones below stay in a write buffer,
        // known to the journal only.
        flush_interval: None,
        ..FlashConfig::small()
    };
    let d: Arc<dyn Device> = dev.clone();
    common::small_flash_config(d, engine)
        .sweep_interval(None)
        .build()
        .unwrap()
}

/// `Cache::new` on `dev`, or a panic if it has not returned within 30 s.
fn open_within_bound(dev: &Arc<MemoryDevice>, background_reclaim: bool) -> Cache {
    let cfg = config(dev, background_reclaim);
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(Cache::new(cfg));
    });
    let c = rx
        .recv_timeout(Duration::from_secs(30))
        .expect("Cache::new did not return within 30 s (hung at the journal replay)")
        .expect("Cache::new");
    c.set_knob("write_back_ms", "0").unwrap();
    c
}

fn put(c: &Cache, i: u64, version: u64) {
    c.set_now(
        format!("k{i}").as_bytes(),
        ItemWrite::new(common::value(version * 1000 + i, VALUE), 0, 0),
    )
    .unwrap();
}

/// A crash image of `dev` now (a process killed: only completed device writes).
fn crash(dev: &Arc<MemoryDevice>) -> Arc<MemoryDevice> {
    Arc::new(MemoryDevice::from_image("crashed", dev.image()))
}

#[test]
fn a_crash_on_a_full_flash_restarts_and_serves_nothing_replaced() {
    let mut dev = Arc::new(MemoryDevice::new("full", DEV));
    // Which version of each key was last acknowledged (None: deleted).
    let mut acked: Vec<Option<u64>> = vec![None; KEYS as usize];
    let mut version = 1;
    for round in 0..3 {
        // A run whose reclaim fell behind (none at all here): overwrites fill the flash
        // until appends are refused, down to the reserve.
        let c = open_within_bound(&dev, false);
        // Nothing frees room in this run: writes go on without waiting for it.
        c.set_knob("append_wait_ms", "0").unwrap();
        for _ in 0..2 {
            for i in 0..KEYS {
                put(&c, i, version);
                acked[i as usize] = Some(version);
            }
            version += 1;
            let _ = c.flash().unwrap().flush().wait();
        }
        // Then delete a third and overwrite a third of the keys, with nothing reaching the
        // log: only the journal knows.
        c.set_knob("write_back_ms", "60000").unwrap();
        for i in 0..KEYS {
            match (i + round) % 3 {
                0 => {
                    c.delete_now(format!("k{i}").as_bytes());
                    acked[i as usize] = None;
                }
                1 => {
                    put(&c, i, version);
                    acked[i as usize] = Some(version);
                }
                _ => {}
            }
        }
        version += 1;
        let image = crash(&dev);
        drop(c);
        // The restart, as the server runs it (background reclaim).
        let c = open_within_bound(&image, true);
        assert!(
            common::ext_stat(&c, "extstore_journal_replayed") > 0,
            "round {round}: the restart replayed nothing"
        );
        for i in 0..KEYS {
            let got = c
                .get_now(format!("k{i}").as_bytes())
                .unwrap()
                .map(|it| it.value);
            if let Some(v) = got {
                let want = acked[i as usize].map(|a| common::value(a * 1000 + i, VALUE));
                assert_eq!(
                    Some(v),
                    want,
                    "round {round}: k{i} served a value it was not last acknowledged with"
                );
            }
        }
        dev = crash(&image);
        drop(c);
    }
}
