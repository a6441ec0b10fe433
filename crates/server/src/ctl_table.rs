//! `ctl stats --table` and `ctl list`: text tables for a person, in human units (IEC bytes,
//! k/M/G counts, percentages, seconds) with per-second rates over 1 min, 5 min and 1 h next
//! to each counter (`-` for gauges). Input is the admin endpoint's `/stats` and `/rates`
//! text, or a run dir's stats files.
use std::fmt::Write as _;
use std::path::Path;

/// `1536` → `1.5 KiB`.
pub fn bytes(v: f64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut v = v;
    let mut i = 0;
    while v.abs() >= 1024.0 && i + 1 < UNITS.len() {
        v /= 1024.0;
        i += 1;
    }
    if i == 0 {
        format!("{v:.0} B")
    } else {
        format!("{v:.1} {}", UNITS[i])
    }
}

/// `12345` → `12.3k`.
pub fn count(v: f64) -> String {
    const UNITS: [(f64, &str); 4] = [(1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")];
    for (scale, unit) in UNITS {
        if v.abs() >= scale {
            return format!("{:.1}{unit}", v / scale);
        }
    }
    if v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
}

/// A stat's value for a person, by its name's unit.
pub fn human(name: &str, raw: &str) -> String {
    let Ok(v) = raw.parse::<f64>() else {
        return raw.to_string();
    };
    if name.contains("bytes") || name == "block_size" {
        bytes(v)
    } else if name.ends_with("_percent") {
        format!("{v:.1}%")
    } else if name.ends_with("_us") {
        format!("{:.3} s", v / 1e6)
    } else if name.ends_with("_at") && v > 0.0 {
        format!("{raw} (unix s)")
    } else {
        count(v)
    }
}

fn rate(name: &str, v: f64) -> String {
    if name.contains("bytes") {
        format!("{}/s", bytes(v))
    } else {
        format!("{}/s", count(v))
    }
}

/// The `stats --table` text from `/stats` and `/rates` bodies.
pub fn table(stats: &str, rates: &str) -> String {
    let rate_of = |k: &str| -> Option<Vec<f64>> {
        rates
            .lines()
            .find_map(|l| l.strip_prefix(k).and_then(|r| r.strip_prefix('=')))
            .map(|r| r.split(',').filter_map(|x| x.parse().ok()).collect())
    };
    let spans = rate_of("span_seconds").unwrap_or_default();
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<34} {:>12} {:>14} {:>14} {:>14}",
        "stat", "value", "1 min", "5 min", "1 h"
    );
    for line in stats.lines() {
        let Some((k, v)) = line.split_once('=') else {
            continue;
        };
        let cols: Vec<String> = match rate_of(k) {
            Some(r) if !k.ends_with("_seconds") => r.iter().map(|x| rate(k, *x)).collect(),
            _ => vec!["-".into(); 3],
        };
        let col = |i: usize| cols.get(i).cloned().unwrap_or_else(|| "-".into());
        let _ = writeln!(
            out,
            "{k:<34} {:>12} {:>14} {:>14} {:>14}",
            human(k, v),
            col(0),
            col(1),
            col(2)
        );
    }
    if !spans.is_empty() {
        let spans: Vec<String> = spans.iter().map(|s| format!("{s:.0} s")).collect();
        let _ = writeln!(
            out,
            "(rates per second; windows covered so far: {})",
            spans.join(", ")
        );
    }
    out
}

/// The `list` text for a run dir.
pub fn list(dir: &Path) -> anyhow::Result<String> {
    let caches = crate::rundir::list(dir)?;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<16} {:<8} {:>8} {:<22} {:<22} {:<12} {:>10} {:>10} {:>8}",
        "export", "state", "pid", "listen", "admin", "mode", "cached", "dirty", "hit"
    );
    for c in &caches {
        let state = if c.running {
            "serving"
        } else if c.get("state") == "serving" {
            "dead"
        } else {
            c.get("state")
        };
        let bs: f64 = c.get("block_size").parse().unwrap_or(0.0);
        let blocks = |k: &str| -> String {
            c.get(k)
                .parse::<f64>()
                .map_or("-".to_string(), |n| bytes(n * bs))
        };
        let _ = writeln!(
            out,
            "{:<16} {:<8} {:>8} {:<22} {:<22} {:<12} {:>10} {:>10} {:>8}",
            c.export,
            state,
            c.get("pid"),
            c.get("listen"),
            c.get("admin"),
            c.get("mode"),
            blocks("cached_blocks"),
            blocks("dirty_blocks"),
            human("read_hit_percent", c.get("read_hit_percent"))
        );
    }
    if caches.is_empty() {
        let _ = writeln!(out, "(no caches in {})", dir.display());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units() {
        assert_eq!(bytes(512.0), "512 B");
        assert_eq!(bytes(1536.0), "1.5 KiB");
        assert_eq!(bytes(3.0 * 1024.0 * 1024.0 * 1024.0), "3.0 GiB");
        assert_eq!(count(12_345.0), "12.3k");
        assert_eq!(count(7.0), "7");
        assert_eq!(human("read_hit_percent", "93.50"), "93.5%");
        assert_eq!(human("flash_recovery_time_us", "2500"), "0.003 s");
        assert_eq!(human("mode", "writeback"), "writeback");
    }

    #[test]
    fn table_joins_rates() {
        let t = table(
            "reads=1200\ndirty_blocks=5\nflash_bytes_written=1048576\n",
            "window_seconds=60,300,3600\nspan_seconds=60.0,300.0,300.0\nreads=20.000,4.000,4.000\n\
             flash_bytes_written=2048.000,0,0\n",
        );
        let lines: Vec<&str> = t.lines().collect();
        assert!(
            lines[1].starts_with("reads") && lines[1].contains("1.2k"),
            "{t}"
        );
        assert!(lines[1].contains("20/s") && lines[1].contains("4/s"), "{t}");
        assert!(
            lines[2].contains(" 5 ") && lines[2].trim_end().ends_with('-'),
            "{t}"
        );
        assert!(
            lines[3].contains("1.0 MiB") && lines[3].contains("2.0 KiB/s"),
            "{t}"
        );
        assert!(
            t.contains("windows covered so far: 60 s, 300 s, 300 s"),
            "{t}"
        );
    }
}
