//! Unit tests of `arena`.
use super::*;

#[test]
fn bump_seal_and_budget() {
    let a = Arena::new(4 << 16, 1 << 16);
    let mut alloc = a.state.lock();
    assert!(a.try_bump(Log::Small, 4).is_none());
    let s = a.take_normal(&mut alloc, 1).unwrap();
    a.install_head(Log::Small, s).unwrap();
    let sp = a.try_bump(Log::Small, 4).unwrap();
    assert_eq!((sp.seg, sp.off), (s, 0));
    assert_eq!(a.try_bump(Log::Small, 6).unwrap().off, 4);
    assert!(a.try_bump(Log::Small, a.seg_words).is_none());
    assert!(a.seal_head(&mut alloc, Log::Small, Some(s)));
    assert_eq!(a.slot(s).end.load(Ordering::Relaxed), 10);
    assert_eq!(alloc.queues[0].len(), 1);
    // Budget: 4 chunks, reserve 1 → 2 more can be taken.
    assert!(a.take_normal(&mut alloc, 1).is_some());
    assert!(a.take_normal(&mut alloc, 1).is_some());
    assert!(a.take_normal(&mut alloc, 1).is_none());
    assert_eq!(a.mem_used(), 3 << 16);
    let (seg, off) = a.split(a.loc(7, 123));
    assert_eq!((seg, off), (7, 123));
}

#[test]
fn large_segments_span_chunks_and_recycle_them() {
    let a = Arena::new(4 << 16, 1 << 16);
    let mut alloc = a.state.lock();
    let words = a.seg_words * 2 + 10;
    assert_eq!(a.available(&alloc, false), 4);
    let sp = a.take_large(&mut alloc, words, Log::Small).unwrap();
    assert_eq!(a.available(&alloc, false), 1);
    let key = b"big";
    let value: Vec<u8> = (0..(words - 5) * 8).map(|i| i as u8).collect();
    let h = Header {
        cas: 1,
        exptime: 0,
        flags: 0,
        vlen: value.len() as u32,
        stored: 0,
        last_access: 0,
        klen: 3,
        rflags: 0,
        home: 0,
    };
    assert!(a.write_record(&sp, &h, key, &value));
    assert_eq!(&a.read_value(sp.seg, 0, &h)[..], &value[..]);
    a.finish(sp);
    a.free_large(&mut alloc, sp.seg);
    assert_eq!(a.available(&alloc, false), 4);
    assert_eq!(a.mem_used(), 3 << 16, "chunks stay allocated for reuse");
    // A record larger than the whole limit may use the spare chunk.
    assert!(a
        .take_large(&mut alloc, a.seg_words * 4 + 1, Log::Small)
        .is_some());
}

#[test]
fn limit_changes_at_run_time() {
    let a = Arena::new(4 << 16, 1 << 16);
    assert!(!a.set_limit(1 << 16), "below two chunks");
    assert!(!a.set_limit(a.max_limit() + (1 << 16)));
    assert_eq!(
        a.max_limit(),
        MAX_LIMIT as u64 + ((SLOT_PAGE as u64 - 1) << 16)
    );
    let mut alloc = a.state.lock();
    let held: Vec<u32> = (0..4)
        .filter_map(|_| a.take_normal(&mut alloc, 0))
        .collect();
    assert_eq!(held.len(), 4);
    assert!(a.take_normal(&mut alloc, 0).is_none());
    drop(alloc);
    // Raising: more chunks, on pages created as needed.
    assert!(a.set_limit(3000 << 16));
    let mut alloc = a.state.lock();
    let more: Vec<u32> = (0..2996)
        .filter_map(|_| a.take_normal(&mut alloc, 0))
        .collect();
    assert_eq!(more.len(), 2996);
    assert!(a.take_normal(&mut alloc, 0).is_none());
    assert_eq!(a.mem_used(), 3000 << 16);
    assert!(a.slot(2999).mem.get().is_some());
    for &s in &more[..1000] {
        a.release_normal(&mut alloc, s);
    }
    drop(alloc);
    // Lowering: free chunks are parked at once, freed ones while over the limit.
    assert!(a.set_limit(1000 << 16));
    assert_eq!(a.limit(), 1000 << 16);
    assert_eq!(a.mem_used(), 2000 << 16);
    let mut alloc = a.state.lock();
    assert!(a.take_normal(&mut alloc, 0).is_none());
    assert_eq!(a.available(&alloc, false), 0);
    for &s in &more[1000..2500] {
        a.release_normal(&mut alloc, s);
    }
    assert_eq!(a.mem_used(), 1000 << 16);
    assert_eq!(
        a.free_count(&alloc),
        500,
        "the rest is within the limit again"
    );
    assert_eq!(a.available(&alloc, false), 500);
    drop(alloc);
    // Raising again reuses parked chunks before allocating.
    assert!(a.set_limit(2000 << 16));
    let mut alloc = a.state.lock();
    assert_eq!(a.available(&alloc, false), 1500);
    let again: Vec<u32> = (0..1500)
        .filter_map(|_| a.take_normal(&mut alloc, 0))
        .collect();
    assert_eq!(again.len(), 1500);
    assert!(
        again.iter().all(|&s| s < 3000),
        "no new chunk was allocated"
    );
    assert_eq!(a.mem_used(), 2000 << 16);
}
