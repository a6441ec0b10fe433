//! A binary-protocol request (first byte 0x80) is answered by closing the connection, never
//! by a hang.
mod common;
use std::io::Write;

use common::{closed, roundtrip, Server};

#[test]
fn binary_request_is_closed() {
    let server = Server::start(&[]);
    let mut c = server.connect();
    // A binary GET header for key "a".
    let mut req = vec![0x80, 0x00, 0x00, 0x01, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0];
    req.extend_from_slice(&[0; 8]);
    req.push(b'a');
    c.write_all(&req).unwrap();
    assert!(closed(&mut c));
    assert_eq!(server.stat("binary_protocol_rejected"), 1);
    let mut d = server.connect();
    assert_eq!(roundtrip(&mut d, b"mn\r\n", b"MN\r\n"), "MN\r\n");
}
