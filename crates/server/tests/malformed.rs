//! Malformed input gets memcached's replies and the connection stays usable where memcached
//! keeps it; an over-long line closes it.
mod common;
use std::io::Write;

use common::{closed, roundtrip, Server};

#[test]
fn errors_keep_the_connection() {
    let server = Server::start(&[]);
    let mut c = server.connect();
    let req = b"bogus\r\nset a b c d\r\nset a 0 0 1\r\nxyz\r\nincr a x\r\nmg a zz\r\nmg\r\nms a 1 MZ\r\nq\r\nget a\r\nmn\r\n";
    let out = roundtrip(&mut c, req, b"MN\r\n");
    assert_eq!(
        out,
        "ERROR\r\nCLIENT_ERROR bad command line format\r\nCLIENT_ERROR bad data chunk\r\nERROR\r\n\
         CLIENT_ERROR invalid numeric delta argument\r\nCLIENT_ERROR invalid flag\r\nERROR\r\n\
         CLIENT_ERROR invalid mode for ms M token\r\nEND\r\nMN\r\n"
    );
}

#[test]
fn line_without_newline_closes() {
    let server = Server::start(&[]);
    let mut c = server.connect();
    c.write_all(&[b'x'; 4096]).unwrap();
    assert!(
        closed(&mut c),
        "server should close after 2048 bytes without a newline"
    );
    // The server is still fine for others.
    let mut d = server.connect();
    assert_eq!(roundtrip(&mut d, b"mn\r\n", b"MN\r\n"), "MN\r\n");
}

#[test]
fn long_multiget_line_is_accepted() {
    let server = Server::start(&[]);
    let mut c = server.connect();
    let keys: Vec<String> = (0..2000).map(|i| format!("key{i:05}")).collect();
    let line = format!("get {}\r\n", keys.join(" "));
    assert!(line.len() > 16_000);
    // Send it slowly so the server sees the line without its newline for a while.
    let (a, b) = line.as_bytes().split_at(line.len() - 10);
    c.write_all(a).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(50));
    c.write_all(b).unwrap();
    assert_eq!(roundtrip(&mut c, b"", b"END\r\n"), "END\r\n");
}

#[test]
fn quit_closes() {
    let server = Server::start(&[]);
    let mut c = server.connect();
    c.write_all(b"mn\r\nquit\r\nmn\r\n").unwrap();
    let mut buf = Vec::new();
    use std::io::Read;
    c.read_to_end(&mut buf).unwrap();
    assert_eq!(buf, b"MN\r\n");
}
