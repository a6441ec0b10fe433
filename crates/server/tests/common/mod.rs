//! Shared helpers for the integration tests: start the real `flashtier` binary on a free
//! port and talk raw protocol bytes to it.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// A running `flashtier kv`, killed when dropped.
pub struct Server {
    pub child: Child,
    pub addr: SocketAddr,
    /// Every stderr line but the "listening" one (startup and log lines), as they arrive.
    pub log: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl Server {
    /// Start `flashtier kv --listen 127.0.0.1:0 -v <extra>` and wait until it listens.
    /// Without a flash argument in `extra` (`--flash`, `-o ext_path=`, `--config`) the server
    /// runs `--ram-only`: tests run in parallel and must not share the default flash file.
    pub fn start(extra: &[&str]) -> Server {
        Self::start_in(extra, None).0
    }

    /// As [`Server::start`], in working directory `cwd` (if given); also returns the
    /// server's other startup log lines (flash tier, admin endpoint) seen before it listened.
    pub fn start_in(extra: &[&str], cwd: Option<&std::path::Path>) -> (Server, Vec<String>) {
        let flash = extra.iter().any(|a| {
            a.starts_with("--flash")
                || a.contains("ext_path")
                || *a == "--config"
                || *a == "--ram-only"
        });
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_flashtier"));
        cmd.args(["kv", "--listen", "127.0.0.1:0", "-v"])
            .args(extra);
        if !flash {
            cmd.arg("--ram-only");
        }
        if let Some(dir) = cwd {
            cmd.current_dir(dir);
        }
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start flashtier");
        let stderr = child.stderr.take().expect("stderr");
        let mut lines = BufReader::new(stderr).lines();
        let mut log = Vec::new();
        let addr = loop {
            let line = lines
                .next()
                .unwrap_or_else(|| panic!("flashtier exited before listening: {log:?}"))
                .expect("read");
            if let Some((_, rest)) = line.split_once(" kv: listening on ") {
                let addr = rest.split_whitespace().next().expect("address");
                break addr.parse().expect("socket address");
            }
            log.push(line);
        };
        // Keep draining stderr so the server never blocks on a full pipe; keep the lines.
        let kept = std::sync::Arc::new(std::sync::Mutex::new(log.clone()));
        let sink = std::sync::Arc::clone(&kept);
        std::thread::spawn(move || {
            for l in lines.map_while(Result::ok) {
                if let Ok(mut v) = sink.lock() {
                    v.push(l);
                }
            }
        });
        (
            Server {
                child,
                addr,
                log: kept,
            },
            log,
        )
    }

    pub fn connect(&self) -> TcpStream {
        connect_to(self.addr)
    }

    /// Resident set size of the server in KiB.
    pub fn rss_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .expect("proc status");
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .expect("VmRSS")
    }

    /// Send SIGTERM and wait (up to `timeout`) for the exit status.
    pub fn terminate(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let pid = self.child.id().to_string();
        let ok = Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .expect("kill");
        assert!(ok.success());
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Some(status) = self.child.try_wait().expect("wait") {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }

    /// Log lines (after startup) that contain `needle`.
    pub fn log_lines(&self, needle: &str) -> Vec<String> {
        self.log
            .lock()
            .map(|v| v.iter().filter(|l| l.contains(needle)).cloned().collect())
            .unwrap_or_default()
    }

    /// A `stats` value.
    pub fn stat(&self, name: &str) -> u64 {
        let mut c = self.connect();
        c.write_all(b"stats\r\n").expect("write");
        let out = read_until(&mut c, b"END\r\n");
        stat(&String::from_utf8_lossy(&out), name)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        // A failing test shows what the server said last (whether it was still running, and
        // any panic or error it logged), which its assertion alone cannot.
        if std::thread::panicking() {
            let exited = self.child.try_wait().ok().flatten();
            if let Ok(log) = self.log.lock() {
                let tail = &log[log.len().saturating_sub(30)..];
                eprintln!(
                    "--- server {} (exit status: {exited:?}), last {} log lines:\n{}",
                    self.addr,
                    tail.len(),
                    tail.join("\n")
                );
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The number `name` holds in a `stats` reply (`STAT <name> <value>` lines); panics if absent.
pub fn stat(stats: &str, name: &str) -> u64 {
    stats
        .lines()
        .find_map(|l| l.strip_prefix(&format!("STAT {name} ")))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no stat {name} in {stats}"))
}

/// A client connection to `addr` with a 10 s read timeout.
pub fn connect_to(addr: impl ToSocketAddrs) -> TcpStream {
    let s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    s
}

/// Read until the received bytes end with `end` (TCP or unix socket).
pub fn read_until(s: &mut impl Read, end: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut buf = [0u8; 65536];
    while !out.ends_with(end) {
        let n = s.read(&mut buf).expect("read");
        assert!(
            n > 0,
            "connection closed; got {:?}",
            String::from_utf8_lossy(&out)
        );
        out.extend_from_slice(&buf[..n]);
    }
    out
}

/// Read exactly `n` bytes.
pub fn read_exact(s: &mut TcpStream, n: usize) -> Vec<u8> {
    let mut out = vec![0u8; n];
    s.read_exact(&mut out).expect("read_exact");
    out
}

/// Send `req` and read the reply ending with `end`.
pub fn roundtrip<S: Read + Write>(s: &mut S, req: &[u8], end: &[u8]) -> String {
    s.write_all(req).expect("write");
    String::from_utf8_lossy(&read_until(s, end)).into_owned()
}

/// True when the peer closes the connection (EOF) within the read timeout.
pub fn closed(s: &mut TcpStream) -> bool {
    let mut buf = [0u8; 1024];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return true,
            Err(_) => return false,
        }
    }
}

/// `stats <section>` as (name, value) pairs.
pub fn stats_section(s: &mut TcpStream, section: &str) -> Vec<(String, String)> {
    let out = roundtrip(s, format!("stats {section}\r\n").as_bytes(), b"END\r\n");
    out.lines()
        .filter_map(|l| l.strip_prefix("STAT "))
        .filter_map(|l| l.split_once(' '))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// The value of `name` in `pairs`.
pub fn value_of<'a>(pairs: &'a [(String, String)], name: &str) -> &'a str {
    pairs
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
        .unwrap_or_else(|| panic!("no {name} in {pairs:?}"))
}

/// One HTTP/1.1 request (`Connection: close`); returns the status code and the body.
pub fn http(addr: impl ToSocketAddrs, method: &str, target: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).expect("connect admin");
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    write!(
        s,
        "{method} {target} HTTP/1.1\r\nHost: test\r\nContent-Length: 0\r\n\r\n"
    )
    .expect("write");
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).expect("read");
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").expect("http head");
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .expect("status code");
    (code, body.to_string())
}

/// A scratch directory on a real filesystem (the flash engine uses O_DIRECT, which tmpfs
/// refuses): `$FLASH_TEST_DIR` or `/var/tmp`, plus `name` and the test process id.
pub fn scratch_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::var_os("FLASH_TEST_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::PathBuf::from("/var/tmp"));
    let dir = dir.join(format!("flashtier-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create scratch dir");
    dir
}

/// `promtool check metrics` (Debian's `prometheus` package, installed by
/// scripts/install-deps.sh) must report nothing: `_total` counters, HELP and TYPE on every
/// family, base units.
pub fn promtool_clean(text: &str) {
    use std::io::Write as _;
    let mut child = std::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("promtool (apt-get install prometheus; scripts/install-deps.sh does)");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(text.as_bytes())
        .expect("feed promtool");
    let out = child.wait_with_output().expect("promtool");
    let findings = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success() && findings.trim().is_empty(),
        "promtool check metrics: {findings}"
    );
}

/// True when `tool` is on the PATH (tests of real peers skip, loudly, without it).
pub fn have(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

/// xorshift64*: a fixed seed reproduces a run.
pub struct Rng(pub u64);

#[allow(dead_code)]
impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    pub fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }
    /// Log-uniform in `1..=max`: small sizes as often as large ones.
    pub fn size(&mut self, max: usize) -> usize {
        let bits = usize::BITS - max.leading_zeros();
        let b = self.below(bits as usize + 1) as u32;
        (1 + self.below(1usize << b)).min(max)
    }
}

/// `get key`: `None` on a miss, else the item's client flags (tests store a version there)
/// and its value.
#[allow(dead_code)]
pub fn get_flags_value(c: &mut TcpStream, key: &str) -> Option<(u32, Vec<u8>)> {
    c.write_all(format!("get {key}\r\n").as_bytes())
        .expect("write");
    let out = read_until(c, b"END\r\n");
    if out == b"END\r\n" {
        return None;
    }
    let head_end = out.windows(2).position(|w| w == b"\r\n").expect("header");
    let head = String::from_utf8_lossy(&out[..head_end]).to_string();
    let flags: u32 = head
        .split(' ')
        .nth(2)
        .expect("flags")
        .parse()
        .expect("flags");
    Some((flags, out[head_end + 2..out.len() - 7].to_vec()))
}

/// The fields of a `/proc/.../stat` file after the command's closing parenthesis (so the
/// state is `[0]`, the session id `[3]`, utime `[11]`, stime `[12]`); empty if unreadable.
pub fn proc_stat_fields(path: impl AsRef<std::path::Path>) -> Vec<String> {
    let stat = std::fs::read_to_string(path).unwrap_or_default();
    stat.rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().map(str::to_string).collect())
        .unwrap_or_default()
}
