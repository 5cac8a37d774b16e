//! A registered local file: an O_DIRECT fd and a buffered fd, the DIO
//! alignment, and the system-call loops (EINTR retried, short only at EOF).

use crate::config::Config;
use crate::error::{Error, OpError, Result};
use crate::stats;
use std::ffi::CString;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};

pub use hipfs_sys::io::{pread_full, pread_once_into, pwrite_all};
pub use hipfs_sys::io::{Rw, MAX_RW_COUNT};
use std::sync::atomic::{AtomicBool, Ordering};

/// A local file opened for the direct path.
#[derive(Debug)]
pub struct PosixFile {
    /// Through the page cache; always present.
    pub buffered: OwnedFd,
    /// O_DIRECT; `None` when the direct path is off for this file.
    pub direct: Option<OwnedFd>,
    /// File-offset and length alignment O_DIRECT needs.
    pub offset_align: usize,
    /// Memory alignment O_DIRECT needs.
    pub mem_align: usize,
    /// Filesystem type name (ext4, xfs, tmpfs, fuse, ...).
    pub fs_name: &'static str,
    /// The fd's access mode (`O_RDONLY`, `O_WRONLY` or `O_RDWR`).
    pub access: i32,
    /// Whether `preadv2(RWF_NOWAIT)` may be used to serve cached pages.
    pub nowait_ok: AtomicBool,
    fallback_logged: AtomicBool,
    /// Set after a direct call failed with EINVAL: the handle goes buffered.
    direct_broken: AtomicBool,
}

fn reopen(fd: RawFd, flags: i32) -> std::io::Result<OwnedFd> {
    let path = CString::new(format!("/proc/self/fd/{fd}")).expect("no NUL in a formatted path");
    // Flags never include O_CREAT, so no mode is read.
    hipfs_sys::fs::open(&path, flags, 0)
}

fn fs_name(magic: i64) -> &'static str {
    match magic {
        0xEF53 => "ext4",
        0x5846_5342 => "xfs",
        0x9123_683E => "btrfs",
        0x0102_1994 => "tmpfs",
        0x6969 => "nfs",
        0x6573_5546 => "fuse",
        0x794C_7630 => "overlay",
        0x0BD0_0BD0 => "lustre",
        0x1983_0326 => "beegfs",
        0x4750_4653 => "gpfs",
        0x9fa0 => "proc",
        0x6265_6572 => "sysfs",
        0x0102_1997 => "9p",
        0x5346_4846 => "wekafs",
        _ => "unknown",
    }
}

impl PosixFile {
    /// Whether the fd's access mode allows `dir` (cuFile and hipFile answer
    /// a read of a write-only file with `InvalidFileOpenFlag`, not EBADF).
    pub fn allows(&self, dir: super::Dir) -> bool {
        match dir {
            super::Dir::Read => self.access != libc::O_WRONLY,
            super::Dir::Write => self.access != libc::O_RDONLY,
        }
    }

    /// Opens the fds the direct path needs for the user's `fd`.
    pub fn open(fd: RawFd, config: &Config) -> Result<PosixFile> {
        let st = match hipfs_sys::fs::fstat(fd) {
            Ok(st) => st,
            Err(e) if e.raw_os_error() == Some(libc::EBADF) => {
                return Err(Error::new(
                    OpError::InvalidValue,
                    format!("fd {fd} is not an open file descriptor"),
                ));
            }
            Err(e) => return Err(os_error(e, format!("fstat fd {fd}"))),
        };
        let fmt = st.st_mode & libc::S_IFMT;
        if fmt != libc::S_IFREG && fmt != libc::S_IFBLK {
            let what = match fmt {
                libc::S_IFDIR => "a directory",
                libc::S_IFSOCK => "a socket",
                libc::S_IFIFO => "a pipe",
                libc::S_IFCHR => "a character device",
                _ => "not a regular file",
            };
            return Err(Error::new(
                OpError::InvalidFileType,
                format!("fd {fd} is {what}; only regular files and block devices work"),
            ));
        }
        let fl = hipfs_sys::fs::get_status_flags(fd)
            .map_err(|e| os_error(e, format!("fcntl fd {fd}")))?;
        if fl & libc::O_PATH != 0 {
            return Err(Error::new(
                OpError::InvalidFileOpenFlag,
                "O_PATH descriptors cannot do I/O",
            ));
        }
        if fl & libc::O_APPEND != 0 {
            return Err(Error::new(
                OpError::InvalidFileOpenFlag,
                "O_APPEND ignores file offsets; open without it",
            ));
        }
        let acc = fl & libc::O_ACCMODE;
        let magic = hipfs_sys::fs::fstatfs(fd).map_or(0, |sfs| sfs.f_type);
        let fs_name = fs_name(magic);
        let buffered = match reopen(fd, acc) {
            Ok(f) => f,
            Err(_) => hipfs_sys::fs::dup_cloexec(fd).map_err(|e| os_error(e, "dup"))?,
        };
        let mut file = PosixFile {
            buffered,
            direct: None,
            offset_align: 4096,
            mem_align: 4096,
            fs_name,
            access: acc,
            nowait_ok: AtomicBool::new(config.page_cache_probe),
            fallback_logged: AtomicBool::new(false),
            direct_broken: AtomicBool::new(false),
        };
        let refuse = |why: String| -> Result<()> {
            if config.allow_compat() {
                file.log_fallback(&why);
                Ok(())
            } else {
                Err(Error::new(
                    OpError::IoNotSupported,
                    format!(
                        "{why}, and compat mode is not allowed (HIPFILE_ALLOW_COMPAT_MODE=false)"
                    ),
                ))
            }
        };
        if config.force_compat() {
            file.log_fallback("compat mode is forced (HIPFILE_FORCE_COMPAT_MODE)");
            return Ok(file);
        }
        if config.unsupported_filesystems.iter().any(|f| f == fs_name) {
            refuse(format!(
                "filesystem {fs_name} is listed in HIPFILE_UNSUPPORTED_FILE_SYSTEMS"
            ))?;
            return Ok(file);
        }
        match reopen(fd, acc | libc::O_DIRECT) {
            Ok(d) => {
                let (off, mem) = dio_alignment(d.as_raw_fd());
                file.offset_align = off;
                file.mem_align = mem;
                file.direct = Some(d);
            }
            Err(e) => refuse(format!("{fs_name} refuses O_DIRECT ({e})"))?,
        }
        Ok(file)
    }

    /// Logs, once per handle, that this handle does not take the direct path.
    pub fn log_fallback(&self, why: &str) {
        if !self.fallback_logged.swap(true, Ordering::Relaxed) {
            stats::record_fallback();
            log::info!("hipfs: handle on {} uses buffered I/O: {why}", self.fs_name);
        }
    }

    /// The O_DIRECT fd when the direct path is usable.
    pub fn direct_fd(&self) -> Option<RawFd> {
        if self.direct_broken.load(Ordering::Relaxed) {
            return None;
        }
        self.direct.as_ref().map(|d| d.as_raw_fd())
    }

    /// The O_DIRECT fd, borrowed, when the direct path is usable.
    pub fn direct_borrowed(&self) -> Option<BorrowedFd<'_>> {
        if self.direct_broken.load(Ordering::Relaxed) {
            return None;
        }
        self.direct.as_ref().map(|d| d.as_fd())
    }

    /// Turns the direct path off after the kernel refused a direct call.
    pub fn disable_direct(&self, why: &str) {
        self.direct_broken.store(true, Ordering::Relaxed);
        self.log_fallback(why);
    }
}

/// `statx(STATX_DIOALIGN)`; 4096 when the filesystem does not say.
fn dio_alignment(fd: RawFd) -> (usize, usize) {
    match hipfs_sys::fs::statx_fd(fd, libc::STATX_DIOALIGN) {
        Ok(stx) if stx.stx_mask & libc::STATX_DIOALIGN != 0 && stx.stx_dio_offset_align > 0 => {
            let off = stx.stx_dio_offset_align as usize;
            let mem = (stx.stx_dio_mem_align as usize).max(1);
            (off.next_power_of_two(), mem.next_power_of_two())
        }
        _ => (4096, 4096),
    }
}

/// Aligned bounce memory for O_DIRECT (the syscall layer's type).
pub use hipfs_sys::mem::AlignedBuf;

/// `std::io::Error` from the syscall layer as a system error with context.
fn os_error(e: std::io::Error, context: impl Into<String>) -> Error {
    Error::system(e.raw_os_error().unwrap_or(libc::EIO), context)
}

/// Pages of `[off, off+len)` in the page cache, or `None` where the kernel
/// lacks `cachestat(2)` (before Linux 6.5).
pub fn cached_pages(fd: i32, off: u64, len: usize) -> Option<u64> {
    static MISSING: AtomicBool = AtomicBool::new(false);
    if MISSING.load(Ordering::Relaxed) {
        return None;
    }
    match hipfs_sys::fs::cachestat(fd, off, len as u64) {
        Ok(pages) => Some(pages),
        Err(e) => {
            if e.raw_os_error() == Some(libc::ENOSYS) {
                MISSING.store(true, Ordering::Relaxed);
            }
            None
        }
    }
}
