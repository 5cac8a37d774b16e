//! Resolving client paths beneath the export, never outside it.
//!
//! Every lookup goes through `openat2(2)` with `RESOLVE_BENEATH` (no `..`
//! above the export, no absolute symlinks, no escaping symlinks) and
//! `RESOLVE_NO_MAGICLINKS`, from the export's root fd. The final component
//! is never followed (`O_NOFOLLOW`): operations act on the name itself, the
//! way the kernel asks a FUSE filesystem to.

use std::ffi::{CStr, CString};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// `errno` as a plain result, the way replies carry it.
pub type Errno = i32;

// linux/openat2.h. Our own definitions: libc's `open_how` cannot be built
// outside libc (it is non_exhaustive).
const RESOLVE_NO_MAGICLINKS: u64 = 0x02;
const RESOLVE_BENEATH: u64 = 0x08;

#[repr(C)]
struct OpenHow {
    flags: u64,
    mode: u64,
    resolve: u64,
}

pub(crate) fn last_errno() -> Errno {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

/// Turns a `-1` return into the errno.
pub(crate) fn check(rc: libc::c_int) -> Result<libc::c_int, Errno> {
    if rc < 0 {
        Err(last_errno())
    } else {
        Ok(rc)
    }
}

pub(crate) fn cstr(b: &[u8]) -> Result<CString, Errno> {
    CString::new(b).map_err(|_| libc::EINVAL)
}

/// `openat2(dir, path, flags, mode)` resolving beneath `dir`.
pub(crate) fn open_beneath(
    dir: RawFd,
    path: &CStr,
    flags: i32,
    mode: u32,
) -> Result<OwnedFd, Errno> {
    let how = OpenHow {
        flags: (flags | libc::O_CLOEXEC | libc::O_NOFOLLOW) as u32 as u64,
        mode: if flags & (libc::O_CREAT | libc::O_TMPFILE) != 0 {
            u64::from(mode & 0o7777)
        } else {
            0
        },
        resolve: RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS,
    };
    loop {
        // SAFETY: `path` is NUL-terminated, `how` is a valid open_how of the
        // size passed; the kernel only reads both.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_openat2,
                dir,
                path.as_ptr(),
                &how as *const OpenHow,
                std::mem::size_of::<OpenHow>(),
            )
        };
        if rc >= 0 {
            // SAFETY: the kernel returned a new descriptor that we now own.
            return Ok(unsafe { OwnedFd::from_raw_fd(rc as RawFd) });
        }
        let e = last_errno();
        // EAGAIN: a concurrent rename raced the lookup; EINTR: a signal.
        if e != libc::EAGAIN && e != libc::EINTR {
            // EXDEV is what the kernel answers for an escape attempt.
            return Err(e);
        }
    }
}

/// The node at `rel` (empty: the export root) opened with `flags`.
pub(crate) fn open_node(root: RawFd, rel: &[u8], flags: i32) -> Result<OwnedFd, Errno> {
    let p = if rel.is_empty() {
        CString::from(c".")
    } else {
        cstr(rel)?
    };
    open_beneath(root, &p, flags, 0)
}

/// The directory holding `rel` (an O_PATH fd) and the last name. The root
/// itself has no parent here: its operations are refused with `EBUSY` or
/// done through [`open_node`].
pub(crate) fn open_parent(root: RawFd, rel: &[u8]) -> Result<(OwnedFd, CString), Errno> {
    if rel.is_empty() {
        return Err(libc::EBUSY);
    }
    let (dir, name) = match rel.iter().rposition(|&b| b == b'/') {
        Some(i) => (&rel[..i], &rel[i + 1..]),
        None => (&b""[..], rel),
    };
    let fd = open_node(root, dir, libc::O_PATH | libc::O_DIRECTORY)?;
    Ok((fd, cstr(name)?))
}

/// A path that reaches exactly the inode behind `fd` (an O_PATH fd), for the
/// calls that have no fd form accepting O_PATH (chmod, utimensat, xattrs).
pub(crate) fn proc_path(fd: &OwnedFd) -> CString {
    CString::new(format!("/proc/self/fd/{}", fd.as_raw_fd()))
        .unwrap_or_else(|_| unreachable!("a formatted number has no NUL"))
}

/// `fstatat(dir, name, AT_SYMLINK_NOFOLLOW)`; an empty name stats `dir`.
pub(crate) fn stat_at(dir: RawFd, name: &CStr) -> Result<libc::stat, Errno> {
    // SAFETY: an all-zero stat is a valid value to be overwritten.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    let flags = if name.is_empty() {
        libc::AT_EMPTY_PATH | libc::AT_SYMLINK_NOFOLLOW
    } else {
        libc::AT_SYMLINK_NOFOLLOW
    };
    // SAFETY: `name` is NUL-terminated and `st` is writable for its size.
    check(unsafe { libc::fstatat(dir, name.as_ptr(), &mut st, flags) })?;
    Ok(st)
}

/// `fstat` of an fd (O_PATH fds included).
pub(crate) fn stat_fd(fd: RawFd) -> Result<libc::stat, Errno> {
    stat_at(fd, c"")
}
