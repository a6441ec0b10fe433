//! Differential test: memcached 1.6 (reference) against flashtier, same random stream.
//!
//! Starts a real `memcached` and `flashtier kv` on free loopback ports with matching memory
//! and item size limits and runs [`memdiff::run`] for a few seeds, bounded by `TIME_BUDGET`
//! (under a minute on any machine). Skipped loudly without `memcached` on the PATH.
//!
//! Environment: `FLASHTIER_ADDR=HOST:PORT` tests a running server instead (e.g. a second
//! memcached, to check the harness); `FLASHTIER_BIN` the binary (default
//! `target/release/flashtier`; missing fails the test: build it first); `MEMDIFF_OPS` (30000
//! per seed), `MEMDIFF_SEEDS` (`1,2,3`), `MEMDIFF_SKIP` (command kinds to leave out).

use memdiff::{run, GenConfig, Outcome, RunConfig};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Total time the differential runs may take (they stop early, successfully, at this point).
const TIME_BUDGET: Duration = Duration::from_secs(45);

/// A child process killed when dropped, so no server outlives a failing test.
struct Server {
    child: Child,
    name: &'static str,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port");
    listener.local_addr().expect("local address").port()
}

fn on_path(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|p| p.is_file())
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .expect("crates/memdiff sits two levels below the workspace root")
        .to_path_buf()
}

fn start(name: &'static str, program: &Path, args: &[&str], addr: &str) -> Server {
    let child = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {name} ({}): {e}", program.display()));
    let mut server = Server { child, name };
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if TcpStream::connect(addr).is_ok() {
            return server;
        }
        if let Ok(Some(status)) = server.child.try_wait() {
            panic!(
                "{} exited before listening on {addr}: {status}",
                server.name
            );
        }
        assert!(
            Instant::now() < deadline,
            "{} did not listen on {addr} within 10 s",
            server.name
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[test]
fn flashtier_answers_like_memcached() {
    let Some(memcached) = on_path("memcached") else {
        eprintln!("\n*** SKIPPED differential test: no `memcached` on PATH (apt-get install memcached) ***\n");
        return;
    };

    let a_addr = format!("127.0.0.1:{}", free_port());
    let a_port = a_addr.rsplit(':').next().unwrap_or_default().to_string();
    let _a = start(
        "memcached",
        &memcached,
        &[
            "-u",
            "root",
            "-l",
            "127.0.0.1",
            "-p",
            &a_port,
            "-U",
            "0",
            "-m",
            "64",
            "-I",
            "1m",
        ],
        &a_addr,
    );

    let (_b, b_addr) = match std::env::var("FLASHTIER_ADDR") {
        Ok(addr) => (None, addr),
        Err(_) => {
            let bin = std::env::var_os("FLASHTIER_BIN")
                .map(PathBuf::from)
                .unwrap_or_else(|| workspace_root().join("target/release/flashtier"));
            assert!(
                bin.is_file(),
                "flashtier binary not found at {}: build it first (`cargo build --release -p \
                 flashtier-server`), or set FLASHTIER_BIN to it, or FLASHTIER_ADDR to a running \
                 server",
                bin.display()
            );
            let addr = format!("127.0.0.1:{}", free_port());
            let server = start(
                "flashtier",
                &bin,
                &[
                    "kv",
                    "--listen",
                    &addr,
                    "--memory",
                    "64MiB",
                    "--max-item-size",
                    "1MiB",
                    // Compared with a RAM-only memcached; and no data/flash.bin in the cwd.
                    "--ram-only",
                ],
                &addr,
            );
            (Some(server), addr)
        }
    };

    let ops: u64 = env_or("MEMDIFF_OPS", 30_000);
    let seeds: Vec<u64> = std::env::var("MEMDIFF_SEEDS")
        .unwrap_or_else(|_| "1,2,3".into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    assert!(!seeds.is_empty(), "MEMDIFF_SEEDS holds no seed");
    let skip: Vec<String> = std::env::var("MEMDIFF_SKIP")
        .unwrap_or_default()
        .split(',')
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect();
    let per_seed = TIME_BUDGET / u32::try_from(seeds.len()).unwrap_or(u32::MAX);

    for seed in seeds {
        let cfg = RunConfig {
            a: a_addr.clone(),
            b: b_addr.clone(),
            gen: GenConfig {
                seed,
                conns: 4,
                max_item_size: 1024 * 1024,
                skip: skip.clone(),
                ..GenConfig::default()
            },
            ops,
            max_duration: Some(per_seed),
            ..RunConfig::default()
        };
        match run(&cfg) {
            Ok(Outcome::Agreed(summary)) => {
                eprintln!("memdiff seed {seed} against {b_addr}: no differences\n{summary}");
            }
            Ok(Outcome::Diverged(div, summary)) => {
                panic!("memcached and {b_addr} disagree:\n{div}\n{summary}");
            }
            Err(e) => panic!("differential run could not be carried out: {e}"),
        }
    }
}
