//! Real files with O_DIRECT, through the io_uring executor and the psync executor. Files live
//! under /var/tmp (tmpfs, as /tmp often is, has no O_DIRECT); a test that cannot get O_DIRECT
//! or io_uring says so loudly on stderr and returns.
mod common;

use std::sync::Arc;

use flashtier_flash::{
    kind, DeviceSpec, DropAll, Error, Flash, FlashConfig, FlashStats, IoBackend, RecordWrite,
};

fn run(backend: IoBackend, name: &str) {
    let p = common::disk_file(name);
    let _ = std::fs::remove_file(&p);
    let spec = common::file_spec(&p, 8 << 20);
    let cfg = FlashConfig {
        io_backend: backend,
        flush_interval: None,
        background_reclaim: false,
        ..FlashConfig::small()
    };
    let opened = Flash::open_specs(
        std::slice::from_ref(&spec),
        cfg.clone(),
        Arc::new(DropAll),
        |_| {},
    );
    let (flash, info) = match opened {
        Ok(x) => x,
        Err(Error::DirectIoUnsupported(p)) => {
            eprintln!(
                "SKIPPED: O_DIRECT unsupported on {} (set FLASH_TEST_DIR to a real disk)",
                p.display()
            );
            return;
        }
        Err(e @ Error::Io { op: "setup", .. }) => {
            eprintln!("SKIPPED: io_uring unavailable here: {e}");
            let _ = std::fs::remove_file(&p);
            return;
        }
        Err(e) => panic!("open {}: {e}", p.display()),
    };
    let expect = match backend {
        IoBackend::Uring => "io_uring",
        IoBackend::Psync => "psync",
        IoBackend::Auto => info.backend,
    };
    assert_eq!(info.backend, expect);
    // A second engine on the same file is refused while the first holds it.
    match Flash::open_specs(
        std::slice::from_ref(&spec),
        cfg.clone(),
        Arc::new(DropAll),
        |_| {},
    ) {
        Err(e @ Error::Io { .. }) => assert!(e.to_string().contains("lock"), "{e}"),
        Err(e) => panic!("unexpected {e}"),
        Ok(_) => panic!("two engines opened the same file"),
    }
    let mut locs = Vec::new();
    for i in 0..400u64 {
        let v = vec![(i % 251) as u8; (i as usize * 37) % 9000 + 1];
        let w = RecordWrite {
            kind: kind::PUT,
            key_id: i,
            version: i,
            flags: 0,
            exptime: 0,
            key: b"key",
            value: &v,
        };
        locs.push((
            flash
                .append_blocking(0, &w, std::time::Duration::from_secs(10))
                .unwrap(),
            v,
        ));
    }
    flash.flush().wait().unwrap();
    for (i, (l, v)) in locs.iter().enumerate() {
        let r = flash.read(*l).wait().unwrap();
        assert_eq!(r.header.key_id, i as u64);
        assert_eq!(&r.value[..], &v[..]);
    }
    assert!(FlashStats::get(&flash.stats().device_bytes_read) > 0);
    assert_eq!(FlashStats::get(&flash.stats().io_queue_depth), 0);
    flash.close().unwrap();
    drop(flash);
    // Reopen through the same backend: everything recovered.
    let mut n = 0;
    let (flash, info) = Flash::open_specs(&[spec], cfg, Arc::new(DropAll), |_| n += 1).unwrap();
    assert!(!info.formatted);
    assert_eq!(n, 400);
    let r = flash.read(locs[399].0).wait().unwrap();
    assert_eq!(&r.value[..], &locs[399].1[..]);
    flash.close().unwrap();
    let _ = std::fs::remove_file(&p);
}

#[test]
fn io_uring_on_a_real_file() {
    run(IoBackend::Uring, "uring");
}

#[test]
fn psync_on_a_real_file() {
    run(IoBackend::Psync, "psync");
}

#[test]
fn missing_directory_is_a_clear_error() {
    let spec = DeviceSpec::parse("/var/tmp/no-such-dir-flashtier/x:8M").unwrap();
    let r = Flash::open_specs(&[spec], FlashConfig::small(), Arc::new(DropAll), |_| {});
    match r {
        Err(e @ Error::DeviceMissing(_)) => assert!(e.to_string().contains("does not exist")),
        Err(e) => panic!("unexpected error {e}"),
        Ok(_) => panic!("opened a device in a missing directory"),
    }
    let spec = DeviceSpec {
        create: false,
        ..DeviceSpec::parse("/var/tmp/flashtier-absent:8M").unwrap()
    };
    assert!(matches!(
        Flash::open_specs(&[spec], FlashConfig::small(), Arc::new(DropAll), |_| {}),
        Err(Error::DeviceMissing(_))
    ));
}
