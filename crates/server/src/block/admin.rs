//! The block face's admin endpoint: plain HTTP/1.1 on a TCP port (127.0.0.1:10810 unless
//! `--admin` says otherwise), one request per connection, text bodies; used by `flashtier
//! ctl`, Prometheus (`/metrics`) and curl. Every route: `docs/operations.md` ("Admin routes").
//!
//! Invariant: reading routes answer `GET`/`HEAD`; routes that change state answer only `POST`
//! (a `GET` gets `405`, so a crawler or a stray `curl` cannot stop the server).
//!
//! The HTTP plumbing is [`crate::http`], shared with the kv face. Each connection is one
//! tokio task; requests touch the cache only through its public API. Lock order: the reset
//! baseline's mutex is taken alone.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use flashtier_blockcache::{BlockCache, BlockStats, FlushState, Mode, SwitchPhase, SwitchStatus};
use flashtier_nbd::{ServerStats, ShutdownHandle};
use parking_lot::Mutex;
use tokio::net::TcpListener;

use crate::http::{self, Request, Response};
use crate::metrics::{parse_number, Exposition, Kind};
use crate::rates::Rates;
use crate::rundir::RunDir;

/// What the endpoint serves.
pub struct AdminCtx {
    pub cache: Arc<BlockCache>,
    pub stop: ShutdownHandle,
    pub nbd: Arc<ServerStats>,
    pub rates: Rates,
    /// Where a mode set at run time is kept for the next start.
    run_dir: Arc<RunDir>,
    /// Counter values at the last `reset-stats` and when it was (unix seconds; 0 = never).
    baseline: Mutex<(u64, HashMap<String, u64>)>,
}

/// HELP of the block cache's gauges (its counters document themselves in `BlockStats`).
const GAUGES: &[(&str, &str)] = &[
    (
        "read_hit_percent",
        "Blocks read that were cache hits, since start",
    ),
    (
        "write_hit_percent",
        "Blocks written that were already cached, since start",
    ),
    (
        "dirty_blocks",
        "Cached blocks not yet written back to the backing",
    ),
    ("cached_blocks", "Blocks in the cache"),
    ("index_bytes", "RAM used by the block index"),
    ("capacity_blocks", "Blocks the cache device holds"),
    ("dirty_percent", "Dirty blocks over the capacity"),
    ("block_size", "Cache block size in bytes"),
    (
        "writeback_rate",
        "Writeback rate the controller set, in blocks per second (0 when idle or flushing)",
    ),
    (
        "live_bytes",
        "Bytes of the cached blocks' current records in the cache file",
    ),
    (
        "dead_bytes",
        "Bytes of dead records (overwritten or evicted) not yet reclaimed in the cache file",
    ),
    (
        "live_ratio",
        "Share of the cache file's capacity holding cached blocks' current records (0-1)",
    ),
    (
        "clean_watermark",
        "Write sequence below which every block is clean",
    ),
    (
        "clean_watermark_persisted",
        "Clean watermark last written to the cache device",
    ),
    (
        "recovered_dirty_blocks",
        "Dirty blocks recovered from the cache device at start",
    ),
    (
        "recovered_clean_blocks",
        "Clean blocks kept at start (warm restart)",
    ),
    (
        "mode_switch_in_progress",
        "1 while a switch away from writeback is writing back",
    ),
    (
        "mode_switch_dirty_left",
        "Dirty blocks the running mode switch still has to write back",
    ),
];

/// NBD counters (the nbd crate's names) and their HELP; `nbd_in_flight` and
/// `nbd_max_in_flight` are gauges.
const NBD: &[(&str, &str)] = &[
    ("nbd_reads", "NBD READ requests"),
    ("nbd_writes", "NBD WRITE requests"),
    ("nbd_flushes", "NBD FLUSH requests"),
    ("nbd_trims", "NBD TRIM requests"),
    ("nbd_write_zeroes", "NBD WRITE_ZEROES requests"),
    ("nbd_caches", "NBD CACHE requests"),
    ("nbd_discs", "NBD DISC requests"),
    (
        "nbd_unknown_commands",
        "NBD requests with an unknown command",
    ),
    ("nbd_fua_requests", "NBD requests carrying FUA"),
    (
        "nbd_bytes_read",
        "Payload bytes sent to clients by successful READs",
    ),
    (
        "nbd_bytes_written",
        "Payload bytes accepted from clients by successful WRITEs",
    ),
    ("nbd_errors", "NBD error replies and protocol violations"),
    ("nbd_in_flight", "NBD requests in flight now"),
    ("nbd_max_in_flight", "Most NBD requests in flight at once"),
    ("nbd_connections_accepted", "NBD connections accepted"),
    ("nbd_connections_active", "NBD connections open now"),
];

/// Counter or gauge, and the HELP text, of a block stat: the libraries' own doc text where
/// they have one; a stat nothing describes is a gauge with a sentence naming it.
pub fn kind_of(stat: &str) -> (Kind, String) {
    if let Some((_, doc)) = BlockStats::describe().into_iter().find(|(k, _)| *k == stat) {
        return (Kind::Counter, doc.to_string());
    }
    if let Some(found) = crate::metrics::flash_kind(stat) {
        return found;
    }
    if let Some((_, doc)) = NBD.iter().find(|(k, _)| *k == stat) {
        let gauge = matches!(
            stat,
            "nbd_in_flight" | "nbd_max_in_flight" | "nbd_connections_active"
        );
        return (
            if gauge { Kind::Gauge } else { Kind::Counter },
            doc.to_string(),
        );
    }
    let help = GAUGES.iter().find(|(k, _)| *k == stat).map_or_else(
        || format!("block cache stat {stat}"),
        |(_, h)| h.to_string(),
    );
    (Kind::Gauge, help)
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

impl AdminCtx {
    pub fn new(
        cache: Arc<BlockCache>,
        stop: ShutdownHandle,
        nbd: Arc<ServerStats>,
        run_dir: Arc<RunDir>,
    ) -> Self {
        Self {
            cache,
            stop,
            nbd,
            rates: Rates::default(),
            run_dir,
            baseline: Mutex::new((0, HashMap::new())),
        }
    }

    /// The mode was set at run time: keep the mode now in force for the next start (one
    /// without `--mode`). A failure is logged; the mode itself is set either way.
    fn mode_set(&self) {
        let mode = self.cache.tunables().mode().name();
        match self.run_dir.save_mode(mode) {
            Ok(()) => log::info!("mode {mode} set at run time; a restart without --mode keeps it"),
            Err(e) => log::warn!(
                "mode {mode} set, but it cannot be kept for the next start (the run dir's mode \
                 file: {e}); a restart starts in the mode its configuration gives"
            ),
        }
    }

    /// Every stat, raw: the cache's and the engine's, then the NBD server's.
    fn raw_pairs(&self) -> Vec<(String, String)> {
        let mut v = self.cache.stats_pairs();
        let t = self.nbd.totals();
        v.extend(
            t.key_values()
                .iter()
                .map(|(k, n)| (k.to_string(), n.to_string())),
        );
        v.push((
            "nbd_connections_accepted".into(),
            self.nbd.connections_accepted().to_string(),
        ));
        v.push((
            "nbd_connections_active".into(),
            self.nbd.connections_active().to_string(),
        ));
        v
    }

    /// The counters (not the gauges), raw, for rates.
    pub fn counters(&self) -> Vec<(String, u64)> {
        self.raw_pairs()
            .into_iter()
            .filter(|(k, _)| kind_of(k).0 == Kind::Counter)
            .filter_map(|(k, v)| v.parse::<u64>().ok().map(|n| (k, n)))
            .collect()
    }

    /// What `/stats`, `ctl stats` and the stats file show: counters since the last reset.
    pub fn stats_view(&self) -> Vec<(String, String)> {
        let raw = self.raw_pairs();
        let base = self.baseline.lock();
        let mut v: Vec<(String, String)> = raw
            .into_iter()
            .map(|(k, v)| match (base.1.get(&k), v.parse::<u64>()) {
                (Some(b), Ok(n)) => {
                    let since = n.saturating_sub(*b).to_string();
                    (k, since)
                }
                _ => (k, v),
            })
            .collect();
        v.push(("stats_reset_at".into(), base.0.to_string()));
        v
    }

    /// `reset-stats`: counters start again from 0 in the stats view.
    fn reset(&self) {
        let now = self.counters().into_iter().collect();
        *self.baseline.lock() = (unix_now(), now);
    }
}

pub async fn serve(listener: TcpListener, ctx: Arc<AdminCtx>) {
    http::serve(listener, "block", move |req: Request| {
        let ctx = Arc::clone(&ctx);
        async move {
            let (code, body) = route(&req, &ctx).await;
            Response::new(code, body)
        }
    })
    .await
}

/// The `/metrics` text.
pub fn metrics(ctx: &AdminCtx) -> String {
    let mut e = Exposition::new("flashtier_block_");
    let mut info = Vec::new();
    for (k, v) in ctx.raw_pairs() {
        if parse_number(&v).is_none() {
            info.push((k, v));
            continue;
        }
        let (kind, help) = kind_of(&k);
        e.stat(&k, &v, kind, &help);
    }
    let (running, done, total) = match ctx.cache.flush_state() {
        FlushState::Idle => (0, 0, 0),
        FlushState::Running { done, total, .. } => (1, done, total),
        FlushState::Done { total, .. } => (0, total, total),
    };
    e.stat(
        "flush_running",
        &running.to_string(),
        Kind::Gauge,
        "1 while a flush (ctl flush, detach, mode switch) runs",
    );
    e.stat(
        "flush_done_blocks",
        &done.to_string(),
        Kind::Gauge,
        "Blocks the current or last flush has written back",
    );
    e.stat(
        "flush_target_blocks",
        &total.to_string(),
        Kind::Gauge,
        "Blocks the current or last flush set out to write back",
    );
    e.info("Text-valued stats (mode) as labels; always 1.", &info);
    e.histogram(
        "request_duration_seconds",
        "Time from an NBD request header being read to its reply being queued, per op.",
        "op",
        &ctx.nbd.latency().snapshots(),
    );
    e.flash_io(ctx.cache.flash().stats());
    e.process();
    e.finish()
}

/// `/rates` text.
fn rates_text(ctx: &AdminCtx) -> String {
    let windows = ctx.rates.windows(Instant::now(), &ctx.counters());
    let join = |f: &dyn Fn(&crate::rates::Window) -> String| {
        windows.iter().map(f).collect::<Vec<_>>().join(",")
    };
    let mut s = format!(
        "window_seconds={}\nspan_seconds={}\n",
        join(&|w| w.seconds.to_string()),
        join(&|w| format!("{:.1}", w.span))
    );
    for (k, _) in ctx.counters() {
        let r = join(&|w| {
            w.per_second
                .iter()
                .find(|(n, _)| *n == k)
                .map_or("0".to_string(), |(_, r)| format!("{r:.3}"))
        });
        s.push_str(&format!("{k}={r}\n"));
    }
    s
}

/// `mode_switch*` lines for `/status` and `/mode`.
fn switch_text(sw: &SwitchStatus) -> String {
    format!(
        "mode_switch={}\nmode_switch_id={}\nmode_switch_from={}\nmode_switch_to={}\nmode_switch_total={}\nmode_switch_dirty_left={}\nmode_switch_seconds={:.3}\n",
        sw.phase.name(),
        sw.id,
        sw.from.name(),
        sw.to.name(),
        sw.total,
        sw.dirty_left,
        sw.secs
    )
}

pub fn status_text(cache: &BlockCache) -> String {
    let mut s = String::new();
    let stats: std::collections::HashMap<String, String> =
        cache.stats_pairs().into_iter().collect();
    let get = |k: &str| stats.get(k).cloned().unwrap_or_default();
    s.push_str(&format!("mode={}\n", cache.tunables().mode().name()));
    s.push_str(&format!("dirty_blocks={}\n", get("dirty_blocks")));
    s.push_str(&format!("cached_blocks={}\n", get("cached_blocks")));
    s.push_str(&format!("capacity_blocks={}\n", get("capacity_blocks")));
    s.push_str(&format!("flush_id={}\n", cache.flush_id()));
    match cache.flush_state() {
        FlushState::Idle => s.push_str("flush=idle\n"),
        FlushState::Running {
            done,
            total,
            errors,
        } => s.push_str(&format!(
            "flush=running\nflush_done={done}\nflush_total={total}\nflush_left={}\nflush_errors={errors}\n",
            total.saturating_sub(done)
        )),
        FlushState::Done {
            total,
            secs,
            errors,
        } => s.push_str(&format!(
            "flush=done\nflush_done={total}\nflush_total={total}\nflush_left=0\nflush_errors={errors}\nflush_seconds={secs:.3}\n"
        )),
    }
    if let Some(sw) = cache.mode_switch() {
        s.push_str(&switch_text(&sw));
    }
    s.push_str(&format!("backing_errors={}\n", get("backing_errors")));
    s.push_str(&format!(
        "writeback_held_blocks={}\n",
        get("writeback_held_blocks")
    ));
    s.push_str(&format!(
        "last_error={}\n",
        cache.last_error().unwrap_or_else(|| "none".into())
    ));
    s
}

const READS: &[&str] = &["/stats", "/metrics", "/rates", "/status", "/get"];
const ACTIONS: &[&str] = &["/set", "/mode", "/flush", "/detach", "/reset-stats"];
const ROUTES: &str = "routes: GET /stats /metrics /rates /status /get?KEY; POST /set?KEY=VALUE \
                      /mode?MODE[&wait] /flush[?wait] /reset-stats /detach\n";

async fn route(req: &Request, ctx: &AdminCtx) -> (u16, String) {
    let path = req.path.as_str();
    let method = req.method.to_ascii_uppercase();
    if READS.contains(&path) && method != "GET" {
        return (405, format!("{path}: use GET\n"));
    }
    if ACTIONS.contains(&path) && method != "POST" {
        return (405, format!("{path} changes state: use POST\n"));
    }
    // Parameters: the query string, or a form body.
    let raw = if req.query.is_empty() {
        req.body.trim()
    } else {
        req.query.as_str()
    };
    let query = http::decode(raw);
    let query = query.as_str();
    let cache = &ctx.cache;
    match path {
        "/stats" => {
            let mut s = String::new();
            for (k, v) in ctx.stats_view() {
                s.push_str(&format!("{k}={v}\n"));
            }
            (200, s)
        }
        "/metrics" => (200, metrics(ctx)),
        "/rates" => (200, rates_text(ctx)),
        "/reset-stats" => {
            ctx.reset();
            (200, "stats reset\n".into())
        }
        "/status" => (200, status_text(cache)),
        "/get" => {
            let key = query.strip_prefix("key=").unwrap_or(query);
            if key.is_empty() || key == "all" {
                let mut s = String::new();
                for (k, v) in cache.list_tunables() {
                    s.push_str(&format!("{k}={v}\n"));
                }
                return (200, s);
            }
            match cache.get_tunable(key) {
                Some(v) => (200, format!("{key}={v}\n")),
                None => (404, format!("unknown tunable {key:?}\n")),
            }
        }
        "/set" => {
            if query.is_empty() {
                return (400, "usage: /set?KEY=VALUE\n".into());
            }
            let mut out = String::new();
            for kv in query.split('&') {
                let Some((k, v)) = kv.split_once('=') else {
                    return (400, format!("{kv:?}: expected KEY=VALUE\n"));
                };
                if let Err(e) = cache.set_tunable(k, v) {
                    return (400, format!("{e}\n"));
                }
                if k == "mode" {
                    ctx.mode_set();
                }
                out.push_str(&format!(
                    "{k}={}\n",
                    cache.get_tunable(k).unwrap_or_default()
                ));
            }
            (200, out)
        }
        "/flush" => {
            if query
                .split('&')
                .any(|p| p == "wait" || p.starts_with("wait="))
            {
                match cache.flush_wait().await {
                    Ok(()) => (200, status_text(cache)),
                    Err(e) => (500, format!("{e}\n")),
                }
            } else {
                cache.start_flush();
                (200, status_text(cache))
            }
        }
        "/mode" => {
            // `/mode?MODE[&wait]` (or `to=MODE`): switch; leaving writeback reports the
            // switch (its flush id and progress), `wait` returns once no block is dirty.
            let mut to = None;
            let mut wait = false;
            for p in query.split('&') {
                match p {
                    "wait" | "wait=1" => wait = true,
                    _ => to = Some(p.strip_prefix("to=").unwrap_or(p)),
                }
            }
            let Some(mode) = to.and_then(Mode::parse) else {
                return (
                    400,
                    "usage: /mode?writeback|writethrough|writearound[&wait]\n".into(),
                );
            };
            let switch = cache.set_mode(mode);
            ctx.mode_set();
            let Some(sw) = switch else {
                return (200, format!("mode={}\n", mode.name()));
            };
            if !wait || sw.phase != SwitchPhase::Running {
                return (200, format!("mode={}\n{}", mode.name(), switch_text(&sw)));
            }
            match cache.mode_switch_wait().await {
                Ok(sw) => (200, format!("mode={}\n{}", mode.name(), switch_text(&sw))),
                Err(e) => (500, format!("{e}\n")),
            }
        }
        "/detach" => match cache.flush_wait().await {
            Ok(()) => {
                ctx.stop.shutdown();
                (200, format!("detached\n{}", status_text(cache)))
            }
            Err(e) => (500, format!("{e}\n")),
        },
        _ => (404, ROUTES.into()),
    }
}
