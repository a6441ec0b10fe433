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
    // Page 0 is the superblock, page 1 the dirty map (up to 4096 sets).
    let dev = Arc::new(MemoryDevice::new("small", (sets + 2) * 4096));
    let cfg = SmallConfig {
        staging_bytes: 64 << 10,
        batch_sets: 4,
    };
    SmallSets::with_device(dev, cfg).unwrap()
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
    Clear,
}

fn ops() -> impl Strategy<Value = Vec<Op>> {
    let op = prop_oneof![
        6 => (0u16..300, 0u16..400).prop_map(|(k, n)| Op::Insert(k, n)),
        3 => (0u16..300).prop_map(Op::Remove),
        6 => (0u16..300).prop_map(Op::Get),
        1 => Just(Op::Merge),
        1 => (0u8..20).prop_map(|_| Op::Merge),
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
        let t = tier(8);
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
                    let got = get(&t, k.to_string().as_bytes());
                    if let Some(g) = got {
                        prop_assert_eq!(Some(&g), model.get(&k), "key {}", k);
                    }
                }
                Op::Merge => t.flush_staged(),
                Op::Clear => {
                    t.clear();
                    model.clear();
                }
            }
        }
        t.flush_staged();
        for k in 0..300u16 {
            if let Some(g) = get(&t, k.to_string().as_bytes()) {
                prop_assert_eq!(Some(&g), model.get(&k), "key {} at the end", k);
            }
        }
    }
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
    assert_eq!(n("small_set_filter_bytes"), 256 * 20);
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
