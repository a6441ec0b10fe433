//! GET misses are counted by how the key last left (`get_misses_*`, the departure ledger):
//! keys flash reclaim dropped count as reclaimed (old or young), a key never stored as
//! unknown, and a key stored again after its drop is a hit, not a miss.
mod common;

use std::sync::Arc;

use flashtier_cache::flash::{Device, MemoryDevice};
use flashtier_cache::{Cache, ItemWrite, KvStore};

const N: u64 = 600;

fn open() -> Cache {
    let d: Arc<dyn Device> = Arc::new(MemoryDevice::new("misses", 16 << 20));
    let engine = common::foreground_engine();
    let cfg = common::small_flash_config(d, engine)
        .sweep_interval(None)
        .build()
        .unwrap();
    Cache::new(cfg).unwrap()
}

use common::ext_stat as ext;

fn get(c: &Cache, key: &str) -> bool {
    c.get_now(key.as_bytes()).unwrap().is_some()
}

#[test]
fn misses_are_split_by_how_the_key_left() {
    let c = open();
    // Reclaim drops every unread item it visits: some keys leave by flash reclaim.
    c.set_knob("drop_unread", "1").unwrap();
    for i in 0..N {
        let w = ItemWrite::new(common::value(i, 2000), 0, 0);
        c.set_now(format!("k{i}").as_bytes(), w).unwrap();
    }
    c.flash().unwrap().flush().wait().unwrap();
    assert!(c.flash().unwrap().reclaim_now(true).unwrap() >= 1);
    let evicted = ext(&c, "extstore_objects_evicted");
    assert!(evicted > 0, "reclaim dropped nothing");

    let missed: Vec<u64> = (0..N).filter(|i| !get(&c, &format!("k{i}"))).collect();
    assert_eq!(missed.len() as u64, evicted);
    let reclaimed = ext(&c, "get_misses_reclaimed_old") + ext(&c, "get_misses_reclaimed_young");
    let unknown = ext(&c, "get_misses_unknown");
    assert_eq!(reclaimed + unknown, evicted, "every miss counted once");
    // A direct-mapped ledger of 2048 entries: a few dropped keys may share a slot.
    assert!(
        reclaimed * 10 >= evicted * 9,
        "{reclaimed} of {evicted} misses traced to reclaim"
    );
    for name in [
        "get_misses_ram_evicted",
        "get_misses_lost",
        "get_misses_expired",
    ] {
        assert_eq!(ext(&c, name), 0, "{name}");
    }

    // A key never stored is unknown; a dropped key stored again hits.
    assert!(!get(&c, "never-stored"));
    assert_eq!(ext(&c, "get_misses_unknown"), unknown + 1);
    let again = format!("k{}", missed[0]);
    c.set_now(again.as_bytes(), ItemWrite::new(common::value(1, 10), 0, 0))
        .unwrap();
    assert!(get(&c, &again));
    assert_eq!(
        ext(&c, "get_misses_reclaimed_old") + ext(&c, "get_misses_reclaimed_young"),
        reclaimed
    );
}
