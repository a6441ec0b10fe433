//! `memdiff`: runs the differential test between two memcached-protocol servers.
//!
//! Exit status: 0 when every reply agreed, 1 on the first divergence (printed with the seed),
//! 2 when the run itself could not be carried out (e.g. a server is not reachable).

use clap::Parser;
use memdiff::{run, GenConfig, Outcome, RunConfig};
use std::process::ExitCode;
use std::time::Duration;

/// Send one seeded random memcached command stream to two servers and compare the replies.
#[derive(Parser, Debug)]
#[command(name = "memdiff", version)]
struct Args {
    /// Reference server (memcached), HOST:PORT.
    #[arg(long)]
    a: String,
    /// Server under test, HOST:PORT.
    #[arg(long)]
    b: String,
    /// Seed of the command stream.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Number of commands to send.
    #[arg(long, default_value_t = 100_000)]
    ops: u64,
    /// Parallel connections per server, interleaved deterministically.
    #[arg(long, default_value_t = 4)]
    conns: usize,
    /// Item size limit both servers were started with, in bytes (memcached -I).
    #[arg(long, default_value_t = 1024 * 1024)]
    max_item_size: usize,
    /// Size of the key pool.
    #[arg(long, default_value_t = 32)]
    keys: usize,
    /// Seconds to wait for a reply before calling a server hung.
    #[arg(long, default_value_t = 2.0)]
    timeout: f64,
    /// Stop (successfully) after this many seconds even if --ops is not reached.
    #[arg(long)]
    max_seconds: Option<f64>,
    /// Leave a top-level command kind out of the stream (repeatable), e.g. `--skip long-line`.
    /// Kinds: set add replace append prepend cas get gets gat gats delete incr decr touch
    /// flush_all version verbosity mg ms md ma mn garbage quit long-line odd-spacing.
    #[arg(long)]
    skip: Vec<String>,
    /// Append every request and both replies to this file (for debugging a divergence).
    #[arg(long)]
    trace: Option<std::path::PathBuf>,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let known: Vec<&str> = memdiff::generator::KINDS.iter().map(|k| k.1).collect();
    if let Some(bad) = args.skip.iter().find(|s| !known.contains(&s.as_str())) {
        eprintln!(
            "memdiff: unknown kind {bad:?} for --skip; kinds: {}",
            known.join(" ")
        );
        return ExitCode::from(2);
    }
    if args.skip.len() >= known.len() {
        eprintln!("memdiff: --skip leaves nothing to send");
        return ExitCode::from(2);
    }
    let cfg = RunConfig {
        a: args.a,
        b: args.b,
        gen: GenConfig {
            seed: args.seed,
            conns: args.conns,
            max_item_size: args.max_item_size,
            keys: args.keys,
            skip: args.skip,
        },
        ops: args.ops,
        timeout: Duration::from_secs_f64(args.timeout),
        max_duration: args.max_seconds.map(Duration::from_secs_f64),
        trace: args.trace,
        ..RunConfig::default()
    };
    match run(&cfg) {
        Ok(Outcome::Agreed(summary)) => {
            println!("memdiff: seed {}: no differences", cfg.gen.seed);
            println!("{summary}");
            ExitCode::SUCCESS
        }
        Ok(Outcome::Diverged(div, summary)) => {
            println!("{div}");
            println!("{summary}");
            println!(
                "reproduce: memdiff --a {} --b {} --seed {} --conns {} --ops {}",
                cfg.a, cfg.b, cfg.gen.seed, cfg.gen.conns, cfg.ops
            );
            ExitCode::from(1)
        }
        Err(e) => {
            eprintln!("memdiff: {e}");
            ExitCode::from(2)
        }
    }
}
