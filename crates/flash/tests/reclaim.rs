//! Reclaim: a user index kept consistent through keep/drop decisions and relocations while
//! writing several times the flash capacity; expired segments dropped without value reads;
//! the background reclaimer keeping appends going.
mod common;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::LocMap;
use flashtier_flash::{
    kind, Decision, Device, Error, Flash, FlashConfig, FlashStats, Location, LostRecord,
    MemoryDevice, ReclaimHandler, RecordMeta, RecordWrite,
};

/// key_id -> location; keeps even keys, drops odd ones.
#[derive(Default)]
struct Index {
    map: LocMap,
}

impl ReclaimHandler for Index {
    fn decide(&self, rec: &RecordMeta) -> Decision {
        let mut m = self.map.lock();
        let live = m.get(&rec.key_id) == Some(&rec.location);
        if live && rec.key_id.is_multiple_of(2) {
            Decision::Keep
        } else {
            if live {
                m.remove(&rec.key_id);
            }
            Decision::Drop
        }
    }
    common::loc_map_callbacks!();
}

fn value(key: u64, version: u64) -> Vec<u8> {
    let len = 500 + (key * 7 + version * 13) as usize % 1500;
    (0..len).map(|j| (key + version + j as u64) as u8).collect()
}

fn open(cfg: FlashConfig, index: Arc<Index>) -> Flash {
    let dev: Arc<dyn Device> = Arc::new(MemoryDevice::new("mem", 4 << 20));
    Flash::open(vec![dev], cfg, index, |_| {}).unwrap().0
}

/// Append, reclaiming by hand (or waiting for the background reclaimer) on NoSpace.
fn put(f: &Flash, index: &Index, stream: u8, key: u64, version: u64, exptime: u32, by_hand: bool) {
    let v = value(key, version);
    let w = RecordWrite {
        kind: kind::PUT,
        key_id: key,
        version,
        flags: 0,
        exptime,
        key: b"",
        value: &v,
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        // By hand nothing else makes room: waiting on NoSpace would only time out.
        let res = if by_hand {
            f.append(stream, &w)
        } else {
            f.append_blocking(stream, &w, Duration::from_secs(5))
        };
        match res {
            Ok(loc) => {
                if let Some(old) = index.map.lock().insert(key, loc) {
                    f.mark_dead(old);
                }
                return;
            }
            Err(Error::NoSpace) if Instant::now() < deadline => {
                if by_hand {
                    f.reclaim_now(false).unwrap();
                } else {
                    std::thread::sleep(Duration::from_millis(2));
                }
            }
            Err(Error::Busy(_)) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(1));
            }
            Err(e) => panic!("append: {e}"),
        }
    }
}

fn verify(f: &Flash, index: &Index, latest: &HashMap<u64, u64>) -> usize {
    let snapshot: Vec<_> = index.map.lock().iter().map(|(k, l)| (*k, *l)).collect();
    for (k, l) in &snapshot {
        // The background reclaimer may move a record between the snapshot and the read:
        // then read where the index points now.
        let r = match f.read(*l).wait() {
            Ok(r) => r,
            Err(e) => {
                let now = index.map.lock().get(k).copied();
                assert_ne!(now, Some(*l), "key {k}: read of its indexed location: {e}");
                let Some(now) = now else { continue };
                f.read(now).wait().unwrap()
            }
        };
        assert_eq!(r.header.key_id, *k);
        assert_eq!(
            r.header.version, latest[k],
            "key {k} must map to its latest version"
        );
        assert_eq!(&r.value[..], &value(*k, latest[k])[..]);
    }
    snapshot.len()
}

#[test]
fn index_stays_consistent_through_reclaim() {
    let index = Arc::new(Index::default());
    let cfg = FlashConfig {
        flush_interval: None,
        background_reclaim: false,
        keep_limit: 1.0,
        reclaim_policy: flashtier_flash::ReclaimPolicy::Fifo,
        ..FlashConfig::small()
    };
    let f = open(cfg, Arc::clone(&index));
    let mut latest = HashMap::new();
    // Cold keys written once: they survive only if reclaim relocates them (even ones).
    for key in 1000..1100u64 {
        put(&f, &index, 0, key, 1, 0, true);
        latest.insert(key, 1);
    }
    // ~12 MB written into 4 MiB of flash: at least two full turns of the log.
    for i in 0..10_000u64 {
        let key = i % 400;
        put(&f, &index, 0, key, i, 0, true);
        latest.insert(key, i);
    }
    f.flush().wait().unwrap();
    let s = f.stats();
    assert!(FlashStats::get(&s.reclaims) > 10, "reclaim ran");
    assert!(
        FlashStats::get(&s.records_rewritten) > 0,
        "even keys were kept by rewriting"
    );
    assert!(FlashStats::get(&s.records_dropped) > 0);
    let present = verify(&f, &index, &latest);
    // Every even key is kept (keep_limit 1.0); odd keys may have been dropped.
    for k in (0..400).step_by(2).chain((1000..1100).step_by(2)) {
        assert!(index.map.lock().contains_key(&k), "even key {k} was lost");
    }
    assert!(present >= 250);
    assert!(
        !index.map.lock().contains_key(&1001),
        "odd cold keys were dropped"
    );
    let wa =
        FlashStats::get(&s.device_bytes_written) as f64 / FlashStats::get(&s.bytes_written) as f64;
    assert!(wa < 2.0, "write amplification {wa}");
}

#[test]
fn expired_segments_are_dropped_without_reading_values() {
    let index = Arc::new(Index::default());
    let cfg = FlashConfig {
        flush_interval: None,
        background_reclaim: false,
        ..FlashConfig::small()
    };
    let f = open(cfg.clone(), Arc::clone(&index));
    // Stream 2 holds short-lived items; exptime 1 (1970) has long passed.
    for i in 0..600u64 {
        put(&f, &index, 2, i, i, 1, true);
    }
    f.flush().wait().unwrap();
    let s = f.stats();
    let read_before = FlashStats::get(&s.device_bytes_read);
    let freed = f.reclaim_now(true).unwrap();
    assert!(freed >= 1);
    assert!(FlashStats::get(&s.reclaims_expired) >= 1);
    assert_eq!(FlashStats::get(&s.records_rewritten), 0);
    let read = FlashStats::get(&s.device_bytes_read) - read_before;
    assert!(
        read < u64::from(freed) * cfg.segment_size / 8,
        "read {read} bytes for {freed} expired segments: only summaries should be read"
    );
    // The evicted records left the index.
    assert!(index.map.lock().len() < 600);
}

#[test]
fn background_reclaimer_keeps_appends_going() {
    let index = Arc::new(Index::default());
    let cfg = FlashConfig {
        flush_interval: Some(Duration::from_millis(20)),
        ..FlashConfig::small()
    };
    let f = open(cfg, Arc::clone(&index));
    let mut latest = HashMap::new();
    for i in 0..6000u64 {
        let key = i % 300;
        put(&f, &index, 0, key, i, 0, false);
        latest.insert(key, i);
    }
    f.flush().wait().unwrap();
    assert!(FlashStats::get(&f.stats().reclaims) > 0);
    verify(&f, &index, &latest);
    f.close().unwrap();
}

/// Segments whose values are all dead are freed by the background reclaimer before the low
/// watermark, several under one flush (issue 30: a refill over a full flash waited for
/// reclaim passes of one victim and one flush each). Overwriting keys in order kills whole
/// segments; the index stays exact throughout.
/// Batching needs dead segments to pile up faster than the reclaimer frees them: an
/// unoptimised build writes too slowly for that (the reclaimer frees each dead segment on
/// its own), so the test runs in release builds only, as `scripts/test.sh` runs it.
#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "timing: an unoptimised writer never outruns the reclaimer"
)]
fn dead_segments_are_freed_ahead_in_batches() {
    let index = Arc::new(Index::default());
    let cfg = FlashConfig {
        flush_interval: None,
        ..FlashConfig::small()
    };
    let f = open(cfg, Arc::clone(&index));
    let mut latest = HashMap::new();
    for i in 0..8000u64 {
        let key = i % 400;
        put(&f, &index, 0, key, i, 0, false);
        latest.insert(key, i);
    }
    f.flush().wait().unwrap();
    let s = f.stats();
    let reclaims = FlashStats::get(&s.reclaims);
    let batches = FlashStats::get(&s.reclaim_batches);
    assert!(
        FlashStats::get(&s.reclaims_ahead) > 0,
        "nothing freed ahead"
    );
    assert!(
        batches > 0 && batches < reclaims,
        "{reclaims} victims in {batches} batches: never more than one under a flush"
    );
    assert!(FlashStats::get(&s.reclaim_us) >= FlashStats::get(&s.reclaim_flush_us));
    verify(&f, &index, &latest);
    f.close().unwrap();
}

/// After `pause_reclaim` the background reclaimer frees nothing, however full the flash
/// (a clean shutdown relies on it); `reclaim_now` still works.
#[test]
fn paused_reclaimer_takes_no_victim() {
    let index = Arc::new(Index::default());
    let f = open(FlashConfig::small(), Arc::clone(&index));
    f.pause_reclaim();
    let v = value(1, 1);
    let mut i = 0u64;
    loop {
        match f.append(0, &common::put_record(i, i, &v)) {
            Ok(loc) => {
                index.map.lock().insert(i, loc);
            }
            Err(Error::NoSpace | Error::Busy(_)) => break,
            Err(e) => panic!("append: {e}"),
        }
        i += 1;
        assert!(i < 100_000, "flash never filled");
    }
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        FlashStats::get(&f.stats().reclaims),
        0,
        "paused, yet reclaimed"
    );
    assert!(f.reclaim_now(true).unwrap() >= 1);
    f.close().unwrap();
}

#[test]
fn greedy_picks_the_most_dead_segment() {
    let index = Arc::new(Index::default());
    let cfg = FlashConfig {
        flush_interval: None,
        background_reclaim: false,
        reclaim_policy: flashtier_flash::ReclaimPolicy::Greedy,
        ..FlashConfig::small()
    };
    let seg_size = cfg.segment_size;
    let f = open(cfg, Arc::clone(&index));
    let mut locs = Vec::new();
    for key in 0..800u64 {
        put(&f, &index, 0, key, 1, 0, true);
        locs.push(index.map.lock()[&key]);
    }
    f.flush().wait().unwrap();
    // Kill every record of the second segment; the first stays fully live.
    let second = locs[0].byte_addr() / seg_size + 1;
    for (key, l) in locs.iter().enumerate() {
        if l.byte_addr() / seg_size == second {
            index.map.lock().remove(&(key as u64));
            f.mark_dead(*l);
        }
    }
    assert!(FlashStats::get(&f.stats().bytes_dead) > 0);
    assert_eq!(f.reclaim_now(true).unwrap(), 1);
    let dead_loc = locs
        .iter()
        .find(|l| l.byte_addr() / seg_size == second)
        .unwrap();
    assert!(
        matches!(f.read(*dead_loc).wait(), Err(Error::InvalidLocation(_))),
        "second segment was freed"
    );
    assert_eq!(
        f.read(locs[0]).wait().unwrap().header.key_id,
        0,
        "first segment untouched"
    );
    assert_eq!(FlashStats::get(&f.stats().records_rewritten), 0);
}

#[test]
fn keeping_everything_relocates_every_record() {
    let index = Arc::new(Index::default());
    let cfg = FlashConfig {
        flush_interval: None,
        background_reclaim: false,
        keep_limit: 1.0,
        ..FlashConfig::small()
    };
    let seg_size = cfg.segment_size;
    let f = open(cfg, Arc::clone(&index));
    let mut latest = HashMap::new();
    for key in (0..1200u64).step_by(2) {
        put(&f, &index, 0, key, 5, 0, true);
        latest.insert(key, 5);
    }
    f.flush().wait().unwrap();
    let first_seg_records = index
        .map
        .lock()
        .values()
        .filter(|l| l.byte_addr() < seg_size)
        .count() as u64;
    assert!(first_seg_records > 50);
    assert_eq!(f.reclaim_now(true).unwrap(), 1);
    assert_eq!(
        FlashStats::get(&f.stats().records_rewritten),
        first_seg_records
    );
    assert!(
        index.map.lock().values().all(|l| l.byte_addr() >= seg_size),
        "all moved out of segment 0"
    );
    assert_eq!(verify(&f, &index, &latest), 600);
}

#[test]
fn working_memory_stays_under_its_limit() {
    // Three streams writing, the background reclaimer rewriting the even keys: the write
    // chunks and reclaim's read window together stay under `work_limit`.
    let index = Arc::new(Index::default());
    let cfg = FlashConfig {
        flush_interval: Some(Duration::from_millis(5)),
        keep_limit: 1.0,
        ..FlashConfig::small()
    };
    let f = open(cfg.clone(), Arc::clone(&index));
    let mut latest = HashMap::new();
    // Cold keys written once: reclaim must rewrite the even ones.
    for key in 1000..1400u64 {
        put(&f, &index, 0, key, 1, 0, false);
        latest.insert(key, 1);
    }
    for i in 0..9000u64 {
        let key = i % 500;
        put(&f, &index, [0, 2, 3][(i % 3) as usize], key, i, 0, false);
        latest.insert(key, i);
    }
    // A background reclaimer that kept up by freeing dead segments alone never had to rewrite
    // the cold keys (a slow writer, e.g. an unoptimised build): take victims until it has, so
    // the limit is checked with reclaim's read window in use.
    for _ in 0..256 {
        if FlashStats::get(&f.stats().records_rewritten) > 0 {
            break;
        }
        f.reclaim_now(true).unwrap();
    }
    f.flush().wait().unwrap();
    let s = f.stats();
    let (peak, limit) = (
        FlashStats::get(&s.work_peak_bytes),
        FlashStats::get(&s.work_limit_bytes),
    );
    assert_eq!(limit, cfg.work_limit());
    assert!(FlashStats::get(&s.records_rewritten) > 0, "reclaim rewrote");
    assert!(peak >= cfg.chunk_size, "peak {peak}: buffers were counted");
    assert!(
        peak <= limit,
        "working memory peak {peak} over its limit {limit}"
    );
    assert!(FlashStats::get(&s.work_bytes) <= peak);
    verify(&f, &index, &latest);
}

/// With `free_ahead`, the background reclaimer frees segments at least a quarter dead beyond the
/// high watermark while nobody writes, so a burst finds free segments; without it those
/// segments wait until free segments fall under the low watermark. Keys 0..600 once, then the
/// even keys four times more: the first pass's segments are half dead (the odd keys live),
/// the later ones all dead but the last.
#[test]
fn half_dead_segments_are_freed_ahead_with_free_ahead() {
    let mut free = Vec::new();
    for ahead in [0u32, 8] {
        let index = Arc::new(Index::default());
        let cfg = FlashConfig {
            flush_interval: None,
            free_ahead: ahead,
            ..FlashConfig::small()
        };
        let f = open(cfg, Arc::clone(&index));
        let mut latest = HashMap::new();
        let mut version = 0;
        for round in 0..5u64 {
            for key in (0..600u64).filter(|k| round == 0 || k % 2 == 0) {
                version += 1;
                put(&f, &index, 0, key, version, 0, false);
                latest.insert(key, version);
            }
        }
        f.flush().wait().unwrap();
        // Let the reclaimer settle: free segments unchanged for 300 ms.
        let s = f.stats();
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut last = (u64::MAX, Instant::now());
        while Instant::now() < deadline && last.1.elapsed() < Duration::from_millis(300) {
            let now = FlashStats::get(&s.segments_free);
            if now != last.0 {
                last = (now, Instant::now());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        // A reclaimer a loaded machine has not scheduled for 300 ms looks settled too: with
        // free_ahead, wait (up to 60 s) for it to pass the count without (a shortfall then
        // is the knob not working, not the scheduler).
        if let Some(&without) = free.first() {
            let t0 = Instant::now();
            while FlashStats::get(&s.segments_free) <= without
                && t0.elapsed() < Duration::from_secs(60)
            {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        free.push(FlashStats::get(&s.segments_free));
        eprintln!(
            "free_ahead {ahead}: {} segments free at rest, {} victims freed ahead",
            free[free.len() - 1],
            FlashStats::get(&s.reclaims_ahead)
        );
        // Odd keys were dropped by the handler where reclaim met them; the rest are exact.
        latest.retain(|k, _| index.map.lock().contains_key(k));
        verify(&f, &index, &latest);
        f.close().unwrap();
    }
    assert!(
        free[1] > free[0],
        "free segments at rest: {} without free_ahead, {} with 8",
        free[0],
        free[1]
    );
}
