//! A counting global allocator (cargo feature `alloc-census`, off by default): mimalloc
//! underneath, with live bytes and live allocations kept per size class, written out on
//! SIGUSR2.
//!
//! # Why
//! RSS per flash item (issue 26, docs/eviction.md "RAM per flash item") had 1.5–5.5 MiB of
//! heap that no stat named: all of it inside mimalloc's arena, none of it stacks or the
//! binary. Only the allocator sees every allocation, so this wrapper counts them; the
//! census tells apart heap that is *allocated* (live bytes by size class, which point at
//! who asked: 256-byte blocks are index blocks, 16 × n the index regrowth copy, …) from heap
//! the allocator *holds* with nothing in it (mimalloc's committed bytes minus live bytes).
//! A diagnostic build only: every allocation pays two relaxed atomic adds.
//!
//! # Output
//! SIGUSR2 writes the census to the file named by `FLASHTIER_ALLOC_CENSUS` (default
//! `alloc-census.txt` in the working directory), replacing it: one line
//! `total live_bytes N live_allocs N`, one `mimalloc current_rss N current_commit N
//! peak_commit N`, then `class LO HI live_bytes N live_allocs N allocs N` for every class
//! ever used. Classes: sizes rounded up to 16 bytes up to 1 KiB, then powers of two.
//!
//! # Threads
//! Any thread allocates; the counters are relaxed atomics (a census taken while other
//! threads allocate is a snapshot within a few allocations). The signal is watched by a
//! task on the kv runtime.
use std::alloc::{GlobalAlloc, Layout};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

/// Exact classes of 16 bytes up to this size.
const FINE_MAX: usize = 1024;
const FINE: usize = FINE_MAX / 16;
/// Power-of-two classes above [`FINE_MAX`]: 2^11 ..= 2^(10 + COARSE).
const COARSE: usize = 40;
const CLASSES: usize = FINE + COARSE;

/// The size class of an allocation of `size` bytes.
fn class_of(size: usize) -> usize {
    if size <= FINE_MAX {
        size.max(1).div_ceil(16) - 1
    } else {
        let lg = (usize::BITS - (size - 1).leading_zeros()) as usize; // ceil(log2)
        (FINE + lg - 11).min(CLASSES - 1)
    }
}

/// The sizes class `c` holds: `(lo, hi]`.
fn class_bounds(c: usize) -> (usize, usize) {
    if c < FINE {
        (c * 16, (c + 1) * 16)
    } else {
        let lg = c - FINE + 11;
        (1 << (lg - 1), 1 << lg)
    }
}

#[allow(clippy::declare_interior_mutable_const)]
const ZERO_I: AtomicI64 = AtomicI64::new(0);
#[allow(clippy::declare_interior_mutable_const)]
const ZERO_U: AtomicU64 = AtomicU64::new(0);

/// mimalloc with per-size-class counters (module docs).
pub struct Census {
    live_bytes: [AtomicI64; CLASSES],
    live_allocs: [AtomicI64; CLASSES],
    allocs: [AtomicU64; CLASSES],
}

impl Census {
    /// All counters at zero.
    pub const fn new() -> Self {
        Self {
            live_bytes: [ZERO_I; CLASSES],
            live_allocs: [ZERO_I; CLASSES],
            allocs: [ZERO_U; CLASSES],
        }
    }

    fn add(&self, size: usize) {
        let c = class_of(size);
        self.live_bytes[c].fetch_add(size as i64, Ordering::Relaxed);
        self.live_allocs[c].fetch_add(1, Ordering::Relaxed);
        self.allocs[c].fetch_add(1, Ordering::Relaxed);
    }

    fn sub(&self, size: usize) {
        let c = class_of(size);
        self.live_bytes[c].fetch_sub(size as i64, Ordering::Relaxed);
        self.live_allocs[c].fetch_sub(1, Ordering::Relaxed);
    }

    /// The census as text (module docs: format).
    pub fn report(&self) -> String {
        use std::fmt::Write as _;
        let mut total = (0i64, 0i64);
        let mut lines = String::new();
        for c in 0..CLASSES {
            let allocs = self.allocs[c].load(Ordering::Relaxed);
            if allocs == 0 {
                continue;
            }
            let b = self.live_bytes[c].load(Ordering::Relaxed);
            let n = self.live_allocs[c].load(Ordering::Relaxed);
            total.0 += b;
            total.1 += n;
            let (lo, hi) = class_bounds(c);
            let _ = writeln!(
                lines,
                "class {lo} {hi} live_bytes {b} live_allocs {n} allocs {allocs}"
            );
        }
        let mi = mimalloc_info();
        format!(
            "total live_bytes {} live_allocs {}\nmimalloc current_rss {} current_commit {} \
             peak_commit {}\n{lines}",
            total.0, total.1, mi.0, mi.1, mi.2
        )
    }
}

impl Default for Census {
    fn default() -> Self {
        Self::new()
    }
}

// SAFETY: every method forwards to mimalloc with the caller's layout and pointer unchanged;
// the counters only observe sizes.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Census {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract is mimalloc's.
        let p = unsafe { mimalloc::MiMalloc.alloc(layout) };
        if !p.is_null() {
            self.add(layout.size());
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as `alloc`.
        let p = unsafe { mimalloc::MiMalloc.alloc_zeroed(layout) };
        if !p.is_null() {
            self.add(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        self.sub(layout.size());
        // SAFETY: `ptr` came from this allocator with `layout`.
        unsafe { mimalloc::MiMalloc.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: `ptr` came from this allocator with `layout`.
        let p = unsafe { mimalloc::MiMalloc.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            self.sub(layout.size());
            self.add(new_size);
        }
        p
    }
}

#[allow(unsafe_code)]
mod ffi {
    extern "C" {
        pub fn mi_process_info(
            elapsed_msecs: *mut usize,
            user_msecs: *mut usize,
            system_msecs: *mut usize,
            current_rss: *mut usize,
            peak_rss: *mut usize,
            current_commit: *mut usize,
            peak_commit: *mut usize,
            page_faults: *mut usize,
        );
    }
}

/// mimalloc's (current RSS, current commit, peak commit) in bytes.
#[allow(unsafe_code)]
fn mimalloc_info() -> (usize, usize, usize) {
    let mut v = [0usize; 8];
    let [a, b, c, rss, d, commit, peak, e] = &mut v;
    // SAFETY: every argument points at a live usize mimalloc writes once.
    unsafe { ffi::mi_process_info(a, b, c, rss, d, commit, peak, e) };
    (v[3], v[5], v[6])
}

/// Write the census on every SIGUSR2 (module docs: where).
pub async fn dump_on_usr2(census: &'static Census) {
    use tokio::signal::unix::{signal, SignalKind};
    let Ok(mut usr2) = signal(SignalKind::user_defined2()) else {
        log::warn!("alloc census: cannot watch SIGUSR2");
        return;
    };
    let path = std::env::var_os("FLASHTIER_ALLOC_CENSUS")
        .map_or_else(|| "alloc-census.txt".into(), std::path::PathBuf::from);
    while usr2.recv().await.is_some() {
        let text = census.report();
        let tmp = path.with_extension("tmp");
        match std::fs::write(&tmp, text).and_then(|()| std::fs::rename(&tmp, &path)) {
            Ok(()) => log::info!("alloc census written to {}", path.display()),
            Err(e) => log::warn!("alloc census: cannot write {}: {e}", path.display()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_cover_sizes_in_order() {
        assert_eq!(class_of(0), 0);
        assert_eq!(class_of(16), 0);
        assert_eq!(class_of(17), 1);
        assert_eq!(class_of(256), 15);
        assert_eq!(class_bounds(15), (240, 256));
        assert_eq!(class_of(1024), FINE - 1);
        assert_eq!(class_of(1025), FINE);
        assert_eq!(class_bounds(FINE), (1024, 2048));
        assert_eq!(class_of(4096), FINE + 1);
        assert_eq!(class_bounds(FINE + 1), (2048, 4096));
        assert_eq!(class_of(usize::MAX / 2), CLASSES - 1);
        for size in [1, 15, 16, 17, 255, 256, 1000, 1024, 1025, 4097, 1 << 26] {
            let (lo, hi) = class_bounds(class_of(size));
            assert!(lo < size && size <= hi, "{size} in ({lo}, {hi}]");
        }
    }

    #[test]
    fn counts_what_is_live() {
        let c = Census::new();
        c.add(256);
        c.add(256);
        c.add(5000);
        c.sub(256);
        let r = c.report();
        assert!(
            r.starts_with("total live_bytes 5256 live_allocs 2\n"),
            "{r}"
        );
        assert!(r.contains("class 240 256 live_bytes 256 live_allocs 1 allocs 2\n"));
        assert!(r.contains("class 4096 8192 live_bytes 5000 live_allocs 1 allocs 1\n"));
    }
}
