//! The `flashtier` binary: one executable, one subcommand per face.
//!
//! # Layout
//! - [`cli`]: command-line flags (clap derive), native and memcached-compatible.
//! - [`size`]: parsing sizes such as `64M`, `64MiB`, `1G`.
//! - [`kv`]: `flashtier kv`, the memcached-compatible key-value server.
//!
//! `block` and `ctl` are not built yet (issues 6 and later).
#![deny(unsafe_code)]

mod cli;
mod kv;
mod size;

use clap::Parser as _;

fn main() -> std::process::ExitCode {
    let cli = cli::Cli::parse();
    let result = match cli.command {
        cli::Command::Kv(args) => kv::main(args),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("flashtier: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
