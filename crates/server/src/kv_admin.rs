//! The kv face's admin endpoint (`flashtier kv --admin HOST:PORT`): plain HTTP over the
//! shared [`crate::http`] plumbing, text bodies. For Prometheus, curl and scripts.
//!
//! Routes:
//! - `GET /metrics`: Prometheus text exposition (format 0.0.4): every numeric `stats`
//!   counter and every `stats extstore` counter (including `ram_bytes_per_flash_item` and the
//!   knobs' numeric values), each as `flashtier_<stat>` with a `# TYPE` line (`gauge` for
//!   levels, `counter` for totals); text values (version, backend, reclaim policy) are labels
//!   of one `flashtier_info` gauge.
//! - `GET /stats`: `name=value` lines, the general `stats` then `stats extstore`.
//! - `GET /knobs`: `name=value` lines, the current runtime knobs; `GET /knobs?NAME`: one.
//! - `POST /knobs?NAME=VALUE[&...]` (or `PUT`, or the pairs as a form body): change knobs at
//!   run time through [`Context::set_knob`], the same path as the protocol's
//!   `extstore <knob> <value>`. Pairs apply in order; the first refused one stops with `400`
//!   and its reason (earlier ones stay applied). The reply lists the new values.
//!
//! # Threads
//! Runs on the kv runtime's workers next to the protocol; it reads counters and writes
//! knobs, both relaxed atomics, so it never blocks a request.
use std::collections::HashSet;
use std::fmt::Write as _;
use std::sync::Arc;

use flashtier_cache::KvStore;
use flashtier_memcache::command::admin::general_pairs;
use flashtier_memcache::Context;
use tokio::net::TcpListener;

use crate::http::{self, Request, Response};

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
        "/metrics" if read => Response::ok(metrics(&stat_pairs(ctx))),
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

/// General `stats`, then `stats extstore` (absent without flash).
fn stat_pairs<S: KvStore>(ctx: &Context<S>) -> Vec<(String, String)> {
    let mut v = general_pairs(ctx);
    v.extend(ctx.store.stats_section("extstore").unwrap_or_default());
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

/// Stats that are levels rather than running totals.
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
        "bytes",
        "curr_items",
        "ram_bytes_per_flash_item",
        "extstore_capacity",
        "extstore_segment_size",
        "extstore_io_queue",
        "flash_bytes_dead",
        "flash_io_queue_depth",
        "flash_devices_failed",
        "flash_devices_failing",
        "flash_devices_offline",
        "flash_recovery_time_us",
    ];
    GAUGES.contains(&name)
        || name.starts_with("extstore_knob_")
        || name.starts_with("extstore_index_")
        || name.ends_with("_used")
        || name.ends_with("_free")
        || name.ends_with("_total")
        || name.ends_with("_fragmented")
}

/// A Prometheus number: what Rust and Prometheus both read as a finite float.
fn is_number(v: &str) -> bool {
    !v.is_empty()
        && v.bytes()
            .all(|b| b.is_ascii_digit() || matches!(b, b'.' | b'-' | b'+' | b'e' | b'E'))
        && v.parse::<f64>().is_ok_and(f64::is_finite)
}

/// `[a-zA-Z0-9_]` kept, anything else becomes `_`.
fn metric_name(stat: &str) -> String {
    let clean: String = stat
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    format!("flashtier_{clean}")
}

fn label_value(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// The exposition text for `pairs` (first occurrence of a name wins).
pub fn metrics(pairs: &[(String, String)]) -> String {
    let mut out = String::new();
    let mut seen = HashSet::new();
    let mut info = Vec::new();
    for (k, v) in pairs {
        let name = metric_name(k);
        if !seen.insert(name.clone()) {
            continue;
        }
        if !is_number(v) {
            info.push((name.trim_start_matches("flashtier_").to_string(), v));
            continue;
        }
        let kind = if is_gauge(k) { "gauge" } else { "counter" };
        let _ = writeln!(out, "# TYPE {name} {kind}\n{name} {v}");
    }
    if !info.is_empty() {
        let labels: Vec<String> = info
            .iter()
            .map(|(k, v)| format!("{k}=\"{}\"", label_value(v)))
            .collect();
        let _ = writeln!(
            out,
            "# TYPE flashtier_info gauge\nflashtier_info{{{}}} 1",
            labels.join(",")
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(k: &str, v: &str) -> (String, String) {
        (k.to_string(), v.to_string())
    }

    #[test]
    fn exposition() {
        let text = metrics(&[
            p("cmd_get", "3"),
            p("curr_items", "2"),
            p("version", "1.6.18-\"x\""),
            p("ram_bytes_per_flash_item", "12.50"),
            p("cmd_get", "9"),
            p("extstore_knob_reclaim_policy", "fifo"),
        ]);
        assert_eq!(
            text,
            "# TYPE flashtier_cmd_get counter\nflashtier_cmd_get 3\n\
             # TYPE flashtier_curr_items gauge\nflashtier_curr_items 2\n\
             # TYPE flashtier_ram_bytes_per_flash_item gauge\n\
             flashtier_ram_bytes_per_flash_item 12.50\n\
             # TYPE flashtier_info gauge\n\
             flashtier_info{version=\"1.6.18-\\\"x\\\"\",extstore_knob_reclaim_policy=\"fifo\"} 1\n"
        );
        assert!(!is_number("inf") && !is_number("NaN") && !is_number(""));
        assert!(is_number("0.5") && is_number("42"));
    }
}
