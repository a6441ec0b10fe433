//! ASCII authentication (memcached -Y): a file of `user:password` lines; a connection must
//! send `set <any key> <flags> <exptime> <bytes>\r\n<user> <password>\r\n` before anything
//! else, answered `STORED` (authenticated), `CLIENT_ERROR authentication failure` or
//! `CLIENT_ERROR bad authentication token format`; every other command before that answers
//! `CLIENT_ERROR unauthenticated`. SIGHUP reloads the file ([`AuthFile::reload`]); a reload
//! that fails keeps the previous entries.
//!
//! Why a descriptor is kept: the file is usually readable by root only, and the server, once
//! `-u` has dropped root, can no longer open it. Reopening it with more privilege would mean
//! keeping privilege (a root helper, `CAP_DAC_READ_SEARCH`); instead the descriptor opened at
//! load, while still root, is kept (close-on-exec) and a reload the path refuses with
//! `EACCES` reads that descriptor again from its start. So a file edited in place (truncated
//! and rewritten) is reloaded; a file *replaced* (an editor that writes a new file and
//! renames it, `sed -i`) is a new inode the descriptor does not see: the reload is refused,
//! naming why and what to do, and the old entries stay. The process gains no access it did
//! not have at start: it can read only the file it was given.
//!
//! Passwords are compared in constant time. The file is read whole; it may be at most
//! [`MAX_FILE`] bytes.
use std::fs::File;
use std::io::Read as _;
use std::os::unix::fs::{FileExt as _, MetadataExt as _};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, RwLock};

/// Largest auth file read.
pub const MAX_FILE: u64 = 1 << 20;

/// `(user, password)` pairs.
pub type Entries = Vec<(Vec<u8>, Vec<u8>)>;

/// The loaded entries and where they came from.
#[derive(Debug)]
pub struct AuthFile {
    path: PathBuf,
    /// The file as last opened by its path (at load, or by a reload that could open it):
    /// read again when the path cannot be opened (see the module docs).
    held: Mutex<File>,
    entries: RwLock<Entries>,
}

/// What a successful [`AuthFile::reload`] read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reloaded {
    /// Entries now in force.
    pub entries: usize,
    /// Read through the descriptor kept from an earlier open, because the path cannot be
    /// opened by this process any more (root privileges dropped with `-u`).
    pub through_descriptor: bool,
}

impl AuthFile {
    /// Load `path`; the error says what is wrong with it.
    pub fn load(path: &Path) -> Result<Self, String> {
        let show = path.display();
        let mut file = File::open(path).map_err(|e| format!("auth file {show}: {e}"))?;
        let entries = read(&mut file, path)?;
        Ok(Self {
            path: path.to_path_buf(),
            held: Mutex::new(file),
            entries: RwLock::new(entries),
        })
    }

    /// Read the file again; on error the old entries stay. By its path, or — when the path
    /// refuses this process (`EACCES`) — through the descriptor kept from the last open, if
    /// that is still the file at the path (see the module docs).
    pub fn reload(&self) -> Result<Reloaded, String> {
        let show = self.path.display();
        let (fresh, through_descriptor) = match File::open(&self.path) {
            Ok(mut file) => {
                let fresh = read(&mut file, &self.path)?;
                *self.held.lock().unwrap_or_else(|p| p.into_inner()) = file;
                (fresh, false)
            }
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
                let held = self.held.lock().unwrap_or_else(|p| p.into_inner());
                if let Some(why) = replaced(&held, &self.path) {
                    return Err(format!(
                        "auth file {show}: this process may not open it ({e}; root was \
                         dropped with -u), and the file it opened at start {why} (an editor \
                         that writes a new file and renames it does that). Edit the file in \
                         place (e.g. `cat new > {show}`), make it readable by the -u user, or \
                         restart the server"
                    ));
                }
                (read_at_start(&held, &self.path)?, true)
            }
            Err(e) => return Err(format!("auth file {show}: {e}")),
        };
        let entries = fresh.len();
        *self.entries.write().unwrap_or_else(|p| p.into_inner()) = fresh;
        Ok(Reloaded {
            entries,
            through_descriptor,
        })
    }

    /// True if `user` with `pass` is listed.
    pub fn check(&self, user: &[u8], pass: &[u8]) -> bool {
        let entries = self.entries.read().unwrap_or_else(|p| p.into_inner());
        let mut ok = false;
        for (u, p) in entries.iter() {
            // No early exit: the time taken does not say which entry or byte differed.
            ok |= eq(u, user) & eq(p, pass);
        }
        ok
    }
}

/// Constant-time equality for equal lengths (lengths are not secret).
fn eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The entries of a file just opened (read from its current offset, the start).
fn read(file: &mut File, path: &Path) -> Result<Entries, String> {
    let show = path.display();
    let mut text = Vec::new();
    file.take(MAX_FILE + 1)
        .read_to_end(&mut text)
        .map_err(|e| format!("auth file {show}: {e}"))?;
    entries(&text, path)
}

/// The entries of a kept descriptor, read from offset 0 (its own offset is left alone).
fn read_at_start(file: &File, path: &Path) -> Result<Entries, String> {
    let show = path.display();
    let mut text = vec![0u8; MAX_FILE as usize + 1];
    let mut len = 0;
    while len < text.len() {
        match file.read_at(&mut text[len..], len as u64) {
            Ok(0) => break,
            Ok(n) => len += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(format!("auth file {show}: {e}")),
        }
    }
    text.truncate(len);
    entries(&text, path)
}

fn entries(text: &[u8], path: &Path) -> Result<Entries, String> {
    let show = path.display();
    if text.len() as u64 > MAX_FILE {
        return Err(format!("auth file {show}: larger than {MAX_FILE} bytes"));
    }
    parse(text).map_err(|line| format!("auth file {show}: line {line} is not user:password"))
}

/// Why `held` is no longer the file at `path` (`None`: it still is, or that cannot be told):
/// it has no name left (replaced by a rename, or removed), or `path` names another inode.
fn replaced(held: &File, path: &Path) -> Option<&'static str> {
    let m = held.metadata().ok()?;
    if m.nlink() == 0 {
        return Some("was replaced or removed since");
    }
    match std::fs::metadata(path) {
        Ok(now) if (now.dev(), now.ino()) != (m.dev(), m.ino()) => {
            Some("is no longer the one at that path")
        }
        _ => None,
    }
}

/// `user:password` lines (the password runs to the end of the line, `\r` dropped); an empty
/// line ends the file as in memcached. Err(line number) for a line without `:`.
pub fn parse(text: &[u8]) -> Result<Entries, usize> {
    let mut out = Vec::new();
    for (i, line) in text.split(|&b| b == b'\n').enumerate() {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.is_empty() {
            continue;
        }
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            return Err(i + 1);
        };
        out.push((line[..colon].to_vec(), line[colon + 1..].to_vec()));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_and_check() {
        let e = parse(b"alice:secret\nbob:p:w\r\n\n").unwrap();
        assert_eq!(e.len(), 2);
        assert_eq!(e[1], (b"bob".to_vec(), b"p:w".to_vec()));
        assert_eq!(parse(b"ok:1\nbroken\n"), Err(2));
        let path = std::env::temp_dir().join(format!("ft-auth-{}", std::process::id()));
        std::fs::write(&path, "alice:secret\n").unwrap();
        let a = AuthFile::load(&path).unwrap();
        assert!(a.check(b"alice", b"secret"));
        assert!(!a.check(b"alice", b"secreT"));
        assert!(!a.check(b"bob", b"secret"));
        std::fs::write(&path, "bob:x\n").unwrap();
        assert_eq!(a.reload().map(|r| r.entries), Ok(1));
        assert!(a.check(b"bob", b"x") && !a.check(b"alice", b"secret"));
        std::fs::write(&path, "garbage\n").unwrap();
        assert!(a.reload().is_err());
        assert!(
            a.check(b"bob", b"x"),
            "a failed reload keeps the old entries"
        );
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn a_kept_descriptor_sees_edits_in_place_and_knows_a_replaced_file() {
        let path = std::env::temp_dir().join(format!("ft-auth-fd-{}", std::process::id()));
        std::fs::write(&path, "alice:one\n").unwrap();
        let mut held = File::open(&path).unwrap();
        assert_eq!(read(&mut held, &path).unwrap().len(), 1);
        // In place: the same inode, read again from its start.
        std::fs::write(&path, "bob:two\ncarol:three\n").unwrap();
        assert_eq!(replaced(&held, &path), None);
        let e = read_at_start(&held, &path).unwrap();
        assert_eq!(e[1], (b"carol".to_vec(), b"three".to_vec()));
        // Replaced by a rename: the kept descriptor is the old file.
        let new = path.with_extension("new");
        std::fs::write(&new, "dave:four\n").unwrap();
        std::fs::rename(&new, &path).unwrap();
        assert!(replaced(&held, &path).is_some());
        std::fs::remove_file(&path).unwrap();
    }
}
