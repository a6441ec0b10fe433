//! What `flashtier kv` checks before it creates or opens anything, so a mistake fails the
//! start at once (not after a 1 GiB flash file was created) and `--check-config` finds the
//! same mistakes a start would: knob names and values (against the flash settings in
//! force), flash paths (an existing file or block device that can be read and written, or a
//! size and a directory it can be created in), and with `--check-config` the TCP ports
//! (bound and released at once). Nothing here creates or changes a file.
use std::fmt::Write as _;
use std::path::Path;

use anyhow::{bail, Context as _};
use flashtier_cache::flash::DeviceSpec;
use flashtier_cache::FlashSettings;

use crate::kv::KvConfig;
use crate::startup::{check_contents, Face};

/// Knobs and flash paths: what a start checks first.
pub fn check(cfg: &KvConfig) -> anyhow::Result<()> {
    let specs: Vec<&str> = cfg.flash.iter().map(String::as_str).collect();
    if specs.is_empty() {
        if let Some((name, value)) = cfg.knobs.first() {
            bail!("--knob {name}={value}: no flash tier (--ram-only) for knobs to tune");
        }
    } else {
        let fs = FlashSettings::parse(&specs).context("--flash")?;
        flashtier_cache::knobs::validate_knobs(&fs, &cfg.knobs).context("--knob")?;
    }
    for text in &cfg.flash {
        let spec = DeviceSpec::parse(text).with_context(|| format!("--flash {text}"))?;
        check_device(text, &spec, cfg.default_flash)?;
    }
    Ok(())
}

/// What only `--check-config` checks (a start finds it when it opens the devices): the
/// contents of existing flash files, and the ports.
pub fn check_more(cfg: &KvConfig) -> anyhow::Result<()> {
    for text in &cfg.flash {
        let mut spec = DeviceSpec::parse(text).with_context(|| format!("--flash {text}"))?;
        check_contents(&spec.path, "--flash", cfg.force_format)?;
        if spec.size == 0 {
            spec.size = crate::startup::whole_size(&spec.path, "--flash", text)?;
        }
        let keep = cfg.force_format || cfg.reformat_on_mismatch;
        crate::startup::check_formatted_size(&spec.path, spec.size, Face::Kv, keep)?;
    }
    check_ports(cfg)
}

/// An existing file or device that can be read and written, or a file to create: in an
/// existing directory (`startup::check_parent`), or, for the built-in default
/// (`default_flash`), under the nearest existing ancestor, where `data/` is created.
fn check_device(text: &str, spec: &DeviceSpec, default_flash: bool) -> anyhow::Result<()> {
    let path = &spec.path;
    match std::fs::metadata(path) {
        Ok(m) if m.is_dir() => bail!("--flash {text}: {} is a directory", path.display()),
        Ok(_) => {
            if spec.size == 0 {
                crate::startup::whole_size(path, "--flash", text)?;
            }
            readable_writable(text, path)
        }
        Err(_) if spec.size == 0 => crate::startup::whole_size(path, "--flash", text).map(drop),
        Err(_) if !default_flash => {
            crate::startup::check_parent(path, "--flash", text)?;
            let parent = path
                .parent()
                .filter(|d| !d.as_os_str().is_empty())
                .unwrap_or(Path::new("."));
            rustix::fs::access(
                parent,
                rustix::fs::Access::WRITE_OK | rustix::fs::Access::EXEC_OK,
            )
            .with_context(|| {
                format!(
                    "--flash {text}: cannot create {} ({} is not writable)",
                    path.display(),
                    parent.display()
                )
            })
        }
        Err(_) => {
            // The default: created at start, with `data/` above it.
            let parent = path
                .parent()
                .filter(|d| !d.as_os_str().is_empty())
                .unwrap_or(Path::new("."));
            let existing = parent
                .ancestors()
                .find(|a| !a.as_os_str().is_empty() && a.exists())
                .unwrap_or(Path::new("."));
            if !existing.is_dir() {
                bail!("--flash {text}: {} is not a directory", existing.display());
            }
            rustix::fs::access(
                existing,
                rustix::fs::Access::WRITE_OK | rustix::fs::Access::EXEC_OK,
            )
            .with_context(|| {
                format!(
                    "--flash {text}: cannot create {} ({} is not writable)",
                    path.display(),
                    existing.display()
                )
            })
        }
    }
}

fn readable_writable(text: &str, path: &Path) -> anyhow::Result<()> {
    rustix::fs::access(
        path,
        rustix::fs::Access::READ_OK | rustix::fs::Access::WRITE_OK,
    )
    .with_context(|| {
        format!(
            "--flash {text}: {} cannot be read and written",
            path.display()
        )
    })
}

/// The ports: bound and released at once.
fn check_ports(cfg: &KvConfig) -> anyhow::Result<()> {
    for l in &cfg.listen {
        std::net::TcpListener::bind(l.addr)
            .with_context(|| format!("--listen {}: cannot listen", l.addr))?;
    }
    if let Some(a) = cfg.admin {
        std::net::TcpListener::bind(a).with_context(|| format!("--admin {a}: cannot listen"))?;
    }
    Ok(())
}

/// The effective configuration as a `--config` file would write it.
pub fn describe(cfg: &KvConfig) -> String {
    let q = |s: &str| format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""));
    let mut s = String::new();
    let _ = writeln!(s, "listen = {}", q(&cfg.first_listen().to_string()));
    let _ = writeln!(s, "memory = {}", q(&cfg.memory.to_string()));
    let _ = writeln!(s, "max_item_size = {}", q(&cfg.max_item_size.to_string()));
    let _ = writeln!(s, "threads = {}", cfg.threads);
    let _ = writeln!(s, "max_connections = {}", cfg.max_connections);
    let flash: Vec<String> = cfg.flash.iter().map(|f| q(f)).collect();
    let _ = writeln!(s, "flash = [{}]", flash.join(", "));
    let _ = writeln!(s, "ram_only = {}", cfg.flash.is_empty());
    if cfg.reformat_on_mismatch {
        let _ = writeln!(s, "reformat_on_mismatch = true");
    }
    if let Some(a) = cfg.admin {
        let _ = writeln!(s, "admin = {}", q(&a.to_string()));
    }
    if !cfg.knobs.is_empty() {
        let _ = writeln!(s, "\n[knobs]");
        for (k, v) in &cfg.knobs {
            let _ = writeln!(s, "{k} = {}", q(v));
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(flash: &[&str], knobs: &[(&str, &str)]) -> KvConfig {
        let args = crate::cli::KvArgs {
            listen: vec!["127.0.0.1:0".into()],
            ram_only: true,
            ..Default::default()
        };
        let mut c = KvConfig::from_args(&args, false).unwrap();
        c.flash = flash.iter().map(|s| s.to_string()).collect();
        c.knobs = knobs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        c
    }

    #[test]
    fn finds_what_a_start_would() {
        let dir = std::env::temp_dir().join(format!("ft-kvcheck-{}", std::process::id()));
        let f = format!("{}/sub/f.bin:64MiB", dir.display());
        // A flash file in a directory that does not exist is refused, naming the directory.
        let e = check(&cfg(&[&f], &[])).unwrap_err();
        assert!(e.is::<crate::cli::Conflict>(), "{e}");
        assert!(
            e.to_string()
                .contains(&format!("directory {}/sub does not exist", dir.display())),
            "{e}"
        );
        assert!(!dir.exists());
        std::fs::create_dir_all(dir.join("sub")).unwrap();
        assert!(check(&cfg(&[&f], &[("item_size", "512")])).is_ok());
        std::fs::remove_dir_all(&dir).unwrap();
        let e = check(&cfg(&[&f], &[("foo", "1")])).unwrap_err();
        assert!(format!("{e:#}").contains("unknown knob foo"), "{e:#}");
        let e = check(&cfg(&[], &[("item_size", "1")])).unwrap_err();
        assert!(e.to_string().contains("--ram-only"), "{e}");
        let zero = format!("{}/missing.bin:0", dir.display());
        let e = check(&cfg(&[&zero], &[])).unwrap_err();
        assert!(e.to_string().contains("give a size"), "{e}");
        // Nothing was created.
        assert!(!dir.exists());
        std::fs::create_dir_all(&dir).unwrap();
        let foreign = dir.join("foreign.bin");
        std::fs::write(&foreign, vec![7u8; 1 << 20]).unwrap();
        let e = check_contents(&foreign, "--flash", false).unwrap_err();
        assert!(e.to_string().contains("--force-format"), "{e}");
        assert!(check_contents(&foreign, "--flash", true).is_ok());
        let blank = dir.join("blank.bin");
        std::fs::write(&blank, vec![0u8; 1 << 20]).unwrap();
        assert!(check_contents(&blank, "--flash", false).is_ok());
        std::fs::remove_dir_all(&dir).unwrap();
        let e = check(&cfg(&["/tmp:1G"], &[])).unwrap_err();
        assert!(e.to_string().contains("is a directory"), "{e}");
        let text = describe(&cfg(&[&f], &[("item_size", "512")]));
        let parsed: crate::kv::KvFile = toml::from_str(&text).unwrap();
        assert_eq!(parsed.flash, Some(vec![f.clone()]));
        assert_eq!(parsed.memory.as_deref(), Some("67108864"));
    }
}
