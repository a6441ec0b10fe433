//! Prometheus text exposition (format 0.0.4) for both faces' `/metrics`: the naming layer
//! between the protocol's `stats` names (memcached-compatible, unchanged) and metrics that
//! `promtool check metrics` accepts. Invariant: one rule for every stat ([`metric_name`], also
//! in `docs/operations.md`), so a stat another crate adds later is exported without a list to
//! update; every family gets `# HELP` (the library's doc text, docs/stats.md, or a generic
//! sentence) and `# TYPE` exactly once.
//!
//! Also here: latency histograms ([`Exposition::histogram`]) and the process metrics every
//! Prometheus client exports ([`Exposition::process`], from /proc).

use std::collections::HashSet;
use std::fmt::Write as _;

use flashtier_flash::metrics::Snapshot;

/// Counter or gauge.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
        }
    }
}

/// The exported name of `stat` (without prefix) and the factor turning its value into
/// base units.
///
/// Characters outside `[a-zA-Z0-9_]` become `_`; unit suffixes become base units
/// (`_us`/`_ms`/`_s` → `_seconds`, `_kb` → `_bytes`, `_percent`/`_pct` → `_ratio` 0–1,
/// memcached's `uptime`, `time`, `rusage_*` get `_seconds`); a counter ends in `_total`, a
/// gauge never does (`flash_segments_total`, a gauge, becomes `flash_segments`).
pub fn metric_name(stat: &str, kind: Kind) -> (String, f64) {
    let mut name: String = stat
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    let mut scale = 1.0;
    const UNITS: &[(&str, &str, f64)] = &[
        ("_us", "_seconds", 1e-6),
        ("_ms", "_seconds", 1e-3),
        ("_s", "_seconds", 1.0),
        ("_secs", "_seconds", 1.0),
        ("_kb", "_bytes", 1024.0),
        ("_percent", "_ratio", 0.01),
        ("_pct", "_ratio", 0.01),
    ];
    for (suffix, unit, factor) in UNITS {
        if let Some(base) = name.strip_suffix(suffix) {
            name = format!("{base}{unit}");
            scale = *factor;
            break;
        }
    }
    if matches!(name.as_str(), "uptime" | "time") || name.starts_with("rusage_") {
        name.push_str("_seconds");
    }
    match kind {
        Kind::Counter if !name.ends_with("_total") => name.push_str("_total"),
        Kind::Gauge => {
            if let Some(base) = name.strip_suffix("_total") {
                name = base.to_string();
            }
        }
        Kind::Counter => {}
    }
    (name, scale)
}

/// A number Prometheus and Rust both read as finite.
pub fn parse_number(v: &str) -> Option<f64> {
    if v.is_empty()
        || !v
            .bytes()
            .all(|b| b.is_ascii_digit() || matches!(b, b'.' | b'-' | b'+' | b'e' | b'E'))
    {
        return None;
    }
    v.parse::<f64>().ok().filter(|f| f.is_finite())
}

fn label_value(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn help_text(h: &str) -> String {
    h.replace('\\', "\\\\").replace('\n', " ")
}

fn number(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        format!("{v}")
    }
}

/// One `/metrics` body under construction. The first family of a name wins; later ones
/// with the same name are dropped, so the text never repeats a family.
pub struct Exposition {
    prefix: &'static str,
    out: String,
    seen: HashSet<String>,
}

impl Exposition {
    /// Metric names start with `prefix` (e.g. `flashtier_`, `flashtier_block_`).
    pub fn new(prefix: &'static str) -> Self {
        Self {
            prefix,
            out: String::new(),
            seen: HashSet::new(),
        }
    }

    fn head(&mut self, full: &str, kind: &str, help: &str) -> bool {
        if !self.seen.insert(full.to_string()) {
            return false;
        }
        let _ = writeln!(self.out, "# HELP {full} {}", help_text(help));
        let _ = writeln!(self.out, "# TYPE {full} {kind}");
        true
    }

    /// One stat through the naming rule; a value that is not a number is skipped (text
    /// values go to [`Exposition::info`]).
    pub fn stat(&mut self, stat: &str, value: &str, kind: Kind, help: &str) {
        let Some(v) = parse_number(value) else {
            return;
        };
        let (name, scale) = metric_name(stat, kind);
        let full = format!("{}{name}", self.prefix);
        let unit = ["_seconds", "_bytes", "_ratio"]
            .into_iter()
            .find(|u| name.trim_end_matches("_total").ends_with(u) && !stat.ends_with(u));
        let help = match unit {
            Some(u) => format!("{help} (stat {stat}, exported in {}).", &u[1..]),
            None => help.to_string(),
        };
        if self.head(&full, kind.name(), &help) {
            let _ = writeln!(self.out, "{full} {}", number(v * scale));
        }
    }

    /// A family with labels, one sample per label set (`name` already in base units and,
    /// for a counter, ending in `_total`).
    pub fn labelled(&mut self, name: &str, kind: Kind, help: &str, samples: &[(String, f64)]) {
        let full = format!("{}{name}", self.prefix);
        if self.head(&full, kind.name(), help) {
            for (labels, v) in samples {
                let _ = writeln!(self.out, "{full}{{{labels}}} {}", number(*v));
            }
        }
    }

    /// `<prefix>info{k="v",...} 1`: the text-valued stats as labels of one gauge.
    pub fn info(&mut self, help: &str, labels: &[(String, String)]) {
        if labels.is_empty() {
            return;
        }
        let text: Vec<String> = labels
            .iter()
            .map(|(k, v)| {
                let k: String = k
                    .chars()
                    .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
                    .collect();
                format!("{k}=\"{}\"", label_value(v))
            })
            .collect();
        self.labelled("info", Kind::Gauge, help, &[(text.join(","), 1.0)]);
    }

    /// A latency histogram family `name` (ending in `_seconds`), one series per
    /// `(label value, snapshot)` under label `label`.
    pub fn histogram(&mut self, name: &str, help: &str, label: &str, series: &[(&str, Snapshot)]) {
        let full = format!("{}{name}", self.prefix);
        if !self.head(&full, "histogram", help) {
            return;
        }
        for (value, snap) in series {
            let sel = if label.is_empty() {
                String::new()
            } else {
                format!("{label}=\"{}\",", label_value(value))
            };
            for (le, n) in snap.cumulative() {
                let _ = writeln!(self.out, "{full}_bucket{{{sel}le=\"{le}\"}} {n}");
            }
            let bare = sel.trim_end_matches(',');
            let braces = if bare.is_empty() {
                String::new()
            } else {
                format!("{{{bare}}}")
            };
            let _ = writeln!(self.out, "{full}_sum{braces} {}", snap.sum_seconds());
            let _ = writeln!(self.out, "{full}_count{braces} {}", snap.count());
        }
    }

    /// The flash device's read and write latency histograms (both faces export the same).
    pub fn flash_io(&mut self, fs: &flashtier_flash::FlashStats) {
        self.histogram(
            "flash_io_duration_seconds",
            "Flash device IO time, submit to completion (queueing included), by op.",
            "op",
            &[
                ("read", fs.latency.read.snapshot()),
                ("write", fs.latency.write.snapshot()),
            ],
        );
    }

    /// The standard `process_*` metrics (no prefix), read from /proc; absent ones (not
    /// Linux) are skipped.
    pub fn process(&mut self) {
        let p = crate::procstat::read();
        let prefix = std::mem::take(&mut self.prefix);
        let mut one = |name: &str, kind: Kind, help: &str, v: Option<f64>| {
            if let Some(v) = v {
                self.labelled_bare(name, kind, help, v);
            }
        };
        one(
            "process_cpu_seconds_total",
            Kind::Counter,
            "Total user and system CPU time spent in seconds.",
            p.cpu_seconds,
        );
        one(
            "process_resident_memory_bytes",
            Kind::Gauge,
            "Resident memory size in bytes.",
            p.resident_bytes,
        );
        one(
            "process_virtual_memory_bytes",
            Kind::Gauge,
            "Virtual memory size in bytes.",
            p.virtual_bytes,
        );
        one(
            "process_open_fds",
            Kind::Gauge,
            "Number of open file descriptors.",
            p.open_fds,
        );
        one(
            "process_max_fds",
            Kind::Gauge,
            "Maximum number of open file descriptors.",
            p.max_fds,
        );
        one(
            "process_start_time_seconds",
            Kind::Gauge,
            "Start time of the process since unix epoch in seconds.",
            p.start_time_seconds,
        );
        self.prefix = prefix;
    }

    fn labelled_bare(&mut self, name: &str, kind: Kind, help: &str, v: f64) {
        let full = format!("{}{name}", self.prefix);
        if self.head(&full, kind.name(), help) {
            let _ = writeln!(self.out, "{full} {}", number(v));
        }
    }

    /// The finished text.
    pub fn finish(self) -> String {
        self.out
    }
}

/// Kind and HELP text of a flash engine stat (`flash_*`, both faces), from the engine's own
/// description: a description starting "Gauge" is a gauge, the rest are counters.
pub fn flash_kind(stat: &str) -> Option<(Kind, String)> {
    let (_, doc) = flashtier_flash::FlashStats::describe()
        .into_iter()
        .find(|(k, _)| *k == stat)?;
    let kind = if doc.starts_with("Gauge") {
        Kind::Gauge
    } else {
        Kind::Counter
    };
    Some((kind, doc.to_string()))
}

/// `stat name → meaning` from docs/stats.md's tables (first cell: backticked names, `*`
/// as a wildcard; last cell: meaning), so HELP says what the documentation says.
pub fn doc_help(stat: &str) -> Option<String> {
    const DOC: &str = include_str!("../../../docs/stats.md");
    let rows: Vec<Vec<&str>> = DOC
        .lines()
        .filter(|l| l.starts_with("| `"))
        .map(|l| l.trim_matches('|').split(" | ").collect())
        .collect();
    let find = |stat: &str, columns: Option<usize>| {
        rows.iter()
            .filter(|cells| columns.is_none_or(|n| cells.len() == n))
            // A row with an empty meaning (a compatibility table's) is not a definition.
            .filter(|cells| cells.last().is_some_and(|m| !m.trim().is_empty()))
            .find(|cells| {
                cells.first().is_some_and(|names| {
                    names
                        .split('`')
                        .skip(1)
                        .step_by(2)
                        .any(|pat| match pat.strip_suffix('*') {
                            Some(p) => !p.is_empty() && stat.starts_with(p),
                            None => stat == pat,
                        })
                })
            })
            .and_then(|cells| cells.last())
            .map(|m| plain(m))
    };
    // A knob's own row (knob | default | meaning) says more than the `extstore_knob_*` row.
    if let Some(m) = stat
        .strip_prefix("extstore_knob_")
        .and_then(|k| find(k, Some(3)))
    {
        return Some(format!("Runtime knob: {m}"));
    }
    find(stat, None)
}

/// Markdown cell text as plain text: backticks dropped, `[text](link)` becomes `text`.
fn plain(md: &str) -> String {
    let mut out = String::new();
    let mut rest = md.trim();
    while let Some(open) = rest.find('[') {
        out.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        match after
            .find("](")
            .and_then(|close| after[close..].find(')').map(|end| (close, close + end + 1)))
        {
            Some((close, end)) => {
                out.push_str(&after[..close]);
                rest = &after[end..];
            }
            None => {
                out.push('[');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out.replace('`', "")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn naming_rule() {
        let c = |s| metric_name(s, Kind::Counter);
        let g = |s| metric_name(s, Kind::Gauge);
        assert_eq!(c("cmd_get"), ("cmd_get_total".into(), 1.0));
        assert_eq!(g("flash_segments_total"), ("flash_segments".into(), 1.0));
        assert_eq!(
            g("flash_recovery_time_us"),
            ("flash_recovery_time_seconds".into(), 1e-6)
        );
        assert_eq!(
            g("extstore_knob_append_wait_ms").0,
            "extstore_knob_append_wait_seconds"
        );
        assert_eq!(g("read_hit_percent"), ("read_hit_ratio".into(), 0.01));
        assert_eq!(g("uptime").0, "uptime_seconds");
        assert_eq!(c("rusage_user").0, "rusage_user_seconds_total");
        assert_eq!(
            g("seq_threshold_kb"),
            ("seq_threshold_bytes".into(), 1024.0)
        );
        assert_eq!(c("a-b.c").0, "a_b_c_total");
    }

    #[test]
    fn exposition_text() {
        let mut e = Exposition::new("x_");
        e.stat("cmd_get", "3", Kind::Counter, "gets");
        e.stat("cmd_get", "9", Kind::Counter, "again");
        e.stat("hit_percent", "50.00", Kind::Gauge, "hits");
        e.stat("version", "1.2", Kind::Gauge, "not a number: skipped");
        e.stat("name", "abc", Kind::Gauge, "skipped");
        e.info("facts", &[("version".into(), "1.6\"x\"".into())]);
        assert_eq!(
            e.finish(),
            "# HELP x_cmd_get_total gets\n# TYPE x_cmd_get_total counter\nx_cmd_get_total 3\n\
             # HELP x_hit_ratio hits (stat hit_percent, exported in ratio).\n# TYPE x_hit_ratio gauge\nx_hit_ratio 0.5\n\
             # HELP x_version not a number: skipped\n# TYPE x_version gauge\nx_version 1.2\n\
             # HELP x_info facts\n# TYPE x_info gauge\nx_info{version=\"1.6\\\"x\\\"\"} 1\n"
        );
        assert!(parse_number("inf").is_none() && parse_number("NaN").is_none());
    }

    #[test]
    fn histogram_text() {
        let h = flashtier_flash::metrics::Histogram::default();
        h.record_ns(2_000);
        let mut e = Exposition::new("x_");
        e.histogram("lat_seconds", "latency", "op", &[("read", h.snapshot())]);
        let t = e.finish();
        assert!(t.contains("x_lat_seconds_bucket{op=\"read\",le=\"1e-06\"} 0\n"));
        assert!(t.contains("x_lat_seconds_bucket{op=\"read\",le=\"2.5e-06\"} 1\n"));
        assert!(t.contains("x_lat_seconds_bucket{op=\"read\",le=\"+Inf\"} 1\n"));
        assert!(t.contains("x_lat_seconds_sum{op=\"read\"} 0.000002\n"));
        assert!(t.contains("x_lat_seconds_count{op=\"read\"} 1\n"));
    }

    #[test]
    fn help_from_the_docs() {
        assert!(doc_help("cmd_get").unwrap().contains("commands received"));
        assert!(doc_help("incr_hits")
            .unwrap()
            .contains("per-command outcomes"));
        assert!(doc_help("extstore_knob_item_size")
            .unwrap()
            .starts_with("Runtime knob: values smaller"));
        assert_eq!(
            plain("see [knobs](#runtime-knobs) and `x`"),
            "see knobs and x"
        );
        assert_eq!(plain("a [b c"), "a [b c");
        assert_eq!(doc_help("no_such_stat_anywhere"), None);
    }
}
