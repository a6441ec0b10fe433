//! Printing raw protocol bytes readably in divergence reports.

/// Escapes `bytes` like a byte-string literal (`\r`, `\n`, `\xNN`), showing at most `max`
/// input bytes and noting how many were left out.
pub fn escape(bytes: &[u8], max: usize) -> String {
    let mut out = String::new();
    for &b in bytes.iter().take(max) {
        match b {
            b'\r' => out.push_str("\\r"),
            b'\n' => out.push_str("\\n"),
            b'\t' => out.push_str("\\t"),
            b'\\' => out.push_str("\\\\"),
            0x20..=0x7e => out.push(char::from(b)),
            _ => out.push_str(&format!("\\x{b:02x}")),
        }
    }
    if bytes.len() > max {
        out.push_str(&format!("...({} more bytes)", bytes.len() - max));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::escape;

    #[test]
    fn escapes_and_truncates() {
        assert_eq!(escape(b"HD\r\n\x01", 100), "HD\\r\\n\\x01");
        assert_eq!(escape(b"abcdef", 3), "abc...(3 more bytes)");
    }
}
