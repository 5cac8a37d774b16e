//! Resolving client paths beneath the export, never outside it.
//!
//! Every lookup goes through `openat2(2)` with `RESOLVE_BENEATH` (no `..`
//! above the export, no absolute symlinks, no escaping symlinks) and
//! `RESOLVE_NO_MAGICLINKS`, from the export's root fd. The final component
//! is never followed (`O_NOFOLLOW`): operations act on the name itself, the
//! way the kernel asks a FUSE filesystem to.

use std::ffi::{CStr, CString};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};

use hipfs_sys::fs::{OpenHow, RESOLVE_BENEATH, RESOLVE_NO_MAGICLINKS};

/// `errno` as a plain result, the way replies carry it.
pub type Errno = i32;

/// The errno of a failed system call (`EIO` for an error without one).
pub(crate) fn errno(e: std::io::Error) -> Errno {
    e.raw_os_error().unwrap_or(libc::EIO)
}

/// Extension turning `std::io::Result` into the server's `Result<_, Errno>`.
pub(crate) trait ToErrno<T> {
    /// The value, or the call's errno.
    fn errno(self) -> Result<T, Errno>;
}

impl<T> ToErrno<T> for std::io::Result<T> {
    fn errno(self) -> Result<T, Errno> {
        self.map_err(errno)
    }
}

pub(crate) fn cstr(b: &[u8]) -> Result<CString, Errno> {
    CString::new(b).map_err(|_| libc::EINVAL)
}

/// The longest path handed to one `openat2` (below PATH_MAX with its NUL).
const CHUNK: usize = 4000;

/// `openat2(dir, path, flags, mode)` resolving beneath `dir`; paths longer
/// than PATH_MAX are resolved piecewise.
pub(crate) fn open_beneath(
    dir: BorrowedFd<'_>,
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
    let bytes = path.to_bytes();
    if bytes.len() >= CHUNK {
        // openat2 takes less than PATH_MAX at once: walk the leading
        // directories in pieces, each resolved beneath the one before
        // (so never above `dir`), then open the rest from the last.
        let cut = bytes[..CHUNK]
            .iter()
            .rposition(|&b| b == b'/')
            .filter(|&i| i > 0)
            .ok_or(libc::ENAMETOOLONG)?;
        let head = cstr(&bytes[..cut])?;
        let tail = cstr(&bytes[cut + 1..])?;
        let mid = open_beneath(dir, &head, libc::O_PATH | libc::O_DIRECTORY, 0)?;
        return open_beneath(mid.as_fd(), &tail, flags, mode);
    }
    loop {
        match hipfs_sys::fs::openat2(dir, path, &how).errno() {
            // EAGAIN: a concurrent rename raced the lookup; EINTR: a signal.
            Err(libc::EAGAIN | libc::EINTR) => continue,
            // EXDEV is what the kernel answers for an escape attempt.
            other => return other,
        }
    }
}

/// The node at `rel` (empty: the export root) opened with `flags`.
pub(crate) fn open_node(root: BorrowedFd<'_>, rel: &[u8], flags: i32) -> Result<OwnedFd, Errno> {
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
pub(crate) fn open_parent(root: BorrowedFd<'_>, rel: &[u8]) -> Result<(OwnedFd, CString), Errno> {
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
pub(crate) fn stat_at(dir: BorrowedFd<'_>, name: &CStr) -> Result<libc::stat, Errno> {
    let flags = if name.is_empty() {
        libc::AT_EMPTY_PATH | libc::AT_SYMLINK_NOFOLLOW
    } else {
        libc::AT_SYMLINK_NOFOLLOW
    };
    hipfs_sys::fs::fstatat(dir, name, flags).errno()
}

/// `fstat` of an fd (O_PATH fds included).
pub(crate) fn stat_fd(fd: impl AsFd) -> Result<libc::stat, Errno> {
    stat_at(fd.as_fd(), c"")
}
