//! mimalloc tuning: how long freed memory stays mapped. mimalloc 3 keeps freed pages for
//! `purge_delay` = 1000 ms before returning them to the OS, so transient buffers (flash
//! reclaim reads, write chunks, decoded records) were counted twice in RSS and in a memory
//! cgroup: the kv fill with `-m 64` peaked ~19 MiB higher (docs/eviction.md, "Flash working
//! memory"). The binary sets [`PURGE_DELAY_MS`] at start unless `MIMALLOC_PURGE_DELAY` is
//! set in the environment (mimalloc reads its options from the environment before `main`).

/// Milliseconds freed memory stays mapped (mimalloc 2's default).
pub const PURGE_DELAY_MS: std::ffi::c_long = 10;

/// `mi_option_purge_delay` in mimalloc's `mi_option_t` (include/mimalloc.h, v3).
const MI_OPTION_PURGE_DELAY: i32 = 15;

#[allow(unsafe_code)]
mod ffi {
    extern "C" {
        pub fn mi_option_set(option: i32, value: std::ffi::c_long);
        pub fn mi_option_get(option: i32) -> std::ffi::c_long;
        pub fn mi_collect(force: bool);
    }
}

/// mimalloc's current purge delay in milliseconds.
#[allow(unsafe_code)]
pub fn purge_delay() -> std::ffi::c_long {
    // SAFETY: mi_option_get reads an option slot; any option index in range is valid.
    unsafe { ffi::mi_option_get(MI_OPTION_PURGE_DELAY) }
}

/// Set the purge delay to [`PURGE_DELAY_MS`] unless the environment chose one.
#[allow(unsafe_code)]
pub fn tune() {
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
        // SAFETY: mi_option_set stores an integer option; mimalloc reads it atomically.
        unsafe { ffi::mi_option_set(MI_OPTION_PURGE_DELAY, PURGE_DELAY_MS) }
    }
    log::debug!("mimalloc purge delay {} ms", purge_delay());
}

/// Return the calling thread's freed pages to the OS now (`mi_collect(true)`): a thread that
/// freed a burst of buffers and then sleeps keeps them mapped otherwise, since mimalloc purges
/// a heap's pages only when its thread allocates or collects (the small tier's flusher after
/// a log merge: docs/eviction.md, "RSS at rest").
#[allow(unsafe_code)]
pub fn collect() {
    // SAFETY: mi_collect takes no pointers; it frees the calling thread's unused pages.
    unsafe { ffi::mi_collect(true) }
}

#[cfg(test)]
mod tests {
    #[test]
    fn option_index_is_purge_delay() {
        // mimalloc 3's default purge delay is 1000 ms: a wrong index reads another option.
        if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
            assert_eq!(super::purge_delay(), 1000);
            super::tune();
            assert_eq!(super::purge_delay(), super::PURGE_DELAY_MS);
        }
    }
}
