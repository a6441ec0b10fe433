//! Corrupt bytes on "flash" and reopen: corrupt records are never served (and with a full
//! scan never recovered), a corrupt summary falls back to a verified scan, every detection is
//! counted; a segment overwritten with garbage, a header page that cannot be read and a
//! superblock that is neither blank nor valid are counted as losses; reclaim counts the
//! records it cannot read and tells the user; a config that does not match the format is a
//! clear error (or a documented reformat), a device opened at another size names both.
mod common;

use common::{manual, stat};
use std::sync::Arc;
use std::time::Duration;

use std::sync::atomic::Ordering;

use parking_lot::Mutex;

use flashtier_flash::{
    kind, Decision, Device, DropAll, Error, Faults, FaultyDevice, Flash, FlashConfig, FlashStats,
    Location, LostRecord, MemoryDevice, ReclaimHandler, RecordMeta, RecordWrite,
};

fn open(dev: &Arc<MemoryDevice>, cfg: FlashConfig) -> Result<(Flash, Vec<RecordMeta>), Error> {
    let mut got = Vec::new();
    let d: Arc<dyn Device> = Arc::clone(dev) as Arc<dyn Device>;
    let (f, _) = Flash::open(vec![d], cfg, Arc::new(DropAll), |m| got.push(m))?;
    Ok((f, got))
}

/// 600 records of ~1 KB: segment 0 is sealed (with a summary), later ones too.
fn fill(dev: &Arc<MemoryDevice>) -> Vec<Location> {
    let (f, _) = open(dev, manual()).unwrap();
    let locs = (0..600u64)
        .map(|i| {
            let v = vec![i as u8; 1000];
            let w = RecordWrite {
                kind: kind::PUT,
                key_id: i,
                version: 0,
                flags: 0,
                exptime: 0,
                key: b"key",
                value: &v,
            };
            f.append_blocking(0, &w, Duration::from_secs(5)).unwrap()
        })
        .collect();
    f.close().unwrap();
    locs
}

/// Device offset of a global byte address (single device: segments start after one page).
fn dev_off(addr: u64) -> u64 {
    4096 + addr
}

#[test]
fn corrupt_record_is_never_served() {
    let dev = Arc::new(MemoryDevice::new("m", 4 << 20));
    let locs = fill(&dev);
    dev.poke(dev_off(locs[10].byte_addr()) + 500, &[0xFF, 0x00, 0xEE]);
    let (f, rec) = open(&dev, manual()).unwrap();
    assert_eq!(rec.len(), 600, "summaries still list it");
    assert!(matches!(f.read(locs[10]).wait(), Err(Error::Corrupt(_))));
    assert_eq!(FlashStats::get(&f.stats().checksum_failures), 1);
    assert_eq!(f.read(locs[11]).wait().unwrap().header.key_id, 11);
    f.close().unwrap();
    drop(f);
    // With a full scan the corrupt record is not even recovered; the segment's records after
    // it are dropped too (the scan cannot trust lengths past a bad record).
    let (f, rec) = open(
        &dev,
        FlashConfig {
            recovery_full_scan: true,
            ..manual()
        },
    )
    .unwrap();
    assert!(rec.iter().all(|m| m.key_id != 10));
    assert!(rec.iter().any(|m| m.key_id == 9));
    assert!(FlashStats::get(&f.stats().recovery_damaged_segments) >= 1);
    for m in &rec {
        assert_eq!(f.read(m.location).wait().unwrap().header.key_id, m.key_id);
    }
}

#[test]
fn corrupt_summary_falls_back_to_a_verified_scan() {
    let dev = Arc::new(MemoryDevice::new("m", 4 << 20));
    let locs = fill(&dev);
    let seg = manual().segment_size;
    // First summary entry of segment 0 sits at the start of its tail pages.
    let records_in_seg0 = locs.iter().filter(|l| l.byte_addr() < seg).count();
    let tail = ((records_in_seg0 * 40 + 64) as u64).div_ceil(4096) * 4096;
    dev.poke(dev_off(seg - tail) + 3, &[0xAB]);
    let (f, rec) = open(&dev, manual()).unwrap();
    assert_eq!(rec.len(), 600, "the scan recovers every intact record");
    let s = f.stats();
    assert_eq!(
        FlashStats::get(&s.recovery_damaged_segments),
        0,
        "nothing was lost"
    );
    assert!(FlashStats::get(&s.checksum_failures) >= 1);
    for m in &rec {
        assert_eq!(f.read(m.location).wait().unwrap().header.key_id, m.key_id);
    }
}

#[test]
fn mismatched_config_is_an_error_or_a_documented_reformat() {
    let dev = Arc::new(MemoryDevice::new("m", 4 << 20));
    fill(&dev);
    let other = FlashConfig {
        segment_size: 512 << 10,
        ..manual()
    };
    match open(&dev, other.clone()) {
        Err(e @ Error::Mismatch(_)) => assert!(e.to_string().contains("segment size"), "{e}"),
        Err(e) => panic!("unexpected {e}"),
        Ok(_) => panic!("opened with a different segment size"),
    }
    let (f, rec) = open(
        &dev,
        FlashConfig {
            reformat_on_mismatch: true,
            ..other.clone()
        },
    )
    .unwrap();
    assert!(rec.is_empty(), "reformat starts empty");
    f.close().unwrap();
    drop(f);
    let (_f, rec) = open(&dev, other).unwrap();
    assert!(rec.is_empty());
}

#[test]
fn a_resized_device_names_both_sizes_and_keeps_its_records_at_the_old_one() {
    let dev = Arc::new(MemoryDevice::new("m", 4 << 20));
    fill(&dev);
    let mut image = dev.image();
    image.resize(8 << 20, 0);
    let grown = Arc::new(MemoryDevice::from_image("m", image));
    match open(&grown, manual()) {
        Err(Error::Resized {
            device,
            formatted,
            requested,
        }) => assert_eq!(
            (device.as_str(), formatted, requested),
            ("m", 4 << 20, 8 << 20)
        ),
        Err(e) => panic!("unexpected {e}"),
        Ok(_) => panic!("opened at another size"),
    }
    let e = open(&grown, manual()).err().expect("refused");
    assert!(
        e.to_string().contains("formatted for 4MiB, now 8MiB"),
        "{e}"
    );
    // Nothing was written: at its old size the device still holds every record.
    let (_f, rec) = open(&dev, manual()).unwrap();
    assert_eq!(rec.len(), 600);
    let (f, rec) = open(
        &grown,
        FlashConfig {
            reformat_on_mismatch: true,
            ..manual()
        },
    )
    .unwrap();
    assert!(rec.is_empty(), "reformat starts empty");
    assert_eq!(FlashStats::get(&f.stats().superblocks_lost), 1);
}

#[test]
fn segment_overwritten_with_garbage_is_counted_and_the_rest_survives() {
    let dev = Arc::new(MemoryDevice::new("m", 4 << 20));
    let locs = fill(&dev);
    let seg = manual().segment_size;
    let in_seg1: Vec<u64> = (0..600u64)
        .filter(|&i| (seg..2 * seg).contains(&locs[i as usize].byte_addr()))
        .collect();
    assert!(!in_seg1.is_empty());
    let garbage: Vec<u8> = (0..seg).map(|i| (i * 7 + 13) as u8).collect();
    dev.poke(dev_off(seg), &garbage);
    let (f, rec) = open(&dev, manual()).unwrap();
    assert_eq!(stat(&f, "recovery_unreadable_headers"), 1);
    assert_eq!(
        rec.len(),
        600 - in_seg1.len(),
        "every other record is recovered"
    );
    assert!(rec.iter().all(|m| !in_seg1.contains(&m.key_id)));
    for m in &rec {
        assert_eq!(f.read(m.location).wait().unwrap().header.key_id, m.key_id);
    }
    f.close().unwrap();
}

#[test]
fn freed_and_never_used_segments_are_not_losses() {
    let dev = Arc::new(MemoryDevice::new("m", 4 << 20));
    fill(&dev);
    let (f, _) = open(&dev, manual()).unwrap();
    assert_eq!(f.reclaim_now(true).unwrap(), 1);
    f.close().unwrap();
    drop(f);
    let (f, _) = open(&dev, manual()).unwrap();
    assert_eq!(stat(&f, "recovery_unreadable_headers"), 0);
    assert_eq!(stat(&f, "recovery_damaged_segments"), 0);
    assert_eq!(stat(&f, "superblocks_lost"), 0);
}

#[test]
fn garbage_superblock_is_refused_or_formatted_and_counted_when_forced() {
    let dev = Arc::new(MemoryDevice::new("m", 4 << 20));
    fill(&dev);
    dev.poke(0, &[0x5a; 64 << 10]);
    let before = dev.image();
    match open(&dev, manual()) {
        Err(Error::NotBlank { found, .. }) => {
            assert!(found.contains("non-zero data at byte 0"), "{found}")
        }
        other => panic!(
            "garbage at the start must be refused, got {:?}",
            other.err()
        ),
    }
    assert!(dev.image() == before, "a refused device is left as it was");
    let forced = FlashConfig {
        force_format: true,
        ..manual()
    };
    let (f, rec) = open(&dev, forced).unwrap();
    assert!(rec.is_empty(), "the cache starts empty");
    assert_eq!(stat(&f, "superblocks_lost"), 1);
    f.close().unwrap();
    drop(f);
    let (f, _) = open(&dev, manual()).unwrap();
    assert_eq!(stat(&f, "superblocks_lost"), 0, "formatted: valid now");
    assert_eq!(
        stat(&f, "recovery_unreadable_headers"),
        0,
        "formatting zeroed every segment header, the garbage ones too"
    );
    drop(f);
    let blank = Arc::new(MemoryDevice::new("blank", 4 << 20));
    let (f, _) = open(&blank, manual()).unwrap();
    assert_eq!(stat(&f, "superblocks_lost"), 0, "a blank device is no loss");
}

#[test]
fn unreadable_header_page_retires_its_segment_and_open_goes_on() {
    let mem = Arc::new(MemoryDevice::new("m", 4 << 20));
    let locs = fill(&mem);
    let seg = manual().segment_size;
    let faults = Faults::new();
    faults.bad_read_page.store(dev_off(seg), Ordering::SeqCst);
    let d: Arc<dyn Device> = Arc::new(FaultyDevice::new(mem.clone(), Arc::clone(&faults)));
    let mut rec = Vec::new();
    let (f, _) = Flash::open(vec![d], manual(), Arc::new(DropAll), |m| rec.push(m)).unwrap();
    assert_eq!(stat(&f, "recovery_unreadable_headers"), 1);
    let lost = locs
        .iter()
        .filter(|l| (seg..2 * seg).contains(&l.byte_addr()))
        .count();
    assert_eq!(rec.len(), 600 - lost);
    // The retired segment is neither recovered nor freed for reuse.
    let used: std::collections::BTreeSet<u64> = locs.iter().map(|l| l.byte_addr() / seg).collect();
    let total = (mem.len() - 4096) / seg;
    assert_eq!(u64::from(f.free_segments()), total - used.len() as u64);
    assert!(f.read(locs[0]).wait().is_ok());
}

/// Keeps every record; remembers what the engine evicted.
#[derive(Default)]
struct KeepAll(Mutex<Vec<u64>>);

impl ReclaimHandler for KeepAll {
    fn decide(&self, _: &RecordMeta) -> Decision {
        Decision::Keep
    }
    fn relocated(&self, _: &RecordMeta, _: Location) -> bool {
        true
    }
    fn evicted(&self, rec: &RecordMeta) {
        self.0.lock().push(rec.key_id);
    }
    fn lost(&self, _: &[LostRecord]) {}
}

#[test]
fn reclaim_counts_the_records_it_cannot_read_and_tells_the_user() {
    let dev = Arc::new(MemoryDevice::new("m", 4 << 20));
    let locs = fill(&dev);
    dev.poke(dev_off(locs[3].byte_addr()) + 200, &[0xFF, 0x00]);
    let handler = Arc::new(KeepAll::default());
    let d: Arc<dyn Device> = Arc::clone(&dev) as Arc<dyn Device>;
    let keep_all = FlashConfig {
        keep_limit: 1.0,
        ..manual()
    };
    let (f, _) = Flash::open(vec![d], keep_all, handler.clone(), |_| {}).unwrap();
    assert_eq!(f.reclaim_now(true).unwrap(), 1);
    assert_eq!(stat(&f, "records_unreadable"), 1);
    assert_eq!(
        *handler.0.lock(),
        vec![3],
        "the user hears which record went"
    );
}

/// A segment size chosen by default (`adopt_geometry`) gives way to the one a set was
/// formatted with: the set opens warm with its own geometry instead of being refused.
#[test]
fn default_geometry_gives_way_to_the_formatted_one() {
    let dev = Arc::new(MemoryDevice::new("g", 4 << 20));
    let locs = fill(&dev);
    let other = FlashConfig {
        segment_size: 512 << 10,
        chunk_size: 128 << 10,
        adopt_geometry: true,
        ..manual()
    };
    let d: Arc<dyn Device> = Arc::clone(&dev) as Arc<dyn Device>;
    let mut got = Vec::new();
    let (f, info) = Flash::open(vec![d], other, Arc::new(DropAll), |m| got.push(m)).unwrap();
    assert_eq!(info.segment_size, manual().segment_size);
    assert!(!info.formatted);
    assert_eq!(got.len(), locs.len(), "every record recovered");
    for m in &got {
        assert_eq!(f.read(m.location).wait().unwrap().header.key_id, m.key_id);
    }
}
