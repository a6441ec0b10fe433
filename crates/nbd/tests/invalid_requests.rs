//! Invalid requests over a raw socket: each gets the spec's error (or a clean close) and
//! never crashes the server or changes data.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{random_bytes, wait_until, Raw, TestDir, TestServer};
use flashtier_backend::MemoryBackend;
use flashtier_nbd::{proto, Export, ServerConfig};

const SIZE: usize = 1 << 20;
const EINVAL: u32 = 22;
const ENOSPC: u32 = 28;
const EPERM: u32 = 1;

fn setup(tag: &str) -> (TestDir, TestServer, Arc<MemoryBackend>, Vec<u8>) {
    let dir = TestDir::new(tag);
    let mem = Arc::new(MemoryBackend::new(SIZE));
    let server = TestServer::single(&dir, mem.clone());
    // Seed known content through the protocol.
    let data = random_bytes(SIZE, 7);
    let (mut r, size, _) = Raw::go(&server.sock, "disk");
    assert_eq!(size, SIZE as u64);
    r.request(proto::CMD_WRITE, 0, 1, 0, SIZE as u32, &data);
    assert_eq!(r.reply(), (0, 1));
    (dir, server, mem, data)
}

/// Reads 4 KiB at 0 on a connection, proving the stream is still in sync.
fn assert_in_sync(r: &mut Raw, data: &[u8], handle: u64) {
    r.request(proto::CMD_READ, 0, handle, 0, 4096, &[]);
    assert_eq!(r.reply(), (0, handle));
    assert_eq!(r.read_n(4096), &data[..4096]);
}

#[test]
fn bad_magic_closes_connection_and_server_survives() {
    let (_dir, server, mem, data) = setup("magic");
    let (mut r, _, _) = Raw::go(&server.sock, "disk");
    let mut junk = [0u8; 28];
    junk[..4].copy_from_slice(&0xdead_beef_u32.to_be_bytes());
    r.send(&junk);
    assert!(r.closed(), "server must close on bad request magic");
    let (mut r2, _, _) = Raw::go(&server.sock, "disk");
    assert_in_sync(&mut r2, &data, 9);
    assert_eq!(mem.snapshot(), data);
    assert!(server.server.stats().totals().errors >= 1);
    server.stop();
}

#[test]
fn out_of_range_gets_einval_or_enospc() {
    let (_dir, server, mem, data) = setup("range");
    let (mut r, _, _) = Raw::go(&server.sock, "disk");
    let end = SIZE as u64;
    r.request(proto::CMD_READ, 0, 1, end - 100, 4096, &[]);
    assert_eq!(r.reply(), (EINVAL, 1));
    r.request(proto::CMD_READ, 0, 2, u64::MAX - 10, 4096, &[]);
    assert_eq!(r.reply(), (EINVAL, 2));
    r.request(proto::CMD_WRITE, 0, 3, end - 100, 4096, &[0xaa; 4096]);
    assert_eq!(r.reply(), (ENOSPC, 3));
    r.request(proto::CMD_WRITE_ZEROES, 0, 4, end, 1, &[]);
    assert_eq!(r.reply(), (ENOSPC, 4));
    r.request(proto::CMD_TRIM, 0, 5, end, 4096, &[]);
    assert_eq!(r.reply(), (EINVAL, 5));
    r.request(proto::CMD_CACHE, 0, 6, u64::MAX, 1, &[]);
    assert_eq!(r.reply(), (EINVAL, 6));
    assert_in_sync(&mut r, &data, 7);
    assert_eq!(
        mem.snapshot(),
        data,
        "rejected requests must not change data"
    );
    server.stop();
}

#[test]
fn oversized_requests_get_einval_and_stream_stays_in_sync() {
    let (_dir, server, mem, data) = setup("oversize");
    let (mut r, _, _) = Raw::go(&server.sock, "disk");
    let over = proto::DEFAULT_MAX_PAYLOAD + 4096;
    r.request(proto::CMD_READ, 0, 1, 0, over, &[]);
    assert_eq!(r.reply(), (EINVAL, 1));
    // An oversized WRITE's payload is drained so the next header is found.
    let payload = vec![0x55u8; over as usize];
    r.request(proto::CMD_WRITE, 0, 2, 0, over, &payload);
    assert_eq!(r.reply(), (EINVAL, 2));
    assert_in_sync(&mut r, &data, 3);
    assert_eq!(mem.snapshot(), data);
    server.stop();
}

#[test]
fn write_beyond_discard_limit_closes_connection() {
    let dir = TestDir::new("discard");
    let mem = Arc::new(MemoryBackend::new(SIZE));
    let config = ServerConfig {
        max_discard: 1 << 26,
        ..ServerConfig::default()
    };
    let server = TestServer::start(&dir, vec![Export::new("disk", mem.clone())], config);
    let (mut r, _, _) = Raw::go(&server.sock, "disk");
    r.request(proto::CMD_WRITE, 0, 1, 0, u32::MAX, &[1, 2, 3]);
    assert!(r.closed(), "a 4 GiB write is treated as denial of service");
    assert!(mem.snapshot().iter().all(|&b| b == 0));
    let (mut r2, _, _) = Raw::go(&server.sock, "disk");
    r2.request(proto::CMD_FLUSH, 0, 2, 0, 0, &[]);
    assert_eq!(r2.reply(), (0, 2));
    server.stop();
}

#[test]
fn unknown_command_and_flags_get_einval() {
    let (_dir, server, mem, data) = setup("unknown");
    let (mut r, _, _) = Raw::go(&server.sock, "disk");
    r.request(42, 0, 1, 0, 4096, &[]);
    assert_eq!(r.reply(), (EINVAL, 1));
    r.request(proto::CMD_BLOCK_STATUS, 0, 2, 0, 4096, &[]);
    assert_eq!(r.reply(), (EINVAL, 2));
    r.request(proto::CMD_READ, 1 << 9, 3, 0, 4096, &[]);
    assert_eq!(r.reply(), (EINVAL, 3));
    // NO_HOLE is only valid on WRITE_ZEROES; the payload is still consumed.
    r.request(proto::CMD_WRITE, proto::CMD_FLAG_NO_HOLE, 4, 0, 8, &[9; 8]);
    assert_eq!(r.reply(), (EINVAL, 4));
    // FUA is accepted on every command, as the spec requires once SEND_FUA is advertised.
    r.request(proto::CMD_READ, proto::CMD_FLAG_FUA, 5, 0, 16, &[]);
    assert_eq!(r.reply(), (0, 5));
    assert_eq!(r.read_n(16), &data[..16]);
    assert_in_sync(&mut r, &data, 6);
    assert_eq!(mem.snapshot(), data);
    let t = server.server.stats().totals();
    assert_eq!(t.unknown, 2);
    server.stop();
}

#[test]
fn abrupt_disconnect_mid_request_leaves_data_intact() {
    let (_dir, server, mem, data) = setup("abrupt");
    {
        let (mut r, _, _) = Raw::go(&server.sock, "disk");
        // Header announces 64 KiB, only half the payload arrives, then the socket drops.
        r.request(proto::CMD_WRITE, 0, 1, 0, 65536, &[0xee; 32768]);
    }
    {
        let (mut r, _, _) = Raw::go(&server.sock, "disk");
        // Half a header, then drop.
        r.send(&proto::REQUEST_MAGIC.to_be_bytes());
    }
    // Both connections closed on the server's side (their in-flight WRITE ended with them),
    // however late a loaded machine runs it: after a fixed 100 ms sleep the first one's
    // in-flight count could still be live at the check below.
    wait_until(
        "both aborted connections closed",
        Duration::from_secs(60),
        || server.server.stats().connections_active() == 0,
    );
    let (mut r, _, _) = Raw::go(&server.sock, "disk");
    assert_in_sync(&mut r, &data, 2);
    assert_eq!(mem.snapshot(), data, "a partial WRITE must not be applied");
    assert_eq!(server.server.stats().totals().in_flight, 0);
    server.stop();
}

#[test]
fn read_only_export_refuses_writes_with_eperm() {
    let dir = TestDir::new("ro");
    let img = dir.path("img");
    std::fs::write(&img, random_bytes(SIZE, 3)).expect("write image");
    let file = flashtier_backend::FileBackend::open(&img, true).expect("open");
    let server = TestServer::single(&dir, Arc::new(file));
    let (mut r, _, flags) = Raw::go(&server.sock, "disk");
    assert_ne!(flags & proto::FLAG_READ_ONLY, 0);
    r.request(proto::CMD_WRITE, 0, 1, 0, 4, &[1, 2, 3, 4]);
    assert_eq!(r.reply(), (EPERM, 1));
    r.request(proto::CMD_TRIM, 0, 2, 0, 4096, &[]);
    assert_eq!(r.reply(), (EPERM, 2));
    r.request(proto::CMD_FLUSH, 0, 3, 0, 0, &[]);
    assert_eq!(r.reply(), (0, 3));
    assert_eq!(std::fs::read(&img).expect("read"), random_bytes(SIZE, 3));
    server.stop();
}

/// A RAM device that advertises a 512-byte minimum block size.
struct Sectors(MemoryBackend);

impl flashtier_backend::BlockBackend for Sectors {
    fn size(&self) -> u64 {
        self.0.size()
    }
    fn block_sizes(&self) -> flashtier_backend::BlockSizes {
        flashtier_backend::BlockSizes {
            min: 512,
            ..Default::default()
        }
    }
    fn can_multi_conn(&self) -> bool {
        true
    }
    fn read(&self, offset: u64, len: u32) -> flashtier_backend::BackendFuture<'_, bytes::Bytes> {
        self.0.read(offset, len)
    }
    fn write(
        &self,
        o: u64,
        d: bytes::Bytes,
        fua: bool,
    ) -> flashtier_backend::BackendFuture<'_, ()> {
        self.0.write(o, d, fua)
    }
    fn flush(&self) -> flashtier_backend::BackendFuture<'_, ()> {
        self.0.flush()
    }
    fn trim(&self, offset: u64, len: u32) -> flashtier_backend::BackendFuture<'_, ()> {
        self.0.trim(offset, len)
    }
    fn write_zeroes(
        &self,
        offset: u64,
        len: u32,
        flags: flashtier_backend::ZeroFlags,
    ) -> flashtier_backend::BackendFuture<'_, ()> {
        self.0.write_zeroes(offset, len, flags)
    }
}

#[test]
fn unaligned_requests_get_einval_when_a_minimum_block_size_is_advertised() {
    let dir = TestDir::new("align");
    let server = TestServer::single(&dir, Arc::new(Sectors(MemoryBackend::new(SIZE))));
    let (mut r, _, _) = Raw::go(&server.sock, "disk");
    r.request(proto::CMD_READ, 0, 1, 100, 512, &[]);
    assert_eq!(r.reply(), (EINVAL, 1));
    r.request(proto::CMD_WRITE, 0, 2, 512, 100, &[1; 100]);
    assert_eq!(r.reply(), (EINVAL, 2));
    r.request(proto::CMD_READ, 0, 3, 512, 1024, &[]);
    assert_eq!(r.reply(), (0, 3));
    assert_eq!(r.read_n(1024), vec![0; 1024]);
    server.stop();
}
