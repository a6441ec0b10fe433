//! `flashtier ctl`: a small blocking HTTP client for the block face's admin endpoint.
//! `flush --wait` starts a flush and polls `/status`, drawing a progress bar on stderr.
use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::time::Duration;

use anyhow::{bail, Context as _};
use clap::{Args, Subcommand};

#[derive(Clone, Debug, Args)]
pub struct CtlArgs {
    /// Admin endpoint of `flashtier block`, HOST:PORT.
    #[arg(long, value_name = "HOST:PORT", default_value = "127.0.0.1:10810")]
    pub admin: String,

    #[command(subcommand)]
    pub op: CtlOp,
}

#[derive(Clone, Debug, Subcommand)]
pub enum CtlOp {
    /// Print every statistic as key=value.
    Stats,
    /// Print the Prometheus text.
    Metrics,
    /// Set a tunable: KEY=VALUE.
    Set { assignment: String },
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

fn request(addr: &str, path: &str) -> anyhow::Result<String> {
    let mut s = TcpStream::connect(addr).with_context(|| format!("cannot connect to {addr}"))?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
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
        CtlOp::Stats => print!("{}", request(a, "/stats")?),
        CtlOp::Metrics => print!("{}", request(a, "/metrics")?),
        CtlOp::Status => print!("{}", request(a, "/status")?),
        CtlOp::Get { key } => print!("{}", request(a, &format!("/get?{}", encode(key)))?),
        CtlOp::Set { assignment } => {
            if !assignment.contains('=') {
                bail!("set {assignment:?}: expected KEY=VALUE");
            }
            print!("{}", request(a, &format!("/set?{}", encode(assignment)))?)
        }
        CtlOp::Detach => print!("{}", request(a, "/detach")?),
        CtlOp::Flush { wait: false } => print!("{}", request(a, "/flush")?),
        CtlOp::Flush { wait: true } => {
            request(a, "/flush")?;
            let mut err = std::io::stderr();
            loop {
                let st = request(a, "/status")?;
                let state = field(&st, "flush").unwrap_or_default();
                let done: u64 = field(&st, "flush_done")
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0);
                let total: u64 = field(&st, "flush_total")
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0);
                let frac = if total == 0 {
                    1.0
                } else {
                    done as f64 / total as f64
                };
                let filled = (frac * 40.0).round() as usize;
                let _ = write!(
                    err,
                    "\rflush [{}{}] {:5.1}% {done}/{total} blocks",
                    "#".repeat(filled),
                    " ".repeat(40 - filled.min(40)),
                    frac * 100.0
                );
                let _ = err.flush();
                if state == "done" {
                    let _ = writeln!(err);
                    println!(
                        "flush done: {total} blocks in {} s",
                        field(&st, "flush_seconds").unwrap_or_default()
                    );
                    break;
                }
                if let Some(e) = field(&st, "last_error").filter(|e| e != "none") {
                    let _ = write!(err, " (last error: {e})");
                }
                std::thread::sleep(Duration::from_millis(200));
            }
        }
    }
    Ok(())
}
