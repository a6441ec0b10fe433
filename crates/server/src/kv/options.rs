//! memcached's `-o` extended options: every one memcached 1.6.18 knows, each honoured or
//! accepted with a one-line warning that says why it does not apply; anything else is a
//! usage error, as memcached's "Illegal suboption".
//!
//! The table is the single list `docs/compat.md` mirrors. Values are checked the way
//! memcached checks them (a bad value is refused even when the option then has no effect),
//! so a command line that memcached refuses is refused here too.
use std::time::Duration;

use anyhow::Context as _;

use crate::usage;

/// What an option does here.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Effect {
    /// Honoured (its meaning is applied).
    Honoured,
    /// Accepted; the warning says why it has no effect.
    Warn(&'static str),
}

/// Options memcached 1.6.18 accepts, with what they do here. `ext_*`, `ssl_*` and
/// `idle_timeout` are honoured by [`apply`]; every other one is listed with its warning.
pub const OPTIONS: &[(&str, Effect)] = &[
    ("maxconns_fast", Effect::Honoured),
    (
        "no_maxconns_fast",
        Effect::Warn("a client over the connection limit always gets ERROR and is closed"),
    ),
    (
        "hashpower",
        Effect::Warn("the index grows by itself (1.25x at load 0.9)"),
    ),
    (
        "no_hashexpand",
        Effect::Warn("the index grows shard by shard without a global pause"),
    ),
    (
        "slab_reassign",
        Effect::Warn("there are no slab classes (RAM is a log of segments)"),
    ),
    (
        "no_slab_reassign",
        Effect::Warn("there are no slab classes (RAM is a log of segments)"),
    ),
    (
        "slab_automove",
        Effect::Warn("there are no slab classes (RAM is a log of segments)"),
    ),
    (
        "no_slab_automove",
        Effect::Warn("there are no slab classes (RAM is a log of segments)"),
    ),
    (
        "slab_automove_ratio",
        Effect::Warn("there are no slab classes (RAM is a log of segments)"),
    ),
    (
        "slab_automove_window",
        Effect::Warn("there are no slab classes (RAM is a log of segments)"),
    ),
    (
        "slab_automove_freeratio",
        Effect::Warn("there are no slab classes (RAM is a log of segments)"),
    ),
    (
        "slab_sizes",
        Effect::Warn("there are no slab classes (RAM is a log of segments)"),
    ),
    (
        "slab_chunk_max",
        Effect::Warn("there are no slab classes; large items span whole segments"),
    ),
    (
        "no_chunked_items",
        Effect::Warn("there are no slab chunks; large items span whole segments"),
    ),
    (
        "tail_repair_time",
        Effect::Warn("items are never locked in an LRU tail; nothing to repair"),
    ),
    (
        "hash_algorithm",
        Effect::Warn("the index hashes with seeded xxh3 whatever is asked"),
    ),
    (
        "lru_crawler",
        Effect::Warn("expiry is reclaimed by the sweeper; there is no LRU crawler"),
    ),
    (
        "no_lru_crawler",
        Effect::Warn("expiry is reclaimed by the sweeper; there is no LRU crawler"),
    ),
    (
        "lru_crawler_sleep",
        Effect::Warn("expiry is reclaimed by the sweeper; there is no LRU crawler"),
    ),
    (
        "lru_crawler_tocrawl",
        Effect::Warn("expiry is reclaimed by the sweeper; there is no LRU crawler"),
    ),
    (
        "lru_maintainer",
        Effect::Warn("eviction is S3-FIFO over segments; there is no LRU maintainer"),
    ),
    (
        "no_lru_maintainer",
        Effect::Warn("eviction is S3-FIFO over segments; there is no LRU maintainer"),
    ),
    (
        "hot_lru_pct",
        Effect::Warn("eviction is S3-FIFO (small log 10%), not hot/warm/cold LRUs"),
    ),
    (
        "warm_lru_pct",
        Effect::Warn("eviction is S3-FIFO (small log 10%), not hot/warm/cold LRUs"),
    ),
    (
        "hot_max_factor",
        Effect::Warn("eviction is S3-FIFO (small log 10%), not hot/warm/cold LRUs"),
    ),
    (
        "warm_max_factor",
        Effect::Warn("eviction is S3-FIFO (small log 10%), not hot/warm/cold LRUs"),
    ),
    (
        "temporary_ttl",
        Effect::Warn("short-TTL items share the logs; expired segments are freed by the sweeper"),
    ),
    ("idle_timeout", Effect::Honoured),
    (
        "watcher_logbuf_size",
        Effect::Warn("there is no `watch` command"),
    ),
    (
        "worker_logbuf_size",
        Effect::Warn("there is no `watch` command"),
    ),
    ("track_sizes", Effect::Warn("`stats sizes` is not kept")),
    (
        "inline_ascii_resp",
        Effect::Warn("replies are always built from the item (no inline header)"),
    ),
    (
        "no_inline_ascii_resp",
        Effect::Warn("replies are always built from the item (no inline header)"),
    ),
    ("modern", Effect::Honoured),
    (
        "no_modern",
        Effect::Warn("flashtier has one behaviour, memcached 1.6's"),
    ),
    (
        "drop_privileges",
        Effect::Warn("no seccomp filter; use -u to drop to a user"),
    ),
    (
        "no_drop_privileges",
        Effect::Warn("no seccomp filter is installed anyway"),
    ),
    (
        "resp_obj_mem_limit",
        Effect::Warn("output is bounded per connection (1 MiB) instead"),
    ),
    (
        "read_buf_mem_limit",
        Effect::Warn("input is bounded per connection (one request) instead"),
    ),
    ("sock_cookie_id", Effect::Warn("sockets carry no cookie")),
    ("ext_path", Effect::Honoured),
    ("ext_item_size", Effect::Honoured),
    ("ext_recache_rate", Effect::Honoured),
    ("ext_compact_under", Effect::Honoured),
    ("ext_drop_under", Effect::Honoured),
    ("ext_drop_unread", Effect::Honoured),
    (
        "ext_page_size",
        Effect::Warn("flash segment size is chosen from the flash size (256 KiB..16 MiB)"),
    ),
    (
        "ext_wbuf_size",
        Effect::Warn("flash write buffers are the engine's chunks (knobs: max_chunks_in_flight)"),
    ),
    (
        "ext_threads",
        Effect::Warn("flash IO runs on one io_uring thread"),
    ),
    (
        "ext_io_depth",
        Effect::Warn("flash IO runs on one io_uring thread (read_queue_limit bounds reads)"),
    ),
    (
        "ext_item_age",
        Effect::Warn(
            "every item is written through to flash when stored; there is no idle age to wait for",
        ),
    ),
    (
        "ext_low_ttl",
        Effect::Warn(
            "flash segments are not split by TTL; wholly expired segments are reclaimed unread",
        ),
    ),
    (
        "ext_max_frag",
        Effect::Warn("reclaim picks victims by reclaim_policy and keep_limit"),
    ),
    (
        "ext_max_sleep",
        Effect::Warn("the reclaimer is paced by reclaim_rate"),
    ),
    ("ssl_chain_cert", Effect::Honoured),
    ("ssl_key", Effect::Honoured),
    ("ssl_keyformat", Effect::Honoured),
    ("ssl_verify_mode", Effect::Honoured),
    (
        "ssl_ciphers",
        Effect::Warn("TLS uses rustls's own cipher suites"),
    ),
    ("ssl_ca_cert", Effect::Honoured),
    (
        "ssl_wbuf_size",
        Effect::Warn("TLS records are sized by rustls"),
    ),
    ("ssl_session_cache", Effect::Honoured),
    (
        "ssl_kernel_tls",
        Effect::Warn("TLS runs in user space (rustls); no kernel offload"),
    ),
    ("ssl_min_version", Effect::Honoured),
];

/// `ext_*` options that set a runtime knob of the flash tier (`ext_` stripped).
const EXT_KNOBS: &[&str] = &[
    "ext_item_size",
    "ext_recache_rate",
    "ext_compact_under",
    "ext_drop_under",
    "ext_drop_unread",
];

/// TLS settings from `-Z` and the `ssl_*` options.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TlsOptions {
    pub chain_cert: Option<std::path::PathBuf>,
    pub key: Option<std::path::PathBuf>,
    /// 1 = PEM (default), 2 = DER (memcached's SSL_FILETYPE_PEM / _ASN1).
    pub key_format: u8,
    /// 0 none, 1 request, 2 require, 3 once (= require).
    pub verify_mode: u8,
    pub ca_cert: Option<std::path::PathBuf>,
    /// 2 = TLS 1.2 (default), 3 = TLS 1.3 (0 and 1 mean 1.2: rustls has nothing older).
    pub min_version: u8,
    pub session_cache: bool,
}

/// What the `-o` options asked for.
#[derive(Clone, Debug, Default)]
pub struct Extended {
    pub flash: Vec<String>,
    pub knobs: Vec<(String, String)>,
    pub idle_timeout: Option<Duration>,
    pub tls: TlsOptions,
    /// One line per option that is accepted without effect.
    pub warnings: Vec<String>,
}

/// Parse every `-o` argument (comma-separated `name[=value]` lists).
pub fn apply(args: &[String]) -> anyhow::Result<Extended> {
    let mut x = Extended {
        tls: TlsOptions {
            key_format: 1,
            min_version: 2,
            ..TlsOptions::default()
        },
        ..Extended::default()
    };
    for opt in args
        .iter()
        .flat_map(|o| o.split(','))
        .filter(|o| !o.is_empty())
    {
        let (name, value) = match opt.split_once('=') {
            Some((n, v)) => (n, Some(v)),
            None => (opt, None),
        };
        let Some((_, effect)) = OPTIONS.iter().find(|(n, _)| *n == name) else {
            usage!("-o {name}: unknown option (memcached 1.6.18 has no such option; see docs/compat.md)");
        };
        check_value(name, value)?;
        let need = || -> anyhow::Result<&str> {
            value.filter(|v| !v.is_empty()).with_context(|| {
                crate::cli::Usage(format!("-o {name}: needs a value ({name}=...)"))
            })
        };
        match name {
            "ext_path" => x.flash.push(need()?.to_string()),
            n if EXT_KNOBS.contains(&n) => {
                let v = value.unwrap_or("1");
                x.knobs
                    .push((n.trim_start_matches("ext_").to_string(), v.to_string()));
            }
            "idle_timeout" => {
                let secs: u64 = parse_num(name, need()?)?;
                x.idle_timeout = (secs > 0).then(|| Duration::from_secs(secs));
            }
            "ssl_chain_cert" => x.tls.chain_cert = Some(need()?.into()),
            "ssl_key" => x.tls.key = Some(need()?.into()),
            "ssl_ca_cert" => x.tls.ca_cert = Some(need()?.into()),
            "ssl_keyformat" => {
                x.tls.key_format = match need()? {
                    "1" | "PEM" | "pem" => 1,
                    "2" | "DER" | "der" | "ASN1" => 2,
                    other => usage!(
                        "-o ssl_keyformat={other}: PEM (1) and DER (2) are supported; \
                         OpenSSL engines are not"
                    ),
                }
            }
            "ssl_verify_mode" => {
                x.tls.verify_mode = parse_num(name, need()?)?;
                if x.tls.verify_mode > 3 {
                    usage!("-o ssl_verify_mode: 0 (none), 1 (request), 2 (require) or 3 (once)");
                }
            }
            "ssl_min_version" => {
                let v = need()?;
                x.tls.min_version = match v {
                    "0" | "tlsv1.0" | "1" | "tlsv1.1" => {
                        x.warnings.push(format!(
                            "-o ssl_min_version={v}: TLS 1.2 is the oldest version served (rustls)"
                        ));
                        2
                    }
                    "2" | "tlsv1.2" => 2,
                    "3" | "tlsv1.3" => 3,
                    other => usage!("-o ssl_min_version={other}: 0 (tlsv1.0) .. 3 (tlsv1.3)"),
                }
            }
            "ssl_session_cache" => x.tls.session_cache = true,
            _ => {
                if let Effect::Warn(why) = effect {
                    let shown = value.map_or(name.to_string(), |v| format!("{name}={v}"));
                    x.warnings
                        .push(format!("-o {shown} accepted with no effect: {why}"));
                }
            }
        }
    }
    Ok(x)
}

fn parse_num<T: std::str::FromStr>(name: &str, v: &str) -> anyhow::Result<T> {
    match v.trim().parse() {
        Ok(n) => Ok(n),
        Err(_) => usage!("-o {name}={v}: not a number"),
    }
}

/// The value checks memcached makes for options that take one.
fn check_value(name: &str, value: Option<&str>) -> anyhow::Result<()> {
    let num = |v: Option<&str>| v.and_then(|v| v.trim().parse::<f64>().ok());
    let missing = || -> anyhow::Result<()> { usage!("-o {name}: needs a value ({name}=...)") };
    match name {
        "hashpower" => match num(value) {
            Some(h) if (12.0..=32.0).contains(&h) => {}
            Some(h) => usage!("-o hashpower={h}: must be between 12 and 32"),
            None => missing()?,
        },
        "tail_repair_time" => match num(value) {
            Some(t) if t >= 10.0 => {}
            Some(_) => usage!("-o tail_repair_time: cannot be less than 10 seconds"),
            None => missing()?,
        },
        "hash_algorithm" => match value {
            Some("jenkins" | "murmur3" | "xxh3") => {}
            Some(other) => usage!("-o hash_algorithm={other}: jenkins, murmur3 or xxh3"),
            None => missing()?,
        },
        "slab_automove" => match value.map(|v| num(Some(v))) {
            None | Some(Some(0.0 | 1.0 | 2.0)) => {}
            _ => usage!("-o slab_automove: must be between 0 and 2"),
        },
        "slab_automove_ratio" => match num(value) {
            Some(r) if r > 0.0 && r <= 1.0 => {}
            _ => usage!("-o slab_automove_ratio: must be > 0 and < 1"),
        },
        "slab_automove_window" => match num(value) {
            Some(w) if w > 2.0 => {}
            _ => usage!("-o slab_automove_window: must be > 2"),
        },
        "hot_lru_pct" | "warm_lru_pct" => match num(value) {
            Some(p) if (1.0..80.0).contains(&p) => {}
            _ => usage!("-o {name}: must be > 1 and < 80"),
        },
        "hot_max_factor" | "warm_max_factor" => match num(value) {
            Some(f) if f > 0.0 => {}
            _ => usage!("-o {name}: must be greater than 0"),
        },
        "lru_crawler_sleep" => match num(value) {
            Some(s) if (0.0..=1_000_000.0).contains(&s) => {}
            _ => usage!("-o lru_crawler_sleep: must be between 0 and 1 second"),
        },
        "idle_timeout"
        | "lru_crawler_tocrawl"
        | "temporary_ttl"
        | "watcher_logbuf_size"
        | "worker_logbuf_size"
        | "slab_chunk_max"
        | "read_buf_mem_limit"
        | "resp_obj_mem_limit"
        | "ext_page_size"
        | "ext_wbuf_size"
        | "ext_threads"
        | "ext_io_depth"
        | "ext_item_age"
        | "ext_low_ttl"
        | "ext_max_sleep"
        | "ssl_wbuf_size"
        | "sock_cookie_id" => match num(value) {
            Some(v) if v >= 0.0 => {}
            _ => usage!("-o {name}: needs a non-negative number"),
        },
        "ext_max_frag" | "slab_automove_freeratio" => match num(value) {
            Some(v) if v >= 0.0 => {}
            _ => usage!("-o {name}: needs a number"),
        },
        _ => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(a: &str) -> anyhow::Result<Extended> {
        apply(&[a.to_string()])
    }

    #[test]
    fn every_option_of_memcached_1_6_18_is_known() {
        // `memcached -h` of 1.6.18 plus the options memcached.c and storage.c accept.
        for name in [
            "maxconns_fast",
            "hashpower",
            "tail_repair_time",
            "hash_algorithm",
            "no_lru_crawler",
            "lru_crawler_sleep",
            "lru_crawler_tocrawl",
            "read_buf_mem_limit",
            "no_lru_maintainer",
            "hot_lru_pct",
            "warm_lru_pct",
            "hot_max_factor",
            "warm_max_factor",
            "temporary_ttl",
            "idle_timeout",
            "slab_chunk_max",
            "watcher_logbuf_size",
            "worker_logbuf_size",
            "track_sizes",
            "no_hashexpand",
            "modern",
            "no_modern",
            "sock_cookie_id",
            "ext_path",
            "ext_page_size",
            "ext_wbuf_size",
            "ext_threads",
            "ext_item_size",
            "ext_item_age",
            "ext_low_ttl",
            "ext_drop_unread",
            "ext_recache_rate",
            "ext_compact_under",
            "ext_drop_under",
            "ext_max_frag",
            "ext_max_sleep",
            "slab_automove_freeratio",
            "ssl_chain_cert",
            "ssl_key",
            "ssl_keyformat",
            "ssl_verify_mode",
            "ssl_ciphers",
            "ssl_ca_cert",
            "ssl_wbuf_size",
            "ssl_session_cache",
            "ssl_kernel_tls",
            "ssl_min_version",
            "slab_reassign",
            "slab_automove",
            "slab_automove_ratio",
            "slab_automove_window",
            "lru_crawler",
            "lru_maintainer",
            "slab_sizes",
            "no_chunked_items",
            "no_slab_reassign",
            "no_slab_automove",
            "no_maxconns_fast",
            "inline_ascii_resp",
            "no_inline_ascii_resp",
            "no_drop_privileges",
            "drop_privileges",
            "resp_obj_mem_limit",
            "ext_io_depth",
        ] {
            assert!(OPTIONS.iter().any(|(n, _)| *n == name), "{name}");
        }
    }

    #[test]
    fn honoured_warned_and_refused() {
        let x = run("ext_path=/f:1G,ext_item_size=512,idle_timeout=30,modern").unwrap();
        assert_eq!(x.flash, vec!["/f:1G".to_string()]);
        assert_eq!(x.knobs, vec![("item_size".to_string(), "512".to_string())]);
        assert_eq!(x.idle_timeout, Some(Duration::from_secs(30)));
        assert!(x.warnings.is_empty(), "{:?}", x.warnings);
        let x = run("lru_crawler_sleep=100,slab_reassign").unwrap();
        assert_eq!(x.warnings.len(), 2);
        assert!(x.warnings[0].contains("lru_crawler_sleep=100"));
        assert!(run("bogus").is_err());
        assert!(run("hashpower=40").is_err());
        assert!(run("hash_algorithm=md5").is_err());
        assert!(run("idle_timeout=x").is_err());
        assert!(run("ext_path").is_err());
        assert!(run("ssl_verify_mode=7").is_err());
        let x = run("ssl_chain_cert=/c,ssl_key=/k,ssl_min_version=3,ssl_session_cache").unwrap();
        assert_eq!(x.tls.min_version, 3);
        assert!(x.tls.session_cache);
        assert!(run("idle_timeout=0").unwrap().idle_timeout.is_none());
    }
}
