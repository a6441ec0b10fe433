//! Fuzz recovery: take a valid flash image holding known records, flip fuzzer-chosen bytes,
//! reopen it. Recovery must not panic, and every record it yields that reads back without a
//! checksum error must be byte-exact one of the records written (corruption is never served).
#![no_main]

use std::sync::{Arc, Mutex, OnceLock};

use flashtier_flash::{
    kind, Device, DropAll, Flash, FlashConfig, IoBackend, MemoryDevice, RecordWrite,
};
use libfuzzer_sys::fuzz_target;

const RECORDS: u64 = 64;
const DEVICE_LEN: u64 = 512 << 10;

/// A small, quiet engine: 64 KiB segments (7 on the device, the fewest the engine accepts,
/// so a flip often lands in a header, summary or record), no background threads beyond the
/// minimum, one IO thread.
fn config() -> FlashConfig {
    FlashConfig {
        segment_size: 64 << 10,
        chunk_size: 16 << 10,
        flush_interval: None,
        background_reclaim: false,
        psync_threads: 1,
        io_backend: IoBackend::Psync,
        ..FlashConfig::small()
    }
}

fn value_for(key_id: u64) -> Vec<u8> {
    let len = 100 + (key_id as usize * 37) % 3000;
    (0..len)
        .map(|i| (key_id as usize).wrapping_mul(31).wrapping_add(i) as u8)
        .collect()
}

/// Every record's value, built once (the oracle compares up to 64 per input).
fn values() -> &'static [Vec<u8>] {
    static VALUES: OnceLock<Vec<Vec<u8>>> = OnceLock::new();
    VALUES.get_or_init(|| (0..RECORDS).map(value_for).collect())
}

fn base_image() -> &'static Vec<u8> {
    static IMAGE: OnceLock<Vec<u8>> = OnceLock::new();
    IMAGE.get_or_init(|| {
        let dev = Arc::new(MemoryDevice::new("base", DEVICE_LEN));
        let (flash, _) = Flash::open(vec![dev.clone()], config(), Arc::new(DropAll), |_| {})
            .expect("open blank memory device");
        for key_id in 0..RECORDS {
            let key = key_id.to_le_bytes();
            let value = &values()[key_id as usize];
            let rec = RecordWrite {
                kind: kind::PUT,
                key_id,
                version: key_id + 1,
                flags: 0,
                exptime: 0,
                key: &key,
                value,
            };
            flash.append(0, &rec).expect("append");
            if key_id % 16 == 15 {
                flash.flush().wait().expect("flush");
            }
        }
        flash.close().expect("close");
        dev.image()
    })
}

/// The device every input reopens, reset to the base image first (a fresh 1 MiB buffer per
/// input cost more than the recovery itself), and the scratch copy the flips are made in.
fn device() -> &'static (Arc<MemoryDevice>, Mutex<Vec<u8>>) {
    static DEV: OnceLock<(Arc<MemoryDevice>, Mutex<Vec<u8>>)> = OnceLock::new();
    DEV.get_or_init(|| {
        let image = base_image().clone();
        (
            Arc::new(MemoryDevice::from_image("fuzz", image.clone())),
            Mutex::new(image),
        )
    })
}

fuzz_target!(|data: &[u8]| {
    let (dev, scratch) = device();
    // No engine from an earlier input may still hold the device.
    assert_eq!(Arc::strong_count(dev), 1, "an engine outlived its close");
    let flips: Vec<(usize, u8)> = data
        .chunks_exact(5)
        .map(|f| {
            let off = u32::from_le_bytes([f[0], f[1], f[2], f[3]]) as usize % DEVICE_LEN as usize;
            (off, f[4])
        })
        .collect();
    {
        let mut image = scratch.lock().expect("scratch lock");
        for &(off, x) in &flips {
            image[off] ^= x;
        }
        dev.poke(0, &image);
        for &(off, x) in &flips {
            image[off] ^= x;
        }
    }
    let devices: Vec<Arc<dyn Device>> = vec![dev.clone()];
    let mut metas = Vec::new();
    // An image with no byte changed must open and serve every record.
    let untouched = flips.iter().all(|&(_, x)| x == 0);
    let opened = Flash::open(devices, config(), Arc::new(DropAll), |m| metas.push(m));
    let Ok((flash, _)) = opened else {
        assert!(!untouched, "the untouched image failed to open");
        return;
    };
    let mut served = 0;
    // All reads in flight at once (the executor drains them in one go), then checked.
    let reads: Vec<_> = metas.iter().map(|m| flash.read(m.location)).collect();
    for read in reads {
        if let Ok(rec) = read.wait() {
            let key_id = rec.header.key_id;
            assert!(key_id < RECORDS, "served a record that was never written");
            assert_eq!(
                &rec.key[..],
                &key_id.to_le_bytes()[..],
                "served a wrong key"
            );
            assert_eq!(
                &rec.value[..],
                &values()[key_id as usize][..],
                "served corrupt bytes"
            );
            served += 1;
        }
    }
    if untouched {
        assert_eq!(served, RECORDS, "the untouched image lost records");
    }
    let _ = flash.close();
});
