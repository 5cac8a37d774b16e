//! Raw-pointer socket I/O: the TCP transport reads payloads straight from
//! the socket into registered memory and writes them straight from it,
//! without forming Rust references to memory the peer may be changing.

use std::io;
use std::os::fd::{BorrowedFd, RawFd};

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
    if len == 0 {
        return Ok(());
    }
    let mut scratch = vec![0u8; 64 * 1024];
    while len > 0 {
        let n = len.min(scratch.len() as u64) as usize;
        // SAFETY: scratch has at least n writable bytes.
        unsafe { recv_exact(fd, scratch.as_mut_ptr(), n)? };
        len -= n as u64;
    }
    Ok(())
}

/// Sends up to `len` bytes of `file` from `offset` with `sendfile(2)`
/// (page cache to socket, no user copy). Returns how many bytes it sent:
/// fewer than `len` when the file ends first, or when `sendfile` fails (a
/// file system that cannot splice, a read error) after which the caller
/// decides how to go on. A failure before any byte went out is returned
/// as the error so the caller can tell the two apart.
pub fn send_file(sock: RawFd, file: RawFd, offset: u64, len: usize) -> io::Result<usize> {
    let mut done = 0usize;
    while done < len {
        let mut off = libc::off_t::try_from(offset + done as u64)
            .map_err(|_| io::Error::from_raw_os_error(libc::EOVERFLOW))?;
        // Linux sends at most 0x7ffff000 bytes per call.
        let want = (len - done).min(0x7fff_f000);
        // SAFETY: plain syscall on two fds the caller holds; `off` is a
        // local the kernel updates (the file's own position is untouched,
        // so concurrent users of a dup of the fd are not disturbed).
        let n = unsafe { libc::sendfile(sock, file, &mut off, want) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            if done == 0 {
                return Err(e);
            }
            break;
        }
        if n == 0 {
            break;
        }
        done += n as usize;
    }
    Ok(done)
}

/// Reads up to `len` bytes of `file` at `offset` through a small buffer
/// and sends them: the fallback for files `sendfile` cannot read. Returns
/// how many bytes came from the file (fewer at end of file or on a read
/// error); socket errors are errors.
pub fn send_file_copied(
    sock: RawFd,
    file: BorrowedFd<'_>,
    offset: u64,
    len: usize,
) -> io::Result<usize> {
    let mut scratch = vec![0u8; 256 * 1024];
    let mut done = 0usize;
    while done < len {
        let want = (len - done).min(scratch.len());
        // A read error ends the file data (the caller sends zeros after it).
        let n = match hipfs_sys::io::pread(file, &mut scratch[..want], offset + done as u64) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        // SAFETY: the first n bytes of scratch were just filled.
        unsafe { send_all(sock, scratch.as_ptr(), n, done + n < len)? };
        done += n;
    }
    Ok(done)
}

/// Sends `len` zero bytes (the rest of a payload whose source ran short).
pub fn send_zeros(sock: RawFd, mut len: u64) -> io::Result<()> {
    static ZEROS: [u8; 64 * 1024] = [0; 64 * 1024];
    while len > 0 {
        let n = len.min(ZEROS.len() as u64) as usize;
        // SAFETY: ZEROS is a static array of at least n bytes.
        unsafe { send_all(sock, ZEROS.as_ptr(), n, false)? };
        len -= n as u64;
    }
    Ok(())
}

/// Reads whatever the socket has (at least one byte, blocking), up to
/// `b.len()`; 0 means the peer closed. The TLS lanes read ciphertext
/// through this into their own buffer.
pub fn recv_some(fd: RawFd, b: &mut [u8]) -> io::Result<usize> {
    loop {
        // SAFETY: `b` is writable for its length for the whole call.
        let n = unsafe { libc::recv(fd, b.as_mut_ptr().cast(), b.len(), 0) };
        if n >= 0 {
            return Ok(n as usize);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Looks at the first `b.len()` bytes the peer sent without taking them
/// (waits until that many are there, or the peer closes, or the socket's
/// read timeout passes). Returns how many it saw.
pub fn peek(fd: RawFd, b: &mut [u8]) -> io::Result<usize> {
    loop {
        // SAFETY: `b` is writable for its length for the whole call.
        let n = unsafe {
            libc::recv(
                fd,
                b.as_mut_ptr().cast(),
                b.len(),
                libc::MSG_PEEK | libc::MSG_WAITALL,
            )
        };
        if n >= 0 {
            return Ok(n as usize);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Appends `len` bytes at `src` to `dst` (a TLS lane stages a region's
/// bytes before encrypting them), without forming a reference to memory
/// the application may be changing.
///
/// # Safety
/// `[src, src+len)` must be readable for the duration of the call.
pub unsafe fn append_raw(dst: &mut Vec<u8>, src: *const u8, len: usize) {
    dst.reserve(len);
    let at = dst.len();
    // SAFETY: `reserve` made room for `len` more bytes past `at`; the
    // caller guarantees the source range is readable; a Vec's buffer
    // never overlaps the caller's memory.
    unsafe {
        std::ptr::copy_nonoverlapping(src, dst.as_mut_ptr().add(at), len);
        dst.set_len(at + len);
    }
}

/// Copies `src` to `dst` (decrypted or buffered bytes into a registered region).
///
/// # Safety
/// `[dst, dst+src.len())` must be writable for the duration of the call.
pub unsafe fn copy_to_raw(dst: *mut u8, src: &[u8]) {
    // SAFETY: the caller guarantees the destination range is writable;
    // `src` is a buffer of the lane (TLS session or read-ahead), never the caller's memory.
    unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), dst, src.len()) }
}

/// Sends as much of `bufs` as the socket takes now, without waiting
/// (`MSG_DONTWAIT`; the socket itself stays blocking for the lane's
/// reader). `WouldBlock` when it takes nothing. A TLS lane sends its
/// session's ciphertext through this while holding the session lock, so
/// it never waits on the peer with the lock held.
pub fn send_vectored_now(fd: RawFd, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
    // SAFETY: msghdr is plain old data; all-zero is a valid empty header.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    // IoSlice is ABI compatible with iovec on Unix (documented by std);
    // sendmsg only reads the slices.
    msg.msg_iov = bufs.as_ptr() as *mut libc::iovec;
    msg.msg_iovlen = bufs.len() as _;
    loop {
        // SAFETY: `msg` points at `bufs`, valid for the call; MSG_NOSIGNAL:
        // a dead peer is EPIPE, not SIGPIPE.
        let n = unsafe { libc::sendmsg(fd, &msg, libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT) };
        if n >= 0 {
            return Ok(n as usize);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Waits until the socket has room to send, or has failed or been shut
/// down (then the next send says why).
pub fn wait_writable(fd: RawFd) -> io::Result<()> {
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLOUT,
        revents: 0,
    };
    loop {
        // SAFETY: `pfd` is one valid pollfd, borrowed for the call.
        let n = unsafe { libc::poll(&mut pfd, 1, -1) };
        if n >= 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}
