//! Number parsing with exactly the acceptance rules memcached uses.
//!
//! memcached parses every numeric token with C's `strtol`/`strtoul`/`strtoull` (base 10) and
//! then checks that parsing stopped at whitespace or at the end of the token
//! (`safe_strto*` in memcached's `util.c`). The quirks matter for byte-identical replies:
//! leading whitespace and a `+`/`-` sign are accepted, `strtoul("-1")` is rejected only because
//! the result is "negative", and 32-bit targets are filled by truncating a 64-bit `long`.
//! These functions reproduce those rules on byte slices; the caller passes one token (or an
//! item's value, for incr/decr, whose end plays the role of the trailing `\r\n`).
//!
//! Pure functions; any thread.

/// C `isspace` in the "C" locale.
pub fn is_c_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r')
}

/// The digits of a number as `strtoull` sees them.
struct Scanned {
    negative: bool,
    /// `None` when the magnitude does not fit in 64 bits (`ERANGE`).
    magnitude: Option<u64>,
    /// 128-bit magnitude for signed range checks (saturates far above `u64::MAX`).
    wide: u128,
}

/// Scans `[space]* [+-]? digit+` and requires the byte after the digits to be whitespace,
/// NUL or the end of the slice. Returns `None` for no digits or trailing garbage.
fn scan(s: &[u8]) -> Option<Scanned> {
    let mut i = 0;
    while s.get(i).copied().is_some_and(is_c_space) {
        i += 1;
    }
    let mut negative = false;
    match s.get(i) {
        Some(b'-') => {
            negative = true;
            i += 1;
        }
        Some(b'+') => i += 1,
        _ => {}
    }
    let start = i;
    let mut wide: u128 = 0;
    while let Some(d) = s.get(i).copied().filter(u8::is_ascii_digit) {
        wide = wide.saturating_mul(10).saturating_add(u128::from(d - b'0'));
        i += 1;
    }
    if i == start {
        return None;
    }
    match s.get(i) {
        None | Some(0) => {}
        Some(&b) if is_c_space(b) => {}
        Some(_) => return None,
    }
    let magnitude = u64::try_from(wide).ok();
    Some(Scanned {
        negative,
        magnitude,
        wide,
    })
}

/// memcached `safe_strtoull`: a 64-bit unsigned number.
pub fn strtoull(s: &[u8]) -> Option<u64> {
    let sc = scan(s)?;
    let mag = sc.magnitude?;
    let value = if sc.negative { mag.wrapping_neg() } else { mag };
    if (value as i64) < 0 && s.contains(&b'-') {
        return None;
    }
    Some(value)
}

/// memcached `safe_strtoul` into a `uint32_t`: parsed as a 64-bit `unsigned long`, then
/// truncated.
pub fn strtoul32(s: &[u8]) -> Option<u32> {
    strtoull(s).map(|v| v as u32)
}

/// memcached `safe_strtol` into an `int32_t`: parsed as a 64-bit `long` (out of range is an
/// error), then truncated to 32 bits.
pub fn strtol32(s: &[u8]) -> Option<i32> {
    let sc = scan(s)?;
    let v: i64 = if sc.negative {
        if sc.wide > (1u128 << 63) {
            return None;
        }
        (sc.wide as i128).wrapping_neg() as i64
    } else {
        if sc.wide > i64::MAX as u128 {
            return None;
        }
        sc.wide as i64
    };
    Some(v as i32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unsigned_rules() {
        assert_eq!(strtoull(b"0"), Some(0));
        assert_eq!(strtoull(b"18446744073709551615"), Some(u64::MAX));
        assert_eq!(strtoull(b"18446744073709551616"), None);
        assert_eq!(strtoull(b"-1"), None);
        assert_eq!(strtoull(b"-0"), Some(0));
        assert_eq!(strtoull(b"+5"), Some(5));
        assert_eq!(strtoull(b"\t5"), Some(5));
        assert_eq!(strtoull(b"5\tx"), Some(5));
        assert_eq!(strtoull(b"5x"), None);
        assert_eq!(strtoull(b""), None);
        assert_eq!(strtoull(b"-"), None);
        assert_eq!(strtoull(b"12\0zz"), Some(12));
        // strtoull negates modulo 2^64; memcached only rejects results that look negative.
        assert_eq!(strtoull(b"-18446744073709551615"), Some(1));
    }

    #[test]
    fn u32_truncates() {
        assert_eq!(strtoul32(b"4294967296"), Some(0));
        assert_eq!(strtoul32(b"4294967295"), Some(u32::MAX));
        assert_eq!(strtoul32(b"-5"), None);
    }

    #[test]
    fn i32_truncates() {
        assert_eq!(strtol32(b"-1"), Some(-1));
        assert_eq!(strtol32(b"2147483648"), Some(i32::MIN));
        assert_eq!(strtol32(b"4294967297"), Some(1));
        assert_eq!(strtol32(b"9223372036854775808"), None);
        assert_eq!(strtol32(b"-9223372036854775808"), Some(0));
        assert_eq!(strtol32(b"abc"), None);
    }
}
