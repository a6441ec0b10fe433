//! `flashtier ctl`: a small blocking HTTP client for the block face's admin endpoint.
//! `flush --wait` starts a flush and polls `/status`, drawing a progress bar on stderr;
//! `set mode=… --wait` does the same for a switch away from writeback (until no block is
//! dirty). Reads are `GET`, actions `POST` (the endpoint refuses a `GET` that would change
//! state). `--admin` takes `HOST:PORT` (host names resolve; `http://` is accepted) and may
//! stand before or after the subcommand. `list` reads a run dir's stats files instead of an
//! endpoint; `stats --table` joins `/stats` and `/rates` in human units.
use std::io::{Read as _, Write as _};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

use anyhow::{bail, Context as _};
use clap::{Args, Subcommand};

/// The block face's admin endpoint by default, the one `flashtier ctl` talks to by default.
pub const DEFAULT_ADMIN: &str = "127.0.0.1:10810";

#[derive(Clone, Debug, Args)]
pub struct CtlArgs {
    /// Admin endpoint of `flashtier block`, HOST:PORT (host names resolve). Accepted before
    /// or after the subcommand.
    #[arg(long, global = true, value_name = "HOST:PORT", default_value = DEFAULT_ADMIN)]
    pub admin: String,

    #[command(subcommand)]
    pub op: CtlOp,
}

#[derive(Clone, Debug, Subcommand)]
pub enum CtlOp {
    /// Print every statistic as key=value (counters since the last reset-stats).
    Stats {
        /// A table in human units with per-second rates over 1 min, 5 min and 1 h.
        #[arg(long)]
        table: bool,
    },
    /// Start the counters shown by `stats` (and the stats file) from 0 again; Prometheus
    /// metrics keep counting.
    ResetStats,
    /// List the caches whose stats files are in a run dir (running or stopped).
    List {
        /// The run dir `flashtier block --run-dir` used.
        #[arg(long, value_name = "DIR", default_value = "data/run/block")]
        run_dir: std::path::PathBuf,
    },
    /// Print the Prometheus text.
    Metrics,
    /// Set a tunable: KEY=VALUE. `mode=writethrough|writearound` leaving writeback prints
    /// the switch (its flush id and the dirty blocks left).
    Set {
        assignment: String,
        /// With `mode=…`: block until no block is dirty, with a progress bar on stderr.
        #[arg(long)]
        wait: bool,
    },
    /// Print a tunable (`all` for every one).
    Get { key: String },
    /// Write back every dirty block; returns at once unless --wait.
    Flush {
        /// Block until done, with a progress bar on stderr.
        #[arg(long)]
        wait: bool,
    },
    /// Print mode, dirty blocks and flush progress.
    Status,
    /// Flush, then stop the server.
    Detach,
}

/// `http://host:port/` or `host:port` → `host:port`.
fn endpoint(admin: &str) -> &str {
    admin
        .trim()
        .trim_start_matches("http://")
        .trim_end_matches('/')
}

fn get(addr: &str, path: &str) -> anyhow::Result<String> {
    request(addr, "GET", path)
}

fn post(addr: &str, path: &str) -> anyhow::Result<String> {
    request(addr, "POST", path)
}

fn request(admin: &str, method: &str, path: &str) -> anyhow::Result<String> {
    let addr = endpoint(admin);
    let targets: Vec<std::net::SocketAddr> = addr
        .to_socket_addrs()
        .with_context(|| format!("--admin {admin}: cannot resolve (expected HOST:PORT)"))?
        .collect();
    let mut s = TcpStream::connect(&targets[..]).with_context(|| {
        format!("cannot connect to the admin endpoint {addr} (is flashtier block running with --admin {addr}?)")
    })?;
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    )?;
    let mut resp = String::new();
    s.read_to_string(&mut resp)?;
    let (head, body) = resp.split_once("\r\n\r\n").unwrap_or((&resp, ""));
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse::<u16>().ok())
        .unwrap_or(0);
    if code != 200 {
        bail!("{path}: HTTP {code}: {}", body.trim());
    }
    Ok(body.to_string())
}

fn field(status: &str, key: &str) -> Option<String> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(key).and_then(|r| r.strip_prefix('=')))
        .map(str::to_string)
}

fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'=' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

pub fn main(args: CtlArgs) -> anyhow::Result<()> {
    let a = &args.admin;
    match &args.op {
        CtlOp::Stats { table: false } => print!("{}", get(a, "/stats")?),
        CtlOp::Stats { table: true } => {
            print!(
                "{}",
                crate::ctl_table::table(&get(a, "/stats")?, &get(a, "/rates")?)
            )
        }
        CtlOp::ResetStats => print!("{}", post(a, "/reset-stats")?),
        CtlOp::List { run_dir } => print!("{}", crate::ctl_table::list(run_dir)?),
        CtlOp::Metrics => print!("{}", get(a, "/metrics")?),
        CtlOp::Status => print!("{}", get(a, "/status")?),
        CtlOp::Get { key } => print!("{}", get(a, &format!("/get?{}", encode(key)))?),
        CtlOp::Set { assignment, wait } => {
            let Some((key, value)) = assignment.split_once('=') else {
                bail!("set {assignment:?}: expected KEY=VALUE");
            };
            if key.trim() != "mode" {
                if *wait {
                    bail!("set --wait applies to mode=… only");
                }
                print!("{}", post(a, &format!("/set?{}", encode(assignment)))?);
                return Ok(());
            }
            let out = post(a, &format!("/mode?{}", encode(value.trim())))?;
            print!("{out}");
            if *wait && field(&out, "mode_switch").as_deref() == Some("running") {
                let id = field(&out, "mode_switch_id").unwrap_or_default();
                let status = progress(a, "mode_switch", "mode_switch_total", |status| {
                    let total: u64 = num(status, "mode_switch_total");
                    total.saturating_sub(num(status, "mode_switch_dirty_left"))
                })?;
                if field(&status, "mode_switch_id").unwrap_or_default() != id {
                    bail!("another mode switch started meanwhile");
                }
                println!(
                    "mode switch done: {} blocks written back in {} s (flush id {id})",
                    num(&status, "mode_switch_total"),
                    field(&status, "mode_switch_seconds").unwrap_or_default()
                );
            }
        }
        CtlOp::Detach => print!("{}", post(a, "/detach")?),
        CtlOp::Flush { wait: false } => print!("{}", post(a, "/flush")?),
        CtlOp::Flush { wait: true } => {
            let started = post(a, "/flush")?;
            let id = field(&started, "flush_id").unwrap_or_default();
            let status = progress(a, "flush", "flush_total", |status| {
                num(status, "flush_done")
            })?;
            println!(
                "flush done: {} blocks in {} s (flush id {id})",
                num(&status, "flush_total"),
                field(&status, "flush_seconds").unwrap_or_default()
            );
        }
    }
    Ok(())
}

fn num(status: &str, key: &str) -> u64 {
    field(status, key).and_then(|v| v.parse().ok()).unwrap_or(0)
}

/// Poll `/status` drawing a progress bar until `state_key` is `done`; returns the last
/// status. `cancelled` is an error.
fn progress(
    a: &str,
    state_key: &str,
    total_key: &str,
    done_of: impl Fn(&str) -> u64,
) -> anyhow::Result<String> {
    let mut err = std::io::stderr();
    loop {
        let status = get(a, "/status")?;
        let state = field(&status, state_key).unwrap_or_default();
        let total = num(&status, total_key);
        let done = done_of(&status).min(total);
        let frac = if total == 0 || state == "done" {
            1.0
        } else {
            done as f64 / total as f64
        };
        let filled = (frac * 40.0).round() as usize;
        let _ = write!(
            err,
            "\r{state_key} [{}{}] {:5.1}% {done}/{total} blocks",
            "#".repeat(filled),
            " ".repeat(40 - filled.min(40)),
            frac * 100.0
        );
        let _ = err.flush();
        match state.as_str() {
            "done" => {
                let _ = writeln!(err);
                return Ok(status);
            }
            "cancelled" => {
                let _ = writeln!(err);
                bail!("{state_key} cancelled (mode is writeback again)");
            }
            _ => {}
        }
        if let Some(e) = field(&status, "last_error").filter(|e| e != "none") {
            let _ = write!(err, " (last error: {e})");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}
