//! Our client against our server, in process: concurrent writes and reads from many tasks
//! over a pooled NbdClientBackend, checked against the server's RAM image.

mod common;

use std::sync::Arc;

use bytes::Bytes;
use common::{random_bytes, runtime, TestDir, TestServer};
use flashtier_backend::{BlockBackend, MemoryBackend, ZeroFlags};
use flashtier_nbd::NbdClientBackend;

const SIZE: usize = 16 << 20;

#[test]
fn pooled_client_round_trips_through_our_server() {
    let dir = TestDir::new("own");
    let mem = Arc::new(MemoryBackend::new(SIZE));
    let server = TestServer::single(&dir, mem.clone());
    let uri = server.uri("disk");
    let rt = runtime();
    let expected = rt.block_on(async {
        let b = Arc::new(
            NbdClientBackend::connect_str(&uri, 4)
                .await
                .expect("connect"),
        );
        assert_eq!(b.connections(), 4);
        assert_eq!(b.info().name.as_deref(), Some("disk"));
        let mut tasks = Vec::new();
        // 64 tasks each own a 256 KiB slice: write, FUA write, zero a part, read back.
        for t in 0..64u64 {
            let b = Arc::clone(&b);
            tasks.push(tokio::spawn(async move {
                let off = t * (256 << 10);
                let mut data = random_bytes(256 << 10, t);
                b.write(off, Bytes::from(data.clone()), t % 2 == 0)
                    .await
                    .expect("write");
                b.write_zeroes(
                    off + 4096,
                    8192,
                    ZeroFlags {
                        fua: true,
                        no_hole: t % 3 == 0,
                    },
                )
                .await
                .expect("zeroes");
                data[4096..4096 + 8192].fill(0);
                let got = b.read(off, 256 << 10).await.expect("read");
                assert!(got[..] == data[..], "task {t} read back different data");
                data
            }));
        }
        let mut expected = Vec::new();
        for t in tasks {
            expected.extend(t.await.expect("task"));
        }
        b.flush().await.expect("flush");
        b.disconnect().await.expect("disconnect");
        expected
    });
    assert!(mem.snapshot() == expected);
    let t = server.server.stats().totals();
    assert_eq!(
        (t.writes, t.write_zeroes, t.reads, t.errors),
        (64, 64, 64, 0)
    );
    server.stop();
}
