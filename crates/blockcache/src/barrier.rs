//! [`Barrier`]: group commit for clients' FLUSH requests and FUA writes.
//!
//! A database commits with an fsync, which reaches the cache as an NBD FLUSH; several threads
//! (and, behind nbdfuse, several connections) send them at once. Each used to run its own
//! cache-device flush (write the partly filled buffers, wait for every write in flight —
//! reclaim's included — then fdatasync), one after the other on the device. Here a FLUSH
//! needs only a flush that *started after* every write it must cover had returned:
//!
//! - client writes are counted as they return (`cache_writes`; writes that reached the backing
//!   around the cache also in `backing_writes`);
//! - flushes run one at a time under one async mutex that holds what the last successful one
//!   covered (counts read just before it started);
//! - a FLUSH reads the counts when it arrives, takes the mutex (waiting for the flush in
//!   progress), and returns at once if a flush that finished while it waited covered them;
//!   otherwise it runs the next flush, which covers every request that queued behind the
//!   previous one. A FLUSH that finds no flush running always runs its own.
//!
//! So a burst of N FLUSHes costs at most two device flushes. The backing is flushed the same way (only when a client write
//! reached it since its last flush), concurrently with the cache device: an acknowledged
//! FLUSH never returns while another request's backing flush, which it relies on, is still
//! running (the flag this replaces let a second FLUSH return during the first one's).
//!
//! Invariant: `covered.cache <= cache_writes` and a successful flush sets `covered` only to
//! counts read before it started. Threads: request tasks.
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};

use flashtier_backend::BackendError;

/// What the last successful flush of each device covered (client writes counted).
#[derive(Debug, Default)]
struct Covered {
    cache: u64,
    backing: u64,
}

/// Client writes returned and what the flushes covered.
#[derive(Debug, Default)]
pub(crate) struct Barrier {
    /// Client write requests that returned (their appends are in the cache's buffers).
    cache_writes: AtomicU64,
    /// Client writes that reached the backing around the cache.
    backing_writes: AtomicU64,
    /// Cache flushes that succeeded (also under `covered`; read here without the lock).
    done: AtomicU64,
    /// Held while a flush runs.
    covered: tokio::sync::Mutex<Covered>,
}

/// Which devices a [`Barrier::sync`] flushed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Synced {
    /// The cache device was flushed by this call.
    pub(crate) cache: bool,
    /// The backing was flushed by this call.
    pub(crate) backing: bool,
}

impl Barrier {
    /// A client write request returned (call after its last append or backing write).
    pub(crate) fn wrote(&self) {
        self.cache_writes.fetch_add(1, Ordering::AcqRel);
    }

    /// A client write reached the backing (call once the backing write returned).
    pub(crate) fn wrote_backing(&self) {
        self.backing_writes.fetch_add(1, Ordering::AcqRel);
    }

    /// Make every write that returned before this call durable: on return `Ok`, a cache
    /// flush (`flush_cache`) and, if a write reached the backing, a backing flush
    /// (`flush_backing`) that each started after those writes returned have succeeded —
    /// this call's or an earlier caller's. Returns which flushes this call ran.
    pub(crate) async fn sync<C, B>(
        &self,
        flush_cache: impl FnOnce() -> C,
        flush_backing: impl FnOnce() -> B,
    ) -> Result<Synced, BackendError>
    where
        C: Future<Output = Result<(), BackendError>>,
        B: Future<Output = Result<(), BackendError>>,
    {
        let need_cache = self.cache_writes.load(Ordering::Acquire);
        let need_backing = self.backing_writes.load(Ordering::Acquire);
        let done = self.done.load(Ordering::Acquire);
        let mut covered = self.covered.lock().await;
        // Only a flush that finished while this one waited may answer it: a FLUSH that finds
        // the device idle always runs its own (it also hands the buffers of clean
        // admissions to the device, which callers rely on).
        let shared = self.done.load(Ordering::Acquire) != done;
        let run = Synced {
            cache: !shared || covered.cache < need_cache,
            backing: covered.backing < need_backing,
        };
        if run == Synced::default() {
            return Ok(run);
        }
        // Everything that returned by now is covered by flushes that start after this.
        let upto_cache = self.cache_writes.load(Ordering::Acquire);
        let upto_backing = self.backing_writes.load(Ordering::Acquire);
        let cache = async {
            if run.cache {
                flush_cache().await
            } else {
                Ok(())
            }
        };
        let backing = async {
            if run.backing {
                flush_backing().await
            } else {
                Ok(())
            }
        };
        let (c, b) = tokio::join!(cache, backing);
        if c.is_ok() && run.cache {
            covered.cache = upto_cache;
            self.done.fetch_add(1, Ordering::AcqRel);
        }
        if b.is_ok() && run.backing {
            covered.backing = upto_backing;
        }
        c.and(b).map(|()| run)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicU64;
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;

    fn ok() -> std::future::Ready<Result<(), BackendError>> {
        std::future::ready(Ok(()))
    }

    #[tokio::test]
    async fn a_flush_on_an_idle_device_always_runs() {
        let b = Barrier::default();
        let cache = AtomicU64::new(0);
        let flush = || {
            cache.fetch_add(1, Ordering::Relaxed);
            ok()
        };
        assert!(b.sync(flush, ok).await.expect("sync").cache);
        b.wrote();
        let s = b.sync(flush, ok).await.expect("sync");
        assert!(s.cache && !s.backing);
        assert!(b.sync(flush, ok).await.expect("sync").cache);
        assert_eq!(cache.load(Ordering::Relaxed), 3);
    }

    #[tokio::test]
    async fn a_failed_flush_covers_nothing() {
        let b = Barrier::default();
        b.wrote();
        b.wrote_backing();
        let err = b
            .sync(ok, || {
                std::future::ready(Err(BackendError::Io(std::io::Error::other("eio"))))
            })
            .await;
        assert!(err.is_err());
        // The backing flush failed, so the next FLUSH runs it again.
        let s = b.sync(ok, ok).await.expect("sync");
        assert!(s.backing);
    }

    /// Many FLUSHes at once while a slow flush runs: they wait for it, then one more flush
    /// covers all of them; each caller returns only once a flush that started after its own
    /// write returned has succeeded.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_burst_of_flushes_shares_few_device_flushes() {
        let b = Arc::new(Barrier::default());
        let flushes = Arc::new(AtomicU64::new(0));
        let mut tasks = Vec::new();
        for i in 0..16u64 {
            let (b, flushes) = (Arc::clone(&b), Arc::clone(&flushes));
            tasks.push(tokio::spawn(async move {
                b.wrote();
                let written = b.cache_writes.load(Ordering::Acquire);
                b.sync(
                    || async move {
                        flushes.fetch_add(1, Ordering::AcqRel);
                        tokio::time::sleep(Duration::from_millis(30)).await;
                        Ok(())
                    },
                    ok,
                )
                .await
                .expect("sync");
                assert!(b.covered.lock().await.cache >= written, "task {i}");
            }));
        }
        for t in tasks {
            t.await.expect("task");
        }
        let n = flushes.load(Ordering::Acquire);
        assert!((1..=3).contains(&n), "{n} device flushes for 16 FLUSHes");
    }
}
