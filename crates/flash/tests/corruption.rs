//! Corrupt bytes on "flash" and reopen: corrupt records are never served (and with a full
//! scan never recovered), a corrupt summary falls back to a verified scan, every detection is
//! counted; a config that does not match the format is a clear error (or a documented
//! reformat).
use std::sync::Arc;
use std::time::Duration;

use flashtier_flash::{
    kind, Device, DropAll, Error, Flash, FlashConfig, FlashStats, Location, MemoryDevice,
    RecordMeta, RecordWrite,
};

fn cfg() -> FlashConfig {
    FlashConfig {
        flush_interval: None,
        background_reclaim: false,
        ..FlashConfig::small()
    }
}

fn open(dev: &Arc<MemoryDevice>, cfg: FlashConfig) -> Result<(Flash, Vec<RecordMeta>), Error> {
    let mut got = Vec::new();
    let d: Arc<dyn Device> = Arc::clone(dev) as Arc<dyn Device>;
    let (f, _) = Flash::open(vec![d], cfg, Arc::new(DropAll), |m| got.push(m))?;
    Ok((f, got))
}

/// 600 records of ~1 KB: segment 0 is sealed (with a summary), later ones too.
fn fill(dev: &Arc<MemoryDevice>) -> Vec<Location> {
    let (f, _) = open(dev, cfg()).unwrap();
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
    let (f, rec) = open(&dev, cfg()).unwrap();
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
            ..cfg()
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
    let seg = cfg().segment_size;
    // First summary entry of segment 0 sits at the start of its tail pages.
    let records_in_seg0 = locs.iter().filter(|l| l.byte_addr() < seg).count();
    let tail = ((records_in_seg0 * 40 + 64) as u64).div_ceil(4096) * 4096;
    dev.poke(dev_off(seg - tail) + 3, &[0xAB]);
    let (f, rec) = open(&dev, cfg()).unwrap();
    assert_eq!(rec.len(), 600, "the scan recovers every intact record");
    let s = f.stats();
    assert_eq!(FlashStats::get(&s.recovery_damaged_segments), 1);
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
        ..cfg()
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
