//! The block face's run directory: `<export>.lock` (an exclusive `flock` held for the life
//! of the process, so two instances never serve — or write the stats of — the same export
//! from one directory), `<export>.stats` (`key=value` lines rewritten atomically: a
//! header — pid, state, time, addresses — then every statistic) and `<export>.mode` (the
//! mode last set at run time, [`SavedMode`]: a restart without an explicit mode keeps it).
//! `ctl list` reads the stats files of a directory.
//!
//! Order at start: lock, then write the first stats file, both before the server announces
//! it serves, so an unwritable or busy run dir fails the start instead of a later write.
//! The mode file is read after the lock (and by `--check-config`, without it) and written by
//! admin requests, one at a time.
use std::fs::File;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context as _};

/// A locked run directory entry for one export.
pub struct RunDir {
    stats_path: PathBuf,
    mode_path: PathBuf,
    /// Serializes writers of the mode file (they share its temporary name).
    mode_writer: std::sync::Mutex<()>,
    /// Holds the lock until dropped (process exit).
    _lock: File,
}

/// The mode last set at run time (`ctl set mode=…`, `POST /mode`), as `<export>.mode` keeps
/// it: `mode=NAME` and `set_at=TIME` lines.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SavedMode {
    pub mode: String,
    /// When it was set (RFC 3339, UTC).
    pub set_at: String,
    /// The file it was read from.
    pub path: PathBuf,
}

/// `<export>.mode` in `dir`.
fn mode_path(dir: &Path, export: &str) -> PathBuf {
    dir.join(format!("{export}.mode"))
}

impl SavedMode {
    /// The mode saved in `dir` for `export`, if a valid one is. A file that does not parse
    /// is reported as an error (the caller warns and ignores it).
    pub fn read(dir: &Path, export: &str) -> Result<Option<SavedMode>, String> {
        let path = mode_path(dir, export);
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(format!("{}: {e}", path.display())),
        };
        let field = |k: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(k)?.strip_prefix('='))
                .map(|v| v.trim().to_string())
        };
        match field("mode") {
            Some(mode) if flashtier_blockcache::Mode::parse(&mode).is_some() => {
                Ok(Some(SavedMode {
                    mode,
                    set_at: field("set_at").unwrap_or_default(),
                    path,
                }))
            }
            other => Err(format!(
                "{}: no valid mode=writeback|writethrough|writearound line (found {other:?})",
                path.display()
            )),
        }
    }
}

/// What the stats file says about the instance besides its statistics.
pub struct Header<'a> {
    pub state: &'a str,
    pub export: &'a str,
    pub listen: &'a str,
    pub admin: &'a str,
}

impl RunDir {
    /// Create `dir` if needed, take `<export>.lock` (failing at once if another process
    /// holds it) and record our pid in it.
    pub fn lock(dir: &Path, export: &str) -> anyhow::Result<RunDir> {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("--run-dir {}: cannot create it", dir.display()))?;
        let lock_path = dir.join(format!("{export}.lock"));
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(&lock_path)
            .with_context(|| {
                format!(
                    "--run-dir {}: cannot open {}",
                    dir.display(),
                    lock_path.display()
                )
            })?;
        if let Err(e) =
            rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive)
        {
            let holder = std::fs::read_to_string(&lock_path).unwrap_or_default();
            let holder = holder.trim();
            if e == rustix::io::Errno::WOULDBLOCK {
                bail!(
                    "--run-dir {}: export {export:?} is already served from this run dir (pid \
                     {}); give another --run-dir or --export",
                    dir.display(),
                    if holder.is_empty() { "unknown" } else { holder }
                );
            }
            bail!(
                "--run-dir {}: cannot lock {}: {e}",
                dir.display(),
                lock_path.display()
            );
        }
        file.set_len(0)
            .and_then(|()| writeln!(file, "{}", std::process::id()))
            .with_context(|| {
                format!(
                    "--run-dir {}: cannot write {}",
                    dir.display(),
                    lock_path.display()
                )
            })?;
        Ok(RunDir {
            stats_path: dir.join(format!("{export}.stats")),
            mode_path: mode_path(dir, export),
            mode_writer: std::sync::Mutex::new(()),
            _lock: file,
        })
    }

    /// Keep `mode` (set at run time) for the next start (temp file + rename).
    pub fn save_mode(&self, mode: &str) -> std::io::Result<()> {
        let _one = self.mode_writer.lock().unwrap_or_else(|p| p.into_inner());
        let text = format!(
            "# The block mode last set at run time (flashtier ctl set mode=..., POST /mode).\n\
             # A start without --mode (or mode in --config) uses it; one with them removes it.\n\
             mode={mode}\nset_at={}\n",
            crate::logging::timestamp()
        );
        let tmp = self.mode_path.with_extension("mode.tmp");
        std::fs::write(&tmp, text)?;
        std::fs::rename(&tmp, &self.mode_path)
    }

    /// Forget the mode set at run time (a start gave one explicitly).
    pub fn forget_mode(&self) -> std::io::Result<()> {
        match std::fs::remove_file(&self.mode_path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }

    /// Rewrite the stats file atomically (temp file + rename).
    pub fn write_stats(&self, h: &Header<'_>, stats: &[(String, String)]) -> std::io::Result<()> {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        let mut text = format!(
            "pid={}\nstate={}\nupdated={}\nupdated_at={}\nexport={}\nlisten={}\nadmin={}\n",
            std::process::id(),
            h.state,
            now.as_secs(),
            crate::logging::timestamp(),
            h.export,
            h.listen,
            h.admin
        );
        for (k, v) in stats {
            text.push_str(k);
            text.push('=');
            text.push_str(v);
            text.push('\n');
        }
        let tmp = self.stats_path.with_extension("stats.tmp");
        std::fs::write(&tmp, text)?;
        std::fs::rename(&tmp, &self.stats_path)
    }
}

/// One instance found by [`list`].
#[derive(Debug)]
pub struct Listed {
    pub export: String,
    pub fields: Vec<(String, String)>,
    /// The pid in the file is a running process and the file says `serving`.
    pub running: bool,
}

impl Listed {
    pub fn get(&self, k: &str) -> &str {
        self.fields
            .iter()
            .find(|(n, _)| n == k)
            .map_or("", |(_, v)| v.as_str())
    }
}

/// The caches whose stats files are in `dir`, sorted by export name.
pub fn list(dir: &Path) -> anyhow::Result<Vec<Listed>> {
    let mut out = Vec::new();
    let entries =
        std::fs::read_dir(dir).with_context(|| format!("cannot read run dir {}", dir.display()))?;
    for e in entries.flatten() {
        let path = e.path();
        if path.extension().and_then(|x| x.to_str()) != Some("stats") {
            continue;
        }
        let Some(export) = path.file_stem().and_then(|s| s.to_str()) else {
            continue;
        };
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        let fields: Vec<(String, String)> = text
            .lines()
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let mut l = Listed {
            export: export.to_string(),
            fields,
            running: false,
        };
        let alive = l
            .get("pid")
            .parse::<u32>()
            .is_ok_and(|p| Path::new(&format!("/proc/{p}")).exists());
        l.running = alive && l.get("state") == "serving";
        out.push(l);
    }
    out.sort_by(|a, b| a.export.cmp(&b.export));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lock_excludes_and_stats_list() {
        let dir = std::env::temp_dir().join(format!("ft-rundir-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let rd = RunDir::lock(&dir, "a").unwrap();
        let again = RunDir::lock(&dir, "a").err().unwrap().to_string();
        assert!(again.contains("already served"), "{again}");
        assert!(again.contains(&std::process::id().to_string()), "{again}");
        let other = RunDir::lock(&dir, "b").unwrap();
        let h = Header {
            state: "serving",
            export: "a",
            listen: "127.0.0.1:1",
            admin: "none",
        };
        rd.write_stats(&h, &[("dirty_blocks".into(), "3".into())])
            .unwrap();
        other
            .write_stats(
                &Header {
                    state: "stopped",
                    export: "b",
                    ..h
                },
                &[],
            )
            .unwrap();
        let l = list(&dir).unwrap();
        assert_eq!(l.len(), 2);
        assert!(l[0].running && !l[1].running);
        assert_eq!(l[0].get("dirty_blocks"), "3");
        // The mode set at run time: saved, read back (also without the lock), forgotten.
        assert_eq!(SavedMode::read(&dir, "a"), Ok(None));
        rd.save_mode("writethrough").unwrap();
        let saved = SavedMode::read(&dir, "a").unwrap().unwrap();
        assert_eq!(saved.mode, "writethrough");
        assert!(saved.set_at.starts_with("20"), "{saved:?}");
        assert_eq!(SavedMode::read(&dir, "b"), Ok(None));
        rd.forget_mode().unwrap();
        rd.forget_mode().unwrap();
        assert_eq!(SavedMode::read(&dir, "a"), Ok(None));
        std::fs::write(dir.join("a.mode"), "mode=fast\n").unwrap();
        assert!(SavedMode::read(&dir, "a").is_err());
        assert_eq!(list(&dir).unwrap().len(), 2, "ctl list ignores mode files");
        drop(rd);
        assert!(RunDir::lock(&dir, "a").is_ok());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
