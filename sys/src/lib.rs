//! The one place where hipfs makes system calls: safe functions over the
//! Linux calls the policy code needs (std's `sys` pattern).
//!
//! Each function checks the return value and turns `-1` into
//! [`std::io::Error`]; calls that can be interrupted retry `EINTR`.
//! Functions that move bytes through raw pointers (the I/O engine's
//! destination is often pinned or foreign memory) are `unsafe fn` with a
//! `# Safety` section; everything else is safe. Functions that take a
//! [`RawFd`](std::os::fd::RawFd) only query a descriptor (a stale number
//! gives `EBADF`); those that act on one take a
//! [`BorrowedFd`](std::os::fd::BorrowedFd).
//!
//! Besides the system calls it holds the I/O engine's persistent scoped
//! worker pool ([`pool`]): like `std::thread::scope` it lets jobs borrow
//! from the caller, which needs one lifetime erasure that policy code must
//! not contain.

pub mod dirent;
pub mod drm;
pub mod fs;
pub mod io;
pub mod mem;
pub mod pool;
pub mod process;
pub mod rand;
pub mod xattr;

/// Turns a C return value into a result: negative means `errno` is set.
pub(crate) fn cvt<T: Copy + PartialOrd + Default>(rc: T) -> std::io::Result<T> {
    if rc < T::default() {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

/// Like [`cvt`], retrying while the call reports `EINTR`.
pub(crate) fn cvt_retry<T: Copy + PartialOrd + Default>(
    mut f: impl FnMut() -> T,
) -> std::io::Result<T> {
    loop {
        match cvt(f()) {
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            other => return other,
        }
    }
}
