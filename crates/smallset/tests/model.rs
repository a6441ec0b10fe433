//! Model test of the small tier: random inserts, removes, `flush_all`s and merges against a
//! `HashMap`, on a small memory device so sets overflow and evict. A lookup may miss a key
//! the model holds (evicted inside its set, or refused for staging room) but must never
//! return another value, and never a removed or cleared key (no resurrection).
use std::collections::HashMap;
use std::sync::Arc;

use flashtier_flash::MemoryDevice;
use flashtier_smallset::{block_on, ItemMeta, SmallConfig, SmallSets, SmallStore};
use proptest::prelude::*;

fn tier(sets: u64) -> SmallSets {
    tier_with_log(sets, 0, 1)
}

/// `sets` sets and `log` log pages (0: no log); `merge_min` is Kangaroo's threshold.
fn tier_with_log(sets: u64, log: u64, merge_min: usize) -> SmallSets {
    // Page 0 is the superblock, page 1 the dirty map (up to 4096 sets), the log last.
    let pages = sets + 2 + log;
    let dev = Arc::new(MemoryDevice::new("small", pages * 4096));
    let cfg = SmallConfig {
        // 500 staged 100-byte puts fit without pressure (entries cost 168 B of RAM beyond key
        // and value since the eleventh sitting, 96 before).
        staging_bytes: 96 << 10,
        batch_sets: 4,
        log_fraction: (log as f64 + 0.5) / (pages - 1) as f64,
        io_lanes: 1,
        log_tag_bits: 16,
        release_memory: None,
        // The smallest merge budget: chunks split by the pages their sets need.
        merge_pages: 4,
        hugepages: false,
        merge_min,
    };
    let t = SmallSets::with_device(dev, cfg).unwrap();
    assert_eq!((u64::from(t.sets()), u64::from(t.log_pages())), (sets, log));
    t
}

fn meta(cas: u64) -> ItemMeta {
    ItemMeta {
        flags: cas as u32,
        exptime: 0,
        stored: 1,
        cas,
    }
}

fn get(t: &SmallSets, key: &[u8]) -> Option<(Vec<u8>, u64)> {
    let l = block_on(t.lookup(key)).unwrap();
    l.item.map(|i| (i.value.to_vec(), i.meta.cas))
}

#[derive(Clone, Debug)]
enum Op {
    Insert(u16, u16),
    Remove(u16),
    Get(u16),
    Merge,
    /// Append what is staged to the log (merging its tail only when it needs room).
    Append,
    Clear,
}

fn ops() -> impl Strategy<Value = Vec<Op>> {
    let op = prop_oneof![
        6 => (0u16..300, 0u16..400).prop_map(|(k, n)| Op::Insert(k, n)),
        3 => (0u16..300).prop_map(Op::Remove),
        6 => (0u16..300).prop_map(Op::Get),
        1 => Just(Op::Merge),
        3 => Just(Op::Append),
        1 => (0u8..40).prop_map(|x| if x == 0 { Op::Clear } else { Op::Merge }),
    ];
    proptest::collection::vec(op, 1..400)
}

fn value(k: u16, n: u16) -> Vec<u8> {
    let mut v = format!("{k}:{n}:").into_bytes();
    v.resize(20 + n as usize % 180, b'x');
    v
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn never_a_wrong_or_removed_value(ops in ops()) {
        check(&tier(8), ops)?;
    }

    /// The same with an on-flash log of 6 pages in front of the sets: lookups go through
    /// the log's index, appends fill it and its merges run when it needs room.
    #[test]
    fn with_a_log_never_a_wrong_or_removed_value(ops in ops()) {
        check(&tier_with_log(8, 6, 1), ops)?;
    }

    /// The same with Kangaroo's threshold at 3: sets gaining fewer new objects drop them.
    #[test]
    fn with_a_log_and_a_threshold_never_a_wrong_or_removed_value(ops in ops()) {
        check(&tier_with_log(8, 6, 3), ops)?;
    }
}

fn check(t: &SmallSets, ops: Vec<Op>) -> Result<(), TestCaseError> {
    {
        let mut model: HashMap<u16, (Vec<u8>, u64)> = HashMap::new();
        let mut cas = 0u64;
        for op in ops {
            match op {
                Op::Insert(k, n) => {
                    cas += 1;
                    let v = value(k, n);
                    if t.insert(k.to_string().as_bytes(), &v, meta(cas)) {
                        model.insert(k, (v, cas));
                    } else {
                        model.remove(&k);
                    }
                }
                Op::Remove(k) => {
                    t.remove(k.to_string().as_bytes());
                    model.remove(&k);
                }
                Op::Get(k) => {
                    let got = get(t, k.to_string().as_bytes());
                    if let Some(g) = got {
                        prop_assert_eq!(Some(&g), model.get(&k), "key {}", k);
                    }
                }
                Op::Merge => t.flush_staged(),
                Op::Append => t.flush_to_log(),
                Op::Clear => {
                    t.clear();
                    model.clear();
                }
            }
        }
        t.flush_staged();
        for k in 0..300u16 {
            if let Some(g) = get(t, k.to_string().as_bytes()) {
                prop_assert_eq!(Some(&g), model.get(&k), "key {} at the end", k);
            }
        }
    }
    Ok(())
}

#[test]
fn without_pressure_everything_merged_is_found_and_misses_read_nothing() {
    let t = tier(256);
    for k in 0..500u32 {
        assert!(t.insert(
            format!("key:{k}").as_bytes(),
            &[k as u8; 100],
            meta(k.into())
        ));
    }
    t.flush_staged();
    for k in 0..500u32 {
        let got = get(&t, format!("key:{k}").as_bytes()).expect("merged key found");
        assert_eq!(got, (vec![k as u8; 100], k.into()));
    }
    for k in 500..2500u32 {
        assert_eq!(get(&t, format!("key:{k}").as_bytes()), None);
    }
    let stats: HashMap<String, String> = t.stats().into_iter().collect();
    let n = |s: &str| stats[s].parse::<u64>().unwrap();
    assert_eq!(n("small_items"), 500);
    assert_eq!(n("small_hits"), 500);
    assert!(n("small_filter_negatives") > 1500, "{stats:?}");
    assert_eq!(n("small_set_filter_bytes"), 256 * 10);
    // 500 items of 100 bytes over 256 sets: each page written once.
    assert!(n("small_page_writes") <= 256);
}

#[test]
fn read_entries_survive_set_overflow() {
    // One set: 30 entries of 100 bytes fill it; keep reading key 0..5 while 200 others pass.
    let t = tier(1);
    let hot: Vec<String> = (0..5).map(|k| format!("hot:{k}")).collect();
    for h in &hot {
        t.insert(h.as_bytes(), &[1; 100], meta(1));
    }
    t.flush_staged();
    for round in 0..20u32 {
        for h in &hot {
            assert!(
                get(&t, h.as_bytes()).is_some(),
                "hot key {h} evicted in round {round}"
            );
        }
        for k in 0..10 {
            t.insert(format!("cold:{round}:{k}").as_bytes(), &[2; 100], meta(2));
        }
        t.flush_staged();
    }
}

#[test]
fn a_removed_key_stays_gone_after_its_page_is_rewritten() {
    let t = tier(1);
    t.insert(b"k", b"old", meta(1));
    t.flush_staged();
    t.remove(b"k");
    assert_eq!(get(&t, b"k"), None, "the staged delete shadows the page");
    t.flush_staged();
    assert_eq!(get(&t, b"k"), None, "the delete reached the page");
    t.insert(b"j", b"x", meta(2));
    t.flush_staged();
    assert_eq!(get(&t, b"k"), None);
    t.insert(b"k", b"new", meta(3));
    assert_eq!(get(&t, b"k"), Some((b"new".to_vec(), 3)));
    t.clear();
    assert_eq!(get(&t, b"k"), None);
    t.flush_staged();
    assert_eq!(
        get(&t, b"j"),
        None,
        "cleared pages are of an old generation"
    );
}

fn stats_of(t: &SmallSets) -> HashMap<String, u64> {
    t.stats()
        .into_iter()
        .filter_map(|(k, v)| v.parse().ok().map(|v| (k, v)))
        .collect()
}

/// With a log: appended items are served from it, its merges carry many objects per set
/// rewrite (grouped by set), and a delete or overwrite of a key whose latest version is in
/// the log shadows it — staged, appended as a tombstone, and merged.
#[test]
fn with_a_log_lookups_read_it_and_merges_group_by_set() {
    let t = tier_with_log(64, 16, 1);
    let k = |i: u32| format!("key:{i}").into_bytes();
    for i in 0..600u32 {
        assert!(t.insert(&k(i), &[i as u8; 100], meta(i.into())));
        if i % 50 == 49 {
            t.flush_to_log();
        }
    }
    t.flush_to_log();
    let s = stats_of(&t);
    assert_eq!(s["small_staged_items"], 0);
    assert!(
        s["small_log_items"] > 0 && s["small_log_merges"] > 0,
        "{s:?}"
    );
    assert_eq!(s["small_log_index_bytes"], 64 * 4 + 16 * 32 * 4);
    for i in 0..600u32 {
        assert_eq!(
            get(&t, &k(i)),
            Some((vec![i as u8; 100], i.into())),
            "key {i}"
        );
    }
    let s = stats_of(&t);
    assert!(s["small_log_hits"] > 0, "{s:?}");
    let per_rewrite = s["small_log_objects_merged"] as f64 / s["small_log_sets_merged"] as f64;
    assert!(
        per_rewrite >= 3.0,
        "{per_rewrite} objects per set rewrite: {s:?}"
    );
    // Deletes and overwrites of keys whose latest version is in the log.
    let in_log: Vec<u32> = (0..600u32).rev().take(60).collect();
    for &i in &in_log {
        if i % 2 == 0 {
            t.remove(&k(i));
        } else {
            assert!(t.insert(&k(i), b"new", meta(9999)));
        }
    }
    let check = |when: &str| {
        for &i in &in_log {
            let want = (i % 2 == 1).then(|| (b"new".to_vec(), 9999));
            assert_eq!(get(&t, &k(i)), want, "key {i} {when}");
        }
    };
    check("staged");
    t.flush_to_log();
    check("in the log");
    t.flush_staged();
    assert_eq!(stats_of(&t)["small_log_items"], 0);
    check("merged");
    assert_eq!(stats_of(&t)["small_items"], 600 - 30);
}

/// Kangaroo's threshold: a set gaining fewer new objects than it is not rewritten (they
/// are dropped), but never when dropping could uncover an older version.
#[test]
fn the_threshold_drops_small_gains_but_never_uncovers_an_older_version() {
    let t = tier_with_log(64, 8, 4);
    let k = |i: u32| format!("key:{i}").into_bytes();
    // Old versions on pages (~8 a set: most sets gain enough), then newer versions and
    // deletes of a few through the log: keys on pages must be rewritten, never dropped.
    for i in 0..512u32 {
        assert!(t.insert(&k(i), b"old", meta(1)));
    }
    t.flush_staged();
    let present: Vec<u32> = (0..512u32).filter(|&i| get(&t, &k(i)).is_some()).collect();
    assert!(present.len() > 300, "{} of 512 on pages", present.len());
    for i in 0..64u32 {
        assert!(t.insert(&k(i), b"new", meta(2)));
        t.remove(&k(i + 64));
    }
    t.flush_staged();
    for &i in present.iter().filter(|&&i| i < 128) {
        let want = (i < 64).then(|| (b"new".to_vec(), 2));
        assert_eq!(get(&t, &k(i)), want, "key {i}");
    }
    for i in 0..128u32 {
        assert_ne!(get(&t, &k(i)), Some((b"old".to_vec(), 1)), "key {i}");
    }
    // Fresh keys, few per set: dropped, so misses (never wrong).
    for i in 1000..1040u32 {
        assert!(t.insert(&k(i), b"x", meta(3)));
    }
    t.flush_staged();
    assert!(stats_of(&t)["small_log_dropped"] > 0);
    for i in 1000..1040u32 {
        if let Some(g) = get(&t, &k(i)) {
            assert_eq!(g, (b"x".to_vec(), 3));
        }
    }
}
