//! Command semantics: what each request does to the store and what it answers.
//!
//! Invariant: every command is written once here on top of three store calls — `get`, `set`
//! and `update` (an atomic read-modify-write closure) — so it behaves the same whether the
//! item is in RAM or on flash. Replies are appended to the connection's output buffer;
//! nothing here touches the socket. One file per family: [`storage`] (set add replace append
//! prepend cas, the store decision `ms` shares), [`retrieval`] (get gets gat gats), [`arith`]
//! (incr decr, the number rules `ma` shares), [`keyed`] (delete touch), `meta_*`, [`admin`]
//! (flush_all version verbosity shutdown lru_crawler cache_memlimit extstore), [`stats`],
//! [`exptime`] (memcached's exptime rules on the store's clock).
//!
//! Runs on the connection's task; any worker thread.

pub mod admin;
pub mod arith;
pub mod exptime;
pub mod keyed;
pub mod meta_arith;
pub mod meta_debug;
pub mod meta_delete;
pub mod meta_get;
pub mod meta_set;
pub mod retrieval;
pub mod stats;
pub mod storage;

use flashtier_cache::{Error as StoreError, KvStore};

use crate::codec::meta::base64_encode;
use crate::context::Context;
use crate::output::Output;
use crate::reply;
use crate::request::{Meta, Request};
use crate::stats::Stats;

/// What the connection does after a request.
#[derive(Debug)]
pub enum Flow {
    Continue,
    /// `quit`: flush replies and close.
    Close,
    /// A dump to continue part by part between output flushes.
    Dump(crate::dump::DumpState),
}

/// Execute one request, appending its reply (if any) to `out`.
pub async fn execute<S: KvStore>(ctx: &Context<S>, request: Request, out: &mut Output) -> Flow {
    let family = crate::latency::Family::of(&request);
    let started = std::time::Instant::now();
    let flow = run(ctx, request, out).await;
    ctx.latency.of(family).record(started.elapsed());
    flow
}

/// A one-key `get`/`gets` whose lookup [`KvStore::get_if_ready`] already answered (the
/// connection asked it to decide where the read runs): its reply, timed from `started`
/// (before the lookup) like [`execute`].
pub fn execute_fetched<S: KvStore>(
    ctx: &Context<S>,
    req: &crate::request::Retrieval,
    item: Option<flashtier_cache::Item>,
    started: std::time::Instant,
    out: &mut Output,
) {
    retrieval::run_fetched(ctx, req, item, out);
    let family = crate::latency::Family::Get;
    ctx.latency.of(family).record(started.elapsed());
}

async fn run<S: KvStore>(ctx: &Context<S>, request: Request, out: &mut Output) -> Flow {
    match request {
        Request::Storage(s) => storage::run(ctx, s, out).await,
        Request::Retrieval(r) => retrieval::run(ctx, r, out).await,
        Request::Delete { key, noreply } => keyed::delete(ctx, &key, noreply, out).await,
        Request::Touch {
            key,
            exptime,
            noreply,
        } => keyed::touch(ctx, &key, exptime, noreply, out).await,
        Request::Arith {
            key,
            incr,
            delta,
            noreply,
        } => arith::run(ctx, &key, incr, delta, noreply, out).await,
        Request::FlushAll { delay, noreply } => admin::flush_all(ctx, delay, noreply, out),
        Request::Version => admin::version(ctx, out),
        Request::Verbosity { level, noreply } => {
            // memcached's MAX_VERBOSITY_LEVEL.
            ctx.verbosity
                .store(level.min(2), std::sync::atomic::Ordering::Relaxed);
            if !noreply {
                reply::line(out, b"OK");
            }
        }
        Request::Quit => return Flow::Close,
        Request::Shutdown(arg) => admin::shutdown(ctx, arg, out),
        Request::LruCrawler(cmd) => return admin::lru_crawler(ctx, cmd, out),
        Request::MemLimit { megabytes, noreply } => admin::memlimit(ctx, megabytes, noreply, out),
        Request::Extstore {
            name,
            value,
            noreply,
        } => admin::extstore(ctx, &name, &value, noreply, out),
        Request::Stats(arg) => return stats::run(ctx, arg, out),
        Request::MetaGet(meta) => meta_get::run(ctx, meta, out).await,
        Request::MetaSet { meta, mode, value } => meta_set::run(ctx, meta, mode, value, out).await,
        Request::MetaDelete(meta) => meta_delete::run(ctx, meta, out).await,
        Request::MetaArith { meta, incr } => meta_arith::run(ctx, meta, incr, out).await,
        Request::MetaNoop => reply::line(out, b"MN"),
        Request::MetaDebug { key, binary } => meta_debug::run(ctx, &key, binary, out).await,
        Request::TooLarge {
            key,
            noreply,
            drop_existing,
        } => storage::too_large(ctx, &key, noreply, drop_existing, out).await,
        Request::Reply { line, noreply } => {
            if !noreply {
                reply::line(out, line.as_bytes());
            }
        }
    }
    Flow::Continue
}

/// Write a store failure as memcached would (`SERVER_ERROR ...`), counting it.
pub(crate) fn store_error<S>(ctx: &Context<S>, err: &StoreError, noreply: bool, out: &mut Output) {
    let line = match err {
        StoreError::TooLarge { .. } => {
            Stats::incr(&ctx.stats.store_too_large);
            "SERVER_ERROR object too large for cache".to_string()
        }
        StoreError::OutOfMemory => {
            Stats::incr(&ctx.stats.store_no_memory);
            "SERVER_ERROR out of memory storing object".to_string()
        }
        other => format!("SERVER_ERROR {other}"),
    };
    if !noreply {
        reply::line(out, line.as_bytes());
    }
}

/// Append `" k<key>"` (and `" b"` for a binary key, base64 encoded) for meta replies.
pub(crate) fn meta_key(out: &mut Output, meta: &Meta) {
    if meta.opts.key_binary {
        reply::flag_bytes(out, b'k', base64_encode(&meta.key).as_bytes());
        out.extend_from_slice(b" b");
    } else {
        reply::flag_bytes(out, b'k', &meta.key);
    }
}

/// Append the `O` and `k` return flags in request order (replies without an item).
pub(crate) fn meta_echo(out: &mut Output, meta: &Meta) {
    for f in &meta.opts.flags {
        match f.letter {
            b'O' => reply::flag_bytes(out, b'O', &f.token),
            b'k' => meta_key(out, meta),
            _ => {}
        }
    }
}

#[cfg(test)]
pub(crate) mod testing;
