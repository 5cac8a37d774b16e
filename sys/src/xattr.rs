//! Extended attributes, by path (the server reaches O_PATH fds through
//! `/proc/self/fd/N`, which the `f*xattr` calls do not accept).

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

use crate::cvt;

/// `getxattr(2)` into `buf`; returns the value's length.
pub fn get(path: &CStr, name: &CStr, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: strings are NUL-terminated; the kernel writes at most buf.len() bytes.
    let n = cvt(unsafe {
        libc::getxattr(
            path.as_ptr(),
            name.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    })?;
    Ok(n as usize)
}

/// `listxattr(2)` into `buf` (NUL-separated names); returns the bytes used.
pub fn list(path: &CStr, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: as in `get`.
    let n = cvt(unsafe { libc::listxattr(path.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) })?;
    Ok(n as usize)
}

/// The size `llistxattr(2)` of `path` needs (0: no attributes). The last
/// component is not followed.
pub fn llist_len(path: &CStr) -> io::Result<usize> {
    // SAFETY: a NULL buffer of size 0 only asks the size.
    let n = cvt(unsafe { libc::llistxattr(path.as_ptr(), std::ptr::null_mut(), 0) })?;
    Ok(n as usize)
}

/// `listxattrat(2)` (Linux 6.13) system call number; the same in every
/// architecture's table (it was added after the tables were unified).
const SYS_LISTXATTRAT: libc::c_long = 465;

/// The size `listxattrat(2)` needs for `name` in directory `dir` (0: no
/// attributes), without following a final symlink: one lookup of `name`
/// instead of `/proc/self/fd/N/name`'s walk through procfs. `ENOSYS` on
/// kernels before 6.13.
pub fn list_len_at(dir: BorrowedFd<'_>, name: &CStr) -> io::Result<usize> {
    // SAFETY: `name` is NUL-terminated; a NULL buffer of size 0 only asks
    // the size; `dir` is a live descriptor for the duration of the call.
    let n = cvt(unsafe {
        libc::syscall(
            SYS_LISTXATTRAT,
            dir.as_raw_fd(),
            name.as_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
            std::ptr::null_mut::<libc::c_char>(),
            0usize,
        )
    })?;
    Ok(n as usize)
}

/// `setxattr(2)`.
pub fn set(path: &CStr, name: &CStr, value: &[u8], flags: i32) -> io::Result<()> {
    // SAFETY: strings are NUL-terminated; `value` is read for its length.
    cvt(unsafe {
        libc::setxattr(
            path.as_ptr(),
            name.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            flags,
        )
    })
    .map(drop)
}

/// `removexattr(2)`.
pub fn remove(path: &CStr, name: &CStr) -> io::Result<()> {
    // SAFETY: strings are NUL-terminated.
    cvt(unsafe { libc::removexattr(path.as_ptr(), name.as_ptr()) }).map(drop)
}
