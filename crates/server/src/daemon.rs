//! Process-level start-up as memcached does it: daemonize (-d), the pid file (-P), dropping
//! root for a user (-u), the core size limit (-r) and locked memory (-k).
//!
//! Daemonizing forks *before* any thread exists (the tokio runtime and the flash engine's
//! threads start in the child). Unlike memcached's `daemon()`, the parent does not exit at
//! once: it waits on a pipe until the child serves (exit 0) or reports why it could not
//! start (the child's error line, the child's exit status), so `flashtier kv -d` fails
//! visibly and a service manager sees readiness. The child then detaches stdio to
//! `/dev/null` (kept with -v, as memcached).
//!
//! Privileges are dropped after every socket and flash file is open, with glibc's
//! `setgid`/`setuid`, which apply to every thread of the process. The `-Y` auth file's
//! descriptor, opened as root, stays open so SIGHUP can read it again after the drop
//! (`flashtier_memcache::auth`).
// `unsafe` is needed for fork, setsid, dup2, set*id, getpwnam_r, setrlimit and mlockall;
// each block states its SAFETY.
#![allow(unsafe_code)]

use std::ffi::CString;
use std::io::{Read as _, Write as _};
use std::os::fd::{FromRawFd as _, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The write end of the readiness pipe, in a daemonized child until it is ready.
static READY: Mutex<Option<std::fs::File>> = Mutex::new(None);

/// True when the effective user is root.
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// A user to become: ids from the password database.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UserIds {
    pub uid: libc::uid_t,
    pub gid: libc::gid_t,
}

/// Look `name` up in the password database.
pub fn lookup_user(name: &str) -> std::io::Result<Option<UserIds>> {
    let cname = CString::new(name).map_err(|_| std::io::ErrorKind::InvalidInput)?;
    let mut buf = vec![0 as libc::c_char; 16 * 1024];
    // SAFETY: an all-zero passwd is a valid value of this plain C struct.
    let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
    let mut result: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: every pointer is valid for the call: the name is NUL-terminated, `pwd` and
    // `result` are writable, `buf` is writable for `buf.len()` bytes and outlives the call;
    // the strings `pwd` points to live in `buf`, which we do not read through `pwd`.
    let rc = unsafe {
        libc::getpwnam_r(
            cname.as_ptr(),
            &mut pwd,
            buf.as_mut_ptr(),
            buf.len(),
            &mut result,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::from_raw_os_error(rc));
    }
    if result.is_null() {
        return Ok(None);
    }
    Ok(Some(UserIds {
        uid: pwd.pw_uid,
        gid: pwd.pw_gid,
    }))
}

/// Become `ids` for good: no supplementary groups, then the group, then the user.
pub fn drop_privileges(ids: UserIds) -> std::io::Result<()> {
    // SAFETY: setgroups with a zero count reads no memory.
    if unsafe { libc::setgroups(0, std::ptr::null()) } != 0 {
        let e = std::io::Error::last_os_error();
        // EPERM: already without the privilege to change groups (memcached continues too).
        if e.raw_os_error() != Some(libc::EPERM) {
            return Err(e);
        }
    }
    // SAFETY: setgid/setuid take plain integers; glibc applies them to every thread.
    if unsafe { libc::setgid(ids.gid) } != 0 || unsafe { libc::setuid(ids.uid) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Raise the core file size limit to its hard maximum (-r).
pub fn raise_core_limit() -> std::io::Result<()> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `lim` is a valid, writable rlimit for the duration of the call.
    if unsafe { libc::getrlimit(libc::RLIMIT_CORE, &mut lim) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    lim.rlim_cur = lim.rlim_max;
    // SAFETY: `lim` is a valid rlimit for the duration of the call.
    if unsafe { libc::setrlimit(libc::RLIMIT_CORE, &lim) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Lock all current and future pages in RAM (-k).
pub fn lock_memory() -> std::io::Result<()> {
    // SAFETY: mlockall takes flags only.
    if unsafe { libc::mlockall(libc::MCL_CURRENT | libc::MCL_FUTURE) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Fork into the background. Must be called while the process has one thread. Returns in
/// the child only; the parent waits for [`ready`] or [`fail`] from the child and exits.
pub fn daemonize() -> std::io::Result<()> {
    let mut fds = [0; 2];
    // SAFETY: `fds` is a writable array of two ints.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: the two descriptors were just created and are owned by nothing else.
    let (read_end, write_end) =
        unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    // SAFETY: the process is single-threaded here (the caller's contract), so the child
    // may run arbitrary code after fork.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(std::io::Error::last_os_error());
    }
    if pid > 0 {
        drop(write_end);
        parent_wait(std::fs::File::from(read_end), pid);
    }
    drop(read_end);
    // SAFETY: setsid takes no arguments; the child is not a process group leader.
    unsafe { libc::setsid() };
    *READY.lock().unwrap_or_else(|p| p.into_inner()) = Some(std::fs::File::from(write_end));
    Ok(())
}

/// The parent of a daemonized child: relay its start-up outcome, never return.
fn parent_wait(mut pipe: std::fs::File, child: libc::pid_t) -> ! {
    let mut msg = Vec::new();
    let _ = pipe.read_to_end(&mut msg);
    match msg.split_first() {
        Some((0, _)) => std::process::exit(0),
        Some((&code, text)) => {
            let _ = std::io::stderr().write_all(text);
            std::process::exit(i32::from(code));
        }
        None => {
            // The child died before saying anything: its status says why.
            let mut status = 0;
            // SAFETY: `status` is writable; `child` is our child.
            unsafe { libc::waitpid(child, &mut status, 0) };
            eprintln!("flashtier: the daemon exited during start-up (status {status})");
            std::process::exit(1);
        }
    }
}

/// The daemonized child serves: release the parent (exit 0) and detach stdio (kept with
/// `keep_stderr`). No effect when not daemonized.
pub fn ready(keep_stderr: bool) {
    let Some(mut pipe) = READY.lock().unwrap_or_else(|p| p.into_inner()).take() else {
        return;
    };
    let _ = pipe.write_all(&[0]);
    drop(pipe);
    detach_stdio(keep_stderr);
}

/// The daemonized child cannot start: the parent prints `line` and exits with `code`.
/// Returns false when not daemonized (the caller prints the line itself).
pub fn fail(line: &str, code: u8) -> bool {
    let Some(mut pipe) = READY.lock().unwrap_or_else(|p| p.into_inner()).take() else {
        return false;
    };
    let mut msg = vec![code.max(1)];
    msg.extend_from_slice(line.as_bytes());
    msg.push(b'\n');
    pipe.write_all(&msg).is_ok()
}

fn detach_stdio(keep_stderr: bool) {
    let Ok(null) = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")
    else {
        return;
    };
    let fd = std::os::fd::AsRawFd::as_raw_fd(&null);
    let targets: &[i32] = if keep_stderr { &[0, 1] } else { &[0, 1, 2] };
    for &t in targets {
        // SAFETY: both descriptors are valid; dup2 replaces `t` atomically.
        unsafe { libc::dup2(fd, t) };
    }
}

/// The pid file (-P): written with a temporary name and renamed (readers never see it
/// empty), removed when dropped.
#[derive(Debug)]
pub struct PidFile {
    path: PathBuf,
}

impl PidFile {
    /// Write this process's id to `path`. A pid file naming a live process is overwritten
    /// with a warning, as memcached does.
    pub fn write(path: &Path) -> std::io::Result<Self> {
        if let Ok(old) = std::fs::read_to_string(path) {
            if let Ok(pid) = old.trim().parse::<i32>() {
                // SAFETY: signal 0 only checks that the process exists.
                if pid > 0 && unsafe { libc::kill(pid, 0) } == 0 {
                    log::warn!(
                        "the pid file {} contained the following (running) pid: {pid}",
                        path.display()
                    );
                }
            }
        }
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, format!("{}\n", std::process::id()))?;
        std::fs::rename(&tmp, path).inspect_err(|_| {
            let _ = std::fs::remove_file(&tmp);
        })?;
        Ok(Self {
            path: path.to_path_buf(),
        })
    }
}

impl Drop for PidFile {
    fn drop(&mut self) {
        // Only our own pid: another instance may have taken the file over.
        let ours = std::fs::read_to_string(&self.path)
            .is_ok_and(|s| s.trim() == std::process::id().to_string());
        if ours {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn users_and_pid_files() {
        assert_eq!(lookup_user("root").unwrap().map(|u| u.uid), Some(0));
        assert!(lookup_user("no-such-user-flashtier").unwrap().is_none());
        let p = std::env::temp_dir().join(format!("ft-pid-{}", std::process::id()));
        {
            let _f = PidFile::write(&p).unwrap();
            let text = std::fs::read_to_string(&p).unwrap();
            assert_eq!(text.trim(), std::process::id().to_string());
        }
        assert!(!p.exists(), "removed when dropped");
    }
}
