//! Device reads past `read_queue_limit` wait in the engine instead of failing (issue 25: a
//! refused read became a miss for an item that was there). With the limit at 1 or 2 and reads
//! from several threads at once, every read returns its record, the device never holds more
//! than the limit at once, reads are counted as having waited, and closing the engine fails
//! the reads still waiting with `Closed` instead of leaving them hanging.
mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use flashtier_flash::{
    use_ring_lane, Completion, Device, DropAll, Error, Flash, FlashConfig, IoBackend, Location,
    MemoryDevice, Record,
};

/// A memory device whose reads take `delay` and that counts how many run at once.
struct Counting {
    inner: MemoryDevice,
    delay: Duration,
    now: AtomicU64,
    peak: AtomicU64,
}

impl Counting {
    fn new(len: u64, delay: Duration) -> Self {
        Self {
            inner: MemoryDevice::new("counting", len),
            delay,
            now: AtomicU64::new(0),
            peak: AtomicU64::new(0),
        }
    }
}

impl Device for Counting {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn len(&self) -> u64 {
        self.inner.len()
    }
    fn read_at(&self, buf: &mut [u8], off: u64) -> std::io::Result<()> {
        let now = self.now.fetch_add(1, Ordering::SeqCst) + 1;
        self.peak.fetch_max(now, Ordering::SeqCst);
        std::thread::sleep(self.delay);
        let res = self.inner.read_at(buf, off);
        self.now.fetch_sub(1, Ordering::SeqCst);
        res
    }
    fn write_at(&self, buf: &[u8], off: u64) -> std::io::Result<()> {
        self.inner.write_at(buf, off)
    }
    fn sync(&self) -> std::io::Result<()> {
        self.inner.sync()
    }
}

/// Value of record `i`: mostly small, every 40th longer than 31 pages, so its size hint is
/// short and the read takes a second device read in the same slot.
fn value(i: u64) -> Vec<u8> {
    let len = if i % 40 == 7 {
        127_000
    } else {
        100 + (i as usize * 997) % 6000
    };
    (0..len).map(|j| (i as usize * 31 + j) as u8).collect()
}

/// `n` records appended and flushed (out of the write buffers: reads go to the device).
fn fill(flash: &Flash, n: u64) -> Vec<Location> {
    let locs = (0..n)
        .map(|i| {
            let v = value(i);
            flash
                .append_blocking(0, &common::put_record(i, 1, &v), Duration::from_secs(10))
                .expect("append")
        })
        .collect();
    flash.flush().wait().expect("flush");
    locs
}

fn check(i: u64, rec: Result<Record, Error>) {
    let rec = rec.unwrap_or_else(|e| panic!("read of record {i} failed: {e}"));
    assert_eq!(rec.header.key_id, i);
    assert!(rec.value[..] == value(i)[..], "record {i}: wrong bytes");
}

/// Several threads each start a read of every record before waiting for any (so most wait
/// for a slot), in a different order per thread; returns the reads done.
fn read_all_from_threads(flash: &Arc<Flash>, locs: &Arc<Vec<Location>>, threads: u64) -> u64 {
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let (flash, locs) = (Arc::clone(flash), Arc::clone(locs));
            std::thread::spawn(move || {
                use_ring_lane(t as usize);
                let n = locs.len() as u64;
                let order: Vec<u64> = (0..n).map(|k| (k * (2 * t + 1) + t) % n).collect();
                let reads: Vec<(u64, Completion<Record>)> = order
                    .iter()
                    .map(|&i| (i, flash.read(locs[i as usize])))
                    .collect();
                for (i, c) in reads {
                    check(i, c.wait());
                }
                n
            })
        })
        .collect();
    handles.into_iter().map(|h| h.join().expect("reader")).sum()
}

fn stat(flash: &Flash, name: &str) -> u64 {
    common::stat(flash, name)
}

#[test]
fn reads_past_the_limit_wait_and_all_return_their_record() {
    let dev = Arc::new(Counting::new(32 << 20, Duration::from_micros(200)));
    let cfg = FlashConfig {
        io_backend: IoBackend::Psync,
        psync_threads: 6,
        read_queue_limit: 2,
        flush_interval: None,
        background_reclaim: false,
        ..FlashConfig::for_capacity(32 << 20)
    };
    let (flash, _) = Flash::open(
        vec![Arc::clone(&dev) as Arc<dyn Device>],
        cfg,
        Arc::new(DropAll),
        |_| {},
    )
    .expect("open");
    let flash = Arc::new(flash);
    let locs = Arc::new(fill(&flash, 240));
    dev.peak.store(0, Ordering::SeqCst);
    let done = read_all_from_threads(&flash, &locs, 4);
    assert_eq!(done, 4 * 240);
    let peak = dev.peak.load(Ordering::SeqCst);
    assert!(peak <= 2, "{peak} device reads at once, limit 2");
    let waited = stat(&flash, "reads_waited");
    assert!(waited > 0, "no read waited: the limit was never reached");
    assert_eq!(
        stat(&flash, "read_queue_full"),
        waited,
        "old name, same count"
    );
    assert_eq!(stat(&flash, "reads_waiting"), 0);
    assert_eq!(stat(&flash, "reads_in_flight"), 0);
    // The knob still bounds the device, changed at run time.
    flash.set_knob("read_queue_limit", "1").expect("knob");
    dev.peak.store(0, Ordering::SeqCst);
    assert_eq!(read_all_from_threads(&flash, &locs, 3), 3 * 240);
    assert_eq!(dev.peak.load(Ordering::SeqCst), 1);
}

#[test]
fn io_uring_lanes_reads_past_the_limit_all_return() {
    let p = common::disk_file("read-queue-uring");
    let _ = std::fs::remove_file(&p);
    let cfg = FlashConfig {
        io_backend: IoBackend::Uring,
        uring_rings: 2,
        read_queue_limit: 1,
        flush_interval: None,
        background_reclaim: false,
        ..FlashConfig::for_capacity(32 << 20)
    };
    let flash = match Flash::open_specs(
        &[common::file_spec(&p, 32 << 20)],
        cfg,
        Arc::new(DropAll),
        |_| {},
    ) {
        Ok((f, _)) => Arc::new(f),
        Err(e @ (Error::DirectIoUnsupported(_) | Error::Io { op: "setup", .. })) => {
            eprintln!("SKIPPED: no O_DIRECT or io_uring here: {e}");
            let _ = std::fs::remove_file(&p);
            return;
        }
        Err(e) => panic!("open {}: {e}", p.display()),
    };
    let locs = Arc::new(fill(&flash, 240));
    // Threads on both lanes; the ring threads reap and start the waiting reads.
    assert_eq!(read_all_from_threads(&flash, &locs, 4), 4 * 240);
    assert!(stat(&flash, "reads_waited") > 0);
    assert_eq!(stat(&flash, "reads_waiting"), 0);
    assert_eq!(stat(&flash, "reads_in_flight"), 0);
    drop(flash);
    let _ = std::fs::remove_file(&p);
}

#[test]
fn close_fails_the_waiting_reads_with_closed() {
    let dev = Arc::new(Counting::new(32 << 20, Duration::from_millis(5)));
    let cfg = FlashConfig {
        io_backend: IoBackend::Psync,
        read_queue_limit: 1,
        flush_interval: None,
        background_reclaim: false,
        ..FlashConfig::for_capacity(32 << 20)
    };
    let (flash, _) = Flash::open(
        vec![Arc::clone(&dev) as Arc<dyn Device>],
        cfg,
        Arc::new(DropAll),
        |_| {},
    )
    .expect("open");
    let locs = fill(&flash, 40);
    let reads: Vec<_> = locs.iter().map(|&l| flash.read(l)).collect();
    assert!(stat(&flash, "reads_waiting") > 0);
    flash.close().expect("close");
    // Every read completes: with its record if it had started, else `Closed`. None hangs.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let outcomes: Vec<_> = reads.into_iter().map(Completion::wait).collect();
        let _ = tx.send(outcomes);
    });
    let outcomes = rx
        .recv_timeout(Duration::from_secs(20))
        .expect("a read still hangs after close");
    let mut closed = 0;
    for (i, r) in outcomes.into_iter().enumerate() {
        match r {
            Err(Error::Closed) => closed += 1,
            r => check(i as u64, r),
        }
    }
    assert!(closed > 0, "no read was still waiting at close");
    assert_eq!(stat(&flash, "reads_waiting"), 0);
    assert!(matches!(flash.read(locs[0]).wait(), Err(Error::Closed)));
}
