//! Raw-pointer socket I/O: the TCP transport reads payloads straight from
//! the socket into registered memory and writes them straight from it,
//! without forming Rust references to memory the peer may be changing.

use std::io;
use std::os::fd::RawFd;

/// Writes all `len` bytes at `ptr` to the socket.
///
/// # Safety
/// `[ptr, ptr+len)` must be readable for the duration of the call.
pub unsafe fn send_all(
    fd: RawFd,
    mut ptr: *const u8,
    mut len: usize,
    more: bool,
) -> io::Result<()> {
    let flags = libc::MSG_NOSIGNAL | if more { libc::MSG_MORE } else { 0 };
    while len > 0 {
        // SAFETY: the caller guarantees the range is readable; send() only
        // reads from it. MSG_NOSIGNAL: a dead peer is an EPIPE error, not a
        // SIGPIPE that kills a host process that did not ignore it.
        let n = unsafe { libc::send(fd, ptr.cast(), len, flags) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        // SAFETY: n <= len, so the pointer stays inside the range.
        ptr = unsafe { ptr.add(n as usize) };
        len -= n as usize;
    }
    Ok(())
}

/// Reads exactly `len` bytes from the socket into `ptr`.
///
/// # Safety
/// `[ptr, ptr+len)` must be writable for the duration of the call.
pub unsafe fn recv_exact(fd: RawFd, mut ptr: *mut u8, mut len: usize) -> io::Result<()> {
    while len > 0 {
        // SAFETY: the caller guarantees the range is writable.
        let n = unsafe { libc::recv(fd, ptr.cast(), len, 0) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "peer closed the connection",
            ));
        }
        // SAFETY: n <= len.
        ptr = unsafe { ptr.add(n as usize) };
        len -= n as usize;
    }
    Ok(())
}

/// Reads into a fixed-size array.
pub fn recv_array<const N: usize>(fd: RawFd) -> io::Result<[u8; N]> {
    let mut b = [0u8; N];
    // SAFETY: b is a local array of N writable bytes.
    unsafe { recv_exact(fd, b.as_mut_ptr(), N)? };
    Ok(b)
}

/// Reads and throws away `len` bytes (the payload of a refused frame, so
/// the stream stays in step).
pub fn discard(fd: RawFd, mut len: u64) -> io::Result<()> {
    let mut scratch = vec![0u8; 64 * 1024];
    while len > 0 {
        let n = len.min(scratch.len() as u64) as usize;
        // SAFETY: scratch has at least n writable bytes.
        unsafe { recv_exact(fd, scratch.as_mut_ptr(), n)? };
        len -= n as u64;
    }
    Ok(())
}
