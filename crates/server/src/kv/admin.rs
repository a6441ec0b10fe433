//! The kv face's admin endpoint (`flashtier kv --admin HOST:PORT`): plain HTTP over the
//! shared [`crate::http`] plumbing, text bodies; for Prometheus, curl and scripts. Every
//! route: `docs/operations.md` ("Admin routes"). Knob changes go through
//! [`Context::set_knob`], the same path as the protocol's `extstore <knob> <value>`.
//!
//! Runs on the kv runtime's workers next to the protocol; it reads counters and writes knobs,
//! both relaxed atomics, so it never blocks a request.

use std::fmt::Write as _;
use std::sync::Arc;

use flashtier_cache::KvStore;
use flashtier_memcache::command::admin::general_pairs;
use flashtier_memcache::Context;
use tokio::net::TcpListener;

use crate::http::{self, Request, Response};
use crate::metrics::{doc_help, parse_number, Exposition, Kind};

const ROUTES: &str =
    "routes: GET /metrics, GET /stats, GET /knobs[?NAME], POST|PUT /knobs?NAME=VALUE\n";

/// Serve the endpoint on `listener` until the runtime stops.
pub async fn serve<S: KvStore>(listener: TcpListener, ctx: Arc<Context<S>>) {
    http::serve(listener, "kv", move |req: Request| {
        let ctx = Arc::clone(&ctx);
        async move { route(&req, &ctx) }
    })
    .await
}

fn route<S: KvStore>(req: &Request, ctx: &Context<S>) -> Response {
    let method = req.method.to_ascii_uppercase();
    let read = method == "GET";
    match req.path.as_str() {
        "/metrics" if read => Response::ok(metrics(ctx)),
        "/stats" if read => {
            let mut s = String::new();
            for (k, v) in stat_pairs(ctx) {
                let _ = writeln!(s, "{k}={v}");
            }
            Response::ok(s)
        }
        "/knobs" if read => get_knobs(req, ctx),
        "/knobs" if method == "POST" || method == "PUT" => set_knobs(req, ctx),
        "/metrics" | "/stats" | "/knobs" => Response::new(405, ROUTES),
        _ => Response::new(404, ROUTES),
    }
}

/// General `stats`, then `stats extstore` (absent without flash) and `stats small` (absent
/// without the small-object tier).
fn stat_pairs<S: KvStore>(ctx: &Context<S>) -> Vec<(String, String)> {
    let mut v = general_pairs(ctx);
    v.extend(ctx.store.stats_section("extstore").unwrap_or_default());
    v.extend(ctx.store.stats_section("small").unwrap_or_default());
    v
}

fn get_knobs<S: KvStore>(req: &Request, ctx: &Context<S>) -> Response {
    let knobs = ctx.knobs();
    let params = req.params();
    if let Some((name, value)) = params.first() {
        if !value.is_empty() {
            return Response::new(405, "use POST or PUT to change a knob\n");
        }
        return match knobs.iter().find(|(k, _)| k == name) {
            Some((k, v)) => Response::ok(format!("{k}={v}\n")),
            None => Response::new(404, format!("unknown knob {name}\n")),
        };
    }
    let mut s = String::new();
    for (k, v) in knobs {
        let _ = writeln!(s, "{k}={v}");
    }
    Response::ok(s)
}

fn set_knobs<S: KvStore>(req: &Request, ctx: &Context<S>) -> Response {
    let params = req.params();
    if params.is_empty() {
        return Response::new(400, "usage: POST /knobs?NAME=VALUE[&NAME=VALUE...]\n");
    }
    let mut out = String::new();
    for (name, value) in params {
        if let Err(e) = ctx.set_knob(&name, &value) {
            let _ = writeln!(out, "error: {e}");
            return Response::new(400, out);
        }
        let now = ctx
            .knobs()
            .into_iter()
            .find(|(k, _)| *k == name)
            .map_or(value, |(_, v)| v);
        let _ = writeln!(out, "{name}={now}");
    }
    Response::ok(out)
}

/// Stats that are levels rather than running totals (flash engine stats say so in their
/// own docs, see [`kind_of`]).
fn is_gauge(name: &str) -> bool {
    const GAUGES: &[&str] = &[
        "pid",
        "uptime",
        "time",
        "pointer_size",
        "max_connections",
        "curr_connections",
        "connection_structures",
        "limit_maxbytes",
        "accepting_conns",
        "threads",
        "worker_connections_min",
        "worker_connections_max",
        "bytes",
        "curr_items",
        "ram_bytes_per_flash_item",
        "extstore_capacity",
        "extstore_segment_size",
        "extstore_io_queue",
        "extstore_live_bytes",
        "extstore_dead_bytes",
        "extstore_live_percent",
        "extstore_device_bytes_per_byte_stored",
        "extstore_write_back_queue",
        "extstore_write_back_lag_ms",
        "small_item_max",
        "small_sets",
        "small_items",
        "small_live_items_estimate",
        "small_staged_items",
        "small_staged_bytes",
        "small_staged_peak_bytes",
        "small_merge_bytes",
        "small_merge_peak_bytes",
        "small_merge_peak_pages",
        "small_merge_page_limit",
        "small_set_filter_bytes",
        "small_ram_bytes",
        "small_log_pages",
        "small_log_items",
        "small_log_index_bytes",
        "small_log_tag_width",
        "small_wait_ms",
        "small_write_amplification",
        "small_restart_clean",
        "small_recovered_items",
        "small_recovered_dirty_sets",
        "small_recovered_log_items",
        "small_recovered_log_pages",
        "small_recovered_log_lost_pages",
    ];
    GAUGES.contains(&name)
        || name.starts_with("extstore_knob_")
        || name.starts_with("extstore_index_")
        || name.ends_with("_used")
        || name.ends_with("_free")
        || name.ends_with("_total")
        || name.ends_with("_fragmented")
}

/// Kind and HELP text of a stat: the flash engine's own doc text for `flash_*`, else
/// docs/stats.md, else a sentence naming the stat.
fn kind_of(stat: &str) -> (Kind, String) {
    if let Some(found) = crate::metrics::flash_kind(stat) {
        return found;
    }
    let kind = if is_gauge(stat) {
        Kind::Gauge
    } else {
        Kind::Counter
    };
    let help = doc_help(stat).unwrap_or_else(|| format!("memcached-style stat {stat}"));
    (kind, help)
}

/// The `/metrics` text: every numeric stat through the naming rule, text stats as labels
/// of `flashtier_info`, request latency per command family and per stage, flash IO latency,
/// process.
pub fn metrics<S: KvStore>(ctx: &Context<S>) -> String {
    let mut e = Exposition::new("flashtier_");
    let mut info = Vec::new();
    for (k, v) in stat_pairs(ctx) {
        if parse_number(&v).is_none() {
            info.push((k, v));
            continue;
        }
        let (kind, help) = kind_of(&k);
        e.stat(&k, &v, kind, &help);
    }
    e.info(
        "Text-valued stats (version, flash backend, reclaim policy) as labels; always 1.",
        &info,
    );
    e.histogram(
        "request_duration_seconds",
        "Time from a parsed request starting to execute to its reply being buffered, per \
         memcached command family (get, set, delete, arith, touch, flush, other).",
        "command",
        &ctx.latency.snapshots(),
    );
    e.histogram(
        "request_stage_duration_seconds",
        "Where a request's time goes outside its command: socket_wait (the kernel received \
         the bytes until the serving thread read them: socket queue, wake-up, run queue), \
         turnaround (read until the replies were written), write (the socket write).",
        "stage",
        &ctx.latency.stage_snapshots(),
    );
    if let Some(fs) = ctx.store.flash_stats() {
        e.flash_io(fs);
    }
    e.process();
    e.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_and_help() {
        assert_eq!(kind_of("cmd_get").0, Kind::Counter);
        assert_eq!(kind_of("curr_items").0, Kind::Gauge);
        assert_eq!(kind_of("flash_segments_total").0, Kind::Gauge);
        assert_eq!(kind_of("flash_bytes_written").0, Kind::Counter);
        assert!(kind_of("flash_bytes_dead").1.contains("dead"));
        assert_eq!(
            kind_of("brand_new_stat").1,
            "memcached-style stat brand_new_stat"
        );
    }
}
