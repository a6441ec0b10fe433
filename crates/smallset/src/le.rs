//! Little-endian field access for the tier's on-flash pages (set pages and the superblock),
//! checked: a field past the buffer reads as `None` and a write past it is dropped, so a
//! damaged page can never panic a decoder.

/// Copy `bytes` into `dst` at `at` (nothing if it does not fit).
pub(crate) fn put(dst: &mut [u8], at: usize, bytes: &[u8]) {
    if let Some(d) = dst.get_mut(at..at + bytes.len()) {
        d.copy_from_slice(bytes);
    }
}

pub(crate) fn le16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

pub(crate) fn le32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

pub(crate) fn le64(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
}
