//! Append, read (from RAM and from the device), flush, seal across segments, reopen and
//! recover, on in-memory devices (one and several = JBOD).
mod common;

use common::manual;
use std::sync::Arc;

use flashtier_flash::{
    kind, Device, DropAll, Error, Flash, FlashConfig, FlashStats, Location, MemoryDevice,
    RecordMeta, RecordWrite,
};

fn value(i: u64) -> Vec<u8> {
    let len = (i * 997 % 3000) as usize + 1;
    (0..len).map(|j| (i as usize * 31 + j) as u8).collect()
}

fn put(flash: &Flash, i: u64) -> Location {
    let key = format!("key-{i}");
    let v = value(i);
    flash
        .append_blocking(
            0,
            &RecordWrite {
                kind: kind::PUT,
                key_id: i,
                version: i * 10,
                flags: i as u32,
                exptime: 0,
                key: key.as_bytes(),
                value: &v,
            },
            std::time::Duration::from_secs(10),
        )
        .unwrap()
}

fn check(flash: &Flash, i: u64, loc: Location) {
    let r = flash.read(loc).wait().unwrap();
    assert_eq!(r.header.key_id, i);
    assert_eq!(r.header.version, i * 10);
    assert_eq!(r.header.flags, i as u32);
    assert_eq!(&r.key[..], format!("key-{i}").as_bytes());
    assert_eq!(&r.value[..], &value(i)[..]);
}

fn open(devs: &[Arc<MemoryDevice>]) -> (Flash, Vec<RecordMeta>) {
    let devices: Vec<Arc<dyn Device>> = devs
        .iter()
        .map(|d| Arc::clone(d) as Arc<dyn Device>)
        .collect();
    let mut got = Vec::new();
    let (f, _) = Flash::open(devices, manual(), Arc::new(DropAll), |m| got.push(m)).unwrap();
    (f, got)
}

#[test]
fn append_read_flush_reopen() {
    let dev = Arc::new(MemoryDevice::new("mem0", 4 << 20));
    let (flash, rec) = open(std::slice::from_ref(&dev));
    assert!(rec.is_empty());
    let locs: Vec<_> = (0..200).map(|i| put(&flash, i)).collect();
    // Readable at once, from RAM or in-flight chunks.
    for (i, l) in locs.iter().enumerate() {
        check(&flash, i as u64, *l);
    }
    flash.flush().wait().unwrap();
    for (i, l) in locs.iter().enumerate() {
        check(&flash, i as u64, *l);
    }
    assert!(FlashStats::get(&flash.stats().device_bytes_read) > 0);
    // Packed locations round-trip.
    assert_eq!(Location::unpack(locs[7].pack()), locs[7]);
    flash.close().unwrap();
    assert!(matches!(
        flash.append(
            0,
            &RecordWrite {
                kind: kind::PUT,
                key_id: 0,
                version: 0,
                flags: 0,
                exptime: 0,
                key: b"",
                value: b"",
            }
        ),
        Err(Error::Closed)
    ));
    drop(flash);

    let (flash, rec) = open(std::slice::from_ref(&dev));
    assert_eq!(rec.len(), 200, "every flushed record is recovered");
    for (i, m) in rec.iter().enumerate() {
        assert_eq!(m.key_id, i as u64);
        assert_eq!(m.location, locs[i]);
        assert_eq!(m.kind, kind::PUT);
        check(&flash, i as u64, m.location);
    }
    assert_eq!(FlashStats::get(&flash.stats().recovered_records), 200);
    // New appends after recovery get higher seqs and survive another reopen.
    let l = put(&flash, 500);
    flash.close().unwrap();
    drop(flash);
    let (flash, rec) = open(std::slice::from_ref(&dev));
    assert_eq!(rec.len(), 201);
    assert_eq!(rec.last().unwrap().location, l);
    assert!(rec.last().unwrap().seq > rec[0].seq);
    check(&flash, 500, l);
}

#[test]
fn jbod_spreads_segments_and_recovers() {
    let devs: Vec<_> = (0..2)
        .map(|i| Arc::new(MemoryDevice::new(&format!("m{i}"), 3 << 20)))
        .collect();
    let (flash, _) = open(&devs);
    let locs: Vec<_> = (0..1500).map(|i| put(&flash, i)).collect();
    flash.flush().wait().unwrap();
    let seg_size = manual().segment_size;
    let per_dev = ((3 << 20) - 4096) / seg_size; // segments on device 0
    let segs: std::collections::BTreeSet<u64> =
        locs.iter().map(|l| l.byte_addr() / seg_size).collect();
    assert!(segs.len() > 4, "records span several segments");
    assert!(segs.iter().any(|&s| s < per_dev) && segs.iter().any(|&s| s >= per_dev));
    for (i, l) in locs.iter().enumerate() {
        check(&flash, i as u64, *l);
    }
    flash.close().unwrap();
    drop(flash);
    let (flash, rec) = open(&devs);
    assert_eq!(rec.len(), 1500);
    let mut by_key: Vec<_> = rec.iter().map(|m| (m.key_id, m.location)).collect();
    by_key.sort();
    for (i, (k, l)) in by_key.iter().enumerate() {
        assert_eq!(*k, i as u64);
        assert_eq!(*l, locs[i]);
    }
    check(&flash, 1499, locs[1499]);
}

#[test]
fn too_large_and_bad_locations_are_errors() {
    let dev = Arc::new(MemoryDevice::new("mem0", 4 << 20));
    let (flash, _) = open(std::slice::from_ref(&dev));
    let big = vec![0u8; manual().chunk_size as usize];
    let r = flash.append(0, &common::put_record(1, 0, &big));
    assert!(matches!(r, Err(Error::RecordTooLarge { .. })));
    let max = flash.max_value_len(1);
    let ok = vec![1u8; max];
    let l = flash.append(0, &common::put_record(1, 0, &ok)).unwrap();
    flash.flush().wait().unwrap();
    assert_eq!(flash.read(l).wait().unwrap().value.len(), max);
    // A location in a free segment is not served.
    let free = Location::new(manual().segment_size * 10, 100).unwrap();
    assert!(matches!(
        flash.read(free).wait(),
        Err(Error::InvalidLocation(_))
    ));
    // A location inside a live segment but not at a record start fails its checksum.
    let wrong = Location::new(l.byte_addr() + 16, 100).unwrap();
    assert!(flash.read(wrong).wait().is_err());
}

#[test]
fn flush_interval_writes_quiet_buffers() {
    let dev: Arc<dyn Device> = Arc::new(MemoryDevice::new("mem0", 4 << 20));
    let cfg = FlashConfig {
        flush_interval: Some(std::time::Duration::from_millis(10)),
        ..manual()
    };
    let (flash, _) = Flash::open(vec![dev], cfg, Arc::new(DropAll), |_| {}).unwrap();
    let before = FlashStats::get(&flash.stats().device_bytes_written);
    let loc = put(&flash, 1);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while FlashStats::get(&flash.stats().device_bytes_written) == before {
        assert!(
            std::time::Instant::now() < deadline,
            "interval flusher never wrote the chunk"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    check(&flash, 1, loc);
    // The next record starts on a fresh page: the written page is never rewritten.
    let next = put(&flash, 2);
    assert_eq!(next.byte_addr() % 4096, 0);
    check(&flash, 2, next);
}

#[test]
fn stats_pairs_are_named_and_prefixed() {
    let dev = Arc::new(MemoryDevice::new("mem0", 4 << 20));
    let (flash, _) = open(std::slice::from_ref(&dev));
    put(&flash, 1);
    let pairs = flash.stats().pairs();
    assert!(pairs.iter().all(|(n, _)| n.starts_with("flash_")));
    let get = |name: &str| pairs.iter().find(|(n, _)| *n == name).map(|p| p.1);
    assert_eq!(get("flash_objects_written"), Some(1));
    assert_eq!(get("flash_segments_total"), Some(15));
}

#[test]
fn knobs_change_at_runtime() {
    let dev = Arc::new(MemoryDevice::new("mem0", 4 << 20));
    let (flash, _) = open(std::slice::from_ref(&dev)); // flush interval off
    let get = |f: &Flash, n: &str| f.knobs().into_iter().find(|(k, _)| *k == n).unwrap().1;
    assert_eq!(get(&flash, "flush_interval_ms"), "0");
    let before = FlashStats::get(&flash.stats().device_bytes_written);
    put(&flash, 1);
    std::thread::sleep(std::time::Duration::from_millis(30));
    assert_eq!(
        FlashStats::get(&flash.stats().device_bytes_written),
        before,
        "no interval flush while off"
    );
    flash.set_knob("flush_interval_ms", "5").unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while FlashStats::get(&flash.stats().device_bytes_written) == before {
        assert!(
            std::time::Instant::now() < deadline,
            "knob did not take effect"
        );
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    flash.set_knob("reclaim_policy", "greedy").unwrap();
    assert_eq!(get(&flash, "reclaim_policy"), "greedy");
    assert!(flash.set_knob("keep_limit", "1.5").is_err());
}

/// `can_append` follows back-pressure: true with room, false once appends are refused for want
/// of a free segment (no background reclaim) even for a tiny record, true again once reclaim
/// frees a segment.
#[test]
fn can_append_tells_back_pressure() {
    let dev = Arc::new(MemoryDevice::new("mem0", 4 << 20));
    let (flash, _) = open(std::slice::from_ref(&dev));
    let v = vec![7u8; 3000];
    let w = |i: u64| common::put_record(i, i, &v);
    assert!(flash.can_append(0, 3100));
    let mut i = 0;
    loop {
        flash.flush().wait().unwrap();
        match flash.append(0, &w(i)) {
            Ok(_) => {}
            Err(Error::NoSpace) => break,
            Err(e) => panic!("append {i}: {e}"),
        }
        i += 1;
        assert!(i < 10_000, "flash never filled");
    }
    assert!(!flash.can_append(0, 1));
    flash.reclaim_now(true).unwrap();
    assert!(flash.can_append(0, 3100));
    flash.append(0, &w(i)).unwrap();
}
