//! `get gets gat gats`: one `VALUE` block per hit, then `END`.
//!
//! Keys are looked up in request order. A multi-key get is where flash reads should be
//! batched: [`fetch`] is the one place that turns a key list into items, so it can start all
//! lookups before awaiting any of them once the store has reads worth overlapping.
use bytes::BytesMut;
use flashtier_cache::{CasMode, Item, ItemWrite, KvStore, Update};

use super::exptime;
use crate::context::Context;
use crate::reply;
use crate::request::Retrieval;
use crate::stats::Stats;

/// Read `key` and record the access (marks the item fetched). Errors read as a miss: a
/// retrieval has no way to report a per-key failure in the text protocol.
async fn fetch<S: KvStore>(ctx: &Context<S>, key: &[u8]) -> Option<Item> {
    ctx.store.get(key).await.ok().flatten()
}

/// Set a new exptime on `key` if it exists, keeping its value, flags, CAS and meta bits
/// (`touch`, `gat`, `mg T`). Returns the item as it was before the touch.
pub(crate) async fn touch_item<S: KvStore>(ctx: &Context<S>, key: &[u8], abs: u32) -> Option<Item> {
    let res = ctx
        .store
        .update(key, |cur| match cur {
            None => (Update::Keep, None),
            Some(it) => {
                let w = ItemWrite {
                    value: it.value.clone(),
                    flags: it.flags,
                    exptime: abs,
                    cas: CasMode::Keep,
                    meta: it.meta,
                };
                (Update::Put(w), Some(it.clone()))
            }
        })
        .await;
    let before = res.ok().and_then(|(r, _)| r)?;
    // memcached marks a touched item fetched; the store resets that bit on a write, so read
    // it once more to record the access.
    let _ = ctx.store.get(key).await;
    Some(before)
}

/// Append one `VALUE` block.
pub(crate) fn value_block(out: &mut BytesMut, key: &[u8], item: &Item, with_cas: bool) {
    out.reserve(key.len() + item.value.len() + 48);
    out.extend_from_slice(b"VALUE ");
    out.extend_from_slice(key);
    out.extend_from_slice(b" ");
    reply::u64(out, u64::from(item.flags));
    out.extend_from_slice(b" ");
    reply::u64(out, item.value.len() as u64);
    if with_cas {
        out.extend_from_slice(b" ");
        reply::u64(out, item.cas);
    }
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(&item.value);
    out.extend_from_slice(b"\r\n");
}

pub async fn run<S: KvStore>(ctx: &Context<S>, req: Retrieval, out: &mut BytesMut) {
    let stats = &ctx.stats;
    let abs = req
        .touch
        .map(|e| exptime::absolute(e, ctx.store.clock().now()));
    for key in &req.keys {
        let item = match abs {
            Some(abs) => touch_item(ctx, key, abs).await.map(|mut it| {
                it.exptime = abs;
                it
            }),
            None => fetch(ctx, key).await,
        };
        match (abs.is_some(), &item) {
            (true, Some(_)) => {
                Stats::incr(&stats.cmd_touch);
                Stats::incr(&stats.touch_hits);
            }
            (true, None) => {
                Stats::incr(&stats.cmd_touch);
                Stats::incr(&stats.touch_misses);
            }
            (false, Some(_)) => {
                Stats::incr(&stats.cmd_get);
                Stats::incr(&stats.get_hits);
            }
            (false, None) => {
                Stats::incr(&stats.cmd_get);
                Stats::incr(&stats.get_misses);
            }
        }
        if let Some(item) = item {
            value_block(out, key, &item, req.with_cas);
        }
    }
    out.extend_from_slice(b"END\r\n");
}

#[cfg(test)]
mod tests {
    use crate::command::testing::{run as t, Harness};

    #[tokio::test]
    async fn get_and_gets() {
        assert_eq!(t(b"get a\r\n").await, "END\r\n");
        assert_eq!(
            t(b"set a 1 0 1\r\nx\r\nset b 2 0 2\r\nyy\r\nget a zz b\r\ngets b\r\n").await,
            "STORED\r\nSTORED\r\nVALUE a 1 1\r\nx\r\nVALUE b 2 2\r\nyy\r\nEND\r\nVALUE b 2 2 2\r\nyy\r\nEND\r\n"
        );
        assert_eq!(t(b"get\r\n").await, "ERROR\r\n");
        let long = format!("get a {}\r\n", "k".repeat(251));
        assert_eq!(
            t(long.as_bytes()).await,
            "CLIENT_ERROR bad command line format\r\n"
        );
    }

    #[tokio::test]
    async fn many_keys_beyond_token_cap() {
        let keys: Vec<String> = (0..40).map(|i| format!("k{i}")).collect();
        let mut req = String::new();
        for k in &keys {
            req.push_str(&format!("set {k} 0 0 1\r\nv\r\n"));
        }
        req.push_str(&format!("get {}\r\n", keys.join(" ")));
        let out = t(req.as_bytes()).await;
        assert_eq!(out.matches("VALUE").count(), 40);
    }

    #[tokio::test]
    async fn gat_touches() {
        let h = Harness::new();
        assert_eq!(
            h.send(b"set a 0 100 1\r\nx\r\ngat 0 a\r\n").await,
            "STORED\r\nVALUE a 0 1\r\nx\r\nEND\r\n"
        );
        h.clock.advance(200);
        assert_eq!(
            h.send(b"gats 10 a\r\n").await,
            "VALUE a 0 1 1\r\nx\r\nEND\r\n"
        );
        h.clock.advance(11);
        assert_eq!(h.send(b"get a\r\n").await, "END\r\n");
        assert_eq!(
            h.send(b"gat x a\r\n").await,
            "CLIENT_ERROR invalid exptime argument\r\n"
        );
        assert_eq!(h.send(b"gat 10\r\n").await, "END\r\n");
    }
}
