//! `flush_all`, `version`, `shutdown`, `lru_crawler`, `cache_memlimit` and `extstore`; the
//! general `stats` pairs the admin endpoint shares ([`general_pairs`]). The `stats` command
//! itself is in [`super::stats`].
use flashtier_cache::KvStore;

use super::{exptime, Flow};
use crate::context::Context;
use crate::dump::DumpState;
use crate::output::Output;
use crate::reply;
use crate::request::{LruCrawler, ShutdownArg};
use crate::stats::Stats;

pub fn flush_all<S: KvStore>(ctx: &Context<S>, delay: i32, noreply: bool, out: &mut Output) {
    Stats::incr(&ctx.stats.cmd_flush);
    if !ctx.settings.flush_enabled {
        // memcached -F: refused, but counted.
        if !noreply {
            reply::line(out, b"CLIENT_ERROR flush_all not allowed");
        }
        return;
    }
    let now = ctx.store.clock().now();
    // memcached invalidates items stored at or before `realtime(delay) - 1` once that time
    // comes; with no delay, everything stored so far.
    let at = if delay > 0 {
        exptime::absolute(delay, now).saturating_sub(1)
    } else {
        now
    };
    ctx.store.flush_all(at);
    if !noreply {
        reply::line(out, b"OK");
    }
}

/// `cache_memlimit`: change the store's RAM limit at run time, when the binary gave the
/// context a way to (see [`Context::set_memory_limit_hook`]).
pub fn memlimit<S>(ctx: &Context<S>, megabytes: u32, noreply: bool, out: &mut Output) {
    let ok = ctx.adjust_memory_limit(u64::from(megabytes) << 20);
    if !noreply {
        reply::line(
            out,
            if ok {
                b"OK"
            } else {
                b"MEMLIMIT_ADJUST_FAILED out of bounds or unable to adjust"
            },
        );
    }
}

/// `extstore <knob> <value>`: `OK`, or `CLIENT_ERROR <why>` for an unknown knob or a value
/// it refuses (memcached answers a bare `ERROR`; the reason helps more).
pub fn extstore<S: KvStore>(
    ctx: &Context<S>,
    name: &str,
    value: &str,
    noreply: bool,
    out: &mut Output,
) {
    let line = match ctx.set_knob(name, value) {
        Ok(()) => "OK".to_string(),
        Err(e) => {
            let why: String = e
                .to_string()
                .chars()
                .map(|c| if c.is_control() { ' ' } else { c })
                .collect();
            format!("CLIENT_ERROR {why}")
        }
    };
    if !noreply {
        reply::line(out, line.as_bytes());
    }
}

pub fn version<S>(ctx: &Context<S>, out: &mut Output) {
    let line = format!("VERSION {}", ctx.settings.version);
    reply::line(out, line.as_bytes());
}

/// `shutdown [graceful]` (memcached -A): stops the server as SIGTERM does.
pub fn shutdown<S>(ctx: &Context<S>, arg: ShutdownArg, out: &mut Output) {
    if !ctx.settings.shutdown_enabled {
        reply::line(out, b"ERROR: shutdown not enabled");
        return;
    }
    match arg {
        ShutdownArg::Now | ShutdownArg::Graceful => ctx.shutdown.notify_one(),
        ShutdownArg::Invalid => reply::line(out, b"CLIENT_ERROR invalid shutdown mode"),
    }
}

/// `lru_crawler ...`: `metadump` starts a dump; the tuning sub-commands are accepted (there
/// is no crawler: the sweeper reclaims expired items continuously).
pub fn lru_crawler<S>(ctx: &Context<S>, cmd: LruCrawler, out: &mut Output) -> Flow {
    match cmd {
        LruCrawler::Metadump(arg) => {
            if !ctx.settings.dump_enabled {
                reply::line(out, b"ERROR metadump not allowed");
                return Flow::Continue;
            }
            match DumpState::metadump(&arg) {
                Ok(d) => return Flow::Dump(d),
                Err(line) => reply::line(out, line.as_bytes()),
            }
        }
        LruCrawler::Accepted => reply::line(out, b"OK"),
        LruCrawler::Reply(line) => reply::line(out, line.as_bytes()),
    }
    Flow::Continue
}

/// (user, system) CPU seconds of this process, from `/proc/self/stat`.
fn cpu_times() -> (f64, f64) {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return (0.0, 0.0);
    };
    // Fields after the command name (which may contain spaces) start after the last ')'.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or_default();
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // utime and stime are fields 14 and 15 of the file: 11 and 12 after the command name.
    const HZ: f64 = 100.0;
    (ticks(11) / HZ, ticks(12) / HZ)
}

/// The general `stats` lines as (name, value) pairs, in memcached's order (the admin
/// endpoint's `/stats` and `/metrics` use them too).
pub fn general_pairs<S: KvStore>(ctx: &Context<S>) -> Vec<(String, String)> {
    let now = ctx.store.clock().now();
    let s = &ctx.stats;
    let store = ctx.store.stats();
    let (user, system) = cpu_times();
    let mut v: Vec<(String, String)> = Vec::with_capacity(64);
    let mut add = |k: &str, val: String| v.push((k.to_string(), val));
    add("pid", std::process::id().to_string());
    add("uptime", now.saturating_sub(ctx.started).to_string());
    add("time", now.to_string());
    add("version", ctx.settings.version.clone());
    add("pointer_size", usize::BITS.to_string());
    add("rusage_user", format!("{user:.6}"));
    add("rusage_system", format!("{system:.6}"));
    add("max_connections", ctx.settings.max_connections.to_string());
    add(
        "curr_connections",
        Stats::get(&s.curr_connections).to_string(),
    );
    add(
        "total_connections",
        Stats::get(&s.total_connections).to_string(),
    );
    add(
        "rejected_connections",
        Stats::get(&s.rejected_connections).to_string(),
    );
    add(
        "connection_structures",
        Stats::get(&s.curr_connections).to_string(),
    );
    for (name, value) in s.counters() {
        add(name, value.to_string());
    }
    let limit = if store.limit_maxbytes == 0 {
        ctx.memory_limit()
    } else {
        store.limit_maxbytes
    };
    add("limit_maxbytes", limit.to_string());
    add("accepting_conns", "1".into());
    add("threads", ctx.settings.threads.to_string());
    if let Some((min, max)) = ctx.worker_load_range() {
        add("worker_connections_min", min.to_string());
        add("worker_connections_max", max.to_string());
    }
    let sched = ctx.worker_schedstats();
    if !sched.is_empty() {
        let sum = |f: fn(&(u64, u64, u64)) -> u64| sched.iter().map(f).sum::<u64>();
        add("worker_cpu_us", sum(|s| s.0).to_string());
        add("worker_runqueue_wait_us", sum(|s| s.1).to_string());
        add("worker_runs", sum(|s| s.2).to_string());
    }
    add("bytes", store.bytes.to_string());
    add("curr_items", store.curr_items.to_string());
    add("total_items", store.total_items.to_string());
    add("expired_unfetched", store.expired_unfetched.to_string());
    add("evicted_unfetched", store.evicted_unfetched.to_string());
    add("evictions", store.evictions.to_string());
    add("reclaimed", store.reclaimed.to_string());
    v
}

#[cfg(test)]
mod tests {
    use crate::command::testing::{run as t, Harness};

    #[tokio::test]
    async fn flush_all_forms() {
        assert_eq!(
            t(b"set a 0 0 1\r\nx\r\nflush_all\r\nget a\r\n").await,
            "STORED\r\nOK\r\nEND\r\n"
        );
        assert_eq!(
            t(b"flush_all noreply\r\nflush_all 0 noreply\r\nmn\r\n").await,
            "MN\r\n"
        );
        assert_eq!(
            t(b"flush_all x\r\n").await,
            "CLIENT_ERROR invalid exptime argument\r\n"
        );
        assert_eq!(t(b"flush_all 1 2 3\r\n").await, "ERROR\r\n");
    }

    #[tokio::test]
    async fn delayed_flush() {
        let h = Harness::new();
        assert_eq!(
            h.send(b"set a 0 0 1\r\nx\r\nflush_all 10\r\nget a\r\n")
                .await,
            "STORED\r\nOK\r\nVALUE a 0 1\r\nx\r\nEND\r\n"
        );
        h.clock.advance(10);
        assert_eq!(h.send(b"get a\r\n").await, "END\r\n");
    }

    #[tokio::test]
    async fn misc() {
        assert!(t(b"version\r\n")
            .await
            .starts_with("VERSION 1.6.18-flashtier-"));
        assert_eq!(
            t(b"verbosity 1\r\nverbosity\r\nverbosity x\r\nverbosity 1 noreply\r\n").await,
            "OK\r\nERROR\r\nCLIENT_ERROR bad command line format\r\n"
        );
        assert_eq!(t(b"shutdown\r\n").await, "ERROR: shutdown not enabled\r\n");
        assert_eq!(
            t(b"slabs automove invalid\r\nslabs automove 1\r\nslabs automove 3\r\nslabs automove 0 noreply\r\nslabs automove ratio 0.5\r\nslabs automove ratio x\r\nslabs automove ratio\r\nslabs automove\r\nslabs reassign 1 2\r\n").await,
            "CLIENT_ERROR bad command line format\r\nOK\r\nERROR\r\nOK\r\nERROR\r\nERROR\r\nERROR\r\nERROR\r\n"
        );
        assert_eq!(
            t(b"GET a\r\nm\r\n \r\n\r\nmx a\r\n").await,
            "ERROR\r\nERROR\r\nERROR\r\nERROR\r\nERROR\r\n"
        );
    }

    #[tokio::test]
    async fn stats_sections() {
        let out = t(b"set a 0 0 1\r\nx\r\nget a\r\nget b\r\nstats\r\n").await;
        assert!(out.contains("STAT cmd_get 2\r\n"), "{out}");
        assert!(out.contains("STAT get_hits 1\r\n"));
        assert!(out.contains("STAT get_misses 1\r\n"));
        assert!(out.contains("STAT curr_items 1\r\n"));
        assert!(out.ends_with("END\r\n"));
        let out = t(b"get b\r\nstats reset\r\nstats\r\n").await;
        assert!(out.contains("RESET\r\n") && out.contains("STAT get_misses 0\r\n"));
        assert!(t(b"stats settings\r\n")
            .await
            .contains("STAT item_size_max 1024\r\n"));
        assert_eq!(t(b"stats items\r\n").await, "END\r\n");
        assert!(t(b"stats slabs\r\n").await.contains("active_slabs"));
        assert_eq!(t(b"stats nonsense\r\n").await, "ERROR\r\n");
        assert_eq!(
            t(b"stats detail\r\n").await,
            "CLIENT_ERROR usage: stats detail on|off|dump\r\n"
        );
        assert_eq!(t(b"stats detail on\r\n").await, "OK\r\n");
        assert_eq!(t(b"stats conns\r\n").await, "END\r\n");
        assert_eq!(t(b"stats cachedump 1 1\r\n").await, "END\r\n");
        assert_eq!(
            t(b"stats cachedump 100 1\r\n").await,
            "CLIENT_ERROR Illegal slab id\r\n"
        );
        assert_eq!(
            t(b"stats cachedump 1\r\n").await,
            "CLIENT_ERROR bad command line\r\n"
        );
        assert_eq!(
            t(b"stats cachedump x 1\r\n").await,
            "CLIENT_ERROR bad command line format\r\n"
        );
    }

    #[tokio::test]
    async fn extstore_without_knobs() {
        // The test store has no runtime knobs: every name is refused as a client error.
        assert_eq!(
            t(b"extstore\r\nextstore item_size\r\nextstore item_size 1 noreply\r\nmn\r\n").await,
            "ERROR\r\nERROR\r\nMN\r\n"
        );
        let out = t(b"extstore item_size 1\r\n").await;
        assert!(
            out.starts_with("CLIENT_ERROR unknown knob item_size"),
            "{out}"
        );
        assert!(out.ends_with("\r\n") && out.lines().count() == 1, "{out}");
    }

    #[tokio::test]
    async fn memlimit() {
        let h = Harness::new();
        assert_eq!(
            h.send(b"cache_memlimit 50\r\n").await,
            "MEMLIMIT_ADJUST_FAILED out of bounds or unable to adjust\r\n"
        );
        let seen = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let s2 = seen.clone();
        h.ctx.set_memory_limit_hook(Box::new(move |b| {
            s2.store(b, std::sync::atomic::Ordering::Relaxed);
            true
        }));
        assert_eq!(
            h.send(b"cache_memlimit 50\r\ncache_memlimit 5\r\ncache_memlimit x\r\ncache_memlimit 9 noreply\r\ncache_memlimit\r\n").await,
            "OK\r\nMEMLIMIT_TOO_SMALL cannot set maxbytes to less than 8m\r\nERROR\r\nERROR\r\n"
        );
        assert_eq!(seen.load(std::sync::atomic::Ordering::Relaxed), 9 << 20);
        assert!(h
            .send(b"stats\r\n")
            .await
            .contains("STAT limit_maxbytes 9437184\r\n"));
    }
}
