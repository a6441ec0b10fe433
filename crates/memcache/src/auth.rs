//! ASCII authentication (memcached -Y): a file of `user:password` lines; a connection must
//! send `set <any key> <flags> <exptime> <bytes>\r\n<user> <password>\r\n` before anything
//! else, answered `STORED` (authenticated), `CLIENT_ERROR authentication failure` or
//! `CLIENT_ERROR bad authentication token format`; every other command before that answers
//! `CLIENT_ERROR unauthenticated`. SIGHUP reloads the file ([`AuthFile::reload`]); a reload
//! that fails keeps the previous entries.
//!
//! Passwords are compared in constant time. The file is read whole; it may be at most
//! [`MAX_FILE`] bytes.
use std::path::{Path, PathBuf};
use std::sync::RwLock;

/// Largest auth file read.
pub const MAX_FILE: u64 = 1 << 20;

/// `(user, password)` pairs.
pub type Entries = Vec<(Vec<u8>, Vec<u8>)>;

/// The loaded entries and where they came from.
#[derive(Debug)]
pub struct AuthFile {
    path: PathBuf,
    entries: RwLock<Entries>,
}

impl AuthFile {
    /// Load `path`; the error says what is wrong with it.
    pub fn load(path: &Path) -> Result<Self, String> {
        Ok(Self {
            path: path.to_path_buf(),
            entries: RwLock::new(read(path)?),
        })
    }

    /// Read the file again; on error the old entries stay. Returns the number of entries.
    pub fn reload(&self) -> Result<usize, String> {
        let fresh = read(&self.path)?;
        let n = fresh.len();
        *self.entries.write().unwrap_or_else(|p| p.into_inner()) = fresh;
        Ok(n)
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

fn read(path: &Path) -> Result<Entries, String> {
    let show = path.display();
    let meta = std::fs::metadata(path).map_err(|e| format!("auth file {show}: {e}"))?;
    if meta.len() > MAX_FILE {
        return Err(format!("auth file {show}: larger than {MAX_FILE} bytes"));
    }
    let text = std::fs::read(path).map_err(|e| format!("auth file {show}: {e}"))?;
    parse(&text).map_err(|line| format!("auth file {show}: line {line} is not user:password"))
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
        assert_eq!(a.reload(), Ok(1));
        assert!(a.check(b"bob", b"x") && !a.check(b"alice", b"secret"));
        std::fs::write(&path, "garbage\n").unwrap();
        assert!(a.reload().is_err());
        assert!(
            a.check(b"bob", b"x"),
            "a failed reload keeps the old entries"
        );
        std::fs::remove_file(&path).unwrap();
    }
}
