//! `stats` and its sections, in the shapes memcached 1.6.18 answers with, so memcached-tool,
//! memcached_exporter and existing dashboards read flashtier as they read memcached:
//! - general: memcached's counters ([`super::admin::general_pairs`]) and, with a flash tier,
//!   memcached's extstore names ([`extstore_pairs`]) — where memcached puts them;
//! - `settings`: memcached's names and value formats (every value one token);
//! - `items`, `slabs`: the store's sections (one class per tier, see `flashtier_cache`);
//! - `conns`, `detail on|off|dump`, `cachedump`, `reset`, `sizes`, and any further section
//!   the store has (`extstore`). Unknown sections answer `ERROR`, as memcached does;
//! - `latency` (flashtier's own): per command family and per request stage
//!   ([`crate::latency`]), and the flash device's reads and writes: count, mean and
//!   percentiles (the upper bound of the histogram bucket holding them), in microseconds.
use flashtier_cache::KvStore;

use super::admin::general_pairs;
use super::Flow;
use crate::context::Context;
use crate::dump::DumpState;
use crate::output::Output;
use crate::reply;
use crate::request::StatsArg;

/// Run `stats <arg>`.
pub fn run<S: KvStore>(ctx: &Context<S>, arg: StatsArg, out: &mut Output) -> Flow {
    match arg {
        StatsArg::General => {
            for (k, v) in general_pairs(ctx) {
                reply::stat(out, &k, v);
            }
            for (k, v) in extstore_pairs(ctx) {
                reply::stat(out, &k, v);
            }
            // The small-object tier's `small_*` stats, when it is on (docs/stats.md).
            for (k, v) in ctx.store.stats_section("small").unwrap_or_default() {
                reply::stat(out, &k, v);
            }
        }
        StatsArg::Reset => {
            ctx.stats.reset();
            ctx.detail.reset();
            ctx.latency.start_window(&latency_series(ctx));
            reply::line(out, b"RESET");
            return Flow::Continue;
        }
        StatsArg::CacheDump { class, limit } => {
            if !ctx.settings.dump_enabled {
                reply::line(out, b"CLIENT_ERROR stats cachedump not allowed");
                return Flow::Continue;
            }
            return Flow::Dump(DumpState::cachedump(class, limit));
        }
        StatsArg::Detail(sub) => {
            match sub.as_deref() {
                Some(b"on") => {
                    ctx.detail.set_on(true);
                    reply::line(out, b"OK");
                }
                Some(b"off") => {
                    ctx.detail.set_on(false);
                    reply::line(out, b"OK");
                }
                Some(b"dump") => {
                    for line in ctx.detail.dump() {
                        reply::line(out, line.as_bytes());
                    }
                    reply::line(out, b"END");
                }
                _ => reply::line(out, b"CLIENT_ERROR usage: stats detail on|off|dump"),
            }
            return Flow::Continue;
        }
        StatsArg::Section(name) => match &name[..] {
            b"settings" => settings(ctx, out),
            b"conns" => conns(ctx, out),
            b"sizes" => reply::stat(out, "sizes_status", "disabled"),
            b"latency" => latency(ctx, out),
            other => {
                let name = String::from_utf8_lossy(other);
                match ctx.store.stats_section(&name) {
                    Some(lines) => {
                        for (k, v) in lines {
                            reply::stat(out, &k, v);
                        }
                    }
                    None if name == "items" => {}
                    None if name == "slabs" => {
                        reply::stat(out, "active_slabs", 0);
                        reply::stat(out, "total_malloced", ctx.store.stats().bytes);
                    }
                    None => {
                        reply::line(out, b"ERROR");
                        return Flow::Continue;
                    }
                }
            }
        },
    }
    reply::line(out, b"END");
    Flow::Continue
}

/// memcached's extstore counters of the general `stats`, from the store's `extstore`
/// section; empty without a flash tier. Each name is given only where flashtier keeps the
/// same quantity (the mapping is listed in docs/stats.md).
pub fn extstore_pairs<S: KvStore>(ctx: &Context<S>) -> Vec<(String, String)> {
    let Some(ext) = ctx.store.stats_section("extstore") else {
        return Vec::new();
    };
    let get = |k: &str| ext.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
    let mut v = Vec::new();
    // (memcached name, flashtier name)
    const MAP: &[(&str, &str)] = &[
        ("get_extstore", "extstore_hits"),
        ("recache_from_extstore", "extstore_objects_promoted"),
        ("miss_from_extstore", "extstore_tag_collisions"),
        ("badcrc_from_extstore", "extstore_checksum_failures"),
        ("extstore_compact_rescues", "extstore_objects_relocated"),
        ("extstore_page_evictions", "flash_reclaims"),
        ("extstore_page_reclaims", "flash_reclaims_expired"),
        ("extstore_pages_free", "extstore_segments_free"),
        ("extstore_pages_used", "extstore_segments_used"),
        ("extstore_objects_evicted", "extstore_objects_evicted"),
        ("extstore_objects_read", "extstore_objects_read"),
        ("extstore_objects_written", "extstore_objects_written"),
        ("extstore_bytes_written", "extstore_bytes_written"),
        ("extstore_bytes_read", "extstore_bytes_read"),
        ("extstore_bytes_used", "extstore_bytes_used"),
        ("extstore_bytes_fragmented", "extstore_bytes_fragmented"),
        ("extstore_limit_maxbytes", "extstore_capacity"),
        ("extstore_io_queue", "extstore_io_queue"),
    ];
    for (name, from) in MAP {
        if let Some(val) = get(from) {
            v.push((name.to_string(), val));
        }
    }
    v
}

fn yes(b: bool) -> &'static str {
    if b {
        "yes"
    } else {
        "no"
    }
}

/// `stats settings` with memcached's names; every value is one token.
fn settings<S: KvStore>(ctx: &Context<S>, out: &mut Output) {
    let settings = &ctx.settings;
    let tcp = !settings.listen.ip().is_unspecified() || settings.listen.port() != 0;
    reply::stat(out, "maxbytes", ctx.memory_limit());
    reply::stat(out, "maxconns", settings.max_connections);
    reply::stat(out, "tcpport", if tcp { settings.listen.port() } else { 0 });
    reply::stat(out, "udpport", 0);
    reply::stat(out, "inter", settings.listen.ip());
    reply::stat(
        out,
        "verbosity",
        ctx.verbosity.load(std::sync::atomic::Ordering::Relaxed),
    );
    reply::stat(
        out,
        "evictions",
        if settings.evictions { "on" } else { "off" },
    );
    match &settings.unix_socket {
        Some((path, mask)) => {
            reply::stat(out, "domain_socket", path);
            reply::stat(out, "umask", format!("{mask:o}"));
        }
        None => {
            reply::stat(out, "domain_socket", "NULL");
            reply::stat(out, "umask", "700");
        }
    }
    reply::stat(out, "shutdown_command", yes(settings.shutdown_enabled));
    reply::stat(out, "num_threads", settings.threads);
    reply::stat(
        out,
        "stat_key_prefix",
        char::from(settings.detail_delimiter),
    );
    reply::stat(out, "detail_enabled", yes(ctx.detail.is_on()));
    reply::stat(out, "reqs_per_event", settings.reqs_per_event);
    reply::stat(out, "cas_enabled", yes(settings.cas_enabled));
    reply::stat(out, "tcp_backlog", settings.backlog);
    reply::stat(out, "binding_protocol", settings.binding_protocol);
    reply::stat(out, "auth_enabled_sasl", "no");
    reply::stat(out, "auth_enabled_ascii", yes(settings.auth.is_some()));
    reply::stat(out, "item_size_max", settings.max_item_size);
    reply::stat(out, "maxconns_fast", "yes");
    reply::stat(out, "lru_crawler", "no");
    reply::stat(out, "flush_enabled", yes(settings.flush_enabled));
    reply::stat(out, "dump_enabled", yes(settings.dump_enabled));
    reply::stat(
        out,
        "idle_timeout",
        settings.idle_timeout.map_or(0, |d| d.as_secs()),
    );
    reply::stat(out, "max_output_buffer", settings.max_output_buffer);
    reply::stat(out, "ssl_enabled", yes(settings.tls.is_some()));
    if let Some(min) = settings.tls {
        reply::stat(out, "ssl_min_version", min);
    }
    // The store's runtime knobs, named as memcached names its extstore settings.
    for (k, v) in ctx.knobs() {
        let v: String = v.split_whitespace().collect::<Vec<_>>().join("_");
        reply::stat(out, &format!("ext_{k}"), v);
    }
}

fn conns<S>(ctx: &Context<S>, out: &mut Output) {
    for (id, entry) in ctx.connections() {
        reply::stat(out, &format!("{id}:addr"), &entry.peer);
        reply::stat(out, &format!("{id}:listen_addr"), &entry.listen);
        reply::stat(out, &format!("{id}:state"), "conn_parse_cmd");
    }
}

/// Every histogram `stats latency` shows, by its name there: command families (`get`,
/// `set`, ...), request stages (`stage_socket_wait`, ...) and, with flash, device IO
/// (`flash_read`, `flash_write`). Counts since start.
fn latency_series<S: KvStore>(ctx: &Context<S>) -> Vec<(String, flashtier_metrics::Snapshot)> {
    let mut series: Vec<(String, flashtier_metrics::Snapshot)> = ctx
        .latency
        .snapshots()
        .into_iter()
        .map(|(n, s)| (n.to_string(), s))
        .collect();
    series.extend(
        ctx.latency
            .stage_snapshots()
            .into_iter()
            .map(|(n, s)| (format!("stage_{n}"), s)),
    );
    if let Some(fs) = ctx.store.flash_stats() {
        series.push(("flash_read".into(), fs.latency.read.snapshot()));
        series.push(("flash_write".into(), fs.latency.write.snapshot()));
    }
    series
}

/// `stats latency`: `latency_<name>_{count,mean_us,p50_us,p90_us,p99_us,p999_us}` for every
/// series of [`latency_series`], counted since the last `stats reset` (since start before
/// any). Percentiles are bucket upper bounds (at most 1.5× the true value).
fn latency<S: KvStore>(ctx: &Context<S>, out: &mut Output) {
    let series = ctx.latency.in_window(latency_series(ctx));
    for (i, (cpu, wait, runs)) in ctx.worker_schedstats().into_iter().enumerate() {
        reply::stat(out, &format!("worker_{i}_cpu_us"), cpu);
        reply::stat(out, &format!("worker_{i}_runqueue_wait_us"), wait);
        reply::stat(out, &format!("worker_{i}_runs"), runs);
    }
    for (name, snap) in series {
        let n = snap.count();
        reply::stat(out, &format!("latency_{name}_count"), n);
        let mean = if n == 0 {
            0.0
        } else {
            snap.sum_seconds() * 1e6 / n as f64
        };
        reply::stat(
            out,
            &format!("latency_{name}_mean_us"),
            format!("{mean:.1}"),
        );
        for (q, label) in [(0.5, "p50"), (0.9, "p90"), (0.99, "p99"), (0.999, "p999")] {
            let us = snap.quantile_bound(q).map_or(0.0, |s| s * 1e6);
            reply::stat(
                out,
                &format!("latency_{name}_{label}_us"),
                format!("{us:.0}"),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::command::testing::{run as t, Harness};

    #[tokio::test]
    async fn stats_reset_starts_the_latency_window() {
        let h = Harness::new();
        let gets = |out: String| {
            out.lines()
                .find_map(|l| l.strip_prefix("STAT latency_get_count "))
                .map(|v| v.trim().to_string())
        };
        h.send(b"set k 0 0 1\r\nx\r\nget k\r\nget k\r\n").await;
        assert_eq!(
            gets(h.send(b"stats latency\r\n").await).as_deref(),
            Some("2")
        );
        assert_eq!(
            h.send(b"stats reset\r\nget k\r\n").await,
            "RESET\r\nVALUE k 0 1\r\nx\r\nEND\r\n"
        );
        assert_eq!(
            gets(h.send(b"stats latency\r\n").await).as_deref(),
            Some("1")
        );
    }

    #[tokio::test]
    async fn detail_prefixes() {
        let h = Harness::new();
        assert_eq!(
            h.send(b"stats detail on\r\nset a:1 0 0 1\r\nx\r\nget a:1\r\nget a:2\r\ndelete b:1\r\nmg a:1 v\r\nstats detail dump\r\n")
                .await,
            "OK\r\nSTORED\r\nVALUE a:1 0 1\r\nx\r\nEND\r\nEND\r\nNOT_FOUND\r\nVA 1\r\nx\r\n\
             PREFIX a get 3 hit 2 set 1 del 0\r\nPREFIX b get 0 hit 0 set 0 del 1\r\nEND\r\n"
        );
        assert_eq!(
            h.send(b"stats detail off\r\nget a:1\r\nstats detail dump\r\n")
                .await,
            "OK\r\nVALUE a:1 0 1\r\nx\r\nEND\r\nPREFIX a get 3 hit 2 set 1 del 0\r\n\
             PREFIX b get 0 hit 0 set 0 del 1\r\nEND\r\n"
        );
    }

    #[tokio::test]
    async fn dumps() {
        let h = Harness::new();
        let out = h
            .send(
                b"set a:b 0 0 1\r\nx\r\nset k 5 0 2\r\nyy\r\nget k\r\nlru_crawler metadump all\r\n",
            )
            .await;
        let lines: Vec<&str> = out.split('\n').collect();
        assert!(
            lines
                .iter()
                .any(|l| l.starts_with("key=a%3Ab exp=-1 la=")
                    && l.ends_with("fetch=no cls=1 size=4")),
            "{out}"
        );
        assert!(lines
            .iter()
            .any(|l| l.starts_with("key=k ") && l.contains("fetch=yes")));
        assert!(out.ends_with("END\r\n"));
        let out = h.send(b"stats cachedump 1 1\r\n").await;
        assert_eq!(out, "ITEM a:b [1 b; 0 s]\r\nEND\r\n");
        assert_eq!(h.send(b"stats cachedump 2 0\r\n").await, "END\r\n");
        assert_eq!(
            h.send(b"lru_crawler metadump x\r\nlru_crawler sleep 5\r\nlru_crawler\r\n")
                .await,
            "BADCLASS invalid class id\r\nOK\r\nERROR\r\n"
        );
        assert_eq!(
            h.send(b"lru_crawler metadump 2\r\n").await,
            "END\r\n",
            "no flash-only items"
        );
    }

    #[tokio::test]
    async fn settings_values_are_single_tokens() {
        let out = t(b"stats settings\r\n").await;
        for line in out.lines().filter(|l| l.starts_with("STAT ")) {
            assert_eq!(line.split(' ').count(), 3, "{line}");
        }
        assert!(out.contains("STAT cas_enabled yes\r\n"));
    }
}
