//! `flashtier-bench`: the load generator's command line.
//!
//! `load` runs one measured phase (open loop with `--rate`, closed loop without); `fill` only
//! sets every key once;
//! `sweep --rates max,20k,40k` runs one phase per rate on the same connections and writes one
//! JSON report with a row per rate. `--json PATH` (or `-` for stdout) writes the report; a
//! short table goes to stdout, or to stderr when the JSON does. `--client threads` drives
//! each connection with its own sending and receiving thread instead of the event loops.
//!
//! Exit status: 0 success; 1 errors with `--fail-on-error`; 2 configuration or connection
//! failure; 3 a `--verify` failure (a GET hit returned wrong bytes, or a deleted key), always.

use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Context};
use clap::{Args, Parser, Subcommand};
use flashtier_bench::{
    run_with, table, Arrival, Client, KeyDist, Protocol, Rate, RunConfig, ValueSizes, WorkloadSpec,
};

#[derive(Parser)]
#[command(name = "flashtier-bench", about = "memcached-protocol load generator")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// One measured phase: open loop at --rate, or closed loop (max throughput) without it.
    Load {
        /// Offered load in ops/s (e.g. 50000 or 50k); omit for closed loop.
        #[arg(long)]
        rate: Option<String>,
        #[command(flatten)]
        common: Common,
    },
    /// Load every key once (sequential SETs, as --load-phase) and measure nothing else: brings
    /// a server to a known fill before `load`/`sweep` runs with --keys N and no --load-phase.
    Fill {
        #[command(flatten)]
        common: Common,
    },
    /// Latency vs offered load: one phase per rate, one JSON with a row per rate.
    Sweep {
        /// Comma-separated rates in ops/s; `max` is a closed-loop row (e.g. max,20k,40k,80k).
        #[arg(long, required = true)]
        rates: String,
        #[command(flatten)]
        common: Common,
    },
}

#[derive(Args)]
struct Common {
    /// Server address.
    #[arg(long, short = 's', default_value = "127.0.0.1:11211")]
    server: String,
    /// Connections in total.
    #[arg(long, short = 'c', default_value_t = 8)]
    connections: usize,
    /// Client: async (event loops over non-blocking sockets, -t threads) | threads (a
    /// sending and a receiving thread per connection, blocking sockets; -t is ignored).
    #[arg(long, default_value = "async")]
    client: String,
    /// Thread client, open loop: most unanswered requests per connection; a request due
    /// beyond it waits for a reply (counted in `sends_waited`). Closed loop uses --depth.
    #[arg(long, default_value_t = flashtier_bench::thread_client::DEFAULT_MAX_OUTSTANDING)]
    max_outstanding: usize,
    /// Worker threads of the async client (connections are dealt round-robin).
    #[arg(long, short = 't', default_value_t = 1)]
    threads: usize,
    /// Requests in flight per connection (pipeline depth).
    #[arg(long, short = 'd', default_value_t = 1)]
    depth: usize,
    /// Key-space size.
    #[arg(long, short = 'k', default_value_t = 100_000)]
    keys: u64,
    /// Key prefix (key = prefix + decimal index).
    #[arg(long, default_value = "key:")]
    key_prefix: String,
    /// Key distribution: uniform | zipf[:THETA] | hotspot:OPFRAC:KEYFRAC.
    #[arg(long, default_value = "zipf:0.99")]
    dist: String,
    /// Keep popularity rank == key index (by default hot keys are scattered).
    #[arg(long)]
    no_scramble: bool,
    /// Value size: N | LO-HI | SIZE:WEIGHT,SIZE:WEIGHT,...
    #[arg(long, short = 'v', default_value = "100")]
    value_size: String,
    /// Fraction of operations that are GETs.
    #[arg(long, default_value_t = 0.9)]
    get_ratio: f64,
    /// Fraction of operations that are DELETEs (keys from --dist, like GETs and SETs); SETs
    /// are what GETs and DELETEs leave, so --get-ratio + --delete-ratio must not exceed 1.
    #[arg(long, default_value_t = 0.0)]
    delete_ratio: f64,
    /// Protocol: text (get/set/delete) | meta (mg/ms/md).
    #[arg(long, default_value = "text")]
    protocol: String,
    /// Values carry a key-derived pattern; every GET hit is checked byte-exact, and with
    /// --delete-ratio a hit on a key whose DELETE was answered before the GET was sent needs a
    /// SET of it that may have come after (else it counts in `verify_resurrected`).
    #[arg(long)]
    verify: bool,
    /// Cache-aside client: every GET miss is followed by a SET of that key on the same
    /// connection (counted in `cache_aside_sets`; it takes the next request slot).
    #[arg(long)]
    cache_aside: bool,
    /// Set every key once, sequentially, before measuring (closed loop unless --load-rate).
    #[arg(long)]
    load_phase: bool,
    /// Pipeline depth per connection during the load phase.
    #[arg(long, default_value_t = 16)]
    load_depth: usize,
    /// Pace the load phase at this many SETs/s (default: as fast as the server answers).
    #[arg(long)]
    load_rate: Option<String>,
    /// Warm-up before each measured phase, excluded from stats (e.g. 2s, 500ms).
    #[arg(long, default_value = "2s")]
    warmup: String,
    /// Measured duration of each phase.
    #[arg(long, default_value = "10s")]
    duration: String,
    /// Measured operation count per phase (instead of --duration).
    #[arg(long)]
    ops: Option<u64>,
    /// Open-loop inter-arrival law: poisson | uniform.
    #[arg(long, default_value = "poisson")]
    arrival: String,
    /// Random seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// How long to wait for outstanding replies at the end of a phase.
    #[arg(long, default_value = "5s")]
    drain_timeout: String,
    /// Do not snapshot the server's `stats` around each measured window.
    #[arg(long)]
    no_server_stats: bool,
    /// Server process id: report server CPU (utime + stime from /proc/PID/stat) per operation
    /// over each measured window.
    #[arg(long)]
    server_pid: Option<u32>,
    /// Write the JSON report to this path (`-` for stdout).
    #[arg(long)]
    json: Option<String>,
    /// Exit non-zero if any error (error reply, mismatch, timeout, lost connection) occurred.
    #[arg(long)]
    fail_on_error: bool,
}

fn parse_duration(s: &str) -> anyhow::Result<Duration> {
    let s = s.trim();
    let (num, scale) = if let Some(n) = s.strip_suffix("ms") {
        (n, 1e-3)
    } else if let Some(n) = s.strip_suffix("us") {
        (n, 1e-6)
    } else if let Some(n) = s.strip_suffix('s') {
        (n, 1.0)
    } else if let Some(n) = s.strip_suffix('m') {
        (n, 60.0)
    } else {
        (s, 1.0)
    };
    let v: f64 = num.parse().with_context(|| format!("bad duration {s:?}"))?;
    if !(v >= 0.0 && v.is_finite()) {
        bail!("bad duration {s:?}");
    }
    Ok(Duration::from_secs_f64(v * scale))
}

fn build(rates: Vec<Rate>, c: &Common, fill: bool) -> anyhow::Result<RunConfig> {
    Ok(RunConfig {
        server: c.server.clone(),
        connections: c.connections,
        threads: c.threads,
        depth: c.depth,
        workload: WorkloadSpec {
            keys: c.keys,
            dist: c.dist.parse::<KeyDist>()?,
            scramble: !c.no_scramble,
            sizes: c.value_size.parse::<ValueSizes>()?,
            get_ratio: c.get_ratio,
            delete_ratio: c.delete_ratio,
            prefix: c.key_prefix.clone(),
            protocol: c.protocol.parse::<Protocol>()?,
            verify: c.verify,
            cache_aside: c.cache_aside,
        },
        load_phase: c.load_phase || fill,
        load_depth: c.load_depth,
        load_rate: match c.load_rate.as_deref().map(str::parse::<Rate>).transpose()? {
            None => None,
            Some(Rate::Ops(r)) => Some(r),
            Some(Rate::Max) => None,
        },
        warmup: parse_duration(&c.warmup)?,
        duration: parse_duration(&c.duration)?,
        ops: c.ops,
        arrival: c.arrival.parse::<Arrival>()?,
        rates,
        seed: c.seed,
        drain_timeout: parse_duration(&c.drain_timeout)?,
        server_stats: !c.no_server_stats,
        server_pid: c.server_pid,
    })
}

fn main() -> ExitCode {
    match real_main() {
        Ok(code) => code,
        Err(e) => {
            eprintln!("flashtier-bench: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn real_main() -> anyhow::Result<ExitCode> {
    let cli = Cli::parse();
    let fill = matches!(cli.cmd, Cmd::Fill { .. });
    let (rates, common) = match &cli.cmd {
        Cmd::Fill { common } => (Vec::new(), common),
        Cmd::Load { rate, common } => (
            vec![match rate {
                Some(r) => r.parse::<Rate>()?,
                None => Rate::Max,
            }],
            common,
        ),
        Cmd::Sweep { rates, common } => (
            rates
                .split(',')
                .map(str::parse::<Rate>)
                .collect::<Result<Vec<_>, _>>()?,
            common,
        ),
    };
    let cfg = build(rates, common, fill)?;
    let client = match common.client.parse::<Client>()? {
        Client::Threads { .. } => Client::Threads {
            max_outstanding: common.max_outstanding,
        },
        c => c,
    };
    let report = run_with(&cfg, client, |msg| eprintln!("flashtier-bench: {msg}"))?;
    let json = serde_json::to_string_pretty(&report)?;
    let human = table(&report);
    match common.json.as_deref() {
        Some("-") => {
            eprint!("{human}");
            println!("{json}");
        }
        Some(path) => {
            std::fs::write(path, json.as_bytes()).with_context(|| format!("writing {path}"))?;
            print!("{human}");
        }
        None => print!("{human}"),
    }
    std::io::stdout().flush()?;
    let errors: u64 = report.rows.iter().map(|r| r.errors).sum::<u64>()
        + report
            .load_phase
            .as_ref()
            .map_or(0, |l| l.counters.errors());
    let verify_failed =
        |c: &flashtier_bench::stats::Counters| (c.verify_mismatches, c.verify_resurrected);
    let (mismatches, resurrected) = report
        .rows
        .iter()
        .map(|r| verify_failed(&r.counters))
        .chain(
            report
                .load_phase
                .as_ref()
                .map(|l| verify_failed(&l.counters)),
        )
        .fold((0u64, 0u64), |(m, r), (dm, dr)| (m + dm, r + dr));
    if mismatches > 0 || resurrected > 0 {
        // Serving wrong bytes, or a value already deleted, is never a performance result:
        // fail loudly (after the report is written) whatever the flags say.
        if mismatches > 0 {
            eprintln!("flashtier-bench: {mismatches} GET hits returned wrong bytes");
        }
        if resurrected > 0 {
            eprintln!("flashtier-bench: {resurrected} GET hits returned a deleted key's value");
        }
        return Ok(ExitCode::from(3));
    }
    if common.fail_on_error && errors > 0 {
        eprintln!("flashtier-bench: {errors} errors");
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::SUCCESS)
}
