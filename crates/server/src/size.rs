//! Human sizes on the command line: plain bytes (`1048576`), or a number with a binary
//! suffix: `k`/`K`/`KiB`/`KB`, `m`/`M`/`MiB`/`MB`, `g`/`G`/`GiB`/`GB` (all powers of 1024,
//! as memcached's `-I 1m` means 1 MiB).
use anyhow::{bail, Context as _};

/// Parse a size in bytes.
pub fn parse_size(s: &str) -> anyhow::Result<u64> {
    let s = s.trim();
    let digits_end = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, suffix) = s.split_at(digits_end);
    if num.is_empty() {
        bail!("invalid size {s:?}: expected a number with an optional K/M/G suffix");
    }
    let n: u64 = num.parse().with_context(|| format!("invalid size {s:?}"))?;
    let mult: u64 = match suffix.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        "t" | "tb" | "tib" => 1 << 40,
        other => bail!("invalid size {s:?}: unknown suffix {other:?} (use K, M, G or T)"),
    };
    n.checked_mul(mult)
        .with_context(|| format!("size {s:?} is too large"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("64M").unwrap(), 64 << 20);
        assert_eq!(parse_size("64MiB").unwrap(), 64 << 20);
        assert_eq!(parse_size("1G").unwrap(), 1 << 30);
        assert_eq!(parse_size("1m").unwrap(), 1 << 20);
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert_eq!(parse_size("2kb").unwrap(), 2048);
        assert!(parse_size("M").is_err());
        assert!(parse_size("12X").is_err());
        assert!(parse_size("-1").is_err());
        assert!(parse_size("99999999999T").is_err());
    }
}
