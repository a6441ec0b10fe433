//! The NBD client backend against nbdkit: a model check of reads, writes (split above the
//! maximum payload), FUA, zeroes and trims; emulation when nbdkit hides FUA or WRITE_ZEROES;
//! remote errors mapped to errno; a killed server fails requests instead of hanging; a
//! restarted server is reconnected to, and the next flush reports the possible loss.

mod common;

use std::time::Duration;

use bytes::Bytes;
use common::{peers_present, random_bytes, runtime, Nbdkit, TestDir};
use flashtier_backend::{BackendError, BlockBackend, Errno, ZeroFlags};
use flashtier_nbd::{proto, NbdClientBackend};

const SIZE: usize = 64 << 20;

/// Random operations checked against an in-memory model of the device.
async fn model_check(b: &NbdClientBackend, seed: u64) {
    let mut model = vec![0u8; SIZE];
    let mut x = seed | 1;
    let mut next = move |m: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % m
    };
    // One write larger than the 32 MiB payload limit, which the backend must split.
    let big = random_bytes(40 << 20, seed);
    b.write(4096, Bytes::from(big.clone()), false)
        .await
        .expect("big write");
    model[4096..4096 + big.len()].copy_from_slice(&big);
    for i in 0..200u64 {
        let len = (1 + next(64)) as usize * 4096;
        let off = next((SIZE - len) as u64 / 4096) as usize * 4096;
        match next(5) {
            0 | 1 => {
                let data = random_bytes(len, seed ^ i);
                b.write(off as u64, Bytes::from(data.clone()), next(2) == 0)
                    .await
                    .expect("write");
                model[off..off + len].copy_from_slice(&data);
            }
            2 => {
                let flags = ZeroFlags {
                    fua: next(2) == 0,
                    no_hole: next(2) == 0,
                };
                b.write_zeroes(off as u64, len as u32, flags)
                    .await
                    .expect("zeroes");
                model[off..off + len].fill(0);
            }
            3 => {
                // Contents after TRIM are unspecified: trim, then overwrite to restore a model.
                b.trim(off as u64, len as u32).await.expect("trim");
                let data = random_bytes(len, !i);
                b.write(off as u64, Bytes::from(data.clone()), false)
                    .await
                    .expect("rewrite");
                model[off..off + len].copy_from_slice(&data);
            }
            _ => b.flush().await.expect("flush"),
        }
    }
    // Read back everything concurrently in 4 MiB pieces plus one 48 MiB read (split).
    let whole = b.read(0, 48 << 20).await.expect("big read");
    assert!(
        whole[..] == model[..48 << 20],
        "48 MiB read differs from model"
    );
    let mut reads = Vec::new();
    for chunk in 0..SIZE / (4 << 20) {
        reads.push(b.read((chunk * (4 << 20)) as u64, 4 << 20));
    }
    for (chunk, r) in reads.into_iter().enumerate() {
        let got = r.await.expect("read");
        let start = chunk * (4 << 20);
        assert!(
            got[..] == model[start..start + (4 << 20)],
            "chunk {chunk} differs"
        );
    }
}

#[test]
fn client_backend_model_check_against_nbdkit_memory() {
    if !peers_present(
        "client_backend_model_check_against_nbdkit_memory",
        &["nbdkit"],
    ) {
        return;
    }
    let dir = TestDir::new("kitmem");
    let kit = Nbdkit::start(&dir, "mem", &["memory", "64M"]);
    runtime().block_on(async {
        let b = NbdClientBackend::connect_str(&kit.uri(), 3)
            .await
            .expect("connect");
        assert_eq!(b.size(), SIZE as u64);
        assert!(b.info().has(proto::FLAG_SEND_FUA) && b.info().has(proto::FLAG_SEND_WRITE_ZEROES));
        assert_eq!(b.connections(), 3, "nbdkit memory allows multi-conn");
        assert!(matches!(
            b.read(SIZE as u64 - 10, 4096).await,
            Err(BackendError::OutOfRange { .. })
        ));
        model_check(&b, 11).await;
        b.disconnect().await.expect("disconnect");
    });
}

#[test]
fn client_backend_emulates_missing_fua_and_zeroes() {
    if !peers_present(
        "client_backend_emulates_missing_fua_and_zeroes",
        &["nbdkit"],
    ) {
        return;
    }
    let dir = TestDir::new("kitemu");
    let kit = Nbdkit::start(
        &dir,
        "emu",
        &[
            "--filter=nozero",
            "--filter=fua",
            "memory",
            "64M",
            "zeromode=none",
        ],
    );
    runtime().block_on(async {
        let b = NbdClientBackend::connect_str(&kit.uri(), 1)
            .await
            .expect("connect");
        assert!(!b.info().has(proto::FLAG_SEND_FUA), "fua filter hides FUA");
        assert!(
            !b.info().has(proto::FLAG_SEND_WRITE_ZEROES),
            "nozero filter hides zeroes"
        );
        model_check(&b, 23).await;
    });
}

#[test]
fn remote_errors_map_to_errno_and_dead_server_fails_fast() {
    if !peers_present(
        "remote_errors_map_to_errno_and_dead_server_fails_fast",
        &["nbdkit"],
    ) {
        return;
    }
    let dir = TestDir::new("kiterr");
    let mut kit = Nbdkit::start(
        &dir,
        "err",
        &[
            "--filter=error",
            "memory",
            "64M",
            "error=ENOSPC",
            "error-pwrite-rate=1",
        ],
    );
    runtime().block_on(async {
        let b = NbdClientBackend::connect_str(&kit.uri(), 1)
            .await
            .expect("connect");
        let err = b
            .write(0, Bytes::from(vec![1u8; 4096]), false)
            .await
            .expect_err("write fails");
        assert_eq!(err.errno(), Errno::NoSpc, "{err}");
        b.read(0, 4096).await.expect("reads still work");
        kit.kill();
        let r = tokio::time::timeout(Duration::from_secs(5), b.read(0, 4096)).await;
        let err = r
            .expect("no hang after the server died")
            .expect_err("read fails");
        assert_eq!(err.errno(), Errno::Io);
    });
}

#[test]
fn client_backend_reconnects_after_server_restart() {
    if !peers_present(
        "client_backend_reconnects_after_server_restart",
        &["nbdkit"],
    ) {
        return;
    }
    let dir = TestDir::new("kitre");
    let img = dir.path("img");
    std::fs::File::create(&img)
        .and_then(|f| f.set_len(16 << 20))
        .expect("image");
    let img_arg = img.to_string_lossy().into_owned();
    let mut kit = Nbdkit::start(&dir, "re", &["file", &img_arg]);
    runtime().block_on(async {
        let b = NbdClientBackend::connect_str(&kit.uri(), 2)
            .await
            .expect("connect");
        let data = Bytes::from(random_bytes(1 << 20, 5));
        b.write(0, data.clone(), false).await.expect("write");
        b.flush().await.expect("flush");
        kit.kill();
        // Killing nbdkit loses nothing here (its writes are in the page cache), so a
        // restarted nbdkit serves the same bytes.
        kit = Nbdkit::start(&dir, "re", &["file", &img_arg]);
        let got = b.read(0, 1 << 20).await.expect("read after reconnect");
        assert!(got == data);
        assert!(b.reconnects() >= 1);
        let err = b
            .flush()
            .await
            .expect_err("first flush after a reconnect reports EIO");
        assert_eq!(err.errno(), Errno::Io);
        b.flush().await.expect("the next flush succeeds");
        b.write(1 << 20, data.clone(), true)
            .await
            .expect("write after reconnect");
        assert_eq!(b.read(1 << 20, 1 << 20).await.expect("read"), data);
    });
    drop(kit);
}
