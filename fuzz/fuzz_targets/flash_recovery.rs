//! Fuzz recovery: take a valid flash image holding known records, flip fuzzer-chosen bytes,
//! reopen it. Recovery must not panic, and every record it yields that reads back without a
//! checksum error must be byte-exact one of the records written (corruption is never served).
#![no_main]

use std::sync::{Arc, OnceLock};

use flashtier_flash::{kind, DropAll, Flash, FlashConfig, IoBackend, MemoryDevice, RecordWrite};
use libfuzzer_sys::fuzz_target;

const RECORDS: u64 = 64;
const DEVICE_LEN: u64 = 1 << 20;

/// A small, quiet engine: 64 KiB segments (15 on the device, so a flip often lands in a
/// header, summary or record), no background threads beyond the minimum, one IO thread.
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
    (0..len).map(|i| (key_id as usize).wrapping_mul(31).wrapping_add(i) as u8).collect()
}

fn base_image() -> &'static Vec<u8> {
    static IMAGE: OnceLock<Vec<u8>> = OnceLock::new();
    IMAGE.get_or_init(|| {
        let dev = Arc::new(MemoryDevice::new("base", DEVICE_LEN));
        let (flash, _) =
            Flash::open(vec![dev.clone()], config(), Arc::new(DropAll), |_| {})
                .expect("open blank memory device");
        for key_id in 0..RECORDS {
            let key = key_id.to_le_bytes();
            let value = value_for(key_id);
            let rec = RecordWrite {
                kind: kind::PUT,
                key_id,
                version: key_id + 1,
                flags: 0,
                exptime: 0,
                key: &key,
                value: &value,
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

fuzz_target!(|data: &[u8]| {
    let mut image = base_image().clone();
    for flip in data.chunks_exact(5) {
        let off = u32::from_le_bytes([flip[0], flip[1], flip[2], flip[3]]) as usize % image.len();
        image[off] ^= flip[4];
    }
    let dev = Arc::new(MemoryDevice::from_image("fuzz", image));
    let mut metas = Vec::new();
    let Ok((flash, _)) = Flash::open(vec![dev], config(), Arc::new(DropAll), |m| {
        metas.push(m)
    }) else {
        return;
    };
    // All reads in flight at once (the executor drains them in one go), then checked.
    let reads: Vec<_> = metas.iter().map(|m| flash.read(m.location)).collect();
    for read in reads {
        if let Ok(rec) = read.wait() {
            let key_id = rec.header.key_id;
            assert!(key_id < RECORDS, "served a record that was never written");
            assert_eq!(&rec.key[..], &key_id.to_le_bytes()[..], "served a wrong key");
            assert_eq!(&rec.value[..], &value_for(key_id)[..], "served corrupt bytes");
        }
    }
    let _ = flash.close();
});
