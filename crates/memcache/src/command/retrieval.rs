//! `get gets gat gats`: one `VALUE` block per hit, then `END`.
//!
//! A multi-key get is where flash reads are batched: [`fetch_all`] keeps up to
//! [`FETCH_WINDOW`] lookups running at once, so reads that go to the device overlap; replies
//! are still written in request order.
//!
//! The bound on flash reads a connection keeps outstanding: a connection runs at most
//! [`READ_WINDOW`](crate::connection::READ_WINDOW) pipelined reads together, each a multi-get of
//! at most `FETCH_WINDOW` lookups at a time, so at most 16 × 64 = 1,024 of its reads are at the
//! device or waiting in the engine's read queue (which makes them wait, in arrival order, past
//! `read_queue_limit`: a lookup never fails because that queue is full).
use bytes::Bytes;
use flashtier_cache::{CasMode, Item, ItemWrite, KvStore, Update};

use super::exptime;
use crate::context::Context;
use crate::join::{join_window, BoxFuture};
use crate::output::Output;
use crate::reply;
use crate::request::Retrieval;
use crate::stats::Stats;

/// Most lookups of one multi-key get running at once. Each lookup of a flash item holds a
/// device read, or waits for one in the engine's read queue (past `read_queue_limit`, in
/// arrival order): the window keeps one client's 10,000-key get from parking 10,000 reads
/// ahead of every other client's, and bounds a connection's share of that queue to
/// `READ_BATCH` × this. 64 reads in flight still keep a flash device busy for one request.
pub const FETCH_WINDOW: usize = 64;

/// Read every key (recording the accesses), at most [`FETCH_WINDOW`] lookups at a time, so
/// that the ones waiting on flash overlap. Errors read as a miss: a retrieval has no way to
/// report a per-key failure in the text protocol (the flash engine makes an over-full read
/// queue wait, not fail, so a miss here means the item is gone or unreadable).
async fn fetch_all<S: KvStore>(ctx: &Context<S>, keys: &[Bytes]) -> Vec<Option<Item>> {
    if let [key] = keys {
        return vec![ctx.store.get(key).await.ok().flatten()];
    }
    let lookups = keys.iter().map(|k| -> BoxFuture<'_, Option<Item>> {
        Box::pin(async move { ctx.store.get(k).await.ok().flatten() })
    });
    join_window(Box::new(lookups), FETCH_WINDOW).await
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

/// Append one `VALUE` block. Reserves room for the header, the trailer and only the part of
/// the value that is copied: a large value goes by reference, and reserving its length too
/// cost a ~4 KiB allocation per GET of a 4 KiB value for a ~30-byte header.
pub(crate) fn value_block(out: &mut Output, key: &[u8], item: Item, with_cas: bool) {
    out.reserve(key.len() + Output::copied_len(item.value.len()) + 48);
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
    out.put_value(item.value);
    out.extend_from_slice(b"\r\n");
}

pub async fn run<S: KvStore>(ctx: &Context<S>, req: Retrieval, out: &mut Output) {
    let abs = req
        .touch
        .map(|e| exptime::absolute(e, ctx.store.clock().now()));
    let mut fetched = match abs {
        Some(_) => Vec::new(),
        None => fetch_all(ctx, &req.keys).await,
    }
    .into_iter();
    for key in &req.keys {
        let item = match abs {
            Some(abs) => touch_item(ctx, key, abs).await.map(|mut it| {
                it.exptime = abs;
                it
            }),
            None => fetched.next().flatten(),
        };
        reply_key(ctx, &req, key, item, abs.is_some(), out);
    }
    finish(&req, out);
}

/// A one-key `get`/`gets` (no touch) whose lookup already ran
/// ([`KvStore::get_if_ready`](flashtier_cache::KvStore::get_if_ready)): the same reply and
/// counters as [`run`].
pub fn run_fetched<S: KvStore>(
    ctx: &Context<S>,
    req: &Retrieval,
    item: Option<Item>,
    out: &mut Output,
) {
    debug_assert!(req.touch.is_none() && req.keys.len() == 1);
    if let Some(key) = req.keys.first() {
        reply_key(ctx, req, key, item, false, out);
    }
    finish(req, out);
}

/// One key's counters, detail event and `VALUE` block.
fn reply_key<S: KvStore>(
    ctx: &Context<S>,
    req: &Retrieval,
    key: &[u8],
    item: Option<Item>,
    touched: bool,
    out: &mut Output,
) {
    let stats = &ctx.stats;
    let (cmd, hits, misses) = if touched {
        (&stats.cmd_touch, &stats.touch_hits, &stats.touch_misses)
    } else {
        (&stats.cmd_get, &stats.get_hits, &stats.get_misses)
    };
    Stats::incr(cmd);
    Stats::incr(if item.is_some() { hits } else { misses });
    if !touched {
        let ev = crate::detail::Event::Get {
            hit: item.is_some(),
        };
        ctx.detail.record(key, ctx.settings.detail_delimiter, ev);
    }
    if let Some(mut item) = item.filter(|_| !req.key_too_long) {
        item.cas = ctx.cas_out(item.cas);
        value_block(out, key, item, req.with_cas);
    }
}

/// `END`, or the error a too-long key earns.
fn finish(req: &Retrieval, out: &mut Output) {
    if req.key_too_long {
        reply::line(out, b"CLIENT_ERROR bad command line format");
    } else {
        out.extend_from_slice(b"END\r\n");
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;
    use std::sync::Arc;

    use super::*;
    use crate::command::testing::{run as t, Harness, SlowStore};
    use crate::context::Settings;
    use crate::output::ZERO_COPY_MIN;
    use flashtier_cache::{ItemMeta, ItemWrite};

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
    async fn keys_before_a_too_long_key_are_still_read() {
        let long = "k".repeat(251);
        let req = format!(
            "set a 0 0 1\r\nx\r\nset b 0 0 1\r\ny\r\nget a {long} b\r\nmg a h\r\nmg b h\r\n\
             gat 500 a {long}\r\nmg a t v\r\n"
        );
        assert_eq!(
            t(req.as_bytes()).await,
            "STORED\r\nSTORED\r\nCLIENT_ERROR bad command line format\r\nHD h1\r\nHD h0\r\n\
             CLIENT_ERROR bad command line format\r\nVA 1 t500\r\nx\r\n"
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

    #[tokio::test]
    async fn multi_get_overlaps_reads() {
        let store = Arc::new(SlowStore::new(true));
        let ctx = Context::new(Arc::clone(&store), Settings::default());
        let mut out = Output::new();
        for k in ["a", "b", "c"] {
            let w = ItemWrite::new(Bytes::copy_from_slice(k.as_bytes()), 0, 0);
            store.set(k.as_bytes(), w).await.unwrap();
        }
        let keys = ["a", "x", "b", "c"]
            .iter()
            .map(|k| Bytes::copy_from_slice(k.as_bytes()));
        let req = Retrieval {
            keys: keys.collect(),
            with_cas: false,
            touch: None,
            key_too_long: false,
        };
        run(&ctx, req, &mut out).await;
        assert_eq!(
            &out.to_vec()[..],
            b"VALUE a 0 1\r\na\r\nVALUE b 0 1\r\nb\r\nVALUE c 0 1\r\nc\r\nEND\r\n"
        );
        assert_eq!(
            store.max_in_flight.load(Ordering::SeqCst),
            4,
            "all four reads overlapped"
        );
    }

    #[tokio::test]
    async fn a_large_multi_get_keeps_a_window_of_lookups() {
        let store = Arc::new(SlowStore::new(true));
        let ctx = Context::new(Arc::clone(&store), Settings::default());
        let n = FETCH_WINDOW * 5 + 3;
        let mut expect = Vec::new();
        let mut keys = Vec::new();
        for i in 0..n {
            let (k, v) = (format!("k{i}"), format!("v{i}"));
            if i % 7 != 3 {
                let w = ItemWrite::new(Bytes::copy_from_slice(v.as_bytes()), 0, 0);
                store.set(k.as_bytes(), w).await.unwrap();
                expect.extend_from_slice(format!("VALUE {k} 0 {}\r\n{v}\r\n", v.len()).as_bytes());
            }
            keys.push(Bytes::from(k));
        }
        expect.extend_from_slice(b"END\r\n");
        let req = Retrieval {
            keys: keys.into(),
            with_cas: false,
            touch: None,
            key_too_long: false,
        };
        let mut out = Output::new();
        run(&ctx, req, &mut out).await;
        assert!(out.to_vec() == expect, "every present key, in key order");
        assert_eq!(store.max_in_flight.load(Ordering::SeqCst), FETCH_WINDOW);
    }

    fn item(len: usize) -> Item {
        Item {
            value: Bytes::from(vec![b'v'; len]),
            flags: 3,
            exptime: 0,
            cas: 9,
            meta: ItemMeta::default(),
        }
    }

    #[test]
    fn a_value_sent_by_reference_reserves_only_its_header() {
        let mut out = Output::new();
        let it = item(4096);
        value_block(&mut out, b"k", it.clone(), true);
        assert!(
            out.capacity() < ZERO_COPY_MIN,
            "reserved {} bytes for a header",
            out.capacity()
        );
        let mut want = b"VALUE k 3 4096 9\r\n".to_vec();
        want.extend_from_slice(&it.value);
        want.extend_from_slice(b"\r\n");
        assert_eq!(out.to_vec(), want);
    }

    #[test]
    fn a_copied_value_is_written_whole() {
        let mut out = Output::new();
        let it = item(100);
        value_block(&mut out, b"key", it.clone(), false);
        let mut want = b"VALUE key 3 100\r\n".to_vec();
        want.extend_from_slice(&it.value);
        want.extend_from_slice(b"\r\n");
        assert_eq!(out.to_vec(), want);
    }
}
