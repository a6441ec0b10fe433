//! Helpers for the block face tests: start `flashtier block` on a unix socket with an admin
//! port, connect the nbd crate's client, run `flashtier ctl`.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use flashtier_nbd::NbdClientBackend;

/// A running `flashtier block`, killed when dropped.
pub struct BlockServer {
    pub child: Child,
    pub sock: PathBuf,
    pub admin: String,
}

impl BlockServer {
    /// Start over `backing` with cache `cache_spec` (PATH:SIZE); `extra` flags appended.
    pub fn start(dir: &Path, backing: &str, cache_spec: &str, extra: &[&str]) -> BlockServer {
        let mut args = vec!["--admin", "127.0.0.1:0"];
        args.extend_from_slice(extra);
        Self::start_args(dir, backing, cache_spec, &args)
    }

    /// As [`BlockServer::start`] without an `--admin` flag: the default endpoint.
    pub fn start_default_admin(
        dir: &Path,
        backing: &str,
        cache_spec: &str,
        extra: &[&str],
    ) -> BlockServer {
        Self::start_args(dir, backing, cache_spec, extra)
    }

    fn start_args(dir: &Path, backing: &str, cache_spec: &str, extra: &[&str]) -> BlockServer {
        // After SIGKILL the kernel may release the cache file's lock a little later (an
        // io_uring instance is torn down asynchronously): retry briefly.
        for _ in 0..50 {
            match Self::try_start(dir, backing, cache_spec, extra) {
                Ok(s) => return s,
                Err(e) if e.contains("flash lock") => {
                    std::thread::sleep(std::time::Duration::from_millis(100))
                }
                Err(e) => panic!("flashtier block exited before serving:\n{e}"),
            }
        }
        panic!("cache device stayed locked");
    }

    fn try_start(
        dir: &Path,
        backing: &str,
        cache_spec: &str,
        extra: &[&str],
    ) -> Result<BlockServer, String> {
        let sock = dir.join("nbd.sock");
        let _ = std::fs::remove_file(&sock);
        let mut child = Command::new(env!("CARGO_BIN_EXE_flashtier"))
            .args(["block", "--backing", backing, "--cache", cache_spec])
            .arg("--listen")
            .arg(format!("unix:{}", sock.display()))
            .arg("--run-dir")
            .arg(dir.join("run"))
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start flashtier block");
        let stderr = child.stderr.take().expect("stderr");
        let mut lines = BufReader::new(stderr).lines();
        let mut admin = None;
        let mut serving = false;
        let mut seen = String::new();
        loop {
            let line = match lines.next() {
                Some(Ok(l)) => l,
                _ => {
                    let _ = child.wait();
                    return Err(seen);
                }
            };
            seen.push_str(&line);
            seen.push('\n');
            if let Some((_, a)) = line.split_once(" block: admin on http://") {
                admin = Some(a.trim().to_string());
            }
            serving |= line.contains(" block: serving");
            let admin_off = extra.windows(2).any(|w| w == ["--admin", "none"]);
            if serving && admin_off {
                admin = Some("none".into());
            }
            if serving && admin.is_some() {
                break;
            }
        }
        std::thread::spawn(move || {
            for l in lines.map_while(Result::ok) {
                if std::env::var_os("FT_TEST_VERBOSE").is_some() {
                    eprintln!("[server] {l}");
                }
            }
        });
        Ok(BlockServer {
            child,
            sock,
            admin: admin.expect("admin address"),
        })
    }

    pub fn uri(&self) -> String {
        format!("nbd+unix:///block?socket={}", self.sock.display())
    }

    pub async fn client(&self) -> NbdClientBackend {
        NbdClientBackend::connect_str(&self.uri(), 1)
            .await
            .expect("connect")
    }

    /// `flashtier ctl --admin ADDR <args>`; returns stdout, panics on failure.
    pub fn ctl(&self, args: &[&str]) -> String {
        let out = Command::new(env!("CARGO_BIN_EXE_flashtier"))
            .args(["ctl", "--admin", &self.admin])
            .args(args)
            .output()
            .expect("run ctl");
        assert!(
            out.status.success(),
            "ctl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    pub fn wait_exit(&mut self) -> std::process::ExitStatus {
        self.child.wait().expect("wait")
    }
}

impl Drop for BlockServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A fresh scratch directory under the system temp dir.
pub fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("ftblock-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("scratch dir");
    d
}

pub struct Rng(pub u64);
impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        let mut v = Vec::with_capacity(n + 8);
        while v.len() < n {
            v.extend_from_slice(&self.next().to_le_bytes());
        }
        v.truncate(n);
        v
    }
}

/// The value of `key` in `key=value` lines (`ctl status`, `ctl stats`, the stats file).
pub fn field(text: &str, key: &str) -> Option<String> {
    text.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix('=').map(str::to_string))
}

/// The number `key` holds in `key=value` lines, 0 if absent or not a number.
pub fn num(text: &str, key: &str) -> u64 {
    field(text, key).and_then(|v| v.parse().ok()).unwrap_or(0)
}
