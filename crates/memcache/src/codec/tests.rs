//! Decoder tests: incremental input, swallowing, limits, and random bytes.
#![allow(clippy::indexing_slicing)]
use bytes::BytesMut;
use proptest::prelude::*;

use super::*;
use crate::request::{Retrieval, StoreMode};

fn decoder() -> Decoder {
    Decoder::new(Limits {
        max_item_size: 100,
        ..Limits::default()
    })
}

fn one(input: &[u8]) -> Decoded {
    let mut buf = BytesMut::from(input);
    decoder().decode(&mut buf)
}

#[test]
fn incomplete_until_whole_command() {
    let full = b"set k 3 0 5\r\nhello\r\n";
    let mut d = decoder();
    for cut in 0..full.len() {
        let mut buf = BytesMut::from(&full[..cut]);
        assert_eq!(d.decode(&mut buf), Decoded::Incomplete, "cut at {cut}");
        assert_eq!(buf.len(), cut, "nothing consumed while incomplete");
    }
    let mut buf = BytesMut::from(&full[..]);
    match d.decode(&mut buf) {
        Decoded::Request {
            request: Request::Storage(s),
            swallow: 0,
        } => {
            assert_eq!(s.mode, StoreMode::Set);
            assert_eq!(&s.key[..], b"k");
            assert_eq!(s.flags, 3);
            assert_eq!(&s.value[..], b"hello");
        }
        other => panic!("{other:?}"),
    }
    assert!(buf.is_empty());
}

#[test]
fn pipelined_requests_decode_one_by_one() {
    let mut buf = BytesMut::from(&b"get a b\r\nmn\r\nver"[..]);
    let mut d = decoder();
    let first = d.decode(&mut buf);
    let keys = match first {
        Decoded::Request {
            request: Request::Retrieval(Retrieval { keys, .. }),
            ..
        } => keys,
        other => panic!("{other:?}"),
    };
    assert_eq!(keys.len(), 2);
    assert_eq!(
        d.decode(&mut buf),
        Decoded::Request {
            request: Request::MetaNoop,
            swallow: 0
        }
    );
    assert_eq!(d.decode(&mut buf), Decoded::Incomplete);
    assert_eq!(&buf[..], b"ver");
}

#[test]
fn bare_newline_and_missing_cr() {
    assert!(matches!(
        one(b"mn\n"),
        Decoded::Request {
            request: Request::MetaNoop,
            ..
        }
    ));
    assert_eq!(
        one(b"\r\n"),
        Decoded::Request {
            request: Request::Reply {
                line: "ERROR",
                noreply: false
            },
            swallow: 0
        }
    );
}

#[test]
fn oversized_value_is_swallowed_not_buffered() {
    let mut buf = BytesMut::from(&b"set k 0 0 1000\r\nxxxx"[..]);
    match decoder().decode(&mut buf) {
        Decoded::Request {
            request:
                Request::TooLarge {
                    drop_existing: true,
                    ..
                },
            swallow,
        } => {
            assert_eq!(swallow, 1002);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(&buf[..], b"xxxx", "only the line was consumed");
}

#[test]
fn binary_protocol_closes_only_at_start() {
    assert_eq!(
        one(b"\x80\x01\x00\x05"),
        Decoded::Close(CloseReason::BinaryProtocol)
    );
    let mut d = decoder();
    let mut buf = BytesMut::from(&b"mn\r\n\x80\r\n"[..]);
    assert!(matches!(d.decode(&mut buf), Decoded::Request { .. }));
    assert_eq!(
        d.decode(&mut buf),
        Decoded::Request {
            request: Request::Reply {
                line: "ERROR",
                noreply: false
            },
            swallow: 0
        }
    );
}

#[test]
fn long_lines() {
    assert_eq!(one(&[b'x'; 2048]), Decoded::Incomplete);
    assert_eq!(one(&[b'x'; 2049]), Decoded::Close(CloseReason::LineTooLong));
    let mut get = b"get ".to_vec();
    get.extend_from_slice(&[b'k'; 5000]);
    assert_eq!(one(&get), Decoded::Incomplete);
    let mut huge = b"get ".to_vec();
    huge.extend_from_slice(&vec![b'k'; (1 << 20) + 1]);
    assert_eq!(one(&huge), Decoded::Close(CloseReason::LineTooLong));
    // A long line that arrived whole is parsed (memcached only limits lines in flight).
    let mut long = b"delete ".to_vec();
    long.extend_from_slice(&[b'k'; 3000]);
    long.extend_from_slice(b"\r\n");
    assert!(matches!(
        one(&long),
        Decoded::Request {
            request: Request::Reply { .. },
            ..
        }
    ));
    // ...unless it does not fit memcached's 16 KiB read buffer.
    let mut junk = vec![b'X'; 20_000];
    junk.extend_from_slice(b"\r\n");
    assert_eq!(one(&junk), Decoded::Close(CloseReason::LineTooLong));
    let mut edge = vec![b'X'; DEFAULT_MAX_BUFFERED_LINE - 1];
    edge.extend_from_slice(b"\r\n");
    assert_eq!(one(&edge), Decoded::Close(CloseReason::LineTooLong));
    edge.remove(0);
    assert!(matches!(one(&edge), Decoded::Request { .. }));
    // A multi-key get may be longer.
    let mut get = b"get ".to_vec();
    get.extend_from_slice(&[b'k'; 20_000]);
    get.extend_from_slice(b"\r\n");
    assert!(matches!(one(&get), Decoded::Request { .. }));
}

#[test]
fn http_request_closes() {
    assert_eq!(
        one(b"GET / HTTP/1.1\r\n"),
        Decoded::Close(CloseReason::Http)
    );
}

#[test]
fn nul_truncates_line() {
    assert!(matches!(
        one(b"mn\0garbage\r\n"),
        Decoded::Request {
            request: Request::MetaNoop,
            ..
        }
    ));
}

/// Feed `input` in `chunks`-sized pieces, decoding as a connection would. Returns the number
/// of requests decoded; panics on any broken invariant.
fn drive(input: &[u8], chunk: usize) -> usize {
    let mut d = Decoder::new(Limits {
        max_item_size: 64,
        max_line: 64,
        max_get_line: 256,
        max_buffered_line: 512,
    });
    let mut buf = BytesMut::new();
    let mut swallow = 0usize;
    let mut count = 0;
    for piece in input.chunks(chunk.max(1)) {
        buf.extend_from_slice(piece);
        loop {
            if swallow > 0 {
                let n = swallow.min(buf.len());
                let _ = buf.split_to(n);
                swallow -= n;
                if swallow > 0 {
                    break;
                }
            }
            let before = buf.len();
            match d.decode(&mut buf) {
                Decoded::Incomplete => {
                    assert_eq!(buf.len(), before);
                    // Bounded: a line limit plus at most one item and its line.
                    assert!(
                        buf.len() <= 256 + 64 + 2 + 256,
                        "buffer grew to {}",
                        buf.len()
                    );
                    break;
                }
                Decoded::Close(_) => return count,
                Decoded::Request { swallow: s, .. } => {
                    assert!(buf.len() < before, "a request consumes bytes");
                    swallow = s;
                    count += 1;
                }
            }
        }
    }
    count
}

proptest! {
    #[test]
    fn random_bytes_never_panic(input in proptest::collection::vec(any::<u8>(), 0..512),
                                chunk in 1usize..64) {
        drive(&input, chunk);
    }

    #[test]
    fn random_commands_never_panic(
        lines in proptest::collection::vec(
            prop_oneof![
                Just("set".to_string()), Just("get".to_string()), Just("gat".to_string()),
                Just("ms".to_string()), Just("mg".to_string()), Just("md".to_string()),
                Just("ma".to_string()), Just("me".to_string()), Just("cas".to_string()),
                Just("incr".to_string()), Just("delete".to_string()), Just("stats".to_string()),
                "[a-zA-Z0-9 =+/-]{0,12}".prop_map(|s| s),
            ].prop_flat_map(|cmd| ("[ a-zA-Z0-9=+/-]{0,40}", Just(cmd)))
             .prop_map(|(rest, cmd)| format!("{cmd} {rest}\r\n")),
            0..12),
        chunk in 1usize..32,
    ) {
        let input: String = lines.concat();
        drive(input.as_bytes(), chunk);
    }
}
