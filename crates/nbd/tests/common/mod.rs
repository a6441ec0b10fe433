//! Helpers shared by the integration tests: scratch directories, an in-process server on a
//! Unix socket (own runtime, so test bodies can run peer binaries synchronously), peer
//! binary detection with loud skips, deterministic random data, and a raw protocol client
//! for byte-level tests.

#![allow(dead_code)]

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use flashtier_nbd::{proto, Export, ListenAddr, Server, ServerConfig};

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// Poll `cond` every 5 ms until it holds; panics naming `what` after `limit`. For a state a
/// server task reaches in its own time: a fixed sleep before the check fails whenever a
/// loaded machine has not scheduled the task yet.
pub fn wait_until(what: &str, limit: Duration, mut cond: impl FnMut() -> bool) {
    let t0 = std::time::Instant::now();
    while !cond() {
        assert!(t0.elapsed() < limit, "timed out after {limit:?}: {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A scratch directory removed on drop.
pub struct TestDir(pub PathBuf);

impl TestDir {
    pub fn new(tag: &str) -> TestDir {
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let p = std::env::temp_dir().join(format!("ftnbd-{}-{tag}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).expect("create test dir");
        TestDir(p)
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TestDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// True if `bin` is on PATH.
pub fn have(bin: &str) -> bool {
    std::env::var_os("PATH")
        .map(|paths| std::env::split_paths(&paths).any(|d| d.join(bin).is_file()))
        .unwrap_or(false)
}

/// Returns false (after printing a loud SKIP line) if any peer binary is missing.
pub fn peers_present(test: &str, bins: &[&str]) -> bool {
    for bin in bins {
        if !have(bin) {
            eprintln!("\n*** SKIP {test}: peer binary `{bin}` not found on PATH ***\n");
            return false;
        }
    }
    true
}

/// True if fio is present and built with the nbd ioengine (prints a loud SKIP otherwise).
pub fn fio_with_nbd(test: &str) -> bool {
    if !peers_present(test, &["fio"]) {
        return false;
    }
    let out = Command::new("fio").arg("--enghelp").output();
    let engines = out
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    if !engines.contains("nbd") {
        eprintln!("\n*** SKIP {test}: fio lacks the nbd ioengine ***\n");
        return false;
    }
    true
}

/// Deterministic pseudo-random bytes (xorshift64*).
pub fn random_bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        out.extend_from_slice(&x.wrapping_mul(0x2545_f491_4f6c_dd1d).to_le_bytes());
    }
    out.truncate(len);
    out
}

/// Runs a command, panicking with its output if it fails.
pub fn run(cmd: &mut Command) -> Output {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("spawn {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// A two-thread tokio runtime, as every test here uses.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

/// An in-process server on `DIR/nbd.sock`, on its own two-thread runtime.
pub struct TestServer {
    pub rt: tokio::runtime::Runtime,
    pub server: Server,
    pub sock: PathBuf,
    serving: Option<tokio::task::JoinHandle<Result<(), flashtier_nbd::Error>>>,
}

impl TestServer {
    pub fn start(dir: &TestDir, exports: Vec<Export>, config: ServerConfig) -> TestServer {
        let rt = runtime();
        let sock = dir.path("nbd.sock");
        let server = Server::new(exports, config).expect("server config");
        let listener = rt
            .block_on(Server::bind(&ListenAddr::Unix(sock.clone())))
            .expect("bind");
        let s = server.clone();
        let serving = rt.spawn(async move { s.serve(listener).await });
        TestServer {
            rt,
            server,
            sock,
            serving: Some(serving),
        }
    }

    pub fn single(dir: &TestDir, backend: Arc<dyn flashtier_backend::BlockBackend>) -> TestServer {
        Self::start(
            dir,
            vec![Export::new("disk", backend)],
            ServerConfig::default(),
        )
    }

    pub fn uri(&self, export: &str) -> String {
        format!("nbd+unix:///{export}?socket={}", self.sock.display())
    }

    /// Graceful shutdown; panics if the server does not stop within 10 s.
    pub fn stop(mut self) {
        self.server.shutdown();
        if let Some(h) = self.serving.take() {
            let r = self
                .rt
                .block_on(async { tokio::time::timeout(Duration::from_secs(10), h).await })
                .expect("server stops within 10 s")
                .expect("serve task");
            r.expect("serve result");
        }
    }
}

/// A blocking raw-protocol connection for byte-level tests.
pub struct Raw {
    pub s: UnixStream,
}

impl Raw {
    pub fn connect(sock: &Path) -> Raw {
        let s = UnixStream::connect(sock).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        Raw { s }
    }

    pub fn read_n(&mut self, n: usize) -> Vec<u8> {
        let mut b = vec![0u8; n];
        self.s.read_exact(&mut b).expect("read from server");
        b
    }

    pub fn u32(&mut self) -> u32 {
        u32::from_be_bytes(self.read_n(4).try_into().expect("4"))
    }

    pub fn u64(&mut self) -> u64 {
        u64::from_be_bytes(self.read_n(8).try_into().expect("8"))
    }

    pub fn send(&mut self, b: &[u8]) {
        self.s.write_all(b).expect("write to server");
    }

    /// Reads the greeting and sends client flags; returns the handshake flags.
    pub fn greet(&mut self, client_flags: u32) -> u16 {
        let g = self.read_n(18);
        assert_eq!(&g[..8], b"NBDMAGIC");
        assert_eq!(&g[8..16], b"IHAVEOPT");
        self.send(&client_flags.to_be_bytes());
        u16::from_be_bytes([g[16], g[17]])
    }

    pub fn option(&mut self, opt: u32, data: &[u8]) {
        let mut b = Vec::new();
        b.extend_from_slice(&proto::OPTS_MAGIC.to_be_bytes());
        b.extend_from_slice(&opt.to_be_bytes());
        b.extend_from_slice(&(data.len() as u32).to_be_bytes());
        b.extend_from_slice(data);
        self.send(&b);
    }

    /// Reads one option reply: (option, type, data).
    pub fn option_reply(&mut self) -> (u32, u32, Vec<u8>) {
        assert_eq!(self.u64(), proto::REP_MAGIC);
        let opt = self.u32();
        let kind = self.u32();
        let len = self.u32() as usize;
        (opt, kind, self.read_n(len))
    }

    /// Full handshake with OPT_GO on `export`; returns (size, transmission flags).
    pub fn go(sock: &Path, export: &str) -> (Raw, u64, u16) {
        let mut r = Raw::connect(sock);
        r.greet(proto::FLAG_C_FIXED_NEWSTYLE | proto::FLAG_C_NO_ZEROES);
        let mut data = (export.len() as u32).to_be_bytes().to_vec();
        data.extend_from_slice(export.as_bytes());
        data.extend_from_slice(&0u16.to_be_bytes());
        r.option(proto::OPT_GO, &data);
        let (mut size, mut flags) = (0, 0);
        loop {
            let (opt, kind, d) = r.option_reply();
            assert_eq!(opt, proto::OPT_GO);
            match kind {
                proto::REP_INFO if d[..2] == [0, 0] => {
                    size = u64::from_be_bytes(d[2..10].try_into().expect("8"));
                    flags = u16::from_be_bytes([d[10], d[11]]);
                }
                proto::REP_INFO => {}
                proto::REP_ACK => return (r, size, flags),
                other => panic!("GO failed: {other:#x} {}", String::from_utf8_lossy(&d)),
            }
        }
    }

    pub fn request(
        &mut self,
        cmd: u16,
        flags: u16,
        handle: u64,
        offset: u64,
        len: u32,
        payload: &[u8],
    ) {
        let mut b = Vec::with_capacity(28 + payload.len());
        b.extend_from_slice(&proto::REQUEST_MAGIC.to_be_bytes());
        b.extend_from_slice(&flags.to_be_bytes());
        b.extend_from_slice(&cmd.to_be_bytes());
        b.extend_from_slice(&handle.to_be_bytes());
        b.extend_from_slice(&offset.to_be_bytes());
        b.extend_from_slice(&len.to_be_bytes());
        b.extend_from_slice(payload);
        self.send(&b);
    }

    /// Reads a simple reply header: (error, handle).
    pub fn reply(&mut self) -> (u32, u64) {
        assert_eq!(self.u32(), proto::SIMPLE_REPLY_MAGIC);
        let err = self.u32();
        (err, self.u64())
    }

    /// True if the server has closed the connection (EOF within the read timeout).
    pub fn closed(&mut self) -> bool {
        let mut b = [0u8; 1];
        match self.s.read(&mut b) {
            Ok(0) => true,
            Err(e) => e.kind() == std::io::ErrorKind::ConnectionReset,
            Ok(_) => false,
        }
    }
}

/// An nbdkit process serving on `DIR/<name>.sock`; killed on drop.
pub struct Nbdkit {
    pub child: std::process::Child,
    pub sock: PathBuf,
}

impl Nbdkit {
    /// Starts `nbdkit -f -U SOCK ARGS...` and waits until the socket accepts connections.
    pub fn start(dir: &TestDir, name: &str, args: &[&str]) -> Nbdkit {
        let sock = dir.path(&format!("{name}.sock"));
        // A killed nbdkit leaves its socket file behind and a new one would refuse to bind.
        let _ = std::fs::remove_file(&sock);
        let child = Command::new("nbdkit")
            .arg("-f")
            .arg("-U")
            .arg(&sock)
            .args(args)
            .spawn()
            .expect("spawn nbdkit");
        let kit = Nbdkit { child, sock };
        for _ in 0..500 {
            if let Ok(s) = UnixStream::connect(&kit.sock) {
                // A polite handshake + OPT_ABORT, so nbdkit logs nothing.
                s.set_read_timeout(Some(Duration::from_secs(10)))
                    .expect("timeout");
                let mut r = Raw { s };
                r.greet(proto::FLAG_C_FIXED_NEWSTYLE);
                r.option(proto::OPT_ABORT, &[]);
                let _ = r.option_reply();
                return kit;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("nbdkit {args:?} did not start");
    }

    pub fn uri(&self) -> String {
        format!("nbd+unix:///?socket={}", self.sock.display())
    }

    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Nbdkit {
    fn drop(&mut self) {
        self.kill();
    }
}
