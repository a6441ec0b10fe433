//! The `flashtier` binary: one executable, one subcommand per face (started as `memcached`,
//! `argv[0]`, it is `flashtier kv` with memcached's command line).
//!
//! # Layout
//! - [`cli`] (every flag, clap derive), [`kv`] (the memcached-compatible server, its admin
//!   endpoint and start checks), [`block`] (the NBD block cache and its admin endpoint),
//!   [`ctl`] + [`ctl_table`] (the admin client and its tables).
//! - Shared by both faces: [`signals`], [`daemon`] (-d, -P, -u), [`startup`] (no litter from
//!   a failed start, refusals of foreign data), [`http`] (admin plumbing), [`metrics`] +
//!   [`procstat`] (the Prometheus naming layer), [`logging`].
//! - Block only: [`rundir`] (lock, stats file, `ctl list`), [`rates`]; packaging: [`assets`].
//! - The global allocator is mimalloc (measured against glibc malloc: ARCHITECTURE.md), its
//!   purge delay shortened at start ([`alloc`]).

#![deny(unsafe_code)]

mod alloc;
#[cfg(feature = "alloc-census")]
mod alloc_census;
mod assets;
mod block;
mod cli;
mod ctl;
mod ctl_table;
mod daemon;
mod http;
mod kv;
mod logging;
mod metrics;
mod procstat;
mod rates;
mod rundir;
mod signals;
mod startup;

use clap::Parser as _;

/// mimalloc instead of glibc malloc: chosen by measurement (ARCHITECTURE.md, "Allocator").
#[cfg(not(feature = "alloc-census"))]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// With the `alloc-census` feature: mimalloc with live bytes counted per size class
/// ([`alloc_census`]).
#[cfg(feature = "alloc-census")]
#[global_allocator]
pub static GLOBAL: alloc_census::Census = alloc_census::Census::new();

/// memcached's (and sysexits') exit status for a bad command line ([`cli::Usage`]).
const EX_USAGE: u8 = 64;
/// sysexits' status for a configuration that does not fit the machine ([`cli::Conflict`]).
const EX_CONFIG: u8 = 78;

fn main() -> std::process::ExitCode {
    alloc::tune();
    logging::init(log::LevelFilter::Info);
    let argv0 = std::env::args_os().next().unwrap_or_default();
    let memcached = cli::invoked_as_memcached(&argv0);
    let command = if memcached {
        cli::MemcachedCli::try_parse().map(|m| cli::Command::Kv(Box::new(m.args)))
    } else {
        cli::Cli::try_parse().map(|c| {
            logging::set_format(c.log_format);
            c.command
        })
    };
    let command = match command {
        Ok(c) => c,
        Err(e) if !e.use_stderr() => {
            // --help: print it and succeed.
            let _ = e.print();
            return std::process::ExitCode::SUCCESS;
        }
        Err(e) => {
            // One line: clap's first line without its "error: " prefix.
            let text = e.to_string();
            let first = text.lines().next().unwrap_or("bad command line");
            let first = first.strip_prefix("error: ").unwrap_or(first);
            let name = if memcached { "memcached" } else { "flashtier" };
            eprintln!("{name}: {first} (see --help)");
            return std::process::ExitCode::from(EX_USAGE);
        }
    };
    let result = match command {
        cli::Command::Kv(args) => kv::main(*args, memcached),
        cli::Command::Block(args) => block::main(*args),
        cli::Command::Ctl(args) => ctl::main(args),
        cli::Command::Assets { dir } => assets::write(&dir),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            let usage =
                e.downcast_ref::<cli::Usage>().is_some() || e.chain().any(|c| c.is::<cli::Usage>());
            let conflict = e.downcast_ref::<cli::Conflict>().is_some()
                || e.chain().any(|c| c.is::<cli::Conflict>());
            let code = if usage {
                EX_USAGE
            } else if conflict {
                EX_CONFIG
            } else {
                1
            };
            let line = format!(
                "{}: {}",
                if memcached { "memcached" } else { "flashtier" },
                logging::error_chain(&e)
            );
            // A daemon's parent prints it; otherwise it is the last line logged here, with
            // its own line breaks (a TOML error's source line and caret).
            if !daemon::fail(&line, code) {
                logging::fatal(&logging::error_chain(&e));
            }
            std::process::ExitCode::from(code)
        }
    }
}
