//! Several threads appending on different streams, reading their records back at once and
//! later, while another thread flushes: every read returns the right bytes, nothing deadlocks,
//! and everything is recovered after a clean close.
use std::sync::Arc;
use std::time::Duration;

use flashtier_flash::{kind, Device, DropAll, Flash, FlashConfig, MemoryDevice, RecordWrite};

fn value(id: u64) -> Vec<u8> {
    let len = (id.wrapping_mul(2654435761) % 5000) as usize;
    (0..len).map(|j| (id as usize ^ j) as u8).collect()
}

#[test]
fn parallel_appends_reads_and_flushes() {
    let mem = Arc::new(MemoryDevice::new("mem", 32 << 20));
    let dev: Arc<dyn Device> = Arc::clone(&mem) as Arc<dyn Device>;
    let cfg = FlashConfig {
        flush_interval: Some(Duration::from_millis(5)),
        ..FlashConfig::for_capacity(32 << 20)
    };
    let (flash, _) = Flash::open(vec![dev], cfg.clone(), Arc::new(DropAll), |_| {}).unwrap();
    let flash = Arc::new(flash);
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flusher = {
        let (f, stop) = (Arc::clone(&flash), Arc::clone(&stop));
        std::thread::spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                f.flush().wait().unwrap();
                std::thread::sleep(Duration::from_millis(3));
            }
        })
    };
    let writers: Vec<_> = (0..4u64)
        .map(|t| {
            let f = Arc::clone(&flash);
            std::thread::spawn(move || {
                let mut mine = Vec::new();
                for i in 0..1500u64 {
                    let id = t * 1_000_000 + i;
                    let v = value(id);
                    let w = RecordWrite {
                        kind: kind::PUT,
                        key_id: id,
                        version: i,
                        flags: t as u32,
                        exptime: 0,
                        key: &id.to_le_bytes(),
                        value: &v,
                    };
                    let loc = f
                        .append_blocking((t % 3) as u8, &w, Duration::from_secs(10))
                        .unwrap();
                    let r = f.read(loc).wait().unwrap();
                    assert_eq!(r.header.key_id, id);
                    assert_eq!(&r.value[..], &v[..]);
                    mine.push((id, loc));
                }
                for (id, loc) in &mine {
                    let r = f.read(*loc).wait().unwrap();
                    assert_eq!(r.header.key_id, *id);
                    assert_eq!(&r.value[..], &value(*id)[..]);
                }
                mine
            })
        })
        .collect();
    let mut all = Vec::new();
    for w in writers {
        all.extend(w.join().unwrap());
    }
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    flusher.join().unwrap();
    flash.close().unwrap();
    drop(flash);

    let dev: Arc<dyn Device> = mem;
    let mut n = 0;
    let (flash, _) = Flash::open(vec![dev], cfg, Arc::new(DropAll), |_| n += 1).unwrap();
    assert_eq!(n, all.len());
    for (id, loc) in all.iter().step_by(97) {
        assert_eq!(&flash.read(*loc).wait().unwrap().value[..], &value(*id)[..]);
    }
}
