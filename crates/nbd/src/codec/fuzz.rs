//! Fuzz entry points: each takes arbitrary bytes, drives the parsers the way the server or
//! client loop would, and must never panic. cargo-fuzz targets call these directly; the unit
//! tests below run them over random and mutated inputs.

#![deny(clippy::indexing_slicing, clippy::unwrap_used)]

use crate::addr::{ListenAddr, NbdUri};
use crate::codec::handshake::{
    parse_client_flags, parse_greeting, parse_info, parse_option, parse_option_reply_header,
    parse_rep_server, MAX_OPTION_LEN,
};
use crate::codec::transmission::{parse_request_header, parse_simple_reply, Command};
use crate::error::ParseError;
use crate::proto;

/// The server's handshake input: 4 bytes of client flags, then options back to back.
pub fn server_handshake(data: &[u8]) {
    if parse_client_flags(data, proto::FLAG_FIXED_NEWSTYLE | proto::FLAG_NO_ZEROES).is_err() {
        return;
    }
    let mut rest = data.get(4..).unwrap_or(&[]);
    while !rest.is_empty() {
        let used = match parse_option(rest) {
            Ok((_, used)) => used,
            // The server drains an oversized option and answers REP_ERR_TOO_BIG.
            Err(ParseError::TooLong { len, .. }) if len > u64::from(MAX_OPTION_LEN) => {
                proto::OPTION_HEADER_LEN.saturating_add(len as usize)
            }
            Err(_) => return,
        };
        rest = rest.get(used..).unwrap_or(&[]);
    }
}

/// The server's transmission input: request headers, each WRITE followed by its payload.
pub fn server_requests(data: &[u8]) {
    let mut rest = data;
    while let Ok(req) = parse_request_header(rest) {
        let mut used = proto::REQUEST_HEADER_LEN;
        if req.kind() == Command::Write {
            used = used.saturating_add(req.length as usize);
        }
        let _ = req.kind().allowed_flags();
        rest = rest.get(used..).unwrap_or(&[]);
    }
}

/// The client's handshake input: greeting, then option replies with their data.
pub fn client_handshake(data: &[u8]) {
    if parse_greeting(data).is_err() {
        return;
    }
    let mut rest = data.get(proto::GREETING_LEN..).unwrap_or(&[]);
    while let Ok(h) = parse_option_reply_header(rest) {
        let start = proto::OPTION_REPLY_HEADER_LEN;
        let Some(body) = rest.get(start..start.saturating_add(h.len as usize)) else {
            return;
        };
        match h.reply {
            proto::REP_INFO => {
                let _ = parse_info(body);
            }
            proto::REP_SERVER => {
                let _ = parse_rep_server(body);
            }
            _ => {}
        }
        rest = rest.get(start + body.len()..).unwrap_or(&[]);
    }
}

/// The client's transmission input: simple reply headers.
pub fn client_replies(data: &[u8]) {
    let mut rest = data;
    while parse_simple_reply(rest).is_ok() {
        rest = rest.get(proto::SIMPLE_REPLY_LEN..).unwrap_or(&[]);
    }
}

/// URI and listen-address parsing of arbitrary text.
pub fn addresses(data: &[u8]) {
    if let Ok(s) = std::str::from_utf8(data) {
        if let Ok(uri) = s.parse::<NbdUri>() {
            let _ = uri.to_string().parse::<NbdUri>();
        }
        let _ = s.parse::<ListenAddr>();
    }
}

#[cfg(test)]
#[allow(clippy::indexing_slicing, clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::codec::handshake::{
        encode_greeting, encode_option, encode_option_reply, Info, InfoRequest,
    };
    use crate::codec::transmission::RequestHeader;

    fn corpus() -> Vec<Vec<u8>> {
        let mut hs = 3u32.to_be_bytes().to_vec();
        let req = InfoRequest {
            name: "disk".into(),
            requests: vec![1, 2, 3],
        };
        encode_option(&mut hs, proto::OPT_GO, &req.encode());
        encode_option(&mut hs, proto::OPT_LIST, &[]);
        let mut tx = Vec::new();
        for (cmd, len) in [
            (proto::CMD_WRITE, 8u32),
            (proto::CMD_READ, 4096),
            (proto::CMD_FLUSH, 0),
        ] {
            tx.extend_from_slice(
                &RequestHeader {
                    flags: 1,
                    command: cmd,
                    handle: 9,
                    offset: 0,
                    length: len,
                }
                .encode(),
            );
            if cmd == proto::CMD_WRITE {
                tx.extend_from_slice(&[7; 8]);
            }
        }
        let mut client = encode_greeting(3);
        encode_option_reply(
            &mut client,
            proto::OPT_GO,
            proto::REP_INFO,
            &Info::Export { size: 1, flags: 1 }.encode(),
        );
        encode_option_reply(&mut client, proto::OPT_GO, proto::REP_ACK, &[]);
        vec![
            hs,
            tx,
            client,
            b"nbd+unix:///x?socket=/tmp/s".to_vec(),
            b"nbd://[::1]:1/e%41".to_vec(),
        ]
    }

    #[test]
    fn entry_points_never_panic_on_random_or_mutated_input() {
        let mut x: u64 = 0x1234_5678_9abc_def1;
        let mut rnd = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let seeds = corpus();
        for i in 0..20_000 {
            let mut input = if i % 2 == 0 {
                seeds[(rnd() % seeds.len() as u64) as usize].clone()
            } else {
                (0..rnd() % 96).map(|_| rnd() as u8).collect()
            };
            for _ in 0..(rnd() % 4) {
                if input.is_empty() {
                    break;
                }
                let at = (rnd() % input.len() as u64) as usize;
                match rnd() % 3 {
                    0 => input[at] = rnd() as u8,
                    1 => input.truncate(at),
                    _ => input.insert(at, rnd() as u8),
                }
            }
            server_handshake(&input);
            server_requests(&input);
            client_handshake(&input);
            client_replies(&input);
            addresses(&input);
        }
    }
}
