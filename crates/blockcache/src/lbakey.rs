//! [`KeySplit`]: an LBA as (home slot, stored key) and back, so the table never stores the
//! LBA itself (quotienting, as in Cleary's compact hash tables and quotient filters).
//!
//! An LBA below the backing's block count has `bits` significant bits. It is mixed by a
//! bijection on `bits`-bit values (multiply by an odd constant, xor-shift, twice), giving
//! `h`. The top `qbits` bits of `h` are the quotient `q` (`2^qbits` is the smallest power of
//! two ≥ the slot count `n`); its home slot is `q × n / 2^qbits` (at most two consecutive
//! quotients share a home, so they differ in their low bit). A slot stores the low
//! `bits − qbits + 1` bits of `h`: the remainder plus the quotient's low bit. Home slot and
//! stored key give back `q`, then `h`, then the LBA: two LBAs with the same home and stored
//! key are the same LBA, so a match in the table is exact (no flash read to confirm a hit).
//!
//! Pure arithmetic, no state besides the parameters fixed when the table is sized.

/// Odd multipliers of the mix (splitmix64's).
const M1: u64 = 0xbf58_476d_1ce4_e5b9;
const M2: u64 = 0x94d0_49bb_1331_11eb;

/// The inverse of an odd `m` modulo 2^64 (Newton's iteration, 6 steps double the bits).
const fn inverse(m: u64) -> u64 {
    let mut x = m;
    let mut i = 0;
    while i < 6 {
        x = x.wrapping_mul(2u64.wrapping_sub(m.wrapping_mul(x)));
        i += 1;
    }
    x
}

const M1_INV: u64 = inverse(M1);
const M2_INV: u64 = inverse(M2);

/// How LBAs split over a table of `n` slots.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct KeySplit {
    /// Significant bits of an LBA (and of `h`).
    bits: u32,
    /// `2^bits − 1`.
    mask: u64,
    /// The xor-shift distance of the mix.
    shift: u32,
    /// Quotient bits: `2^qbits ≥ n > 2^(qbits − 1)`.
    qbits: u32,
    /// Slots.
    n: u64,
}

impl KeySplit {
    /// The split for `n` slots (≥ 2) and LBAs below `lba_limit` (≥ 1).
    pub(crate) fn new(n: u64, lba_limit: u64) -> Self {
        let n = n.max(2);
        let qbits = 64 - (n - 1).leading_zeros();
        let lba_bits = 64 - lba_limit.saturating_sub(1).leading_zeros();
        let bits = lba_bits.max(qbits);
        KeySplit {
            bits,
            mask: if bits == 64 {
                u64::MAX
            } else {
                (1 << bits) - 1
            },
            shift: bits.div_ceil(2).max(1),
            qbits,
            n,
        }
    }

    /// Bits of the stored key.
    pub(crate) fn key_bits(&self) -> u32 {
        self.bits - self.qbits + 1
    }

    /// Whether `lba` is in the domain (below `2^bits`).
    pub(crate) fn holds(&self, lba: u64) -> bool {
        lba & !self.mask == 0
    }

    fn mix(&self, x: u64) -> u64 {
        let mut h = x.wrapping_mul(M1) & self.mask;
        h ^= h >> self.shift;
        h = h.wrapping_mul(M2) & self.mask;
        h ^ (h >> self.shift)
    }

    fn unshift(&self, y: u64) -> u64 {
        // x ^ (x >> s) = y: each round fixes `shift` more bits from the top.
        let mut x = y;
        for _ in 0..self.bits / self.shift + 1 {
            x = y ^ (x >> self.shift);
        }
        x
    }

    fn unmix(&self, h: u64) -> u64 {
        let mut x = self.unshift(h);
        x = x.wrapping_mul(M2_INV) & self.mask;
        x = self.unshift(x);
        x.wrapping_mul(M1_INV) & self.mask
    }

    /// (home slot, stored key) of `lba` (which [`KeySplit::holds`]).
    pub(crate) fn split(&self, lba: u64) -> (usize, u64) {
        let h = self.mix(lba);
        let rbits = self.bits - self.qbits;
        let q = h >> rbits;
        let home = ((u128::from(q) * u128::from(self.n)) >> self.qbits) as usize;
        let key = if rbits + 1 >= 64 {
            h
        } else {
            h & ((1 << (rbits + 1)) - 1)
        };
        (home, key)
    }

    /// The LBA stored at `home` with `key` (inverse of [`KeySplit::split`]).
    pub(crate) fn join(&self, home: usize, key: u64) -> u64 {
        let rbits = self.bits - self.qbits;
        // The first quotient whose home is `home`: ceil(home × 2^qbits / n).
        let first = if self.qbits < 32 && (home as u64) < 1 << 32 {
            ((home as u64) << self.qbits).div_ceil(self.n)
        } else {
            ((u128::from(home as u64) << self.qbits).div_ceil(u128::from(self.n))) as u64
        };
        let low = (key >> rbits) & 1;
        let q = if first & 1 == low { first } else { first + 1 };
        let r = if rbits == 0 {
            0
        } else {
            key & ((1 << rbits) - 1)
        };
        let h = if rbits >= 64 { r } else { (q << rbits) | r };
        self.unmix(h)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inverses_are_inverses() {
        assert_eq!(M1.wrapping_mul(M1_INV), 1);
        assert_eq!(M2.wrapping_mul(M2_INV), 1);
    }

    #[test]
    fn split_and_join_round_trip_at_the_extremes() {
        for (n, limit) in [
            (16u64, 1u64),
            (16, 16),
            (17, 1 << 20),
            (1000, 1 << 36),
            (18_641_000, 1 << 36),
            (1 << 24, u64::MAX),
            (3, u64::MAX),
        ] {
            let s = KeySplit::new(n, limit);
            let top = if limit == u64::MAX {
                u64::MAX
            } else {
                limit - 1
            };
            let mut x = 0x1234_5678_9abc_def1u64;
            let mut lbas = vec![0, 1, top, top / 2, top.saturating_sub(1)];
            for _ in 0..2000 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                lbas.push(x % limit.max(1));
            }
            for lba in lbas {
                assert!(s.holds(lba));
                let (home, key) = s.split(lba);
                assert!((home as u64) < s.n, "n {n} lba {lba}");
                assert!(s.key_bits() >= 64 || key >> s.key_bits() == 0);
                assert_eq!(s.join(home, key), lba, "n {n} limit {limit}");
            }
        }
    }

    #[test]
    fn homes_spread_evenly() {
        // Sequential LBAs (a scan) land in every part of the table alike.
        let n = 1000u64;
        let s = KeySplit::new(n, 1 << 30);
        let mut per = vec![0u32; 10];
        for lba in 0..100_000u64 {
            per[s.split(lba).0 * 10 / n as usize] += 1;
        }
        for c in per {
            assert!((9_000..11_000).contains(&c), "{c}");
        }
    }
}
