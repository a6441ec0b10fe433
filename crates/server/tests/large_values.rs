//! Values up to the item limit round-trip; a larger one is swallowed and rejected without
//! buffering it, and the connection stays usable.
mod common;
use std::io::Write;

use common::{read_exact, read_until, roundtrip, Server};

#[test]
fn value_at_the_limit_round_trips() {
    let server = Server::start(&["--max-item-size", "1MiB"]);
    let mut c = server.connect();
    let value: Vec<u8> = (0..1 << 20).map(|i| (i % 251) as u8).collect();
    let mut req = format!("set big 1 0 {}\r\n", value.len()).into_bytes();
    req.extend_from_slice(&value);
    req.extend_from_slice(b"\r\n");
    assert_eq!(roundtrip(&mut c, &req, b"\r\n"), "STORED\r\n");
    c.write_all(b"get big\r\n").unwrap();
    let header = format!("VALUE big 1 {}\r\n", value.len());
    assert_eq!(read_exact(&mut c, header.len()), header.as_bytes());
    assert_eq!(read_exact(&mut c, value.len()), value);
    assert_eq!(read_exact(&mut c, 7), b"\r\nEND\r\n");
}

#[test]
fn oversized_value_is_swallowed() {
    let server = Server::start(&["--max-item-size", "64k"]);
    let mut c = server.connect();
    assert_eq!(
        roundtrip(&mut c, b"set k 0 0 1\r\nx\r\n", b"\r\n"),
        "STORED\r\n"
    );
    let rss_before = server.rss_kib();
    // 32 MiB announced and sent in pieces: must be discarded as it streams in.
    let len = 32 << 20;
    c.write_all(format!("set k 0 0 {len}\r\n").as_bytes())
        .unwrap();
    let chunk = vec![b'z'; 1 << 20];
    for _ in 0..32 {
        c.write_all(&chunk).unwrap();
    }
    c.write_all(b"\r\nget k\r\nmn\r\n").unwrap();
    let out = read_until(&mut c, b"MN\r\n");
    // memcached drops the old item of a failed set.
    assert_eq!(
        String::from_utf8_lossy(&out),
        "SERVER_ERROR object too large for cache\r\nEND\r\nMN\r\n"
    );
    let grew = server.rss_kib().saturating_sub(rss_before);
    assert!(
        grew < 8 * 1024,
        "RSS grew by {grew} KiB while swallowing 32 MiB"
    );
    assert_eq!(
        roundtrip(&mut c, b"set k 0 0 2\r\nok\r\nget k\r\n", b"END\r\n"),
        "STORED\r\nVALUE k 0 2\r\nok\r\nEND\r\n"
    );
}

#[test]
fn meta_set_too_large() {
    let server = Server::start(&["--max-item-size", "1k"]);
    let mut c = server.connect();
    let mut req = b"ms k 2000 T0\r\n".to_vec();
    req.extend_from_slice(&[b'x'; 2000]);
    req.extend_from_slice(b"\r\nmn\r\n");
    assert_eq!(
        roundtrip(&mut c, &req, b"MN\r\n"),
        "SERVER_ERROR object too large for cache\r\nMN\r\n"
    );
}
