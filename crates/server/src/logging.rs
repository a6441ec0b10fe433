//! The process logger: every library logs through the `log` facade, this binary prints.
//!
//! One line per event on stderr: `2026-11-23T21:30:00.123Z WARN  flash: message`. The level
//! is `info` by default; `-v` on `kv` raises it to `debug`, `-vv` to `trace`. Libraries never
//! print; they call `log::warn!` etc., so what they report reaches the same place as the
//! binary's own lines.
use std::io::Write as _;
use std::time::{SystemTime, UNIX_EPOCH};

use log::{Level, LevelFilter, Log, Metadata, Record};

struct StderrLogger;

/// Install the logger (once; later calls are ignored) at `level`.
pub fn init(level: LevelFilter) {
    if log::set_logger(&StderrLogger).is_ok() {
        log::set_max_level(level);
    }
}

/// Change the level of the installed logger.
pub fn set_level(level: LevelFilter) {
    log::set_max_level(level);
}

impl Log for StderrLogger {
    fn enabled(&self, m: &Metadata<'_>) -> bool {
        m.level() <= log::max_level()
    }

    fn log(&self, r: &Record<'_>) {
        if !self.enabled(r.metadata()) {
            return;
        }
        let target = r.target();
        let short = target
            .strip_prefix("flashtier_")
            .unwrap_or(target)
            .split("::")
            .next()
            .unwrap_or(target);
        let level = match r.level() {
            Level::Error => "ERROR",
            Level::Warn => "WARN ",
            Level::Info => "INFO ",
            Level::Debug => "DEBUG",
            Level::Trace => "TRACE",
        };
        let line = format!("{} {level} {short}: {}\n", timestamp(), r.args());
        let _ = std::io::stderr().lock().write_all(line.as_bytes());
    }

    fn flush(&self) {
        let _ = std::io::stderr().flush();
    }
}

/// UTC time now as RFC 3339 with milliseconds.
pub fn timestamp() -> String {
    let d = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let secs = d.as_secs();
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, day) = civil_from_days(days as i64);
    format!(
        "{y:04}-{m:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        d.subsec_millis()
    )
}

/// Proleptic Gregorian date of a day count since 1970-01-01 (Howard Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::civil_from_days;

    #[test]
    fn dates() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(20_415), (2025, 11, 23));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
    }
}
