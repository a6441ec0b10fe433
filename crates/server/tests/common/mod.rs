//! Shared helpers for the integration tests: start the real `flashtier` binary on a free
//! port and talk raw protocol bytes to it.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// A running `flashtier kv`, killed when dropped.
pub struct Server {
    pub child: Child,
    pub addr: SocketAddr,
}

impl Server {
    /// Start `flashtier kv --listen 127.0.0.1:0 -v <extra>` and wait until it listens.
    pub fn start(extra: &[&str]) -> Server {
        let mut child = Command::new(env!("CARGO_BIN_EXE_flashtier"))
            .args(["kv", "--listen", "127.0.0.1:0", "-v"])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start flashtier");
        let stderr = child.stderr.take().expect("stderr");
        let mut lines = BufReader::new(stderr).lines();
        let addr = loop {
            let line = lines
                .next()
                .expect("flashtier exited before listening")
                .expect("read");
            if let Some(rest) = line.strip_prefix("flashtier kv: listening on ") {
                let addr = rest.split_whitespace().next().expect("address");
                break addr.parse().expect("socket address");
            }
        };
        // Keep draining stderr so the server never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        Server { child, addr }
    }

    pub fn connect(&self) -> TcpStream {
        let s = TcpStream::connect(self.addr).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        s
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

    /// A `stats` value.
    pub fn stat(&self, name: &str) -> u64 {
        let mut c = self.connect();
        c.write_all(b"stats\r\n").expect("write");
        let out = read_until(&mut c, b"END\r\n");
        let text = String::from_utf8_lossy(&out);
        let prefix = format!("STAT {name} ");
        text.lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("no stat {name} in {text}"))
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Read until the received bytes end with `end`.
pub fn read_until(s: &mut TcpStream, end: &[u8]) -> Vec<u8> {
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
pub fn roundtrip(s: &mut TcpStream, req: &[u8], end: &[u8]) -> String {
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
