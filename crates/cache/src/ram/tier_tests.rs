//! Unit tests of `ram::tier` on a RAM tier alone (`ram::testing::Rig`): the write path, the
//! removals and the copies from below.
use std::sync::atomic::Ordering::Relaxed;

use super::*;
use crate::ram::record::{F_FILLER, HOME_OLDER, HOME_VALID};
use crate::ram::testing::{Answer, FakeLower, Rig};

fn lower_header(home: u64) -> Header {
    Header {
        cas: 5,
        exptime: 0,
        flags: 0,
        vlen: 1,
        stored: 1,
        last_access: 1,
        klen: 1,
        rflags: F_FETCHED,
        home,
    }
}

#[test]
fn publish_replaces_the_old_version_and_accounts_for_it() {
    let rig = Rig::new(4, FakeLower::new(false, Answer::Drop));
    let first = rig.set(b"k", b"one", 0);
    let second = rig.set(b"k", b"two!", 0);
    assert_ne!(first, second);
    assert_eq!(rig.get(b"k").as_deref(), Some(&b"two!"[..]));
    assert_eq!(rig.slots.len(), 1);
    assert_eq!(rig.count(|c| &c.total_items), 2);
    let words = record::rec_words(1, 4);
    assert_eq!(rig.count(|c| &c.live_bytes), (words * 8) as u64);
    let (seg, _) = rig.ram.arena.split(second);
    assert_eq!(
        rig.ram.arena.slot(seg).live.load(Relaxed),
        words as u64,
        "the old version's words are no longer live"
    );
    assert!(
        rig.lower.forgotten.lock().is_empty(),
        "nothing below to forget"
    );
}

#[test]
fn a_version_leaving_takes_its_lower_copy_along() {
    let rig = Rig::new(4, FakeLower::new(true, Answer::Slot));
    let loc = rig.set(b"k", b"v", 0);
    rig.ram.record(loc).unwrap().set_home(HOME_VALID | 77);
    rig.set(b"k", b"w", 0);
    assert_eq!(*rig.lower.forgotten.lock(), vec![77]);
}

#[test]
fn abandoned_space_becomes_a_filler_and_nothing_is_published() {
    let rig = Rig::new(4, FakeLower::new(false, Answer::Drop));
    let space = rig
        .ram
        .reserve(
            &rig.env(),
            Log::Small,
            10,
            crate::ram::evict::OnLater::KeepOrDrop,
        )
        .unwrap();
    let (seg, off) = (space.seg, space.off);
    assert_eq!(rig.ram.arena.slot(seg).pending.load(Relaxed), 1);
    rig.ram.abandon(Some(space));
    assert_eq!(rig.ram.arena.slot(seg).pending.load(Relaxed), 0);
    let filler = rig.ram.arena.record_at(seg, off).unwrap().header;
    assert_ne!(filler.rflags & F_FILLER, 0);
    assert_eq!(filler.words(), 10);
    assert_eq!(rig.slots.len(), 0);
    assert_eq!(rig.count(|c| &c.live_bytes), 0);
}

#[test]
fn a_later_copy_from_below_is_published_over_the_same_lower_slot_only() {
    let rig = Rig::new(4, FakeLower::new(true, Answer::Slot));
    let hash = rig.slots.hash(b"k");
    let below = Entry {
        tier: Tier::Flash,
        freq: 2,
        size_hint: 3,
        loc: 99,
    };
    rig.slots.lock(hash).insert(hash, below);
    let h = lower_header(HOME_VALID | below.lower_loc());
    let env = rig.env();
    let other = below.lower_loc() + 1;
    assert_eq!(
        rig.ram.copy_up_later(&env, hash, other, b"k", &h, b"v"),
        CopyUp::Abandoned,
        "the slot is no longer the lower slot that was read"
    );
    assert_eq!(rig.slot(b"k"), Some(below));
    assert_eq!(
        rig.ram
            .copy_up_later(&env, hash, below.lower_loc(), b"k", &h, b"v"),
        CopyUp::Done
    );
    let e = rig.slot(b"k").unwrap();
    assert_eq!((e.tier, e.freq), (Tier::Ram, 0));
    assert_eq!(rig.get(b"k").as_deref(), Some(&b"v"[..]));
    let copy = rig.ram.record(e.loc).unwrap().header;
    assert_eq!(copy.home, h.home, "the copy's home is the lower copy");
    assert_eq!(rig.slots.len(), 1);
    assert_eq!(rig.count(|c| &c.total_items), 0, "a copy is not a new item");
}

#[test]
fn a_copy_under_the_lock_takes_only_the_open_segments_room() {
    let rig = Rig::new(4, FakeLower::new(true, Answer::Slot));
    let hash = rig.slots.hash(b"k");
    let below = Entry {
        tier: Tier::Flash,
        freq: 1,
        size_hint: 0,
        loc: 5,
    };
    rig.slots.lock(hash).insert(hash, below);
    let h = lower_header(HOME_VALID | 5);
    let env = rig.env();
    let copy_now = || {
        let mut shard = rig.slots.lock(hash);
        let (pos, _) = shard.find(hash, |e| e.tier == Tier::Flash).unwrap();
        rig.ram.copy_up_now(&env, &mut shard, pos, b"k", &h, b"v")
    };
    assert_eq!(copy_now(), CopyUp::NoRoom, "no open segment yet");
    assert_eq!(rig.ram.mem_used(), 0, "nothing allocated under the lock");
    rig.set(b"other", b"x", 0);
    assert_eq!(copy_now(), CopyUp::Done);
    assert_eq!(rig.slot(b"k").unwrap().tier, Tier::Ram);
}

#[test]
fn a_dead_item_removed_covers_an_older_version_below() {
    let rig = Rig::new(4, FakeLower::new(true, Answer::Slot));
    let now = rig.meta.now();
    // Died before reaching the tier below, over an older version there.
    let a = rig.set(b"a", b"v", now + 1);
    rig.ram.record(a).unwrap().set_home(HOME_OLDER);
    // Expired with a copy below: the copy is forgotten, expiry needs no cover.
    let b = rig.set(b"b", b"v", now + 1);
    rig.ram.record(b).unwrap().set_home(HOME_VALID | 5);
    rig.clock.advance(2);
    let env = rig.env();
    for k in [&b"a"[..], &b"b"[..]] {
        let hash = rig.slots.hash(k);
        let mut shard = rig.slots.lock(hash);
        let (pos, e) = rig.ram.find_key(&shard, hash, k).unwrap();
        let h = rig.ram.record(e.loc).unwrap().header;
        assert!(rig.meta.dead_at(h.exptime, h.stored, rig.meta.now()));
        rig.ram.reclaim(&env, &mut shard, pos, &h, hash);
    }
    assert_eq!(*rig.lower.covered.lock(), vec![rig.slots.hash(b"a")]);
    assert_eq!(*rig.lower.forgotten.lock(), vec![5]);
    assert_eq!(rig.count(|c| &c.reclaimed), 2);
    assert_eq!(rig.count(|c| &c.expired_unfetched), 2);
    assert_eq!(rig.slots.len(), 0);
    assert_eq!(rig.count(|c| &c.live_bytes), 0);
}

#[test]
fn a_same_size_overwrite_is_written_in_place_and_costs_no_space() {
    let rig = Rig::new(4, FakeLower::new(true, Answer::Slot));
    let loc = rig.set(b"k", b"value-1", 0);
    rig.ram.record(loc).unwrap().set_home(HOME_VALID | 9);
    rig.hit(b"k");
    let head = rig.ram.arena.head(Log::Small);
    let live = rig.count(|c| &c.live_bytes);
    assert!(rig.rewrite(b"k", b"value-2", 0), "same record size");
    assert_eq!(rig.get(b"k").as_deref(), Some(&b"value-2"[..]));
    let e = rig.slot(b"k").unwrap();
    assert_eq!((e.loc, e.freq), (loc, 1), "same place, same frequency");
    assert_eq!(rig.ram.arena.head(Log::Small), head, "no space taken");
    assert_eq!(rig.count(|c| &c.live_bytes), live);
    let (seg, _) = rig.ram.arena.split(loc);
    assert_eq!(rig.ram.arena.slot(seg).live.load(Relaxed), live / 8);
    assert_eq!(rig.count(|c| &c.total_items), 2);
    assert_eq!(rig.count(|c| &c.rewritten_in_place), 1);
    assert_eq!(
        *rig.lower.forgotten.lock(),
        vec![9],
        "the old version's lower copy is dead"
    );
    assert_eq!(rig.ram.record(loc).unwrap().header.home, 0);
    // A record of another size is not written in place.
    assert!(!rig.rewrite(b"k", b"a longer value", 0));
    assert!(!rig.rewrite(b"absent", b"value-3", 0));
    assert_eq!(rig.get(b"k").as_deref(), Some(&b"value-2"[..]));
}

#[test]
fn overwrites_in_place_keep_every_item_of_a_nearly_full_tier() {
    let rig = Rig::new(8, FakeLower::new(false, Answer::Drop));
    let value = [1u8; 1000];
    let per_seg = crate::ram::testing::SEG / 8 / record::rec_words(9, value.len());
    // 7 of the 8 segments' worth of items, then every item overwritten five times.
    let n = 7 * per_seg - 2;
    for i in 0..n {
        rig.set(&crate::ram::testing::key(i), &value, 0);
    }
    let used = rig.ram.mem_used();
    for round in 2..7u8 {
        for i in 0..n {
            let v = [round; 1000];
            assert!(rig.rewrite(&crate::ram::testing::key(i), &v, 0));
        }
    }
    assert_eq!(rig.count(|c| &c.evictions), 0);
    assert_eq!(rig.slots.len() as usize, n);
    assert_eq!(rig.ram.mem_used(), used);
    assert!(
        (0..n).all(|i| rig.get(&crate::ram::testing::key(i)).as_deref() == Some(&[6u8; 1000][..]))
    );
}
