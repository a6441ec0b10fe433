//! Unit tests of `writer`: the write path driven on an engine core alone (`test_core`).
use super::*;
use crate::segments::SegState;
use crate::test_core::{core, put, small, stat};

#[test]
fn an_append_stays_in_its_chunk_until_a_flush_writes_and_syncs_it() {
    let c = core(1, small());
    let inner = &c.inner;
    let loc = inner.append(0, &put(b"k", 1, b"one")).unwrap();
    {
        let state = inner.state.lock();
        let st = state.writes.stream(0).unwrap();
        let seg = st.seg().unwrap();
        assert_eq!(st.pending_chunk(), Some(seg));
        let info = state.segments.get(seg).unwrap();
        assert_eq!((info.state, info.records), (SegState::Open(0), 1));
    }
    assert_eq!(
        stat(inner, "device_bytes_written"),
        0,
        "nothing written yet"
    );
    inner.flush().wait().unwrap();
    assert_eq!(stat(inner, "device_bytes_written"), 4096, "one padded page");
    assert_eq!(stat(inner, "flushes"), 1);
    {
        let state = inner.state.lock();
        assert!(
            state.health.unsynced().is_empty(),
            "the flush synced the device"
        );
        assert_eq!(state.writes.stream(0).unwrap().pending_chunk(), None);
    }
    assert_eq!(&inner.read(loc).wait().unwrap().value[..], b"one");
    assert!(matches!(
        inner.append(9, &put(b"k", 1, b"x")),
        Err(Error::Config(_))
    ));
}

#[test]
fn a_full_segment_is_sealed_with_its_summary_and_the_next_one_opened() {
    let c = core(1, small());
    let inner = &c.inner;
    let value = vec![5u8; 16 << 10];
    let wait = std::time::Duration::from_secs(10);
    let locs: Vec<Location> = (0..20)
        .map(|i| {
            inner
                .append_wait(0, &put(b"k", i, &value), None, wait)
                .unwrap()
        })
        .collect();
    inner.flush().wait().unwrap();
    let state = inner.state.lock();
    let first = inner.split(locs[0].byte_addr()).0;
    let info = state.segments.get(first).unwrap();
    assert_eq!(info.state, SegState::Sealed);
    assert!(info.has_summary);
    assert_eq!(info.order, 1, "the first seal's stamp");
    let open = state.writes.stream(0).unwrap().seg().unwrap();
    assert_ne!(open, first);
    let records: u32 = state.segments.iter().map(|s| s.records).sum();
    assert_eq!(records, 20);
    drop(state);
    for (i, loc) in locs.iter().enumerate() {
        let rec = inner.read(*loc).wait().unwrap();
        assert_eq!(
            (rec.header.key_id, rec.value.len()),
            (i as u64, value.len())
        );
    }
}

#[test]
fn a_failed_chunk_write_loses_its_records_and_takes_the_device_out() {
    let c = core(1, small());
    let inner = &c.inner;
    c.faults[0]
        .write_eio
        .store(true, std::sync::atomic::Ordering::SeqCst);
    let loc = inner.append(0, &put(b"k", 1, b"a")).unwrap();
    inner.append(0, &put(b"k", 2, b"b")).unwrap();
    assert!(
        inner.flush().wait().is_err(),
        "the flush reports the failed write"
    );
    // Once; this flush also waits for the summary of the segment the failure sealed.
    assert!(inner.flush().wait().is_ok(), "once");
    // Each write is tried WRITE_ATTEMPTS times: the chunk, then that summary.
    assert_eq!(
        stat(inner, "write_retries"),
        2 * u64::from(WRITE_ATTEMPTS - 1)
    );
    assert_eq!(stat(inner, "chunks_lost"), 1);
    assert_eq!(stat(inner, "records_lost"), 2);
    let mut state = inner.state.lock();
    assert!(state.health.all_out());
    let lost = state.writes.take_lost();
    let keys: Vec<u64> = lost.iter().map(|l| l.meta.key_id).collect();
    assert_eq!(keys, [1, 2]);
    assert!(
        lost.iter().all(|l| l.record.is_some()),
        "with their content"
    );
    assert_eq!(state.writes.lost_total(), 2);
    let seg = inner.split(loc.byte_addr()).0;
    let info = state.segments.get(seg).unwrap();
    assert_eq!((info.records, info.dead), (2, 2));
    assert_eq!(
        info.state,
        SegState::Sealed,
        "a failing device's open segment is sealed"
    );
    assert!(!info.has_summary, "its summary write failed too");
    drop(state);
    assert!(matches!(
        inner.append(0, &put(b"k", 3, b"c")),
        Err(Error::DeviceFailed(_))
    ));
}

#[test]
fn mark_dead_counts_each_record_once() {
    let c = core(1, small());
    let inner = &c.inner;
    let loc = inner.append(0, &put(b"k", 1, b"a")).unwrap();
    inner.mark_dead(loc);
    inner.mark_dead(loc);
    let state = inner.state.lock();
    let info = state.segments.get(inner.split(loc.byte_addr()).0).unwrap();
    assert_eq!((info.records, info.dead), (1, 1));
    drop(state);
    // A location in a free segment counts nothing.
    inner.mark_dead(Location::new(5 * inner.seg_size + 64, 100).unwrap());
    assert_eq!(inner.state.lock().segments.get(5).unwrap().dead, 0);
}

/// A sealed segment's summary names records recovery and reclaim then take without reading
/// them, so it must never reach the device before them. Here the segment's first chunk
/// write is slow (held back) while its later chunks and the seal go through: the summary
/// stays off the device until that write completes (and a sync covers it), and a flush
/// still waits for the summary. (The summary used to be written at the seal, beside the
/// last chunk: a crash image could hold a summary naming bytes that were not there, and a
/// block cache read its dirty block as an I/O error after the restart; see
/// docs/block-cache.md, "Eighth sitting".)
#[test]
fn a_summary_reaches_the_device_only_after_the_records_it_names() {
    use crate::format::segment::{decode_summary, Footer, FOOTER_LEN};
    use std::sync::atomic::Ordering::SeqCst;
    let c = core(1, small());
    let inner = &c.inner;
    let value = vec![5u8; 16 << 10];
    let wait = std::time::Duration::from_secs(10);
    let first = inner
        .append_wait(0, &put(b"k", 0, &value), None, wait)
        .unwrap();
    let seg = inner.split(first.byte_addr()).0;
    let (dev_off, seed) = {
        let state = inner.state.lock();
        let info = state.segments.get(seg).unwrap();
        (info.dev_off, info.seed)
    };
    // The first chunk (header page and first records) waits on its executor thread, until
    // released below or (a failed assertion) when `_held` drops, before the core does.
    c.faults[0].hold_writes_at.store(dev_off, SeqCst);
    let _held = Release(&c.faults[0]);
    let mut keys = 1;
    while inner
        .split(
            inner
                .append_wait(0, &put(b"k", keys, &value), None, wait)
                .unwrap()
                .byte_addr(),
        )
        .0
        == seg
    {
        keys += 1;
    }
    let footer = || {
        let img = c.mem[0].image();
        let end = (dev_off + inner.seg_size) as usize;
        Footer::decode(&img[end - FOOTER_LEN..end], seed).map(|f| {
            let so = dev_off as usize + f.summary_offset as usize;
            decode_summary(&img[so..end], &f, seed).map(|e| e.len())
        })
    };
    // Every other write of the segment completes; the summary must not follow them.
    let deadline = std::time::Instant::now() + std::time::Duration::from_millis(300);
    while std::time::Instant::now() < deadline {
        assert_eq!(
            footer(),
            None,
            "a summary on the device before its first records"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    {
        let state = inner.state.lock();
        let info = state.segments.get(seg).unwrap();
        assert_eq!(info.state, SegState::Sealed);
        assert!(
            info.tail_pending && !info.has_summary,
            "sealed, summary held"
        );
    }
    assert_eq!(stat(inner, "seal_syncs"), 0);
    // A flush started now waits for the slow chunk, the sync and the summary.
    let flush = inner.flush();
    c.faults[0].hold_writes_at.store(u64::MAX, SeqCst);
    flush.wait().unwrap();
    assert_eq!(
        footer(),
        Some(Some(keys as usize)),
        "every record of the segment"
    );
    assert_eq!(stat(inner, "seal_syncs"), 1);
    let state = inner.state.lock();
    let info = state.segments.get(seg).unwrap();
    assert!(info.has_summary && !info.tail_pending);
}

/// Sets `hold_writes_at` back to none when dropped.
struct Release<'a>(&'a crate::io::faulty::Faults);

impl Drop for Release<'_> {
    fn drop(&mut self) {
        self.0
            .hold_writes_at
            .store(u64::MAX, std::sync::atomic::Ordering::SeqCst);
    }
}
