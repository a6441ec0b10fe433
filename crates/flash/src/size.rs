//! Byte counts in messages: [`format_size`] writes one the way the size parser
//! ([`crate::config::parse_size`]) reads it back. A leaf: the error type formats sizes with it
//! and the config module re-exports it.

/// A byte count as [`parse_size`](crate::config::parse_size) reads it back, exactly, in the
/// largest unit that divides it: `64MiB`, `1536MiB`, `4KiB`, `1000` (for messages that suggest
/// a flag value).
pub fn format_size(bytes: u64) -> String {
    const UNITS: [(u64, &str); 4] = [
        (1 << 40, "TiB"),
        (1 << 30, "GiB"),
        (1 << 20, "MiB"),
        (1 << 10, "KiB"),
    ];
    for (unit, name) in UNITS {
        if bytes >= unit && bytes.is_multiple_of(unit) {
            return format!("{}{name}", bytes / unit);
        }
    }
    bytes.to_string()
}
