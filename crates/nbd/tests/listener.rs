//! Listening: a stale Unix socket left by a killed server is replaced, a live one or a
//! regular file is not; TCP on an ephemeral port works end to end with our own client;
//! a backend that cannot share flushes across connections is served without CAN_MULTI_CONN.

mod common;

use std::sync::Arc;

use bytes::Bytes;
use common::{runtime, Raw, TestDir, TestServer};
use flashtier_backend::{BackendFuture, BlockBackend, MemoryBackend, ZeroFlags};
use flashtier_nbd::{proto, Export, ListenAddr, NbdClientBackend, Server, ServerConfig};

#[test]
fn stale_unix_socket_is_replaced_but_live_socket_and_files_are_not() {
    let dir = TestDir::new("listen");
    let rt = runtime();
    let path = dir.path("stale.sock");
    drop(std::os::unix::net::UnixListener::bind(&path).expect("bind"));
    assert!(
        path.exists(),
        "a dropped listener leaves its socket file, like kill -9"
    );
    let addr = ListenAddr::Unix(path.clone());
    let live = rt
        .block_on(Server::bind(&addr))
        .expect("stale socket replaced");
    assert!(
        rt.block_on(Server::bind(&addr)).is_err(),
        "a live socket must not be stolen"
    );
    drop(live);
    assert!(
        !path.exists(),
        "the socket file is removed when the listener drops"
    );

    let file = dir.path("not-a-socket");
    std::fs::write(&file, b"keep me").expect("file");
    assert!(rt
        .block_on(Server::bind(&ListenAddr::Unix(file.clone())))
        .is_err());
    assert_eq!(std::fs::read(&file).expect("still there"), b"keep me");
}

#[test]
fn tcp_listener_serves_our_client() {
    let rt = runtime();
    rt.block_on(async {
        let mem = Arc::new(MemoryBackend::new(1 << 20));
        let server = Server::new(vec![Export::new("t", mem.clone())], ServerConfig::default())
            .expect("server");
        let listener = Server::bind(&"127.0.0.1:0".parse().expect("addr"))
            .await
            .expect("bind");
        let ListenAddr::Tcp(addr) = listener.local_addr().expect("addr") else {
            panic!("tcp listener");
        };
        let s = server.clone();
        let serving = tokio::spawn(async move { s.serve(listener).await });
        let client = NbdClientBackend::connect_str(&format!("nbd://{addr}/t"), 2)
            .await
            .expect("connect");
        client
            .write(4096, Bytes::from_static(b"over tcp"), true)
            .await
            .expect("write");
        assert_eq!(&client.read(4096, 8).await.expect("read")[..], b"over tcp");
        client.disconnect().await.expect("disconnect");
        assert_eq!(&mem.snapshot()[4096..4104], b"over tcp");
        server.shutdown();
        serving.await.expect("join").expect("serve");
    });
}

/// A RAM device that claims each connection has its own cache.
struct PrivateCache(MemoryBackend);

impl BlockBackend for PrivateCache {
    fn size(&self) -> u64 {
        self.0.size()
    }
    fn can_multi_conn(&self) -> bool {
        false
    }
    fn read(&self, offset: u64, len: u32) -> BackendFuture<'_, Bytes> {
        self.0.read(offset, len)
    }
    fn write(&self, offset: u64, data: Bytes, fua: bool) -> BackendFuture<'_, ()> {
        self.0.write(offset, data, fua)
    }
    fn flush(&self) -> BackendFuture<'_, ()> {
        self.0.flush()
    }
    fn trim(&self, offset: u64, len: u32) -> BackendFuture<'_, ()> {
        self.0.trim(offset, len)
    }
    fn write_zeroes(&self, offset: u64, len: u32, flags: ZeroFlags) -> BackendFuture<'_, ()> {
        self.0.write_zeroes(offset, len, flags)
    }
}

#[test]
fn multi_conn_is_advertised_only_when_the_backend_allows_it() {
    let dir = TestDir::new("multiconn");
    let shared = Export::new("shared", Arc::new(MemoryBackend::new(4096)));
    let private = Export::new("private", Arc::new(PrivateCache(MemoryBackend::new(4096))));
    let server = TestServer::start(&dir, vec![shared, private], ServerConfig::default());
    let (_, _, flags) = Raw::go(&server.sock, "shared");
    assert_ne!(flags & proto::FLAG_CAN_MULTI_CONN, 0);
    let (_, _, flags) = Raw::go(&server.sock, "private");
    assert_eq!(flags & proto::FLAG_CAN_MULTI_CONN, 0);
    server.stop();
}
