//! A bounds-checked big-endian reader over a byte slice. Every read either succeeds or
//! returns [`ParseError::Incomplete`] naming the total length needed; nothing indexes the
//! slice directly, so untrusted input cannot cause a panic.

#![deny(clippy::indexing_slicing, clippy::unwrap_used)]

use crate::error::ParseError;

/// Reads big-endian integers and byte runs from the front of a slice.
#[derive(Clone, Debug)]
pub struct Cursor<'a> {
    buf: &'a [u8],
    /// Bytes consumed so far; always `<= buf.len()`.
    pos: usize,
}

impl<'a> Cursor<'a> {
    /// A cursor at the start of `buf`.
    pub fn new(buf: &'a [u8]) -> Self {
        Cursor { buf, pos: 0 }
    }

    /// Bytes consumed so far.
    pub fn position(&self) -> usize {
        self.pos
    }

    /// Bytes not yet consumed.
    pub fn remaining(&self) -> usize {
        self.buf.len().saturating_sub(self.pos)
    }

    /// Takes the next `n` bytes.
    pub fn take(&mut self, n: usize) -> Result<&'a [u8], ParseError> {
        let end = self
            .pos
            .checked_add(n)
            .ok_or(ParseError::Invalid("length overflows"))?;
        let out = self
            .buf
            .get(self.pos..end)
            .ok_or(ParseError::Incomplete { needed: end })?;
        self.pos = end;
        Ok(out)
    }

    /// Takes everything left.
    pub fn rest(&mut self) -> &'a [u8] {
        let out = self.buf.get(self.pos..).unwrap_or(&[]);
        self.pos = self.buf.len();
        out
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], ParseError> {
        let bytes = self.take(N)?;
        bytes
            .try_into()
            .map_err(|_| ParseError::Invalid("short read"))
    }

    /// Reads a big-endian `u16`.
    pub fn u16(&mut self) -> Result<u16, ParseError> {
        Ok(u16::from_be_bytes(self.array()?))
    }

    /// Reads a big-endian `u32`.
    pub fn u32(&mut self) -> Result<u32, ParseError> {
        Ok(u32::from_be_bytes(self.array()?))
    }

    /// Reads a big-endian `u64`.
    pub fn u64(&mut self) -> Result<u64, ParseError> {
        Ok(u64::from_be_bytes(self.array()?))
    }
}

#[cfg(test)]
#[allow(clippy::indexing_slicing, clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn reads_big_endian_and_reports_needed() {
        let mut c = Cursor::new(&[0, 1, 0, 0, 0, 2, 9]);
        assert_eq!(c.u16(), Ok(1));
        assert_eq!(c.u32(), Ok(2));
        assert_eq!(c.u64(), Err(ParseError::Incomplete { needed: 14 }));
        assert_eq!(c.rest(), &[9]);
        assert_eq!(c.remaining(), 0);
    }
}
