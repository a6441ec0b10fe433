//! Where a record lives: a device-set-global address plus a read-size hint.
//!
//! The address space concatenates every device's segments in order (device 0's segments, then
//! device 1's, ...), so `address = global_segment * segment_size + offset_in_segment`, counted
//! in 16-byte units (records are 16-byte aligned). 40 bits of 16-byte units cover 16 TiB. The
//! 5-bit size hint is the number of 4 KiB pages the record spans from the page holding its
//! start (1..=31), so a read is one IO; 0 means "more than 31 pages" and the reader first reads
//! one page to learn the length. The index stores [`Location::pack`]ed values (45 bits).

/// Bytes per address unit (the record alignment).
pub const UNIT: u64 = 16;
/// Bytes per page (the IO alignment).
pub const PAGE: u64 = 4096;
/// Bits of the packed address.
pub const ADDR_BITS: u32 = 40;
/// Bits of the packed size hint.
pub const HINT_BITS: u32 = 5;
/// Bits a packed location uses (the rest of a `u64` is free for the caller).
pub const PACKED_BITS: u32 = ADDR_BITS + HINT_BITS;
/// Largest byte address a location can express (exclusive).
pub const MAX_BYTES: u64 = (1u64 << ADDR_BITS) * UNIT;

/// A record's location. Cheap to copy; `pack`/`unpack` convert to the 45-bit form. The
/// default is byte 0, one page (a placeholder where no record is meant).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Location {
    /// Address in 16-byte units (< 2^40).
    units: u64,
    /// Pages to read (1..=31), 0 = more than 31.
    hint: u8,
}

impl Location {
    /// A location from a byte address (16-byte aligned, < [`MAX_BYTES`]) and a record length.
    /// Returns `None` if the address is not representable.
    pub fn new(byte_addr: u64, record_len: u64) -> Option<Self> {
        if !byte_addr.is_multiple_of(UNIT) || byte_addr >= MAX_BYTES {
            return None;
        }
        let first = byte_addr / PAGE;
        let last = (byte_addr + record_len.max(1)).div_ceil(PAGE);
        let pages = last - first;
        let hint = if pages <= 31 { pages as u8 } else { 0 };
        Some(Self {
            units: byte_addr / UNIT,
            hint,
        })
    }

    /// Byte address in the device-set-global address space.
    pub fn byte_addr(self) -> u64 {
        self.units * UNIT
    }

    /// Pages to read starting at the page holding the record (0 = unknown, more than 31).
    pub fn size_hint_pages(self) -> u8 {
        self.hint
    }

    /// Pack into the low [`PACKED_BITS`] bits of a `u64`: address in bits 0..40, hint in 40..45.
    pub fn pack(self) -> u64 {
        self.units | (u64::from(self.hint) << ADDR_BITS)
    }

    /// Inverse of [`pack`](Self::pack); bits above [`PACKED_BITS`] are ignored.
    pub fn unpack(v: u64) -> Self {
        Self {
            units: v & ((1u64 << ADDR_BITS) - 1),
            hint: ((v >> ADDR_BITS) & ((1u64 << HINT_BITS) - 1)) as u8,
        }
    }
}

impl std::fmt::Display for Location {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:#x}+{}p", self.byte_addr(), self.hint)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pack_round_trip_and_hint() {
        let l = Location::new(4096 * 3 + 16, 100).unwrap();
        assert_eq!(l.size_hint_pages(), 1);
        assert_eq!(Location::unpack(l.pack()), l);
        assert!(l.pack() < 1 << PACKED_BITS);
        // crosses one page boundary
        let l = Location::new(4096 - 16, 32).unwrap();
        assert_eq!(l.size_hint_pages(), 2);
        // large record
        let l = Location::new(0, 200 * 1024).unwrap();
        assert_eq!(l.size_hint_pages(), 0);
        let top = Location::new(MAX_BYTES - 16, 16).unwrap();
        assert_eq!(Location::unpack(top.pack()), top);
        assert!(Location::new(MAX_BYTES, 16).is_none());
        assert!(Location::new(8, 16).is_none());
    }
}
