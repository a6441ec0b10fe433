//! Model-based recovery test: random appends on several streams and flushes, a crash at a
//! random write (that write torn after a random number of pages, every later write lost),
//! then reopen the crash image. Checked against a model of what a completed flush made
//! durable:
//! - every record appended before the last flush that completed before the crash is
//!   recovered, at its location, with its metadata, and reads back byte-exact;
//! - every recovered record is one that was appended (same location), and reads back
//!   byte-exact: a torn or stale record is never reported or served.
mod common;

use common::manual;
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;

use flashtier_flash::{
    kind, Device, DropAll, Error, Faults, FaultyDevice, Flash, Location, MemoryDevice, RecordWrite,
};

#[derive(Clone, Debug)]
enum Op {
    Append { stream: u8, len: usize },
    Flush,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        12 => (0u8..3, 0usize..6000).prop_map(|(stream, len)| Op::Append { stream, len }),
        1 => Just(Op::Flush),
    ]
}

fn value(id: u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|j| (id.wrapping_mul(131) + j as u64) as u8)
        .collect()
}

fn run(ops: &[Op], crash_after: Option<i64>, torn_pages: u64) -> Result<(), TestCaseError> {
    let mem = Arc::new(MemoryDevice::new("mem", 4 << 20));
    let faults = Faults::new();
    let dev: Arc<dyn Device> = Arc::new(FaultyDevice::new(
        Arc::clone(&mem) as Arc<dyn Device>,
        Arc::clone(&faults),
    ));
    let (flash, _) = Flash::open(vec![dev], manual(), Arc::new(DropAll), |_| {}).unwrap();
    // Arm the crash only after formatting, so the superblock is intact.
    faults.torn_pages.store(torn_pages, Ordering::SeqCst);
    if let Some(n) = crash_after {
        faults.crash_after_writes.store(n, Ordering::SeqCst);
    }
    let mut appended: HashMap<u64, (Location, usize, u8)> = HashMap::new();
    let mut durable: Vec<u64> = Vec::new();
    let mut pending: Vec<u64> = Vec::new();
    let mut next_id = 1u64;
    for op in ops {
        match op {
            Op::Append { stream, len } => {
                let id = next_id;
                next_id += 1;
                let v = value(id, *len);
                let w = RecordWrite {
                    kind: kind::PUT,
                    key_id: id,
                    version: id * 3,
                    flags: u32::from(*stream),
                    exptime: 0,
                    key: &id.to_le_bytes(),
                    value: &v,
                };
                match flash.append_blocking(*stream, &w, Duration::from_secs(5)) {
                    Ok(loc) => {
                        appended.insert(id, (loc, *len, *stream));
                        pending.push(id);
                    }
                    Err(Error::NoSpace) => {}
                    Err(e) => return Err(TestCaseError::fail(format!("append: {e}"))),
                }
            }
            Op::Flush => {
                flash
                    .flush()
                    .wait()
                    .map_err(|e| TestCaseError::fail(format!("flush: {e}")))?;
                if !faults.crashed.load(Ordering::SeqCst) {
                    durable.append(&mut pending);
                }
            }
        }
    }
    // Crash: take the image without closing (a kill -9 leaves exactly what reached the media).
    let image = mem.image();
    drop(flash);

    let dev: Arc<dyn Device> = Arc::new(MemoryDevice::from_image("mem", image));
    let mut recovered = Vec::new();
    let (flash, info) = Flash::open(vec![dev], manual(), Arc::new(DropAll), |m| {
        recovered.push(m)
    })
    .unwrap();
    prop_assert!(!info.formatted);
    let mut seen = HashMap::new();
    for m in &recovered {
        let Some((loc, len, stream)) = appended.get(&m.key_id) else {
            return Err(TestCaseError::fail(format!(
                "recovered a record never appended: {m:?}"
            )));
        };
        prop_assert_eq!(m.location, *loc);
        prop_assert_eq!(m.version, m.key_id * 3);
        prop_assert_eq!(m.flags, u32::from(*stream));
        let r = flash
            .read(m.location)
            .wait()
            .map_err(|e| TestCaseError::fail(format!("read {m:?}: {e}")))?;
        prop_assert_eq!(&r.value[..], &value(m.key_id, *len)[..]);
        prop_assert_eq!(&r.key[..], &m.key_id.to_le_bytes()[..]);
        prop_assert!(seen.insert(m.key_id, ()).is_none(), "recovered twice");
    }
    for id in &durable {
        prop_assert!(
            seen.contains_key(id),
            "durable record {} lost (of {} durable)",
            id,
            durable.len()
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn clean_reopen_recovers_everything_flushed(ops in proptest::collection::vec(op(), 1..300)) {
        run(&ops, None, 0)?;
    }

    #[test]
    fn crash_with_torn_write_loses_nothing_durable(
        ops in proptest::collection::vec(op(), 1..300),
        crash_after in 0i64..40,
        torn_pages in 0u64..17,
    ) {
        run(&ops, Some(crash_after), torn_pages)?;
    }
}
