//! Many clients at once: read-modify-write commands stay atomic across connections and every
//! client gets exactly its own replies.
mod common;
use std::io::Write;

use common::{read_until, roundtrip, Server};

#[test]
fn concurrent_incr_and_cas_are_atomic() {
    let server = Server::start(&["--threads", "4"]);
    let mut c = server.connect();
    assert_eq!(
        roundtrip(&mut c, b"set n 0 0 1\r\n0\r\n", b"\r\n"),
        "STORED\r\n"
    );
    let clients = 8;
    let per = 300;
    let handles: Vec<_> = (0..clients)
        .map(|id| {
            let mut s = server.connect();
            std::thread::spawn(move || {
                // Pipeline incrs and private sets/gets; check every reply belongs to us.
                let mut req = Vec::new();
                for i in 0..per {
                    req.extend_from_slice(b"incr n 1\r\n");
                    req.extend_from_slice(
                        format!("set c{id} 0 0 4\r\n{i:04}\r\nget c{id}\r\n").as_bytes(),
                    );
                }
                req.extend_from_slice(b"mn\r\n");
                s.write_all(&req).unwrap();
                let out = String::from_utf8(read_until(&mut s, b"MN\r\n")).unwrap();
                let mut lines = out.split("\r\n");
                for i in 0..per {
                    let n: u64 = lines.next().unwrap().parse().expect("incr reply");
                    assert!(n >= 1 && n <= (clients * per) as u64);
                    assert_eq!(lines.next(), Some("STORED"));
                    assert_eq!(lines.next(), Some(format!("VALUE c{id} 0 4").as_str()));
                    assert_eq!(lines.next(), Some(format!("{i:04}").as_str()));
                    assert_eq!(lines.next(), Some("END"));
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let out = roundtrip(&mut c, b"get n\r\n", b"END\r\n");
    let total = clients * per;
    assert_eq!(
        out,
        format!(
            "VALUE n 0 {}\r\n{total}\r\nEND\r\n",
            total.to_string().len()
        )
    );
}
