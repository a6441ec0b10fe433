//! When the bytes a TCP read returns reached the socket: the kernel's receive timestamp
//! (`SO_TIMESTAMPNS`), delivered with `recvmsg`. The time from it to the read returning is the
//! request's wait before its worker ran — socket queue, wake-up and run queue — the first stage
//! of [`crate::latency::Stage`] (an operator sees a descheduled worker there, not in the
//! command's own time).
//!
//! For TCP the kernel stamps the most recent segment the read consumed, so a read of a
//! pipelined burst measures from its last packet; at pipeline depth 1 that is the request.
//! Only plain TCP: unix sockets and TLS record no stage.
//!
//! `unsafe` is confined here (`recvmsg` into the buffer's spare capacity, the control
//! message walk); each block states its SAFETY.
#![allow(unsafe_code)]
#![deny(clippy::undocumented_unsafe_blocks)]

use std::os::fd::RawFd;
use std::time::Duration;

use bytes::BytesMut;

/// Ask the kernel to timestamp what arrives on `fd` (best effort: an error is ignored and
/// reads then carry no stamp).
pub fn enable(fd: RawFd) {
    let on: libc::c_int = 1;
    // SAFETY: `fd` is an open socket owned by the caller; the option value is a valid c_int
    // whose size is passed.
    let _ = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_TIMESTAMPNS,
            std::ptr::from_ref(&on).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
}

/// Control-message space for one `timespec` (8-byte aligned, generous).
#[repr(C, align(8))]
struct Control([u8; 64]);

/// Receive into `buf`'s spare capacity (the caller reserved room) without blocking
/// (`MSG_DONTWAIT`, any stream socket): the byte count, and how long ago the kernel received
/// the newest of those bytes (`None` without a stamp: not enabled, or a unix socket).
/// `WouldBlock` when nothing is there.
pub fn recv(fd: RawFd, buf: &mut BytesMut) -> std::io::Result<(usize, Option<Duration>)> {
    let spare = buf.spare_capacity_mut();
    let mut iov = libc::iovec {
        iov_base: spare.as_mut_ptr().cast(),
        iov_len: spare.len(),
    };
    let mut control = Control([0; 64]);
    // SAFETY: an all-zero msghdr is a valid value (null name, no iovecs, no control).
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.0.as_mut_ptr().cast();
    msg.msg_controllen = control.0.len() as _;
    // SAFETY: `iov` points at `spare`, writable for `iov_len` bytes (uninitialised bytes are
    // fine: the kernel only writes them); `control` outlives the call; `msg` is initialised.
    let n = unsafe { libc::recvmsg(fd, &mut msg, libc::MSG_DONTWAIT) };
    if n < 0 {
        return Err(std::io::Error::last_os_error());
    }
    let n = n as usize;
    // SAFETY: the kernel initialised the first `n` bytes of the spare capacity.
    unsafe { buf.set_len(buf.len() + n) };
    let stamp = stamp_of(&msg);
    let age = stamp.and_then(|ts| {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .ok()?;
        now.checked_sub(Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32))
    });
    Ok((n, age))
}

/// The `SCM_TIMESTAMPNS` control message of `msg`, if any.
fn stamp_of(msg: &libc::msghdr) -> Option<libc::timespec> {
    // SAFETY: `msg` was filled by `recvmsg`: its control pointer and length describe the
    // control buffer, which CMSG_FIRSTHDR/CMSG_NXTHDR walk within bounds.
    let mut cmsg = unsafe { libc::CMSG_FIRSTHDR(msg) };
    while !cmsg.is_null() {
        // SAFETY: `cmsg` is non-null and points at a header inside the control buffer.
        let h = unsafe { &*cmsg };
        if h.cmsg_level == libc::SOL_SOCKET && h.cmsg_type == libc::SCM_TIMESTAMPNS {
            // SAFETY: an SCM_TIMESTAMPNS message carries one `timespec`; the data may be
            // unaligned for it, so it is read unaligned.
            let ts = unsafe { std::ptr::read_unaligned(libc::CMSG_DATA(cmsg).cast()) };
            return Some(ts);
        }
        // SAFETY: as above: the walk stays within the control buffer.
        cmsg = unsafe { libc::CMSG_NXTHDR(msg, cmsg) };
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::fd::AsRawFd;

    #[test]
    fn reads_carry_the_kernel_receive_time() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (s, _) = l.accept().unwrap();
        enable(s.as_raw_fd());
        // The kernel turns receive timestamps on lazily (a deferred static key): the first
        // segments after the first socket asks may carry none.
        let mut stamped = None;
        for _ in 0..20 {
            c.write_all(b"get k\r\n").unwrap();
            std::thread::sleep(Duration::from_millis(30));
            let mut buf = BytesMut::with_capacity(64);
            let (n, age) = recv(s.as_raw_fd(), &mut buf).unwrap();
            assert_eq!(&buf[..n], b"get k\r\n");
            if age.is_some() {
                stamped = age;
                break;
            }
        }
        let age = stamped.expect("a receive timestamp within 20 reads");
        assert!(age >= Duration::from_millis(25), "{age:?}");
        assert!(age < Duration::from_secs(5), "{age:?}");
        let mut buf = BytesMut::with_capacity(64);
        s.set_nonblocking(true).unwrap();
        let e = recv(s.as_raw_fd(), &mut buf).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::WouldBlock);
    }
}
