//! The `flashtier` binary: one executable, one subcommand per face.
//!
//! # Layout
//! - [`cli`]: command-line flags (clap derive), native and memcached-compatible.
//! - [`kv`]: `flashtier kv`, the memcached-compatible key-value server; [`kv_admin`] its
//!   HTTP admin endpoint (metrics, stats, runtime knobs); [`kv_check`] what a start and
//!   `--check-config` check before anything is created.
//! - [`signals`]: SIGTERM/SIGINT handling shared by `kv` and `block`.
//! - [`block`]: `flashtier block`, the NBD block cache; [`admin`] its HTTP admin endpoint;
//!   [`ctl`]: `flashtier ctl`, the admin client; [`ctl_table`] its tables for people.
//! - [`http`]: the HTTP plumbing both admin endpoints share.
//! - [`rundir`]: the block face's run dir (lock, stats file, `ctl list`); [`rates`]: its
//!   per-window counter rates.
//! - [`assets`]: man pages and shell completions generated from the CLI (packaging).
//! - [`logging`]: the process logger behind the `log` facade the libraries use.
//! - [`metrics`]: the Prometheus naming layer both `/metrics` share; [`procstat`] the
//!   process metrics it reads from /proc.
//! - [`startup`]: what `kv` and `block` share at start-up: no litter from a failed start,
//!   one-line refusals to format foreign data.
#![deny(unsafe_code)]

mod admin;
mod assets;
mod block;
mod cli;
mod ctl;
mod ctl_table;
mod http;
mod kv;
mod kv_admin;
mod kv_check;
mod logging;
mod metrics;
mod procstat;
mod rates;
mod rundir;
mod signals;
mod startup;

use clap::Parser as _;

fn main() -> std::process::ExitCode {
    logging::init(log::LevelFilter::Info);
    let cli = cli::Cli::parse();
    logging::set_format(cli.log_format);
    let result = match cli.command {
        cli::Command::Kv(args) => kv::main(args),
        cli::Command::Block(args) => block::main(args),
        cli::Command::Ctl(args) => ctl::main(args),
        cli::Command::Assets { dir } => assets::write(&dir),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            log::error!("{}", logging::error_chain(&e));
            std::process::ExitCode::FAILURE
        }
    }
}
