//! A client that sends requests but does not read replies stalls only itself: the server
//! stops reading from it instead of buffering replies without bound, other clients are
//! served, and every reply arrives once the client reads.
mod common;
use std::io::{Read, Write};
use std::time::Duration;

use common::{roundtrip, Server};

#[test]
fn slow_reader_is_bounded() {
    let server = Server::start(&[]);
    let mut c = server.connect();
    let value = vec![b'v'; 100 * 1024];
    let mut req = format!("set big 0 0 {}\r\n", value.len()).into_bytes();
    req.extend_from_slice(&value);
    req.extend_from_slice(b"\r\n");
    assert_eq!(roundtrip(&mut c, &req, b"\r\n"), "STORED\r\n");
    let before = server.rss_kib();
    // 2000 gets = ~200 MiB of replies; the client reads none of them yet.
    let gets = 2000usize;
    let writer = {
        let mut w = c.try_clone().unwrap();
        std::thread::spawn(move || {
            let line = b"get big\r\n".repeat(gets);
            // The server stops reading once its output backs up, so this write may block
            // until the reader below drains.
            w.write_all(&line).unwrap();
        })
    };
    std::thread::sleep(Duration::from_millis(500));
    let grew = server.rss_kib().saturating_sub(before);
    assert!(
        grew < 32 * 1024,
        "server RSS grew {grew} KiB for an unread pipeline"
    );
    let mut other = server.connect();
    assert_eq!(roundtrip(&mut other, b"mn\r\n", b"MN\r\n"), "MN\r\n");
    let per = format!("VALUE big 0 {}\r\n", value.len()).len() + value.len() + 2 + 5;
    let mut total = 0usize;
    let mut buf = vec![0u8; 1 << 20];
    while total < per * gets {
        let n = c.read(&mut buf).unwrap();
        assert!(n > 0);
        total += n;
    }
    assert_eq!(total, per * gets);
    writer.join().unwrap();
}
