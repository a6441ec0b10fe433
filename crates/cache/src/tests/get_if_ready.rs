//! `KvStore::get_if_ready`: a key with a RAM record is answered under one lookup, exactly as
//! `get` answers it (value, access recorded, a dead record a miss); any other key is left to
//! `get`, with `read_may_wait`'s hint.
use bytes::Bytes;

use crate::{Cache, GetNow, ItemWrite, KvStore};

fn open() -> Cache {
    super::loaded_flash_cache("get_if_ready")
}

#[test]
fn ram_hit_is_answered_and_recorded() {
    let c = open();
    let GetNow::Done(Some(first)) = KvStore::get_if_ready(&c, b"k399") else {
        panic!("the newest key is in RAM");
    };
    assert_eq!(first.value, Bytes::from(vec![399u32 as u8; 2000]));
    assert!(!first.meta.fetched, "meta is the state before this access");
    let GetNow::Done(Some(again)) = KvStore::get_if_ready(&c, b"k399") else {
        panic!("still in RAM");
    };
    assert!(again.meta.fetched, "the first answer recorded the access");
    assert_eq!(again.cas, first.cas);
}

#[test]
fn flash_only_and_absent_keys_are_left_to_get() {
    let c = open();
    assert_eq!(KvStore::get_if_ready(&c, b"k0"), GetNow::MayWait);
    assert_eq!(
        c.get_now(b"k0").unwrap().unwrap().value,
        Bytes::from(vec![0u8; 2000])
    );
    assert_eq!(KvStore::get_if_ready(&c, b"absent"), GetNow::Run);
}

#[test]
fn never_an_older_value_or_a_deleted_key() {
    let c = open();
    let new = Bytes::from_static(b"new");
    c.set_now(b"k399", ItemWrite::new(new.clone(), 0, 0))
        .unwrap();
    match KvStore::get_if_ready(&c, b"k399") {
        GetNow::Done(Some(it)) => assert_eq!(it.value, new),
        other => panic!("overwritten key in RAM: {other:?}"),
    }
    assert!(c.delete_now(b"k399"));
    assert!(!matches!(
        KvStore::get_if_ready(&c, b"k399"),
        GetNow::Done(Some(_))
    ));
    assert!(c.get_now(b"k399").unwrap().is_none());
}

#[test]
fn dead_ram_record_is_a_miss_and_gone() {
    let c = open();
    let clock = KvStore::clock(&c).clone();
    let exp = clock.now() + 10;
    let v = Bytes::from_static(b"soon gone");
    c.set_now(b"short", ItemWrite::new(v, 0, exp)).unwrap();
    assert!(matches!(
        KvStore::get_if_ready(&c, b"short"),
        GetNow::Done(Some(_))
    ));
    clock.advance(11);
    assert_eq!(KvStore::get_if_ready(&c, b"short"), GetNow::Done(None));
    assert_eq!(KvStore::get_if_ready(&c, b"short"), GetNow::Run);
    assert!(c.get_now(b"short").unwrap().is_none());
}
