//! Opening, resolving and changing files.

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

use crate::cvt;

/// `open(2)` with `O_CLOEXEC` added; `mode` is read only with `O_CREAT`
/// or `O_TMPFILE`.
pub fn open(path: &CStr, flags: i32, mode: u32) -> io::Result<OwnedFd> {
    let fd = crate::cvt_retry(|| {
        // SAFETY: `path` is NUL-terminated; the kernel only reads it.
        unsafe { libc::open(path.as_ptr(), flags | libc::O_CLOEXEC, mode) }
    })?;
    // SAFETY: the kernel returned a new descriptor that nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `RESOLVE_NO_MAGICLINKS` of linux/openat2.h.
pub const RESOLVE_NO_MAGICLINKS: u64 = 0x02;
/// `RESOLVE_BENEATH` of linux/openat2.h.
pub const RESOLVE_BENEATH: u64 = 0x08;

/// `struct open_how` of linux/openat2.h (our own: libc's is non_exhaustive).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct OpenHow {
    /// `O_*` flags.
    pub flags: u64,
    /// Mode of a created file.
    pub mode: u64,
    /// `RESOLVE_*` flags.
    pub resolve: u64,
}

/// One `openat2(2)` call (no retry: `EAGAIN` from a racing rename is the
/// caller's to decide about).
pub fn openat2(dir: BorrowedFd<'_>, path: &CStr, how: &OpenHow) -> io::Result<OwnedFd> {
    // SAFETY: `path` is NUL-terminated and `how` is an open_how of the size
    // passed; the kernel only reads both.
    let rc = cvt(unsafe {
        libc::syscall(
            libc::SYS_openat2,
            dir.as_raw_fd(),
            path.as_ptr(),
            how as *const OpenHow,
            std::mem::size_of::<OpenHow>(),
        )
    })?;
    // SAFETY: the kernel returned a new descriptor that nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(rc as RawFd) })
}

/// `fstatat(2)`; `flags` as the kernel takes them (`AT_EMPTY_PATH` with an
/// empty name stats `dir` itself).
pub fn fstatat(dir: BorrowedFd<'_>, name: &CStr, flags: i32) -> io::Result<libc::stat> {
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: `name` is NUL-terminated and `st` is writable for its size.
    cvt(unsafe { libc::fstatat(dir.as_raw_fd(), name.as_ptr(), st.as_mut_ptr(), flags) })?;
    // SAFETY: fstatat succeeded, so the kernel filled `st`.
    Ok(unsafe { st.assume_init() })
}

/// `fstat(2)` of a descriptor (query only).
pub fn fstat(fd: RawFd) -> io::Result<libc::stat> {
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: `st` is writable for its size; a bad fd is EBADF.
    cvt(unsafe { libc::fstat(fd, st.as_mut_ptr()) })?;
    // SAFETY: fstat succeeded, so the kernel filled `st`.
    Ok(unsafe { st.assume_init() })
}

/// `fstatfs(2)` of a descriptor (query only; O_PATH fds work).
pub fn fstatfs(fd: RawFd) -> io::Result<libc::statfs> {
    let mut s = std::mem::MaybeUninit::<libc::statfs>::uninit();
    // SAFETY: `s` is writable for its size; a bad fd is EBADF.
    cvt(unsafe { libc::fstatfs(fd, s.as_mut_ptr()) })?;
    // SAFETY: fstatfs succeeded, so the kernel filled `s`.
    Ok(unsafe { s.assume_init() })
}

/// `statx(fd, "", AT_EMPTY_PATH, mask)` (query only).
pub fn statx_fd(fd: RawFd, mask: u32) -> io::Result<libc::statx> {
    let mut stx = std::mem::MaybeUninit::<libc::statx>::zeroed();
    // SAFETY: an empty path with AT_EMPTY_PATH names `fd`; `stx` is writable.
    cvt(unsafe {
        libc::statx(
            fd,
            c"".as_ptr(),
            libc::AT_EMPTY_PATH,
            mask,
            stx.as_mut_ptr(),
        )
    })?;
    // SAFETY: zero is a valid statx and statx succeeded.
    Ok(unsafe { stx.assume_init() })
}

/// `fcntl(fd, F_GETFL)`: the open flags (query only).
pub fn get_status_flags(fd: RawFd) -> io::Result<i32> {
    // SAFETY: F_GETFL takes no argument and only reads the descriptor.
    cvt(unsafe { libc::fcntl(fd, libc::F_GETFL) })
}

/// `mkdirat(2)`.
pub fn mkdirat(dir: BorrowedFd<'_>, name: &CStr, mode: u32) -> io::Result<()> {
    // SAFETY: `name` is NUL-terminated.
    cvt(unsafe { libc::mkdirat(dir.as_raw_fd(), name.as_ptr(), mode) }).map(drop)
}

/// `unlinkat(2)` (`AT_REMOVEDIR` in `flags` removes a directory).
pub fn unlinkat(dir: BorrowedFd<'_>, name: &CStr, flags: i32) -> io::Result<()> {
    // SAFETY: `name` is NUL-terminated.
    cvt(unsafe { libc::unlinkat(dir.as_raw_fd(), name.as_ptr(), flags) }).map(drop)
}

/// `renameat2(2)` with `RENAME_*` flags.
pub fn renameat2(
    from_dir: BorrowedFd<'_>,
    from: &CStr,
    to_dir: BorrowedFd<'_>,
    to: &CStr,
    flags: u32,
) -> io::Result<()> {
    // SAFETY: both names are NUL-terminated; the fds are borrowed for the call.
    cvt(unsafe {
        libc::syscall(
            libc::SYS_renameat2,
            from_dir.as_raw_fd(),
            from.as_ptr(),
            to_dir.as_raw_fd(),
            to.as_ptr(),
            flags,
        )
    })
    .map(drop)
}

/// `symlinkat(2)`: `dir/name` pointing at `target`.
pub fn symlinkat(target: &CStr, dir: BorrowedFd<'_>, name: &CStr) -> io::Result<()> {
    // SAFETY: both strings are NUL-terminated.
    cvt(unsafe { libc::symlinkat(target.as_ptr(), dir.as_raw_fd(), name.as_ptr()) }).map(drop)
}

/// `readlinkat(2)` into `buf`; returns the bytes of the target written.
pub fn readlinkat(dir: BorrowedFd<'_>, name: &CStr, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: the kernel writes at most `buf.len()` bytes into `buf`.
    let n = cvt(unsafe {
        libc::readlinkat(
            dir.as_raw_fd(),
            name.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    })?;
    Ok(n as usize)
}

/// `linkat(2)`.
pub fn linkat(
    from_dir: BorrowedFd<'_>,
    from: &CStr,
    to_dir: BorrowedFd<'_>,
    to: &CStr,
    flags: i32,
) -> io::Result<()> {
    // SAFETY: both names are NUL-terminated.
    cvt(unsafe {
        libc::linkat(
            from_dir.as_raw_fd(),
            from.as_ptr(),
            to_dir.as_raw_fd(),
            to.as_ptr(),
            flags,
        )
    })
    .map(drop)
}

/// `mknodat(2)`.
pub fn mknodat(dir: BorrowedFd<'_>, name: &CStr, mode: u32, dev: u64) -> io::Result<()> {
    // SAFETY: `name` is NUL-terminated.
    cvt(unsafe { libc::mknodat(dir.as_raw_fd(), name.as_ptr(), mode, dev) }).map(drop)
}

/// `fchownat(2)`; `u32::MAX` leaves an id unchanged.
pub fn fchownat(
    dir: BorrowedFd<'_>,
    name: &CStr,
    uid: u32,
    gid: u32,
    flags: i32,
) -> io::Result<()> {
    // SAFETY: `name` is NUL-terminated.
    cvt(unsafe { libc::fchownat(dir.as_raw_fd(), name.as_ptr(), uid, gid, flags) }).map(drop)
}

/// `chmod(2)` of a path.
pub fn chmod(path: &CStr, mode: u32) -> io::Result<()> {
    // SAFETY: `path` is NUL-terminated.
    cvt(unsafe { libc::chmod(path.as_ptr(), mode) }).map(drop)
}

/// `utimensat(AT_FDCWD, path, times, flags)`; `times` is [atime, mtime]
/// (`UTIME_OMIT`/`UTIME_NOW` in `tv_nsec` as the kernel takes them).
pub fn utimensat(path: &CStr, times: &[libc::timespec; 2], flags: i32) -> io::Result<()> {
    // SAFETY: `path` is NUL-terminated and `times` holds two timespecs.
    cvt(unsafe { libc::utimensat(libc::AT_FDCWD, path.as_ptr(), times.as_ptr(), flags) }).map(drop)
}

/// `ftruncate(2)`.
pub fn ftruncate(fd: BorrowedFd<'_>, len: i64) -> io::Result<()> {
    // SAFETY: a plain syscall on a borrowed descriptor.
    crate::cvt_retry(|| unsafe { libc::ftruncate(fd.as_raw_fd(), len) }).map(drop)
}

/// `fsync(2)`, or `fdatasync(2)` when `data_only`.
pub fn fsync(fd: BorrowedFd<'_>, data_only: bool) -> io::Result<()> {
    // SAFETY: plain syscalls on a borrowed descriptor.
    cvt(unsafe {
        if data_only {
            libc::fdatasync(fd.as_raw_fd())
        } else {
            libc::fsync(fd.as_raw_fd())
        }
    })
    .map(drop)
}

/// `lseek(2)`; returns the new offset.
pub fn lseek(fd: BorrowedFd<'_>, off: i64, whence: i32) -> io::Result<i64> {
    // SAFETY: a plain syscall on a borrowed descriptor.
    cvt(unsafe { libc::lseek(fd.as_raw_fd(), off, whence) })
}

/// Pages of `[off, off+len)` of `fd` in the page cache (`cachestat(2)`,
/// Linux 6.5+; older kernels answer `ENOSYS`). Query only.
pub fn cachestat(fd: RawFd, off: u64, len: u64) -> io::Result<u64> {
    #[repr(C)]
    struct Range {
        off: u64,
        len: u64,
    }
    #[repr(C)]
    #[derive(Default)]
    struct Stat {
        nr_cache: u64,
        nr_dirty: u64,
        nr_writeback: u64,
        nr_evicted: u64,
        nr_recently_evicted: u64,
    }
    // cachestat's number on x86_64 and aarch64 (the libc crate lacks it there).
    const SYS_CACHESTAT: libc::c_long = 451;
    let range = Range { off, len };
    let mut stat = Stat::default();
    // SAFETY: cachestat reads `range` and writes `stat`, both ours and of
    // the kernel's layout; flags must be 0.
    cvt(unsafe {
        libc::syscall(
            SYS_CACHESTAT,
            fd,
            &range as *const Range,
            &mut stat as *mut Stat,
            0u32,
        )
    })?;
    Ok(stat.nr_cache)
}

/// `mount(2)`.
pub fn mount(
    source: &CStr,
    target: &CStr,
    fstype: &CStr,
    flags: libc::c_ulong,
    data: Option<&CStr>,
) -> io::Result<()> {
    let data = data.map_or(std::ptr::null(), |d| d.as_ptr().cast::<libc::c_void>());
    // SAFETY: every string is NUL-terminated (or `data` is NULL); the
    // kernel only reads them.
    cvt(unsafe {
        libc::mount(
            source.as_ptr(),
            target.as_ptr(),
            fstype.as_ptr(),
            flags,
            data,
        )
    })
    .map(drop)
}

/// `umount2(2)`.
pub fn umount2(target: &CStr, flags: i32) -> io::Result<()> {
    // SAFETY: `target` is NUL-terminated.
    cvt(unsafe { libc::umount2(target.as_ptr(), flags) }).map(drop)
}

/// `fcntl(fd, F_DUPFD_CLOEXEC)`: a new descriptor for the same open file
/// (the original is left as it is).
pub fn dup_cloexec(fd: RawFd) -> io::Result<OwnedFd> {
    // SAFETY: F_DUPFD_CLOEXEC only reads `fd`; a bad one is EBADF.
    let d = cvt(unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 0) })?;
    // SAFETY: the kernel returned a new descriptor that nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(d) })
}

/// An `_IOR` ioctl that reads into `buf`: the size encoded in `request`
/// must equal `buf.len()` and its direction must be read, else `EINVAL`
/// before any call (so the kernel's copy-out, bounded by that size,
/// stays inside `buf`). Returns the ioctl's value.
pub fn ioctl_read(fd: RawFd, request: u32, buf: &mut [u8]) -> io::Result<i32> {
    check_ioctl(request, IOC_READ, buf.len())?;
    // SAFETY: the request's encoded size is exactly `buf.len()` (checked
    // above), so the kernel writes only inside `buf`, which lives across
    // the call.
    cvt(unsafe { libc::ioctl(fd, request as _, buf.as_mut_ptr()) })
}

const IOC_READ: u32 = 2;
const IOC_WRITE: u32 = 1;

/// `EINVAL` unless `request` encodes direction `dir` and a size of `len`.
fn check_ioctl(request: u32, dir: u32, len: usize) -> io::Result<()> {
    let size = ((request >> 16) & 0x3fff) as usize;
    if request >> 30 != dir || size != len {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    Ok(())
}

/// `ioctl(fd, request, buf)` for an `_IOW` request whose encoded size is
/// `buf.len()`: the kernel reads exactly `buf`. Returns the ioctl's value.
pub fn ioctl_write(fd: RawFd, request: u32, buf: &[u8]) -> io::Result<i32> {
    check_ioctl(request, IOC_WRITE, buf.len())?;
    // SAFETY: the request's encoded size is exactly `buf.len()` (checked
    // above), so the kernel reads only inside `buf`, which lives across
    // the call and is never written.
    cvt(unsafe { libc::ioctl(fd, request as _, buf.as_ptr()) })
}

#[cfg(test)]
mod tests {
    #[test]
    fn ioctl_read_refuses_a_buffer_of_another_size_than_encoded() {
        // _IOR('H', 1, char[4096]).
        let req = 0x9000_4801;
        let e = super::ioctl_read(0, req, &mut [0u8; 16]).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EINVAL));
    }

    #[test]
    fn ioctl_write_refuses_a_read_direction_request_or_another_size() {
        // _IOR('H', 1, char[16]) and _IOW('H', 2, char[16]) with 8 bytes.
        let e = super::ioctl_write(0, 0x8010_4801, &[0u8; 16]).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EINVAL));
        let e = super::ioctl_write(0, 0x4010_4802, &[0u8; 8]).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EINVAL));
    }

    #[test]
    fn ioctl_read_refuses_a_write_direction_request() {
        // _IOW('H', 1, char[16]): direction 1.
        let req = 0x4010_4801;
        let e = super::ioctl_read(0, req, &mut [0u8; 16]).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EINVAL));
    }
}
