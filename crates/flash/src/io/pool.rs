//! Recycled read buffers: a device read takes an aligned buffer from here instead of
//! allocating and zeroing one, and the buffer comes back when the last `Bytes` made from it
//! (the record's key and value slices, a reply queued by reference) is dropped.
//!
//! Invariants: a pooled buffer is reused only after every `Bytes` over it is gone (the
//! `Bytes` owns the buffer through [`PooledBuf`], whose `Drop` returns it); a reused buffer is
//! not zeroed — a read fills the whole window before anything looks at it, and no byte outside
//! the window is ever exposed. Buffers are kept per size class (1..=[`MAX_CLASS_PAGES`]
//! pages) up to [`KEEP_PER_CLASS`] each; larger reads allocate as before.
use std::sync::Arc;

use bytes::Bytes;
use parking_lot::Mutex;

use super::{AlignedBuf, ALIGN};

/// Reads up to this many pages take pooled buffers.
pub const MAX_CLASS_PAGES: usize = 16;
/// Idle buffers kept per size class.
pub const KEEP_PER_CLASS: usize = 256;

/// Free aligned buffers by page count.
pub struct ReadPool {
    classes: Vec<Mutex<Vec<AlignedBuf>>>,
}

impl Default for ReadPool {
    fn default() -> Self {
        Self {
            classes: (0..MAX_CLASS_PAGES)
                .map(|_| Mutex::new(Vec::new()))
                .collect(),
        }
    }
}

impl ReadPool {
    /// A buffer whose window is `len` bytes (a multiple of 4 KiB for device reads). Its
    /// contents are whatever the buffer held last; the caller overwrites all of it.
    pub fn take(&self, len: usize) -> AlignedBuf {
        let pages = len.div_ceil(ALIGN).max(1);
        let Some(class) = self.classes.get(pages - 1) else {
            return AlignedBuf::zeroed(len);
        };
        // A buffer goes back to the largest class its capacity serves, which is the next
        // one up when its allocation happened to start aligned (capacity = pages + 1): look
        // there too, or such buffers would never be found again.
        let reused = class
            .lock()
            .pop()
            .or_else(|| self.classes.get(pages).and_then(|next| next.lock().pop()));
        match reused {
            Some(mut b) => {
                b.set_len(len);
                b
            }
            None => {
                let mut b = AlignedBuf::zeroed(pages * ALIGN);
                b.set_len(len);
                b
            }
        }
    }

    /// Hand a buffer back (dropped if its class is full or it is not a pooled size).
    pub fn give(&self, buf: AlignedBuf) {
        // The largest class this buffer can serve (its capacity may exceed its class).
        let pages = buf.capacity() / ALIGN;
        if pages == 0 {
            return;
        }
        if let Some(class) = self.classes.get(pages - 1) {
            let mut c = class.lock();
            if c.len() < KEEP_PER_CLASS {
                c.push(buf);
            }
        }
    }

    /// Idle buffers held (tests, stats).
    pub fn idle(&self) -> usize {
        self.classes.iter().map(|c| c.lock().len()).sum()
    }
}

/// A buffer on its way back to `pool` once the `Bytes` owning it is dropped.
pub struct PooledBuf {
    buf: Option<AlignedBuf>,
    pool: Arc<ReadPool>,
}

impl PooledBuf {
    /// `Bytes` over `buf`'s window; `buf` returns to `pool` when the last clone is dropped.
    pub fn into_bytes(buf: AlignedBuf, pool: Arc<ReadPool>) -> Bytes {
        Bytes::from_owner(PooledBuf {
            buf: Some(buf),
            pool,
        })
    }
}

impl AsRef<[u8]> for PooledBuf {
    fn as_ref(&self) -> &[u8] {
        self.buf.as_ref().map_or(&[], AlignedBuf::as_slice)
    }
}

impl Drop for PooledBuf {
    fn drop(&mut self) {
        if let Some(b) = self.buf.take() {
            self.pool.give(b);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_come_back_when_the_last_bytes_is_dropped() {
        let pool = Arc::new(ReadPool::default());
        let mut b = pool.take(8192);
        assert_eq!(b.len(), 8192);
        assert_eq!(b.as_slice().as_ptr() as usize % ALIGN, 0);
        b.as_mut_slice()[100] = 7;
        let p = b.as_slice().as_ptr();
        let bytes = PooledBuf::into_bytes(b, Arc::clone(&pool));
        let value = bytes.slice(100..200);
        drop(bytes);
        assert_eq!(pool.idle(), 0, "a slice still holds the buffer");
        assert_eq!(value[0], 7);
        drop(value);
        assert_eq!(pool.idle(), 1);
        // Reused without zeroing, at a smaller length in the same class.
        let again = pool.take(5000);
        assert_eq!(again.as_slice().as_ptr(), p);
        assert_eq!(again.len(), 5000);
        assert_eq!(again.as_slice()[100], 7);
        // A buffer one page roomier than its class (an allocation that started aligned) is
        // kept one class up and still found by a take of its own class.
        let mut roomy = AlignedBuf::zeroed(3 * ALIGN);
        roomy.set_len(2 * ALIGN);
        let roomy_at = roomy.as_slice().as_ptr();
        pool.give(roomy);
        assert_eq!(pool.take(2 * ALIGN).as_slice().as_ptr(), roomy_at);
        // Oversized reads are not pooled.
        let big = pool.take((MAX_CLASS_PAGES + 1) * ALIGN);
        pool.give(big);
        assert_eq!(pool.idle(), 0);
    }
}
