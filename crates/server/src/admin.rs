//! The block face's admin endpoint: plain HTTP/1.1 on a TCP port, one request per
//! connection (`Connection: close`), text bodies. Used by `flashtier ctl`, by Prometheus
//! (`/metrics`) and by curl.
//!
//! Routes (GET or POST; parameters in the query string):
//! - `/stats`: `key=value` lines (the cache's counters and gauges, then `flash_*`).
//! - `/metrics`: Prometheus text, `flashtier_block_<name>`.
//! - `/status`: state, mode, dirty blocks, flush progress (`flush_id`,
//!   `flush=idle|running|done`, `flush_done`, `flush_total`, `flush_left`, `flush_errors`,
//!   `flush_seconds`), the latest mode switch (`mode_switch*`), blocks on hold after
//!   backing errors (`writeback_held_blocks`), last error.
//! - `/get?KEY` (or `/get?key=KEY`; `all` lists every tunable), `/set?KEY=VALUE[&...]`.
//! - `/mode?MODE[&wait]`: change the mode; leaving writeback reports the switch
//!   (`mode_switch=running|done|cancelled`, `mode_switch_id` = its flush id,
//!   `mode_switch_dirty_left`); `wait` returns once no block is dirty.
//! - `/flush` starts a background flush and returns at once; `/flush?wait` returns when it
//!   is done.
//! - `/detach`: flush, wait, then stop the server (the process exits).
//!
//! The HTTP plumbing (accept loop, parsing, replies) is [`crate::http`], shared with the kv
//! face. Each connection is one tokio task; requests touch the cache only through its public
//! API.
use std::sync::Arc;

use flashtier_blockcache::{BlockCache, FlushState, Mode, ModeSwitch, SwitchPhase};
use flashtier_nbd::ShutdownHandle;
use tokio::net::TcpListener;

use crate::http::{self, Request, Response};

/// What the endpoint serves.
pub struct AdminCtx {
    pub cache: Arc<BlockCache>,
    pub stop: ShutdownHandle,
}

pub async fn serve(listener: TcpListener, ctx: Arc<AdminCtx>) {
    http::serve(listener, "block", move |req: Request| {
        let ctx = Arc::clone(&ctx);
        async move {
            let (code, body) = route(&req.path, &http::decode(&req.query), &ctx).await;
            Response::new(code, body)
        }
    })
    .await
}

/// `mode_switch*` lines for `/status` and `/mode`.
fn switch_text(sw: &ModeSwitch) -> String {
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

async fn route(path: &str, query: &str, ctx: &AdminCtx) -> (u16, String) {
    let cache = &ctx.cache;
    match path {
        "/stats" => {
            let mut s = String::new();
            for (k, v) in cache.stats_pairs() {
                s.push_str(&format!("{k}={v}\n"));
            }
            (200, s)
        }
        "/metrics" => {
            let mut s = String::new();
            for (k, v) in cache.stats_pairs() {
                if v.parse::<f64>().is_err() {
                    s.push_str(&format!("flashtier_block_info{{{k}=\"{v}\"}} 1\n"));
                    continue;
                }
                s.push_str(&format!(
                    "# TYPE flashtier_block_{k} untyped\nflashtier_block_{k} {v}\n"
                ));
            }
            (200, s)
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
                return (400, "usage: /mode?writeback|writethrough|writearound[&wait]\n".into());
            };
            let Some(sw) = cache.set_mode(mode) else {
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
        _ => (
            404,
            "routes: /stats /metrics /status /get?KEY /set?KEY=VALUE /mode?MODE[&wait] /flush[?wait] /detach\n"
                .into(),
        ),
    }
}
