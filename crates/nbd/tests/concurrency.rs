//! Concurrency in the transmission phase: replies leave in completion order, the in-flight
//! bound holds, and a graceful shutdown answers in-flight requests before closing.

mod common;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use common::{wait_until, Raw, TestDir, TestServer};
use flashtier_backend::{BackendFuture, BlockBackend, MemoryBackend, ZeroFlags};
use flashtier_nbd::{proto, Export, ServerConfig};
use tokio::sync::Semaphore;

/// A RAM device whose reads at offset 0 wait until the test releases a permit.
struct GatedBackend {
    mem: MemoryBackend,
    gate: Arc<Semaphore>,
}

impl BlockBackend for GatedBackend {
    fn size(&self) -> u64 {
        self.mem.size()
    }
    fn can_multi_conn(&self) -> bool {
        true
    }
    fn read(&self, offset: u64, len: u32) -> BackendFuture<'_, Bytes> {
        Box::pin(async move {
            if offset == 1 << 19 {
                panic!("injected backend panic (expected in this test)");
            }
            if offset == 0 {
                let permit = self
                    .gate
                    .acquire()
                    .await
                    .map_err(|_| flashtier_backend::BackendError::Shutdown)?;
                permit.forget();
            }
            self.mem.read(offset, len).await
        })
    }
    fn write(&self, offset: u64, data: Bytes, fua: bool) -> BackendFuture<'_, ()> {
        self.mem.write(offset, data, fua)
    }
    fn flush(&self) -> BackendFuture<'_, ()> {
        self.mem.flush()
    }
    fn trim(&self, offset: u64, len: u32) -> BackendFuture<'_, ()> {
        self.mem.trim(offset, len)
    }
    fn write_zeroes(&self, offset: u64, len: u32, flags: ZeroFlags) -> BackendFuture<'_, ()> {
        self.mem.write_zeroes(offset, len, flags)
    }
}

fn gated(dir: &TestDir, config: ServerConfig) -> (TestServer, Arc<Semaphore>) {
    let gate = Arc::new(Semaphore::new(0));
    let backend = GatedBackend {
        mem: MemoryBackend::new(1 << 20),
        gate: gate.clone(),
    };
    (
        TestServer::start(dir, vec![Export::new("disk", Arc::new(backend))], config),
        gate,
    )
}

#[test]
fn replies_are_sent_out_of_order_as_requests_complete() {
    let dir = TestDir::new("ooo");
    let (server, gate) = gated(&dir, ServerConfig::default());
    let (mut r, _, _) = Raw::go(&server.sock, "disk");
    r.request(proto::CMD_READ, 0, 1, 0, 512, &[]);
    r.request(proto::CMD_WRITE, 0, 2, 8192, 4, &[1, 2, 3, 4]);
    assert_eq!(
        r.reply(),
        (0, 2),
        "the write completes while the first read is blocked"
    );
    r.request(proto::CMD_READ, 0, 3, 8192, 4, &[]);
    assert_eq!(r.reply(), (0, 3));
    assert_eq!(r.read_n(4), vec![1, 2, 3, 4]);
    gate.add_permits(1);
    assert_eq!(r.reply(), (0, 1));
    assert_eq!(r.read_n(512), vec![0; 512]);
    server.stop();
}

#[test]
fn in_flight_requests_are_bounded_per_connection() {
    let dir = TestDir::new("bound");
    let config = ServerConfig {
        max_in_flight: 2,
        ..ServerConfig::default()
    };
    let (server, gate) = gated(&dir, config);
    let (mut r, _, _) = Raw::go(&server.sock, "disk");
    for h in 1..=5 {
        r.request(proto::CMD_READ, 0, h, 0, 16, &[]);
    }
    // The reader takes the first two in its own time (a loaded machine can need far more
    // than a fixed 200 ms); then give it as long again to wrongly read a third.
    let t0 = std::time::Instant::now();
    wait_until("two requests in flight", Duration::from_secs(60), || {
        server.server.stats().totals().in_flight >= 2
    });
    std::thread::sleep(Duration::from_millis(200).max(t0.elapsed()));
    let conns = server.server.stats().connections();
    assert_eq!(conns.len(), 1);
    assert_eq!(conns[0].export.as_deref(), Some("disk"));
    assert_eq!(conns[0].peer, "unix");
    assert_eq!(
        conns[0].stats.in_flight, 2,
        "the reader waits for a free slot"
    );
    assert_eq!(
        conns[0].stats.reads, 2,
        "requests beyond the bound are not read yet"
    );
    gate.add_permits(5);
    let mut handles: Vec<u64> = (0..5)
        .map(|_| {
            let (err, h) = r.reply();
            assert_eq!(err, 0);
            r.read_n(16);
            h
        })
        .collect();
    handles.sort_unstable();
    assert_eq!(handles, vec![1, 2, 3, 4, 5]);
    let t = server.server.stats().totals();
    assert_eq!((t.max_in_flight, t.reads, t.in_flight), (2, 5, 0));
    server.stop();
}

#[test]
fn graceful_shutdown_answers_in_flight_requests() {
    let dir = TestDir::new("shutdown");
    let (server, gate) = gated(&dir, ServerConfig::default());
    let (mut r, _, _) = Raw::go(&server.sock, "disk");
    // A second client stalls in the handshake; it must not delay the shutdown.
    let mut idle = Raw::connect(&server.sock);
    idle.read_n(18);
    r.request(proto::CMD_READ, 0, 1, 0, 64, &[]);
    // In flight means read by the server: a request still in the socket at shutdown is never
    // read (the reader stops), so a fixed sleep here would fail if the reader ran late.
    wait_until("the read in flight", Duration::from_secs(60), || {
        server.server.stats().totals().in_flight == 1
    });
    server.server.shutdown();
    assert!(
        idle.closed(),
        "a client idle in the handshake is dropped at shutdown"
    );
    std::thread::sleep(Duration::from_millis(100));
    gate.add_permits(1);
    assert_eq!(r.reply(), (0, 1));
    assert_eq!(r.read_n(64), vec![0; 64]);
    assert!(r.closed(), "connection closes after its in-flight requests");
    let sock = server.sock.clone();
    server.stop();
    assert!(!sock.exists(), "the socket file is removed on shutdown");
}

#[test]
fn a_panicking_backend_call_gets_eio_and_the_connection_lives_on() {
    let dir = TestDir::new("panic");
    let (server, _gate) = gated(&dir, ServerConfig::default());
    let (mut r, _, _) = Raw::go(&server.sock, "disk");
    r.request(proto::CMD_READ, 0, 1, 1 << 19, 512, &[]);
    assert_eq!(
        r.reply(),
        (5, 1),
        "EIO for the request whose backend call panicked"
    );
    r.request(proto::CMD_READ, 0, 2, 4096, 512, &[]);
    assert_eq!(r.reply(), (0, 2));
    assert_eq!(r.read_n(512), vec![0; 512]);
    assert_eq!(server.server.stats().totals().in_flight, 0);
    server.stop();
}
