//! Verifiable values: every byte of a value is derived from its key and its length.
//!
//! With `--verify`, a SET of key `k` with `len` bytes sends `pattern(seed(k, len), len)` and a
//! GET hit checks the returned bytes against the pattern for the returned length, so a value
//! served for the wrong key, truncated, shifted or corrupted (for example by a flash read of
//! the wrong block) counts as a mismatch. Because the seed includes the length, a truncated
//! value is not a prefix of a valid shorter one. Pure functions; any thread.

use crate::rng::{mix64, splitmix64};

/// The pattern seed for a key (its index and its prefix hash) and a value length.
pub fn seed(prefix_hash: u64, key_index: u64, len: usize) -> u64 {
    mix64(prefix_hash ^ mix64(key_index) ^ (len as u64).rotate_left(40))
}

/// A stable hash of the key prefix, so runs with different prefixes do not verify each other.
pub fn prefix_hash(prefix: &[u8]) -> u64 {
    let mut h = 0xCBF2_9CE4_8422_2325u64;
    for &b in prefix {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01B3);
    }
    h
}

/// Appends `len` pattern bytes for `seed` to `out`.
pub fn fill(out: &mut Vec<u8>, seed: u64, len: usize) {
    let mut state = seed;
    out.reserve(len);
    let mut left = len;
    while left >= 8 {
        out.extend_from_slice(&splitmix64(&mut state).to_le_bytes());
        left -= 8;
    }
    if left > 0 {
        let last = splitmix64(&mut state).to_le_bytes();
        out.extend_from_slice(last.get(..left).unwrap_or(&[]));
    }
}

/// Whether `value` is exactly the pattern for `seed` and its own length.
pub fn verify(value: &[u8], seed: u64) -> bool {
    let mut state = seed;
    let mut chunks = value.chunks_exact(8);
    for c in &mut chunks {
        if c != splitmix64(&mut state).to_le_bytes() {
            return false;
        }
    }
    let rest = chunks.remainder();
    rest.is_empty() || rest == &splitmix64(&mut state).to_le_bytes()[..rest.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fill_then_verify_round_trips_and_detects_damage() {
        let ph = prefix_hash(b"key:");
        for len in [0usize, 1, 7, 8, 9, 100, 4096, 65_536] {
            let s = seed(ph, 12345, len);
            let mut v = Vec::new();
            fill(&mut v, s, len);
            assert_eq!(v.len(), len);
            assert!(verify(&v, s), "len {len}");
            if len > 0 {
                let mut bad = v.clone();
                bad[len / 2] ^= 1;
                assert!(!verify(&bad, s), "flip at len {len}");
                // A truncated value does not verify under its own (shorter) length.
                let short = &v[..len - 1];
                assert!(!verify(short, seed(ph, 12345, len - 1)) || len == 1);
            }
        }
        // Another key's value does not verify.
        let mut v = Vec::new();
        fill(&mut v, seed(ph, 1, 100), 100);
        assert!(!verify(&v, seed(ph, 2, 100)));
        assert!(!verify(&v, seed(prefix_hash(b"other:"), 1, 100)));
    }
}
