//! Many requests in one write are all answered, in order, with nothing lost.
mod common;
use std::io::Write;

use common::{read_until, Server};

#[test]
fn pipelined_requests_answer_in_order() {
    let server = Server::start(&[]);
    let mut c = server.connect();
    let mut req = Vec::new();
    let mut expect = String::new();
    for i in 0..2000 {
        req.extend_from_slice(
            format!("set k{i} {i} 0 {}\r\nv{i}\r\n", format!("v{i}").len()).as_bytes(),
        );
        req.extend_from_slice(
            format!("get k{i}\r\nmg k{i} v f q\r\nmg nope{i} v q\r\n").as_bytes(),
        );
        expect.push_str(&format!(
            "STORED\r\nVALUE k{i} {i} {len}\r\nv{i}\r\nEND\r\nVA {len} f{i}\r\nv{i}\r\n",
            len = format!("v{i}").len()
        ));
    }
    req.extend_from_slice(b"mn\r\n");
    expect.push_str("MN\r\n");
    c.write_all(&req).unwrap();
    let out = read_until(&mut c, b"MN\r\n");
    assert_eq!(String::from_utf8_lossy(&out), expect);
}

#[test]
fn request_split_across_writes() {
    let server = Server::start(&[]);
    let mut c = server.connect();
    let req = b"set split 0 0 10\r\n0123456789\r\nget split\r\n";
    for b in req.iter() {
        c.write_all(&[*b]).unwrap();
        c.flush().unwrap();
    }
    let out = read_until(&mut c, b"END\r\n");
    assert_eq!(out, b"STORED\r\nVALUE split 0 10\r\n0123456789\r\nEND\r\n");
}
