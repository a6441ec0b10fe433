//! Every io_uring setup choice (`UringSetup`: registered files, cooperative task work, a
//! shared kernel poller, and all of them together) drives the same engine to the same
//! bytes: records written and synced through the rings read back exactly, on each of two
//! lanes, reaped by the caller's loop and by the ring thread, and again after a reopen
//! (recovery reads through the rings). Files live under /var/tmp (O_DIRECT); a machine
//! without O_DIRECT or io_uring makes the test say so loudly and return.
mod common;

use std::path::Path;
use std::sync::Arc;

use common::reap::{check, fill, read_on_lane};
use flashtier_flash::{DropAll, Error, Flash, FlashConfig, IoBackend, UringSetup};

fn open(p: &Path, setup: &UringSetup) -> Option<Flash> {
    let spec = common::file_spec(p, 8 << 20);
    let cfg = FlashConfig {
        io_backend: IoBackend::Uring,
        uring_rings: 2,
        uring_setup: setup.clone(),
        ..common::manual()
    };
    match Flash::open_specs(&[spec], cfg, Arc::new(DropAll), |_| {}) {
        Ok((f, _)) => Some(f),
        Err(e @ (Error::DirectIoUnsupported(_) | Error::Io { op: "setup", .. })) => {
            eprintln!("SKIPPED: no O_DIRECT or io_uring (or this setup) here: {e}");
            None
        }
        Err(e) => panic!("open {} with {setup}: {e}", p.display()),
    }
}

fn round_trip(name: &str, setup: &str) {
    let setup = UringSetup::parse(setup).unwrap();
    let p = common::disk_file(name);
    let _ = std::fs::remove_file(&p);
    let Some(flash) = open(&p, &setup) else {
        let _ = std::fs::remove_file(&p);
        return;
    };
    let locs = fill(&flash, 40);

    // Lane 1, reaped by this loop: the way a serving thread reads.
    let h1 = flash.reap_handle(1).expect("io_uring gives a reap handle");
    read_on_lane(&flash, &h1, 1, &locs[..20]);
    drop(h1);
    // Lane 0, no reaper: the ring thread completes them for a plain waiter.
    let comps: Vec<_> = locs[20..].iter().map(|(l, _)| flash.read(*l)).collect();
    check(comps, &locs[20..]);
    flash.close().unwrap();
    drop(flash);

    // Reopened: recovery reads through the rings, the records are still there.
    let flash = open(&p, &setup).expect("reopen with the same setup");
    let comps: Vec<_> = locs.iter().map(|(l, _)| flash.read(*l)).collect();
    check(comps, &locs);
    flash.close().unwrap();
    let _ = std::fs::remove_file(&p);
}

#[test]
fn registered_files_round_trip() {
    round_trip("setup-fixed", "fixed_files");
}

#[test]
fn cooperative_task_work_round_trip() {
    round_trip("setup-coop", "coop_taskrun");
}

#[test]
fn shared_kernel_poller_round_trip() {
    round_trip("setup-sqpoll", "sqpoll=2ms");
}

#[test]
fn every_choice_together_round_trip() {
    round_trip("setup-all", "fixed_files,coop_taskrun,sqpoll=2ms");
}
