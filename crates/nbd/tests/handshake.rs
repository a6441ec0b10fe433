//! Fixed newstyle negotiation over a raw socket: LIST, INFO, GO, EXPORT_NAME with and
//! without NO_ZEROES, ABORT, unsupported options and bad client flags.

mod common;

use std::sync::Arc;

use common::{Raw, TestDir, TestServer};
use flashtier_backend::MemoryBackend;
use flashtier_nbd::codec::handshake::parse_rep_server;
use flashtier_nbd::{parse_info, proto, Export, Info, ServerConfig};

fn two_exports(dir: &TestDir) -> TestServer {
    let a =
        Export::new("alpha", Arc::new(MemoryBackend::new(1 << 20))).with_description("first disk");
    let b = Export::new("beta", Arc::new(MemoryBackend::new(2 << 20)));
    TestServer::start(dir, vec![a, b], ServerConfig::default())
}

fn info_data(name: &str, requests: &[u16]) -> Vec<u8> {
    let mut d = (name.len() as u32).to_be_bytes().to_vec();
    d.extend_from_slice(name.as_bytes());
    d.extend_from_slice(&(requests.len() as u16).to_be_bytes());
    for r in requests {
        d.extend_from_slice(&r.to_be_bytes());
    }
    d
}

#[test]
fn greeting_list_info_and_unsupported_options() {
    let dir = TestDir::new("hs");
    let server = two_exports(&dir);
    let mut r = Raw::connect(&server.sock);
    let flags = r.greet(proto::FLAG_C_FIXED_NEWSTYLE);
    assert_eq!(flags, proto::FLAG_FIXED_NEWSTYLE | proto::FLAG_NO_ZEROES);

    r.option(proto::OPT_LIST, &[]);
    let mut names = Vec::new();
    loop {
        let (opt, kind, data) = r.option_reply();
        assert_eq!(opt, proto::OPT_LIST);
        if kind == proto::REP_ACK {
            break;
        }
        assert_eq!(kind, proto::REP_SERVER);
        names.push(parse_rep_server(&data).expect("REP_SERVER"));
    }
    assert_eq!(
        names,
        vec![
            ("alpha".into(), "first disk".into()),
            ("beta".into(), String::new())
        ]
    );

    r.option(proto::OPT_LIST, b"junk");
    assert_eq!(r.option_reply().1, proto::REP_ERR_INVALID);

    r.option(proto::OPT_INFO, &info_data("nope", &[]));
    assert_eq!(r.option_reply().1, proto::REP_ERR_UNKNOWN);

    r.option(proto::OPT_INFO, &[0, 0, 0, 50, 1]);
    assert_eq!(r.option_reply().1, proto::REP_ERR_INVALID);

    for opt in [
        proto::OPT_STARTTLS,
        proto::OPT_STRUCTURED_REPLY,
        proto::OPT_SET_META_CONTEXT,
        999,
    ] {
        r.option(opt, &[]);
        let (o, kind, _) = r.option_reply();
        assert_eq!((o, kind), (opt, proto::REP_ERR_UNSUP));
    }

    r.option(
        proto::OPT_INFO,
        &info_data(
            "alpha",
            &[
                proto::INFO_NAME,
                proto::INFO_DESCRIPTION,
                proto::INFO_BLOCK_SIZE,
            ],
        ),
    );
    let mut items = Vec::new();
    loop {
        let (_, kind, data) = r.option_reply();
        if kind == proto::REP_ACK {
            break;
        }
        assert_eq!(kind, proto::REP_INFO);
        items.push(parse_info(&data).expect("info"));
    }
    let flags = items
        .iter()
        .find_map(|i| match i {
            Info::Export { size, flags } => {
                assert_eq!(*size, 1 << 20);
                Some(*flags)
            }
            _ => None,
        })
        .expect("INFO_EXPORT present");
    for f in [
        proto::FLAG_HAS_FLAGS,
        proto::FLAG_SEND_FLUSH,
        proto::FLAG_SEND_FUA,
        proto::FLAG_SEND_TRIM,
        proto::FLAG_SEND_WRITE_ZEROES,
        proto::FLAG_CAN_MULTI_CONN,
    ] {
        assert_ne!(flags & f, 0, "flag {f:#x} missing");
    }
    assert!(items.contains(&Info::Name("alpha".into())));
    assert!(items.contains(&Info::Description("first disk".into())));
    assert!(items.contains(&Info::BlockSize {
        min: 1,
        preferred: 4096,
        max: 1 << 25
    }));

    // GO on the default (empty) name selects the first export, then transmission works.
    r.option(proto::OPT_GO, &info_data("", &[]));
    loop {
        let (_, kind, _) = r.option_reply();
        if kind == proto::REP_ACK {
            break;
        }
        assert_eq!(kind, proto::REP_INFO);
    }
    r.request(proto::CMD_FLUSH, 0, 77, 0, 0, &[]);
    assert_eq!(r.reply(), (0, 77));
    r.request(proto::CMD_DISC, 0, 78, 0, 0, &[]);
    assert!(r.closed());
    server.stop();
}

#[test]
fn export_name_with_and_without_zero_padding() {
    let dir = TestDir::new("expname");
    let server = two_exports(&dir);
    for (client_flags, expect_len) in [(proto::FLAG_C_FIXED_NEWSTYLE, 134usize), (3, 10)] {
        let mut r = Raw::connect(&server.sock);
        r.greet(client_flags);
        r.option(proto::OPT_EXPORT_NAME, b"beta");
        let reply = r.read_n(expect_len);
        assert_eq!(
            u64::from_be_bytes(reply[..8].try_into().expect("8")),
            2 << 20
        );
        assert!(reply[10..].iter().all(|&b| b == 0));
        // The next bytes must be our reply, not padding.
        r.request(proto::CMD_READ, 0, 5, 0, 8, &[]);
        assert_eq!(r.reply(), (0, 5));
        assert_eq!(r.read_n(8), vec![0; 8]);
    }
    // An unknown name cannot be refused with an error: the server closes.
    let mut r = Raw::connect(&server.sock);
    r.greet(proto::FLAG_C_FIXED_NEWSTYLE);
    r.option(proto::OPT_EXPORT_NAME, b"gamma");
    assert!(r.closed());
    server.stop();
}

#[test]
fn abort_and_bad_client_flags() {
    let dir = TestDir::new("abort");
    let server = two_exports(&dir);
    let mut r = Raw::connect(&server.sock);
    r.greet(proto::FLAG_C_FIXED_NEWSTYLE);
    r.option(proto::OPT_ABORT, &[]);
    assert_eq!(r.option_reply().1, proto::REP_ACK);
    assert!(r.closed());

    let mut r = Raw::connect(&server.sock);
    r.greet(1 << 7);
    assert!(r.closed(), "unknown client flags must drop the connection");

    let mut r = Raw::connect(&server.sock);
    r.greet(proto::FLAG_C_FIXED_NEWSTYLE);
    r.send(&[0u8; 16]);
    assert!(r.closed(), "bad option magic must drop the connection");

    let mut r = Raw::connect(&server.sock);
    r.greet(proto::FLAG_C_FIXED_NEWSTYLE);
    let mut big = Vec::new();
    big.extend_from_slice(&proto::OPTS_MAGIC.to_be_bytes());
    big.extend_from_slice(&proto::OPT_INFO.to_be_bytes());
    big.extend_from_slice(&100_000u32.to_be_bytes());
    big.resize(big.len() + 100_000, 0);
    r.send(&big);
    assert_eq!(r.option_reply().1, proto::REP_ERR_TOO_BIG);
    r.option(proto::OPT_ABORT, &[]);
    assert_eq!(r.option_reply().1, proto::REP_ACK);
    server.stop();
}

#[test]
fn stalled_handshake_times_out() {
    let dir = TestDir::new("hstimeout");
    let config = ServerConfig {
        handshake_timeout: std::time::Duration::from_millis(200),
        ..ServerConfig::default()
    };
    let export = Export::new("x", Arc::new(MemoryBackend::new(4096)));
    let server = TestServer::start(&dir, vec![export], config);
    let mut r = Raw::connect(&server.sock);
    r.read_n(18);
    // Say nothing: the server gives up after the timeout and closes.
    let start = std::time::Instant::now();
    assert!(r.closed());
    assert!(start.elapsed() < std::time::Duration::from_secs(5));
    assert_eq!(server.server.stats().totals().errors, 1);
    server.stop();
}
