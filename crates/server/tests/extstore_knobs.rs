//! `extstore <knob> <value>` over the protocol: a change takes effect at once, shows in
//! `stats extstore` and `stats settings`, changes behaviour; unknown knobs and bad values
//! get a `CLIENT_ERROR` and change nothing.
mod common;

use common::{roundtrip, scratch_dir, stats_section, value_of, Server};

#[test]
fn knobs_change_at_run_time() {
    let dir = scratch_dir("knobs");
    let spec = format!("{}:64MiB", dir.join("flash.bin").display());
    let server = Server::start(&[
        "--memory",
        "8MiB",
        "--flash",
        &spec,
        "--knob",
        "recache_rate=3",
        // Write-through, so each SET's flash write shows at once in the counters below.
        "--knob",
        "write_back_ms=0",
    ]);
    let mut c = server.connect();

    // Every item goes to flash at once with write_back_ms=0.
    assert_eq!(
        roundtrip(&mut c, b"set a 0 0 5\r\nhello\r\n", b"\r\n"),
        "STORED\r\n"
    );
    let ext = stats_section(&mut c, "extstore");
    assert_eq!(value_of(&ext, "extstore_knob_item_size"), "0");
    assert_eq!(value_of(&ext, "extstore_knob_recache_rate"), "3");
    assert_eq!(value_of(&ext, "extstore_knob_write_back_ms"), "0");
    assert_eq!(value_of(&ext, "extstore_objects_written"), "1");
    let skipped = value_of(&ext, "extstore_write_skipped").to_string();

    // item_size: values smaller than it stay in RAM only.
    assert_eq!(
        roundtrip(&mut c, b"extstore item_size 100\r\n", b"\r\n"),
        "OK\r\n"
    );
    assert_eq!(
        roundtrip(&mut c, b"set b 0 0 5\r\nhello\r\n", b"\r\n"),
        "STORED\r\n"
    );
    let ext = stats_section(&mut c, "extstore");
    assert_eq!(value_of(&ext, "extstore_knob_item_size"), "100");
    assert_eq!(value_of(&ext, "extstore_objects_written"), "1");
    assert_eq!(
        value_of(&ext, "extstore_write_skipped")
            .parse::<u64>()
            .unwrap(),
        skipped.parse::<u64>().unwrap() + 1
    );
    assert_eq!(
        roundtrip(&mut c, b"get b\r\n", b"END\r\n"),
        "VALUE b 0 5\r\nhello\r\nEND\r\n"
    );

    // memcached's names, the engine's names, noreply; all visible in stats settings.
    let out = roundtrip(
        &mut c,
        b"extstore compact_under 1\r\nextstore drop_unread 1\r\nextstore reclaim_policy greedy\r\n\
          extstore flush_interval_ms 250 noreply\r\nextstore recache_rate 0\r\n",
        b"OK\r\nOK\r\nOK\r\nOK\r\n",
    );
    assert_eq!(out, "OK\r\nOK\r\nOK\r\nOK\r\n");
    let settings = stats_section(&mut c, "settings");
    assert_eq!(value_of(&settings, "ext_item_size"), "100");
    assert_eq!(value_of(&settings, "ext_free_low_watermark"), "1");
    assert_eq!(value_of(&settings, "ext_drop_unread"), "1");
    assert_eq!(value_of(&settings, "ext_reclaim_policy"), "greedy");
    assert_eq!(value_of(&settings, "ext_flush_interval_ms"), "250");
    assert_eq!(value_of(&settings, "ext_recache_rate"), "0");

    // Refusals: a clear CLIENT_ERROR, the connection stays usable, nothing changes.
    for (req, why) in [
        ("extstore bogus 1\r\n", "CLIENT_ERROR unknown knob bogus"),
        ("extstore item_size lots\r\n", "CLIENT_ERROR item_size lots"),
        ("extstore keep_limit 2\r\n", "CLIENT_ERROR keep_limit"),
        (
            "extstore free_low_watermark 99\r\n",
            "CLIENT_ERROR free_low_watermark",
        ),
        (
            "extstore item_age 10\r\n",
            "CLIENT_ERROR item_age is not supported",
        ),
        (
            "extstore max_frag 0.5\r\n",
            "CLIENT_ERROR max_frag is not supported",
        ),
    ] {
        let out = roundtrip(&mut c, req.as_bytes(), b"\r\n");
        assert!(out.starts_with(why), "{req:?} answered {out:?}");
    }
    assert_eq!(
        roundtrip(&mut c, b"extstore item_size\r\n", b"\r\n"),
        "ERROR\r\n"
    );
    assert_eq!(
        roundtrip(&mut c, b"extstore bogus 1 noreply\r\nmn\r\n", b"\r\n"),
        "MN\r\n"
    );
    let ext = stats_section(&mut c, "extstore");
    assert_eq!(value_of(&ext, "extstore_knob_item_size"), "100");
    assert_eq!(value_of(&ext, "extstore_knob_keep_limit"), "0.75");
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn ram_only_has_no_knobs() {
    let server = Server::start(&["--ram-only"]);
    let mut c = server.connect();
    let out = roundtrip(&mut c, b"extstore item_size 100\r\n", b"\r\n");
    assert!(out.starts_with("CLIENT_ERROR no flash tier"), "{out}");
    assert_eq!(
        roundtrip(&mut c, b"stats extstore\r\n", b"\r\n"),
        "ERROR\r\n"
    );
}
