//! Unit tests of `kv::config`: both command lines and the TOML file.
use super::*;
use clap::Parser as _;

fn parse(args: &[&str]) -> anyhow::Result<KvConfig> {
    let mut full = vec!["flashtier", "kv"];
    full.extend_from_slice(args);
    let cli = crate::cli::Cli::try_parse_from(full)?;
    let crate::cli::Command::Kv(a) = cli.command else {
        anyhow::bail!("not a kv command line")
    };
    KvConfig::from_args(&a, false)
}

fn parse_memcached(args: &[&str]) -> anyhow::Result<KvConfig> {
    let mut full = vec!["memcached"];
    full.extend_from_slice(args);
    let cli = crate::cli::MemcachedCli::try_parse_from(full)?;
    KvConfig::from_args(&cli.args, true)
}

fn addrs(c: &KvConfig) -> Vec<String> {
    c.listen.iter().map(|l| l.addr.to_string()).collect()
}

#[test]
fn defaults() {
    let c = parse(&[]).unwrap();
    assert_eq!(addrs(&c), vec!["127.0.0.1:11211"]);
    assert_eq!(c.memory, 64 << 20);
    assert_eq!(c.max_item_size, 1 << 20);
    assert_eq!(c.max_connections, 1024);
    assert!(c.threads >= 1);
    assert_eq!(c.flash, vec![DEFAULT_FLASH.to_string()]);
    assert_eq!(c.admin, None);
    assert!(c.evictions && c.cas && c.flush_enabled && c.dump_enabled);
    assert_eq!((c.reqs_per_event, c.backlog), (20, 1024));
}

#[test]
fn memcached_defaults() {
    let c = parse_memcached(&["-u", "nobody"]).unwrap();
    assert_eq!(addrs(&c), vec!["0.0.0.0:11211"]);
    assert_eq!(c.threads, 4);
    assert!(c.flash.is_empty(), "RAM only unless ext_path");
    assert!(c.memcached);
    if is_root() {
        let e = parse_memcached(&[]).unwrap_err();
        assert!(e.to_string().contains("without the -u switch"), "{e}");
    }
}

#[test]
fn listen_lists_ports_and_unix() {
    let c = parse(&[
        "-l",
        "127.0.0.1,127.0.0.2:7000",
        "-l",
        "[::1]:7001",
        "-p",
        "7002",
    ])
    .unwrap();
    assert_eq!(
        addrs(&c),
        vec!["127.0.0.1:7002", "127.0.0.2:7000", "[::1]:7001"]
    );
    let c = parse(&["--listen", "127.0.0.1:9999"]).unwrap();
    assert_eq!(addrs(&c), vec!["127.0.0.1:9999"]);
    let c = parse(&["-s", "/tmp/x.sock", "-a", "770"]).unwrap();
    assert!(c.listen.is_empty());
    assert_eq!(c.unix, Some((PathBuf::from("/tmp/x.sock"), 0o770)));
    assert!(parse(&["-a", "770"]).is_err());
    assert!(parse(&["-s", "/tmp/x", "-a", "999"]).is_err());
    assert!(parse(&["-l", "127.0.0.1:notaport"]).is_err());
}

#[test]
fn startup_knobs() {
    let c = parse(&[
        "--knob",
        "item_size=4k",
        "-o",
        "ext_drop_unread=1,ext_wbuf_size=8,ext_item_age=5",
    ])
    .unwrap();
    assert_eq!(
        c.knobs,
        vec![
            ("item_size".to_string(), "4k".to_string()),
            ("drop_unread".to_string(), "1".to_string())
        ]
    );
    assert_eq!(c.warnings.len(), 2, "{:?}", c.warnings);
    assert!(parse(&["--knob", "item_size"]).is_err());
}

#[test]
fn flash_default_and_ram_only() {
    assert!(parse(&["--ram-only"]).unwrap().flash.is_empty());
    let c = parse(&["--flash", "/tmp/a:2G"]).unwrap();
    assert_eq!(c.flash, vec!["/tmp/a:2G".to_string()]);
    assert!(parse(&["--ram-only", "--flash", "/tmp/a:2G"]).is_err());
    assert!(parse(&["--ram-only", "-o", "ext_path=/tmp/a:2G"]).is_err());
    let c = parse(&["--admin", "127.0.0.1:0"]).unwrap();
    assert_eq!(c.admin, Some("127.0.0.1:0".parse().unwrap()));
    assert!(parse(&["--admin", "nocolon"]).is_err());
}

#[test]
fn memcached_flags() {
    let c = parse(&[
        "-p",
        "11311",
        "-m",
        "1024",
        "-c",
        "10",
        "-t",
        "2",
        "-I",
        "2m",
        "-U",
        "0",
        "-u",
        "root",
        "-l",
        "0.0.0.0",
        "-vv",
        "-M",
        "-C",
        "-R",
        "5",
        "-b",
        "64",
        "-F",
        "-X",
        "-A",
        "-D",
        "/",
        "-B",
        "ascii",
        "-o",
        "idle_timeout=9",
    ])
    .unwrap();
    assert_eq!(addrs(&c), vec!["0.0.0.0:11311"]);
    assert_eq!(c.memory, 1024 << 20);
    assert_eq!(c.max_connections, 10);
    assert_eq!(c.threads, 2);
    assert_eq!(c.max_item_size, 2 << 20);
    assert_eq!(c.verbose, 2);
    assert!(!c.evictions && !c.cas && !c.flush_enabled && !c.dump_enabled);
    assert!(c.shutdown_enabled && c.detail_enabled);
    assert_eq!(
        (c.reqs_per_event, c.backlog, c.detail_delimiter),
        (5, 64, b'/')
    );
    assert_eq!(c.idle_timeout, Some(Duration::from_secs(9)));
    // Long options as memcached spells them.
    let c = parse(&[
        "--port=11312",
        "--memory-limit=128",
        "--conn-limit=7",
        "--threads=3",
        "--max-item-size=512k",
        "--disable-cas",
        "--listen-backlog=9",
    ])
    .unwrap();
    assert_eq!(addrs(&c), vec!["127.0.0.1:11312"]);
    assert_eq!((c.memory, c.max_connections, c.threads), (128 << 20, 7, 3));
    assert_eq!((c.max_item_size, c.cas, c.backlog), (512 << 10, false, 9));
}

#[test]
fn refused_and_warned() {
    assert!(parse(&["-U", "11211"]).is_err());
    assert!(parse(&["-I", "10"]).is_err());
    assert!(parse(&["-m", "1", "-I", "2m"]).is_err());
    assert!(parse(&["-m", "1", "--memory", "1G"]).is_err());
    assert!(parse(&["--threads", "0"]).is_err());
    assert!(parse(&["--listen", "a:b:c:d:e:f:g:h:i"]).is_err());
    assert!(parse(&["-o", "bogus_option"]).is_err());
    assert!(parse(&["-o", "ext_path=/tmp/x"]).is_err());
    assert!(parse(&["-B", "binary"]).is_err());
    assert!(parse(&["-S"]).is_err());
    assert!(parse(&["-f", "0.5"]).is_err());
    assert!(parse(&["-R", "0"]).is_err());
    assert!(parse(&["-Z"]).is_err(), "TLS needs a certificate");
    let c = parse(&[
        "-f",
        "1.5",
        "-n",
        "48",
        "-L",
        "-B",
        "auto",
        "-o",
        "slab_reassign",
    ])
    .unwrap();
    assert_eq!(c.warnings.len(), 5, "{:?}", c.warnings);
    let e = parse(&["-o", "bogus"]).unwrap_err();
    assert!(e.downcast_ref::<Usage>().is_some());
}

#[test]
fn config_file_with_flag_overrides() {
    let dir = std::env::temp_dir().join(format!("flashtier-kv-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("kv.toml");
    std::fs::write(
        &path,
        "listen = \"127.0.0.1:7000\"\nmemory = \"2G\"\nthreads = 3\n",
    )
    .unwrap();
    let p = path.to_str().unwrap();
    let c = parse(&["--config", p]).unwrap();
    assert_eq!(c.first_listen().port(), 7000);
    assert_eq!(c.memory, 2 << 30);
    assert_eq!(c.threads, 3);
    let c = parse(&[
        "--config",
        p,
        "-m",
        "100",
        "-l",
        "127.0.0.1:7001",
        "-t",
        "1",
    ])
    .unwrap();
    assert_eq!(c.memory, 100 << 20);
    assert_eq!(c.first_listen().port(), 7001);
    assert_eq!(c.threads, 1);
    std::fs::write(&path, "ram_only = true\nadmin = \"127.0.0.1:9\"\n").unwrap();
    let c = parse(&["--config", p]).unwrap();
    assert!(c.flash.is_empty());
    assert_eq!(c.admin, Some("127.0.0.1:9".parse().unwrap()));
    assert_eq!(
        parse(&["--config", p, "--flash", "/tmp/b:1G"])
            .unwrap()
            .flash
            .len(),
        1
    );
    std::fs::write(&path, "flash = []\n").unwrap();
    assert!(parse(&["--config", p]).unwrap().flash.is_empty());
    std::fs::write(&path, "flash = [\"/tmp/c:1G\"]\n").unwrap();
    assert_eq!(
        parse(&["--config", p]).unwrap().flash,
        vec!["/tmp/c:1G".to_string()]
    );
    std::fs::write(
        &path,
        "[knobs]\nitem_size = 512\nreclaim_policy = \"greedy\"\n",
    )
    .unwrap();
    let c = parse(&["--config", p, "--knob", "item_size=1k"]).unwrap();
    assert_eq!(
        c.knobs,
        vec![
            ("item_size".to_string(), "512".to_string()),
            ("reclaim_policy".to_string(), "greedy".to_string()),
            ("item_size".to_string(), "1k".to_string()),
        ]
    );
    std::fs::write(&path, "bogus = 1\n").unwrap();
    assert!(parse(&["--config", p]).is_err());
    // --reformat-on-mismatch: a flag or a key, off unless one says so.
    std::fs::write(&path, "reformat_on_mismatch = true\n").unwrap();
    assert!(parse(&["--config", p]).unwrap().reformat_on_mismatch);
    assert!(
        parse(&["--reformat-on-mismatch"])
            .unwrap()
            .reformat_on_mismatch
    );
    assert!(!parse(&[]).unwrap().reformat_on_mismatch);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn extended_options() {
    let c = parse(&[
        "-o",
        "modern,slab_reassign,ext_path=/tmp/f:4G,ext_wbuf_size=8",
    ])
    .unwrap();
    assert_eq!(c.flash, vec!["/tmp/f:4G".to_string()]);
    let c = parse(&["--flash", "/tmp/a:1GiB", "--flash", "/tmp/b:2G"]).unwrap();
    assert_eq!(
        c.flash,
        vec!["/tmp/a:1GiB".to_string(), "/tmp/b:2G".to_string()]
    );
    assert!(parse(&["--flash", "/tmp/a"]).is_err());
}

#[test]
fn small_hugepages_flag() {
    assert!(!parse(&[]).unwrap().small_hugepages, "off by default");
    assert!(parse(&["--small-hugepages", "on"]).unwrap().small_hugepages);
    assert!(
        !parse(&["--small-hugepages", "off"])
            .unwrap()
            .small_hugepages
    );
    assert!(parse(&["--small-hugepages", "maybe"]).is_err());
}

#[test]
fn small_merge_pages_flag() {
    assert_eq!(parse(&[]).unwrap().small_merge_pages, 2048);
    let c = parse(&["--small-merge-pages", "512"]).unwrap();
    assert_eq!(c.small_merge_pages, 512);
    for bad in ["3", "65537"] {
        let err = parse(&["--small-merge-pages", bad])
            .unwrap_err()
            .to_string();
        assert!(err.contains("--small-merge-pages"), "{err}");
    }
}
