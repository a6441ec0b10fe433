//! The process logger: every library logs through the `log` facade, this binary prints.
//!
//! One line per event on stderr: `2026-11-23T21:30:00.123Z WARN  flash: message`, or with
//! `--log-format json` one JSON object per line
//! (`{"ts":"…","level":"warn","target":"flash","msg":"…"}`). The level is `info` by default;
//! `-vv` on `kv` raises it to `debug` (every command),
//! `-vvv` to `trace`. Libraries never print; they call
//! `log::warn!` etc., so what they report reaches the same place as the binary's own lines.
//! The target is the crate (`flash`, `cache`, `nbd`, ...) or the binary's module (`kv`,
//! `block`, `ctl`).
use std::io::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use log::{Level, LevelFilter, Log, Metadata, Record};

struct StderrLogger;

/// `--log-format json` in force.
static JSON: AtomicBool = AtomicBool::new(false);

/// How log lines look.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// `TIMESTAMP LEVEL target: message`.
    #[default]
    Text,
    /// One JSON object per line: ts, level, target, msg.
    Json,
}

/// Install the logger (once; later calls are ignored) at `level`.
pub fn init(level: LevelFilter) {
    if log::set_logger(&StderrLogger).is_ok() {
        log::set_max_level(level);
    }
}

/// Choose the line format.
pub fn set_format(f: LogFormat) {
    JSON.store(f == LogFormat::Json, Ordering::Relaxed);
}

/// `s` as a JSON string literal (quotes included).
fn json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The short target of a log record: the crate without `flashtier_`, or the binary's module.
fn short_target(target: &str) -> &str {
    let t = target
        .strip_prefix("flashtier::")
        .or_else(|| target.strip_prefix("flashtier_"))
        .unwrap_or(target);
    t.split("::").next().unwrap_or(t)
}

/// One formatted line (newline included). In text format a message's line breaks are
/// escaped (as `\n`) unless `breaks`: see [`fatal`].
fn line(level: Level, target: &str, msg: &str, breaks: bool) -> String {
    let short = short_target(target);
    if JSON.load(Ordering::Relaxed) {
        return format!(
            "{{\"ts\":\"{}\",\"level\":\"{}\",\"target\":{},\"msg\":{}}}\n",
            timestamp(),
            level.as_str().to_ascii_lowercase(),
            json_string(short),
            json_string(msg)
        );
    }
    let level = match level {
        Level::Error => "ERROR",
        Level::Warn => "WARN ",
        Level::Info => "INFO ",
        Level::Debug => "DEBUG",
        Level::Trace => "TRACE",
    };
    // One event, one line: a message with line breaks keeps them escaped.
    let msg = if breaks {
        msg.trim_end().to_string()
    } else {
        msg.replace('\n', "\\n")
    };
    format!("{} {level} {short}: {msg}\n", timestamp())
}

/// Print the error a start (or a subcommand) failed with, the last line the process
/// writes: in text format with its own line breaks, so a message that is a block of text
/// (a TOML parse error with its source line and caret) reads as one; in JSON, one object as
/// every other line.
pub fn fatal(msg: &str) {
    let text = line(Level::Error, "flashtier", msg, true);
    let _ = std::io::stderr().lock().write_all(text.as_bytes());
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
        let text = line(r.level(), r.target(), &r.args().to_string(), false);
        let _ = std::io::stderr().lock().write_all(text.as_bytes());
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

/// An error and its causes on one line, each cause once: a cause whose text the message
/// already holds (a wrapper that printed its source) is not repeated.
pub fn error_chain(e: &anyhow::Error) -> String {
    let mut msg = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if text.is_empty() || msg.contains(&text) {
            continue;
        }
        if !msg.is_empty() {
            msg.push_str(": ");
        }
        msg.push_str(&text);
    }
    msg
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_and_json() {
        let t = line(Level::Warn, "flashtier_flash::engine", "a\nb \"q\"", false);
        assert!(t.ends_with(" WARN  flash: a\\nb \"q\"\n"), "{t}");
        assert_eq!(short_target("flashtier::block"), "block");
        assert_eq!(short_target("tokio::net"), "tokio");
        set_format(LogFormat::Json);
        let j = line(Level::Info, "flashtier::kv", "x\t\u{1}\"", false);
        set_format(LogFormat::Text);
        assert!(
            j.ends_with(",\"level\":\"info\",\"target\":\"kv\",\"msg\":\"x\\t\\u0001\\\"\"}\n"),
            "{j}"
        );
        assert!(j.starts_with("{\"ts\":\"20"), "{j}");
        // A fatal error keeps its line breaks in text, not in JSON.
        let f = line(Level::Error, "flashtier", "bad:\n  |\n1 | x\n", true);
        assert!(f.ends_with(" ERROR flashtier: bad:\n  |\n1 | x\n"), "{f}");
        set_format(LogFormat::Json);
        let j = line(Level::Error, "flashtier", "bad:\n  |", true);
        set_format(LogFormat::Text);
        assert!(j.ends_with("\"msg\":\"bad:\\n  |\"}\n"), "{j}");
    }

    #[test]
    fn causes_once() {
        let io = std::io::Error::new(std::io::ErrorKind::WouldBlock, "busy");
        let e = anyhow::Error::new(io)
            .context("flash lock on f: busy")
            .context("cannot open");
        assert_eq!(error_chain(&e), "cannot open: flash lock on f: busy");
    }

    #[test]
    fn dates() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(20_415), (2025, 11, 23));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
    }
}
