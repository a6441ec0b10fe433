//! A connection's pending reply bytes: small replies coalesced in one buffer, large values
//! kept as the store's own `Bytes` (no copy).
//!
//! A multi-get of large items would otherwise copy every value into the output buffer;
//! memcached avoids that with iovecs pointing into its items, and this is the same idea:
//! values of at least [`ZERO_COPY_MIN`] bytes are queued by reference and written from the
//! store's memory. Dereferences to the current coalescing `BytesMut`, so reply helpers
//! written against `&mut BytesMut` work unchanged. Owned by one connection task.
use std::collections::VecDeque;
use std::ops::{Deref, DerefMut};

use bytes::{Bytes, BytesMut};

/// Values at least this large are queued by reference instead of copied (then written by
/// one vectored write with the reply text around them; a flash value is written straight
/// from its pooled read buffer).
pub const ZERO_COPY_MIN: usize = 2 * 1024;

#[derive(Debug, Default)]
pub struct Output {
    /// Finished segments, in order, all before `tail`.
    queued: VecDeque<Bytes>,
    queued_len: usize,
    /// The segment being appended to.
    tail: BytesMut,
}

impl Output {
    pub fn new() -> Self {
        Self::default()
    }

    /// How many bytes of a `len`-byte value [`put_value`](Self::put_value) copies into the
    /// coalescing buffer: all of a small one, none of one queued by reference (so a caller
    /// reserves room only for what is copied, not a 4 KiB value sent by reference).
    pub fn copied_len(len: usize) -> usize {
        if len < ZERO_COPY_MIN {
            len
        } else {
            0
        }
    }

    /// Append a value, by reference when it is large. Taken by value: cloning a `Bytes`
    /// made from a `Vec` (a RAM hit's copy) allocates its shared header, one more allocation
    /// and free per GET; moving it in does not.
    pub fn put_value(&mut self, value: Bytes) {
        if value.len() < ZERO_COPY_MIN {
            self.tail.extend_from_slice(&value);
            return;
        }
        if !self.tail.is_empty() {
            let seg = self.tail.split().freeze();
            self.queued_len += seg.len();
            self.queued.push_back(seg);
        }
        self.queued_len += value.len();
        self.queued.push_back(value);
    }

    /// Move everything pending in `other` to the end of this output (the replies of
    /// requests executed together, appended in request order).
    pub fn append(&mut self, mut other: Output) {
        if other.queued.is_empty() {
            self.tail.extend_from_slice(&other.tail);
            return;
        }
        if !self.tail.is_empty() {
            let seg = self.tail.split().freeze();
            self.queued_len += seg.len();
            self.queued.push_back(seg);
        }
        for seg in other.drain() {
            self.queued_len += seg.len();
            self.queued.push_back(seg);
        }
    }

    /// Total pending bytes.
    pub fn len(&self) -> usize {
        self.queued_len + self.tail.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Take every pending segment, in order, leaving the output empty.
    pub fn drain(&mut self) -> impl Iterator<Item = Bytes> + '_ {
        if !self.tail.is_empty() {
            let seg = self.tail.split().freeze();
            self.queued_len += seg.len();
            self.queued.push_back(seg);
        }
        self.queued_len = 0;
        self.queued.drain(..)
    }

    /// Everything pending as one contiguous buffer (tests).
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.len());
        for s in &self.queued {
            v.extend_from_slice(s);
        }
        v.extend_from_slice(&self.tail);
        v
    }

    /// Drop pending bytes and give back a large coalescing buffer.
    pub fn clear(&mut self, keep_capacity: usize) {
        self.queued.clear();
        self.queued_len = 0;
        self.tail.clear();
        if self.tail.capacity() > keep_capacity {
            self.tail = BytesMut::new();
        }
    }
}

impl Deref for Output {
    type Target = BytesMut;
    fn deref(&self) -> &BytesMut {
        &self.tail
    }
}

impl DerefMut for Output {
    fn deref_mut(&mut self) -> &mut BytesMut {
        &mut self.tail
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn large_values_are_not_copied_and_order_is_kept() {
        let mut out = Output::new();
        out.extend_from_slice(b"VALUE a 0 3\r\n");
        out.put_value(Bytes::from_static(b"abc"));
        out.extend_from_slice(b"\r\nVALUE b\r\n");
        let big = Bytes::from(vec![7u8; ZERO_COPY_MIN]);
        out.put_value(big.clone());
        out.extend_from_slice(b"\r\nEND\r\n");
        assert_eq!(out.len(), 13 + 3 + 11 + ZERO_COPY_MIN + 7);
        let segs: Vec<Bytes> = out.drain().collect();
        assert_eq!(segs.len(), 3);
        assert_eq!(
            segs[1].as_ptr(),
            big.as_ptr(),
            "the value was queued by reference"
        );
        assert_eq!(&segs[2][..], b"\r\nEND\r\n");
        assert!(out.is_empty());
    }
}
