//! [`Fixed`]: the tier's fixed, fully used arrays (the log index's heads and links, the set
//! summaries' filters and hit bits), optionally in their own mapping whose 2 MiB-aligned
//! part is advised `MADV_HUGEPAGE`.
//!
//! # Why
//! A small GET from flash touches a random set's summary and walks a random group's chain
//! of log links: cache and TLB misses over megabytes of arrays (docs/eviction.md, "Where a
//! small GET's CPU goes"). Transparent huge pages for the whole process cut a GET's CPU but
//! grew RSS 15–20 % (the allocator's arenas, half used); the server's mimalloc is built
//! `no_thp`, which turns THP off for the process (`PR_SET_THP_DISABLE`). These arrays are
//! allocated once at open, sized by the device and written from end to end, so a huge page
//! over them costs no RAM they would not use anyway: each gets an anonymous mapping
//! starting on a 2 MiB boundary, advised over its whole 2 MiB pages — the last, partly used
//! one too when at least half of it is used (so the advised range never exceeds twice the
//! array, and RSS grows by less than the array's own size) — and, where the process has
//! THP disabled, it is switched to "disabled except where advised"
//! (`PR_THP_DISABLE_EXCEPT_ADVISED`, Linux 6.18): the rest of the heap keeps 4 KiB pages.
//! Off ([`SmallConfig::hugepages`](crate::SmallConfig::hugepages) false), an array too
//! small to fill half a huge page, or a kernel that refuses any step: a plain heap array.
//! Only ranges the kernel accepted are counted (`small_hugepage_bytes`).
//!
//! # Threads
//! Any; the arrays are atomics.
use std::ops::Deref;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU16, AtomicU32, AtomicU64};
use std::sync::OnceLock;

/// A huge page's size (x86-64 and arm64 with 4 KiB base pages).
pub(crate) const HUGE: usize = 2 << 20;
const PAGE: usize = 4096;
/// `prctl(PR_SET_THP_DISABLE, 1, PR_THP_DISABLE_EXCEPT_ADVISED)` (Linux 6.18 uapi).
const PR_THP_DISABLE_EXCEPT_ADVISED: libc::c_ulong = 1 << 1;

/// Element types whose all-zero bytes are a valid value (what a fresh anonymous mapping
/// holds).
///
/// # Safety
/// Implement only for types for which every all-zero bit pattern is a valid value.
pub(crate) unsafe trait Zeroed: Default + Send + Sync {}
// SAFETY: an atomic integer's all-zero bytes are the value 0.
unsafe impl Zeroed for AtomicU16 {}
// SAFETY: as above.
unsafe impl Zeroed for AtomicU32 {}
// SAFETY: as above.
unsafe impl Zeroed for AtomicU64 {}

/// A fixed-length array of zero-initialized atomics (see the module docs).
pub(crate) enum Fixed<T: Zeroed> {
    Heap(Box<[T]>),
    Mapped(Mapping<T>),
}

/// `len` elements at `ptr`, the start of an anonymous mapping of `map_len` bytes, of which
/// the first `advised` are advised `MADV_HUGEPAGE`.
pub(crate) struct Mapping<T> {
    ptr: NonNull<T>,
    len: usize,
    map_len: usize,
    advised: usize,
}

// SAFETY: the mapping is owned by this value alone and the elements are atomics (`Zeroed`
// requires `Send + Sync`), so sending or sharing it is sending or sharing `[T]`.
unsafe impl<T: Zeroed> Send for Mapping<T> {}
// SAFETY: as above.
unsafe impl<T: Zeroed> Sync for Mapping<T> {}

impl<T: Zeroed> Fixed<T> {
    /// `len` zeroed elements; with `huge`, in an advised mapping when that is worth it.
    pub(crate) fn new(len: usize, huge: bool) -> Self {
        if huge {
            if let Some(m) = Mapping::new(len) {
                return Fixed::Mapped(m);
            }
        }
        Fixed::Heap((0..len).map(|_| T::default()).collect())
    }

    /// Bytes the kernel accepted as huge-page candidates (0 on the heap).
    pub(crate) fn advised_bytes(&self) -> u64 {
        match self {
            Fixed::Heap(_) => 0,
            Fixed::Mapped(m) => m.advised as u64,
        }
    }
}

impl<T: Zeroed> Deref for Fixed<T> {
    type Target = [T];

    fn deref(&self) -> &[T] {
        match self {
            Fixed::Heap(b) => b,
            // SAFETY: `ptr` starts a private mapping of at least `len × size_of::<T>()`
            // readable and writable bytes, zero-filled by the kernel (a valid `T` each,
            // `Zeroed`), aligned for `T` (page-aligned), unmapped only when `self` drops.
            Fixed::Mapped(m) => unsafe { std::slice::from_raw_parts(m.ptr.as_ptr(), m.len) },
        }
    }
}

/// The advised range for an array of `bytes`: its whole huge pages, plus the last partly
/// used one when at least half of it is used.
pub(crate) fn advised_len(bytes: usize) -> usize {
    let full = bytes / HUGE * HUGE;
    if (bytes - full) * 2 >= HUGE {
        full + HUGE
    } else {
        full
    }
}

impl<T: Zeroed> Mapping<T> {
    /// `None` when nothing would be advised or the kernel refuses (the caller uses the heap).
    fn new(len: usize) -> Option<Self> {
        let bytes = len.checked_mul(std::mem::size_of::<T>())?;
        let advised = advised_len(bytes);
        if advised == 0 || !thp_for_advised() {
            return None;
        }
        let map_len = advised.max(bytes.div_ceil(PAGE) * PAGE);
        let reserve = map_len + HUGE;
        // SAFETY: a fresh private anonymous mapping at an address of the kernel's choosing
        // touches no memory of ours.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                reserve,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            log::warn!("small tier: mmap of {reserve} bytes failed; arrays on the heap");
            return None;
        }
        let start = p as usize;
        let aligned = start.next_multiple_of(HUGE);
        let head = aligned - start;
        let tail = reserve - head - map_len;
        // SAFETY: the head and tail are parts of the mapping just made that nothing refers
        // to; the kept part [aligned, aligned + map_len) stays mapped.
        unsafe {
            if head > 0 {
                libc::munmap(p, head);
            }
            if tail > 0 {
                libc::munmap((aligned + map_len) as *mut libc::c_void, tail);
            }
        }
        // SAFETY: advice on a range of our own mapping; it changes no content.
        let r =
            unsafe { libc::madvise(aligned as *mut libc::c_void, advised, libc::MADV_HUGEPAGE) };
        let advised = if r == 0 {
            advised
        } else {
            log::warn!(
                "small tier: madvise(MADV_HUGEPAGE) refused: {}",
                std::io::Error::last_os_error()
            );
            0
        };
        Some(Mapping {
            ptr: NonNull::new(aligned as *mut T)?,
            len,
            map_len,
            advised,
        })
    }
}

impl<T> Drop for Mapping<T> {
    fn drop(&mut self) {
        // SAFETY: the mapping is ours alone (no slice of it outlives `self`).
        unsafe {
            libc::munmap(self.ptr.as_ptr().cast(), self.map_len);
        }
    }
}

/// True when an advised range of this process may get huge pages: THP is not disabled for
/// the process, or it is and could be narrowed to "except where advised" (decided once).
fn thp_for_advised() -> bool {
    static OK: OnceLock<bool> = OnceLock::new();
    *OK.get_or_init(|| {
        // SAFETY: prctl with integer arguments only reads and sets this process's flags.
        let now = unsafe { libc::prctl(libc::PR_GET_THP_DISABLE, 0, 0, 0, 0) };
        if now == 0 {
            return true;
        }
        // SAFETY: as above.
        let r = unsafe {
            libc::prctl(
                libc::PR_SET_THP_DISABLE,
                1 as libc::c_ulong,
                PR_THP_DISABLE_EXCEPT_ADVISED,
                0 as libc::c_ulong,
                0 as libc::c_ulong,
            )
        };
        if r != 0 {
            log::info!(
                "small tier: THP is off for this process and the kernel cannot allow it where \
                 advised ({}); no huge pages",
                std::io::Error::last_os_error()
            );
        }
        r == 0
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering::Relaxed;

    #[test]
    fn advised_range_is_whole_pages_plus_a_half_used_last_one() {
        assert_eq!(advised_len(0), 0);
        assert_eq!(advised_len(HUGE / 2 - 1), 0);
        assert_eq!(advised_len(HUGE / 2), HUGE);
        assert_eq!(advised_len(HUGE), HUGE);
        assert_eq!(advised_len(HUGE + HUGE / 4), HUGE);
        assert_eq!(advised_len(3 * HUGE - 1), 3 * HUGE);
        for b in (0..10 * HUGE).step_by(HUGE / 7) {
            assert!(advised_len(b) <= 2 * b, "{b}");
        }
    }

    /// Both forms hold zeros, keep what is stored, and only a mapping large enough is
    /// advised (on a kernel that accepts the advice; elsewhere the heap form is used).
    #[test]
    fn arrays_are_zeroed_and_usable_in_both_forms() {
        for (len, huge) in [(1000usize, false), (1000, true), (HUGE / 8 * 3, true)] {
            let a: Fixed<AtomicU64> = Fixed::new(len, huge);
            assert_eq!(a.len(), len);
            assert!(a.iter().all(|x| x.load(Relaxed) == 0));
            a[len - 1].store(7, Relaxed);
            a[0].store(5, Relaxed);
            assert_eq!((a[0].load(Relaxed), a[len - 1].load(Relaxed)), (5, 7));
            let small = len * 8 < HUGE / 2;
            if small || !huge {
                assert_eq!(a.advised_bytes(), 0);
            }
            if let Fixed::Mapped(m) = &a {
                assert_eq!(m.ptr.as_ptr() as usize % HUGE, 0, "starts on a huge page");
                assert_eq!(a.advised_bytes(), advised_len(len * 8) as u64);
            }
        }
    }
}
