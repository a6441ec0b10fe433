//! Fuzz the NBD server's transmission phase end to end: a fixed handshake (fixed newstyle,
//! `OPT_GO` for the export), then a fuzzer-built request stream, through the real server
//! connection (reader, request tasks, reply writer) over an in-memory duplex onto a
//! `MemoryBackend`.
//!
//! The first input byte picks the mode:
//! - even: *requests* — the rest is cut into 12-byte records, each one request with a valid
//!   magic (command, flags, offset and length chosen by the fuzzer, lengths small enough that
//!   a WRITE payload is always sent in full). Oracle: every request before the first `DISC`
//!   gets exactly one reply carrying its handle, a successful READ reply carries exactly
//!   `length` bytes, and a request past the end of the export is refused.
//! - odd: *raw* — the rest is sent verbatim after the handshake (bad magic, torn headers,
//!   truncated payloads); the server must neither panic nor hang.
//!
//! One runtime and the two stream buffers (request bytes out, reply bytes back) serve every
//! input: a connection's tasks all finish before `serve_stream` returns, so nothing carries
//! over, and a reused buffer spares a multi-MiB allocation (an mmap under ASan) per input.
//! Server, export and backend are fresh per input.
#![no_main]

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use flashtier_backend::MemoryBackend;
use flashtier_nbd::codec::handshake::{encode_option, InfoRequest};
use flashtier_nbd::{
    parse_option_reply_header, parse_simple_reply, proto, Export, RequestHeader, Server,
    ServerConfig,
};
use libfuzzer_sys::fuzz_target;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const SIZE: u64 = 64 << 10;
const MAX_REQUESTS: usize = 256;

/// One request the oracle expects an answer to.
struct Sent {
    command: u16,
    offset: u64,
    length: u32,
}

fn handshake() -> Vec<u8> {
    let mut out = u32::from(proto::FLAG_C_FIXED_NEWSTYLE | proto::FLAG_C_NO_ZEROES)
        .to_be_bytes()
        .to_vec();
    let go = InfoRequest {
        name: "fuzz".into(),
        requests: vec![proto::INFO_BLOCK_SIZE],
    };
    encode_option(&mut out, proto::OPT_GO, &go.encode());
    out
}

/// Build the request stream from 12-byte records; returns what was sent before any DISC.
fn requests(data: &[u8], out: &mut Vec<u8>) -> HashMap<u64, Sent> {
    let mut sent = HashMap::new();
    for (i, r) in data.chunks_exact(12).take(MAX_REQUESTS).enumerate() {
        let command = u16::from(r[0] % 9); // 0..=7 known, 8 unknown
        let flags = u16::from_le_bytes([r[1], r[2]]) & 0x3f;
        let raw_off = u32::from_le_bytes([r[3], r[4], r[5], r[6]]);
        let raw_len = u32::from_le_bytes([r[7], r[8], r[9], r[10]]);
        // Mostly aligned and in range, sometimes past the end or unaligned.
        let offset = if r[11] & 1 == 0 {
            u64::from(raw_off) % (SIZE + 8192) / 512 * 512
        } else {
            u64::from(raw_off)
        };
        // Over the whole range, but mostly short: a shift of 0..=7 bits quarters the mean
        // payload, which is most of what an input costs (every byte is copied several times).
        let length = if r[11] & 2 == 0 {
            raw_len % (16 << 10)
        } else {
            raw_len % (SIZE as u32 + 8192)
        } >> ((r[11] >> 2) & 7);
        let handle = i as u64;
        out.extend_from_slice(
            &RequestHeader {
                flags,
                command,
                handle,
                offset,
                length,
            }
            .encode(),
        );
        if command == proto::CMD_WRITE {
            // Byte b of the payload is `b as u8 ^ r[0]`: one 256-byte period, copied.
            let period: [u8; 256] = std::array::from_fn(|b| (b as u8) ^ r[0]);
            let mut left = length as usize;
            while left > 0 {
                let n = left.min(period.len());
                out.extend_from_slice(&period[..n]);
                left -= n;
            }
        }
        if command == proto::CMD_DISC {
            break;
        }
        sent.insert(
            handle,
            Sent {
                command,
                offset,
                length,
            },
        );
    }
    sent
}

/// Skip the greeting and option replies up to the ACK of `OPT_GO`; returns the rest.
fn after_handshake(mut out: &[u8]) -> &[u8] {
    out = out.get(proto::GREETING_LEN..).unwrap_or(&[]);
    while let Ok(h) = parse_option_reply_header(out) {
        let next = proto::OPTION_REPLY_HEADER_LEN + h.len as usize;
        assert!(next <= out.len(), "option reply torn");
        out = &out[next..];
        if h.reply == proto::REP_ACK {
            return out;
        }
        assert!(h.reply & proto::REP_FLAG_ERROR == 0, "OPT_GO refused");
    }
    panic!("no ACK for OPT_GO");
}

fn check_replies(out: &[u8], mut sent: HashMap<u64, Sent>) {
    let mut rest = after_handshake(out);
    while !rest.is_empty() {
        let r = parse_simple_reply(rest).expect("a simple reply");
        rest = &rest[proto::SIMPLE_REPLY_LEN..];
        let s = sent
            .remove(&r.handle)
            .unwrap_or_else(|| panic!("reply to unknown or answered handle {}", r.handle));
        let past_end = s.offset.saturating_add(u64::from(s.length)) > SIZE;
        let ranged = matches!(
            s.command,
            proto::CMD_READ | proto::CMD_WRITE | proto::CMD_TRIM | proto::CMD_WRITE_ZEROES
        );
        if ranged && past_end {
            assert_ne!(r.error, 0, "request past the end accepted");
        }
        if s.command == proto::CMD_READ && r.error == 0 {
            assert!(rest.len() >= s.length as usize, "READ reply torn");
            rest = &rest[s.length as usize..];
        }
    }
    assert!(
        sent.is_empty(),
        "{} requests got no reply (handles {:?})",
        sent.len(),
        sent.keys().take(5).collect::<Vec<_>>()
    );
}

fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("tokio runtime")
    })
}

thread_local! {
    /// The request stream sent and the reply stream received, reused across inputs.
    static BUFFERS: RefCell<(Vec<u8>, Vec<u8>)> = const { RefCell::new((Vec::new(), Vec::new())) };
}

fuzz_target!(|data: &[u8]| {
    BUFFERS.with_borrow_mut(|(input, out)| run(data, input, out));
});

fn run(data: &[u8], input: &mut Vec<u8>, out: &mut Vec<u8>) {
    let Some((&mode, body)) = data.split_first() else {
        return;
    };
    let rt = runtime();
    let backend = Arc::new(MemoryBackend::new(SIZE as usize));
    let Ok(server) = Server::new(
        vec![Export::new("fuzz", backend)],
        ServerConfig {
            max_in_flight: 8,
            ..ServerConfig::default()
        },
    ) else {
        return;
    };
    input.clear();
    input.extend_from_slice(&handshake());
    let sent = if mode & 1 == 0 {
        Some(requests(body, input))
    } else {
        input.extend_from_slice(body);
        None
    };
    out.clear();
    let input: &[u8] = input;
    rt.block_on(async {
        let (client, conn) = tokio::io::duplex(64 << 10);
        let serve = tokio::spawn(async move {
            let _ = server.serve_stream(conn, "fuzz".into()).await;
        });
        let (mut rd, mut wr) = tokio::io::split(client);
        let write = async move {
            // The server may close early (bad magic); a failed write is then expected.
            let _ = wr.write_all(input).await;
            let _ = wr.shutdown().await;
        };
        let read = async {
            let _ = rd.read_to_end(out).await;
        };
        tokio::join!(write, read);
        serve.await.expect("connection task panicked");
    });
    if let Some(sent) = sent {
        check_replies(out, sent);
    }
}
