//! Driving io_uring completions the way a serving thread does (its lane's ring, its own
//! reap loop on the ring's eventfd), shared by the reaper and ring-setup tests.
use std::os::fd::AsRawFd;
use std::time::Duration;

use flashtier_flash::{
    defer_submissions_on_this_thread, submit_deferred, use_ring_lane, Completion, Flash, Location,
    ReapHandle, Record,
};

/// Wait up to `timeout_ms` for the handle's eventfd to turn readable (its ring posted a
/// completion since the last reap cleared it); true if it did.
pub fn readable(h: &ReapHandle, timeout_ms: i32) -> bool {
    let mut pfd = libc::pollfd {
        fd: h.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd for the duration of the call.
    #[allow(unsafe_code)]
    let n = unsafe { libc::poll(&mut pfd, 1, timeout_ms) };
    n == 1
}

/// Wait on the handle's eventfd and reap until every completion is ready; returns how many
/// completions this loop reaped (the ring thread's backstop may take some).
pub fn drive(h: &ReapHandle, comps: &[Completion<Record>]) -> usize {
    let mut reaped = 0;
    while !comps.iter().all(Completion::is_ready) {
        readable(h, 1000);
        reaped += h.reap();
    }
    reaped
}

/// Every completion holds the value `want` lists beside it.
pub fn check(comps: Vec<Completion<Record>>, want: &[(Location, Vec<u8>)]) {
    for (c, (_, v)) in comps.into_iter().zip(want) {
        let r = c.wait().unwrap();
        assert_eq!(&r.value[..], &v[..]);
    }
}

/// Read `want` from a thread on lane `lane` whose submissions wait for one
/// `submit_deferred` (as an event-loop turn's do), reaped by `h`'s loop, and check them.
pub fn read_on_lane(flash: &Flash, h: &ReapHandle, lane: usize, want: &[(Location, Vec<u8>)]) {
    std::thread::scope(|s| {
        s.spawn(|| {
            use_ring_lane(lane);
            defer_submissions_on_this_thread();
            let comps: Vec<_> = want.iter().map(|(l, _)| flash.read(*l)).collect();
            submit_deferred();
            drive(h, &comps);
            check(comps, want);
        });
    });
}

/// Append `n` records of 3–5 KiB and flush them out of the write buffers, so reads go to
/// the device; their locations and values.
pub fn fill(flash: &Flash, n: u64) -> Vec<(Location, Vec<u8>)> {
    let mut locs = Vec::new();
    for i in 0..n {
        let v = vec![(i % 251) as u8; 3000 + i as usize * 50];
        let w = super::put_record(i, i, &v);
        let loc = flash
            .append_blocking(0, &w, Duration::from_secs(10))
            .unwrap();
        locs.push((loc, v));
    }
    // Written and out of the write buffers: reads go to the device.
    flash.flush().wait().unwrap();
    locs
}
