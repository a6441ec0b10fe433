//! Start-up rules `kv` and `block` share: a start that fails leaves nothing behind; a
//! refusal to format or open a device says what was found and what to do, and exits 78
//! ([`explain`], [`check_contents`], [`check_formatted_size`] for `--check-config`); a flash
//! or cache file is created only in a directory that exists ([`check_parent`]); `PATH:0`
//! means the whole existing file or device on both faces ([`whole_size`]).
//!
//! [`Litter`] records, before a start touches the file system, what it may create or grow and
//! undoes it if the start fails (dropped without [`Litter::keep`]). Declare the guard before
//! the store it protects, so the store is closed first. Not undone: a blank file formatted by
//! a start that then failed keeps its superblock; steps that can fail are ordered before the
//! format where possible (sockets, directories, pid file).

use std::path::{Path, PathBuf};

use anyhow::Context as _;

/// What a failing start must undo.
///
/// Records, before a start touches the file system, which paths it may create (flash/cache
/// files, their directories, the pid file, a unix socket) and the length of files it may
/// grow; dropped without [`Litter::keep`], it removes what was created and shrinks what grew.
/// The flash engine already does this for its own failures; the guard covers the steps after
/// it (knobs, privileges, ...) and the directories the server creates.
#[derive(Debug, Default)]
pub struct Litter {
    /// Files that did not exist (None) or their length before the start (Some).
    files: Vec<(PathBuf, Option<u64>)>,
    /// Directories this start created, outermost first.
    dirs: Vec<PathBuf>,
    kept: bool,
}

impl Litter {
    /// Remember `path`'s state before the start may create or grow it.
    pub fn note_file(&mut self, path: &Path) {
        let before = std::fs::symlink_metadata(path).ok().map(|m| m.len());
        self.files.push((path.to_path_buf(), before));
    }

    /// `create_dir_all`, remembering every directory it creates.
    pub fn create_dir_all(&mut self, dir: &Path) -> std::io::Result<()> {
        let mut missing = Vec::new();
        let mut d = Some(dir);
        while let Some(p) = d.filter(|p| !p.as_os_str().is_empty() && !p.exists()) {
            missing.push(p.to_path_buf());
            d = p.parent();
        }
        std::fs::create_dir_all(dir)?;
        self.dirs.extend(missing.into_iter().rev());
        Ok(())
    }

    /// The start succeeded: keep everything.
    pub fn keep(mut self) {
        self.kept = true;
    }
}

impl Drop for Litter {
    fn drop(&mut self) {
        if self.kept {
            return;
        }
        for (path, before) in self.files.iter().rev() {
            match before {
                None => {
                    let _ = std::fs::remove_file(path);
                }
                Some(len) => {
                    let grown =
                        std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.len() != *len);
                    if grown {
                        let _ = std::fs::OpenOptions::new()
                            .write(true)
                            .open(path)
                            .and_then(|f| f.set_len(*len));
                    }
                }
            }
        }
        for dir in self.dirs.iter().rev() {
            // Only if empty: never remove what someone else put there.
            let _ = std::fs::remove_dir(dir);
        }
    }
}

/// Which face a start message speaks for: the flag that names the device, and what a
/// reformat would lose (cached items; a block cache's dirty blocks too).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Face {
    Kv,
    Block,
}

/// Rewrite a refusal to format or to open (anywhere in `e`'s chain) as one line that names
/// what was found and what to do, as a [`crate::cli::Conflict`] (exit 78): other data on
/// the device (`--force-format`), a device formatted for another size (keep the old size,
/// or `--reformat-on-mismatch`), another format mismatch, one storage named twice. Other
/// errors pass through.
pub fn explain(e: anyhow::Error, face: Face) -> anyhow::Error {
    use flashtier_flash::Error as F;
    let Some(found) = e.chain().find_map(|c| c.downcast_ref::<F>()) else {
        return e;
    };
    let text = match found {
        F::NotBlank { device, found } => format!(
            "refusing to format {device}: it holds {found}; flashtier formats only all-zero \
             devices and its own. Pass --force-format to overwrite it (what it holds is lost)"
        ),
        F::Resized {
            device,
            formatted,
            requested,
        } => resized(face, device, *formatted, *requested),
        F::SameStorage(_) => found.to_string(),
        F::Mismatch(_) => match face {
            Face::Kv => format!(
                "{found}. To keep the cached items, start with the devices and sizes it was \
                 formatted with; to format it empty as configured, pass --reformat-on-mismatch"
            ),
            Face::Block => format!(
                "{found}. To keep the cache and its dirty blocks, start with the device as it \
                 was formatted; --force-format formats it as configured, and the dirty blocks \
                 it holds (not yet written back) are lost"
            ),
        },
        _ => return e,
    };
    anyhow::Error::new(crate::cli::Conflict(text))
}

/// What to do about a device formatted for `formatted` bytes and now configured for
/// `requested`: keep the old size (the data stays), or reformat at the new size. On the
/// block face the reformat writes the dirty blocks back first (`block::reformat`).
pub fn resized(face: Face, device: &str, formatted: u64, requested: u64) -> String {
    let new = flashtier_flash::format_size(requested);
    let reformat = match face {
        Face::Kv => format!("to start empty at {new}"),
        Face::Block => {
            format!("to write its dirty blocks back to the backing and start empty at {new}")
        }
    };
    format!(
        "{}; {reformat}, pass --reformat-on-mismatch (or reformat_on_mismatch = true in \
         --config)",
        resized_keep(face, device, formatted, requested)
    )
}

/// The first half of [`resized`]: what was found, and the size that keeps the data.
pub fn resized_keep(face: Face, device: &str, formatted: u64, requested: u64) -> String {
    use flashtier_flash::format_size as human;
    let (old, new) = (human(formatted), human(requested));
    match face {
        Face::Kv => format!(
            "--flash {device}: formatted for {old}, now {new} is asked, and a flash tier cannot \
             change size in place. To keep the cached items, start with --flash {device}:{old}"
        ),
        Face::Block => format!(
            "--cache {device}: formatted for {old}, now {new} is asked, and a cache cannot \
             change size in place. To keep the cache and its dirty blocks, start with --cache \
             {device}:{old}"
        ),
    }
}

/// What a start would find on an existing flashtier device at `size` bytes, read-only: one
/// formatted for a size that gives another segment count is refused as the start would
/// refuse it ([`resized`]), unless `reformat` (`--reformat-on-mismatch`, `--force-format`).
pub fn check_formatted_size(
    path: &Path,
    size: u64,
    face: Face,
    reformat: bool,
) -> anyhow::Result<()> {
    use flashtier_flash::format::superblock::Superblock;
    use std::io::Read as _;
    let Ok(mut file) = std::fs::File::open(path) else {
        return Ok(());
    };
    let mut page = vec![0u8; 4096];
    if file.read_exact(&mut page).is_err() {
        return Ok(());
    }
    let Ok(sb) = Superblock::decode(&page) else {
        return Ok(());
    };
    if reformat || sb.segments_for(size) == u64::from(sb.segments) {
        return Ok(());
    }
    let text = resized(face, &path.display().to_string(), sb.device_size, size);
    Err(anyhow::Error::new(crate::cli::Conflict(text)))
}

/// The bytes `PATH:0` means on either face (`kv --flash`, `block --cache`): the whole
/// existing file or block device. A missing or empty file is refused (a usage error: give a
/// size to create it), in the same words on both faces. `flag` and `text` name the flag and
/// its value in the message.
pub fn whole_size(path: &Path, flag: &str, text: &str) -> anyhow::Result<u64> {
    use std::io::Seek as _;
    let shown = path.display();
    let Ok(meta) = std::fs::metadata(path) else {
        crate::usage!(
            "{flag} {text}: size 0 means \"the whole existing file or device\", and {shown} does \
             not exist; give a size to create it (e.g. {shown}:1GiB)"
        );
    };
    if meta.is_dir() {
        crate::usage!("{flag} {text}: {shown} is a directory");
    }
    // A block device reports length 0 in its metadata: its size is where its end is.
    let len = if std::os::unix::fs::FileTypeExt::is_block_device(&meta.file_type()) {
        std::fs::File::open(path)
            .and_then(|mut f| f.seek(std::io::SeekFrom::End(0)))
            .with_context(|| format!("{flag} {text}: cannot read the size of {shown}"))?
    } else {
        meta.len()
    };
    if len == 0 {
        crate::usage!(
            "{flag} {text}: size 0 means \"the whole existing file or device\", and {shown} is \
             empty; give a size (e.g. {shown}:1GiB)"
        );
    }
    Ok(len)
}

/// The directory a flash or cache file is created in must exist: flashtier creates the
/// file, never the directories above it, so a mistyped path (`/mnt/nvme0/typo/flash.bin`)
/// is refused, naming the missing directory, instead of filling the disk under `/mnt`. The
/// one exception is the kv face's built-in default, `data/flash.bin`, whose `data/` a first
/// `flashtier kv` in a fresh checkout creates (the caller does not ask then).
pub fn check_parent(path: &Path, flag: &str, text: &str) -> anyhow::Result<()> {
    let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) else {
        return Ok(());
    };
    if dir.is_dir() {
        return Ok(());
    }
    if dir.exists() {
        crate::conflict!("{flag} {text}: {} is not a directory", dir.display());
    }
    let existing = dir
        .ancestors()
        .skip(1)
        .find(|a| !a.as_os_str().is_empty() && a.exists());
    let nearest = existing.map_or_else(String::new, |a| format!(" ({} does)", a.display()));
    crate::conflict!(
        "{flag} {text}: directory {} does not exist{nearest}; flashtier creates the file but \
         not its directory: check the path for a typo, or create the directory first",
        dir.display()
    )
}

/// What a start's format check would find on an existing device, read-only: a foreign file
/// system or other data is refused (as the start would refuse it) unless `force_format`.
pub fn check_contents(path: &Path, what: &str, force_format: bool) -> anyhow::Result<()> {
    use std::os::unix::fs::FileExt as _;
    let Ok(file) = std::fs::File::open(path) else {
        return Ok(());
    };
    let len = file
        .metadata()
        .map(|m| m.len())
        .with_context(|| format!("{what} {}", path.display()))?;
    // A block device reports length 0 in its metadata: probe up to its end.
    let len = if len == 0 {
        use std::io::Seek as _;
        (&file).seek(std::io::SeekFrom::End(0)).unwrap_or(0)
    } else {
        len
    };
    let found = flashtier_flash::probe::inspect(len, &mut |off, buf| file.read_at(buf, off))
        .with_context(|| format!("{what} {}: cannot read it", path.display()))?;
    if let flashtier_flash::probe::Content::Foreign(found) = found {
        if !force_format {
            crate::conflict!(
                "{what} {}: refusing to format it: it holds {found}; flashtier formats only \
                 all-zero devices and its own. Pass --force-format to overwrite it",
                path.display()
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn undoes_files_and_directories_unless_kept() {
        let root = std::env::temp_dir().join(format!("ft-litter-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(&root).unwrap();
        let old = root.join("old");
        std::fs::write(&old, b"12345").unwrap();
        let deep = root.join("a/b");
        {
            let mut l = Litter::default();
            l.note_file(&old);
            l.create_dir_all(&deep).unwrap();
            l.note_file(&deep.join("new"));
            std::fs::write(deep.join("new"), b"x").unwrap();
            std::fs::OpenOptions::new()
                .write(true)
                .open(&old)
                .unwrap()
                .set_len(100)
                .unwrap();
        }
        assert_eq!(std::fs::read(&old).unwrap(), b"12345");
        assert!(!root.join("a").exists());
        {
            let mut l = Litter::default();
            l.create_dir_all(&deep).unwrap();
            l.keep();
        }
        assert!(deep.exists());
        std::fs::remove_dir_all(&root).unwrap();
    }
}
