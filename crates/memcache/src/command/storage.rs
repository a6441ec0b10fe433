//! `set add replace append prepend cas`, and the store decision shared with `ms`.
//!
//! The decision follows memcached's `do_store_item`: the CAS comparison is made up front
//! (none / match / stale / bad value), then each mode decides. Append and prepend keep the
//! old item's flags and exptime; an `ms` with `I` may store over a newer CAS as a stale item.
use bytes::{Bytes, BytesMut};
use flashtier_cache::{CasMode, Item, ItemMeta, ItemWrite, KvStore, Update};

use super::exptime;
use crate::context::Context;
use crate::output::Output;
use crate::reply;
use crate::request::{Storage, StoreMode};
use crate::stats::Stats;

/// The outcome of a storage command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stored {
    Stored,
    NotStored,
    Exists,
    NotFound,
}

/// The item a storage command offers.
#[derive(Clone, Debug)]
pub struct Offer {
    pub value: Bytes,
    pub flags: u32,
    /// Absolute unix seconds (0 = never).
    pub exptime: u32,
    /// CAS to compare (0 = none).
    pub compare: u64,
    /// `ms ... I` in CAS mode: accept an older CAS and store the item as stale.
    pub set_stale: bool,
    /// CAS is disabled (memcached -C): any compare value matches an existing item.
    pub any_cas: bool,
}

/// Decide what `mode` does to `current` (memcached `do_store_item`).
pub fn decide(
    mode: StoreMode,
    current: Option<&Item>,
    offer: &Offer,
    max_item_size: usize,
) -> (Update, Stored) {
    let fresh = || ItemWrite::new(offer.value.clone(), offer.flags, offer.exptime);
    let Some(old) = current else {
        return match mode {
            StoreMode::Set | StoreMode::Add => (Update::Put(fresh()), Stored::Stored),
            StoreMode::Cas => (Update::Keep, Stored::NotFound),
            StoreMode::Replace | StoreMode::Append | StoreMode::Prepend => {
                (Update::Keep, Stored::NotStored)
            }
        };
    };
    #[derive(PartialEq)]
    enum CasCheck {
        None,
        Match,
        Stale,
        Bad,
    }
    let check = if offer.compare == 0 {
        CasCheck::None
    } else if offer.any_cas || offer.compare == old.cas {
        CasCheck::Match
    } else if offer.set_stale && offer.compare < old.cas {
        CasCheck::Stale
    } else {
        CasCheck::Bad
    };
    match mode {
        StoreMode::Add => (Update::Keep, Stored::NotStored),
        StoreMode::Set | StoreMode::Replace => (Update::Put(fresh()), Stored::Stored),
        StoreMode::Cas => match check {
            CasCheck::Match => (Update::Put(fresh()), Stored::Stored),
            CasCheck::Stale => {
                let mut w = fresh();
                w.exptime = old.exptime;
                w.meta = ItemMeta {
                    stale: true,
                    win_token_sent: old.meta.win_token_sent,
                    ..ItemMeta::default()
                };
                (Update::Put(w), Stored::Stored)
            }
            CasCheck::None | CasCheck::Bad => (Update::Keep, Stored::Exists),
        },
        StoreMode::Append | StoreMode::Prepend => {
            if check != CasCheck::None && check != CasCheck::Match {
                return (Update::Keep, Stored::Exists);
            }
            let len = old.value.len() + offer.value.len();
            if len > max_item_size {
                return (Update::Keep, Stored::NotStored);
            }
            let mut joined = BytesMut::with_capacity(len);
            if mode == StoreMode::Append {
                joined.extend_from_slice(&old.value);
                joined.extend_from_slice(&offer.value);
            } else {
                joined.extend_from_slice(&offer.value);
                joined.extend_from_slice(&old.value);
            }
            let w = ItemWrite {
                value: joined.freeze(),
                flags: old.flags,
                exptime: old.exptime,
                cas: CasMode::New,
                meta: ItemMeta::default(),
            };
            (Update::Put(w), Stored::Stored)
        }
    }
}

/// Count a storage outcome in the CAS counters.
pub(crate) fn count_cas<S>(ctx: &Context<S>, mode: StoreMode, result: Stored) {
    if mode != StoreMode::Cas {
        return;
    }
    let s = &ctx.stats;
    match result {
        Stored::Stored => Stats::incr(&s.cas_hits),
        Stored::Exists => Stats::incr(&s.cas_badval),
        Stored::NotFound => Stats::incr(&s.cas_misses),
        Stored::NotStored => {}
    }
}

/// Run a text storage command.
pub async fn run<S: KvStore>(ctx: &Context<S>, req: Storage, out: &mut Output) {
    Stats::incr(&ctx.stats.cmd_set);
    let store = &ctx.store;
    let now = store.clock().now();
    let offer = Offer {
        value: req.value,
        flags: req.flags,
        exptime: exptime::absolute(req.exptime, now),
        compare: req.cas,
        set_stale: false,
        any_cas: !ctx.settings.cas_enabled,
    };
    ctx.detail.record(
        &req.key,
        ctx.settings.detail_delimiter,
        crate::detail::Event::Set,
    );
    let result = if req.mode == StoreMode::Set {
        let w = ItemWrite::new(offer.value.clone(), offer.flags, offer.exptime);
        store.set(&req.key, w).await.map(|_| Stored::Stored)
    } else {
        let max = store.max_item_size();
        store
            .update(&req.key, |cur| decide(req.mode, cur, &offer, max))
            .await
            .map(|(r, _)| r)
    };
    match result {
        Ok(r) => {
            count_cas(ctx, req.mode, r);
            if !req.noreply {
                reply::line(out, text_word(r));
            }
        }
        Err(e) => super::store_error(ctx, &e, req.noreply, out),
    }
}

fn text_word(r: Stored) -> &'static [u8] {
    match r {
        Stored::Stored => b"STORED",
        Stored::NotStored => b"NOT_STORED",
        Stored::Exists => b"EXISTS",
        Stored::NotFound => b"NOT_FOUND",
    }
}

/// A value above the item limit: memcached answers before reading the data (the codec
/// swallows it) and, for `set`/`ms`, removes the old item so stale data does not survive.
pub async fn too_large<S: KvStore>(
    ctx: &Context<S>,
    key: &[u8],
    noreply: bool,
    drop_existing: bool,
    out: &mut Output,
) {
    Stats::incr(&ctx.stats.store_too_large);
    if drop_existing {
        // The reply does not depend on whether an old item existed, and a failure to drop it
        // leaves the store as it was, so the result is deliberately not reported.
        let _ = ctx
            .store
            .update(key, |cur| {
                (cur.map_or(Update::Keep, |_| Update::Delete), ())
            })
            .await;
    }
    if !noreply {
        reply::line(out, b"SERVER_ERROR object too large for cache");
    }
}

#[cfg(test)]
mod tests {
    use crate::command::testing::run as t;

    #[tokio::test]
    async fn set_add_replace() {
        assert_eq!(
            t(b"set a 1 0 1\r\nx\r\nget a\r\n").await,
            "STORED\r\nVALUE a 1 1\r\nx\r\nEND\r\n"
        );
        assert_eq!(
            t(b"set a 0 0 1\r\nx\r\nadd a 0 0 1\r\nx\r\n").await,
            "STORED\r\nNOT_STORED\r\n"
        );
        assert_eq!(
            t(b"add b 0 0 1\r\ny\r\nadd b 0 0 1\r\nz\r\nget b\r\n").await,
            "STORED\r\nNOT_STORED\r\nVALUE b 0 1\r\ny\r\nEND\r\n"
        );
        assert_eq!(t(b"replace c 0 0 1\r\nx\r\n").await, "NOT_STORED\r\n");
        assert_eq!(
            t(b"set c 0 0 1\r\nx\r\nreplace c 3 0 2\r\nyy\r\nget c\r\n").await,
            "STORED\r\nSTORED\r\nVALUE c 3 2\r\nyy\r\nEND\r\n"
        );
    }

    #[tokio::test]
    async fn append_prepend_keep_flags() {
        assert_eq!(
            t(b"append a 0 0 1\r\nx\r\nprepend a 0 0 1\r\nx\r\n").await,
            "NOT_STORED\r\nNOT_STORED\r\n"
        );
        assert_eq!(
            t(b"set a 7 0 2\r\nbb\r\nappend a 1 0 1\r\nc\r\nprepend a 2 0 1\r\na\r\nget a\r\n")
                .await,
            "STORED\r\nSTORED\r\nSTORED\r\nVALUE a 7 4\r\nabbc\r\nEND\r\n"
        );
    }

    #[tokio::test]
    async fn cas_rules() {
        assert_eq!(t(b"cas a 0 0 1 1\r\nx\r\n").await, "NOT_FOUND\r\n");
        assert_eq!(
            t(b"set a 0 0 1\r\nx\r\ngets a\r\ncas a 0 0 1 999\r\ny\r\ncas a 0 0 1 0\r\ny\r\ncas a 5 0 1 1\r\nz\r\ngets a\r\n").await,
            "STORED\r\nVALUE a 0 1 1\r\nx\r\nEND\r\nEXISTS\r\nEXISTS\r\nSTORED\r\nVALUE a 5 1 2\r\nz\r\nEND\r\n"
        );
    }

    #[tokio::test]
    async fn noreply_and_errors() {
        assert_eq!(
            t(b"set a 0 0 1 noreply\r\nx\r\nget a\r\n").await,
            "VALUE a 0 1\r\nx\r\nEND\r\n"
        );
        assert_eq!(
            t(b"set a 0 0 1\r\nxyz\r\n").await,
            "CLIENT_ERROR bad data chunk\r\nERROR\r\n"
        );
        assert_eq!(t(b"set a 0 0 1 noreply\r\nxyz\r\n").await, "ERROR\r\n");
        assert_eq!(
            t(b"set a 0 0 -1\r\nx\r\n").await,
            "CLIENT_ERROR bad command line format\r\nERROR\r\n"
        );
        assert_eq!(
            t(b"set a x 0 1\r\n").await,
            "CLIENT_ERROR bad command line format\r\n"
        );
        assert_eq!(t(b"set a 0 0\r\n").await, "ERROR\r\n");
        let long = format!("set {} 0 0 1\r\nx\r\n", "k".repeat(251));
        assert_eq!(
            t(long.as_bytes()).await,
            "CLIENT_ERROR bad command line format\r\nERROR\r\n"
        );
        assert_eq!(
            t(b"cas a 0 0 1 z\r\n").await,
            "CLIENT_ERROR bad command line format\r\n"
        );
    }

    #[tokio::test]
    async fn too_large_is_swallowed_and_drops_old() {
        // The test harness uses a 1024-byte item limit.
        let mut req = b"set a 0 0 1\r\nx\r\nset a 0 0 2000\r\n".to_vec();
        req.extend_from_slice(&[b'v'; 2000]);
        req.extend_from_slice(b"\r\nget a\r\n");
        assert_eq!(
            t(&req).await,
            "STORED\r\nSERVER_ERROR object too large for cache\r\nEND\r\n"
        );
        let mut req = b"set a 0 0 1\r\nx\r\nadd a 0 0 2000 noreply\r\n".to_vec();
        req.extend_from_slice(&[b'v'; 2000]);
        req.extend_from_slice(b"\r\nget a\r\n");
        assert_eq!(t(&req).await, "STORED\r\nVALUE a 0 1\r\nx\r\nEND\r\n");
    }

    #[tokio::test]
    async fn exptime_rules() {
        assert_eq!(
            t(b"set a 0 -1 1\r\nx\r\nget a\r\n").await,
            "STORED\r\nEND\r\n"
        );
        assert_eq!(
            t(b"set a 0 1000 1\r\nx\r\nget a\r\n").await,
            "STORED\r\nVALUE a 0 1\r\nx\r\nEND\r\n"
        );
        // An absolute time in the past.
        assert_eq!(
            t(b"set a 0 2592001 1\r\nx\r\nget a\r\n").await,
            "STORED\r\nEND\r\n"
        );
        // A negative exptime removes an existing item.
        assert_eq!(
            t(b"set a 0 0 1\r\nx\r\nset a 0 -1 1\r\ny\r\nget a\r\n").await,
            "STORED\r\nSTORED\r\nEND\r\n"
        );
    }
}
