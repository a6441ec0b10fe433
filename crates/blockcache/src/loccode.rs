//! [`LocCode`]: a block record's location as the table stores it — its address in 16-byte
//! units only. A [`Location`] also carries a read-size hint (pages the record spans), but
//! every record the index points at is a block record of one length, so the hint follows
//! from the address and is computed again on the way out: `bits(device bytes / 16)` bits
//! instead of 45 (32 bits for 64 GiB). Pure; fixed when the index is sized.
use flashtier_flash::location::{PACKED_BITS, UNIT};
use flashtier_flash::Location;

/// How the index encodes a packed [`Location`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LocCode {
    /// The indexed records' length as the engine reports it (header + value, unpadded);
    /// 0: the code is the packed location itself (no device known, tests).
    record_len: u64,
    /// Bits of a code.
    bits: u32,
}

impl Default for LocCode {
    fn default() -> Self {
        LocCode {
            record_len: 0,
            bits: PACKED_BITS,
        }
    }
}

impl LocCode {
    /// Codes for records of `record_len` bytes (unpadded) on a device set whose addresses
    /// are below `device_bytes`.
    pub fn for_records(device_bytes: u64, record_len: u64) -> Self {
        let units = device_bytes.div_ceil(UNIT).max(2);
        LocCode {
            record_len: record_len.max(1),
            bits: (64 - (units - 1).leading_zeros()).min(PACKED_BITS),
        }
    }

    /// Bits of a code.
    pub fn bits(&self) -> u32 {
        self.bits
    }

    /// The code of packed location `loc`.
    pub fn encode(&self, loc: u64) -> u64 {
        if self.record_len == 0 {
            loc
        } else {
            Location::unpack(loc).byte_addr() / UNIT
        }
    }

    /// The packed location of `code`.
    pub fn decode(&self, code: u64) -> u64 {
        if self.record_len == 0 {
            return code;
        }
        Location::new(code * UNIT, self.record_len).map_or(code, Location::pack)
    }

    /// Whether `loc` survives encoding (it is a record of this length within the device).
    pub fn exact(&self, loc: u64) -> bool {
        let code = self.encode(loc);
        (self.bits >= 64 || code >> self.bits == 0) && self.decode(code) == loc
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flashtier_flash::format::record::RECORD_HEADER_LEN;

    #[test]
    fn block_record_locations_round_trip_and_others_do_not() {
        let len = (RECORD_HEADER_LEN + 4096) as u64;
        let c = LocCode::for_records(64 << 30, len);
        assert_eq!(c.bits(), 32);
        for addr in [0u64, 16, 4096 - 16, 4096 * 7 + 64, (64 << 30) - 4160] {
            let loc = Location::new(addr, len).unwrap().pack();
            assert!(c.exact(loc), "{addr}");
            assert_eq!(c.decode(c.encode(loc)), loc);
        }
        // Another length spans another number of pages at this address.
        let other = Location::new(4096 - 16, 100).unwrap().pack();
        assert!(!c.exact(other));
        // Beyond the device.
        assert!(!c.exact(Location::new(64 << 30, len).unwrap().pack()));
        let plain = LocCode::default();
        assert!(plain.exact(other) && plain.encode(other) == other);
    }
}
