//! A registered local file: an O_DIRECT fd and a buffered fd, the DIO
//! alignment, and the system-call loops (EINTR retried, short only at EOF).

use crate::config::Config;
use crate::error::{Error, OpError, Result};
use crate::stats;
use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};

/// The kernel's cap on one read/write.
pub const MAX_RW_COUNT: usize = 0x7fff_f000;

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
    /// Whether `preadv2(RWF_NOWAIT)` may be used to serve cached pages.
    pub nowait_ok: AtomicBool,
    fallback_logged: AtomicBool,
    /// Set after a direct call failed with EINVAL: the handle goes buffered.
    direct_broken: AtomicBool,
}

fn reopen(fd: RawFd, flags: i32) -> std::io::Result<OwnedFd> {
    let path = CString::new(format!("/proc/self/fd/{fd}")).expect("no NUL in a formatted path");
    // SAFETY: path is NUL-terminated; flags never include O_CREAT, so no mode is read.
    let raw = unsafe { libc::open(path.as_ptr(), flags | libc::O_CLOEXEC) };
    if raw < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: raw is a fresh fd owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
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
    /// Opens the fds the direct path needs for the user's `fd`.
    pub fn open(fd: RawFd, config: &Config) -> Result<PosixFile> {
        // SAFETY: fstat writes into the zeroed struct we own.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: st is a valid out-pointer.
        if unsafe { libc::fstat(fd, &mut st) } != 0 {
            let e = Error::last_os(format!("fstat fd {fd}"));
            if e.errno() == Some(libc::EBADF) {
                return Err(Error::new(
                    OpError::InvalidValue,
                    format!("fd {fd} is not an open file descriptor"),
                ));
            }
            return Err(e);
        }
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
        // SAFETY: F_GETFL on a valid fd has no memory effects.
        let fl = unsafe { libc::fcntl(fd, libc::F_GETFL) };
        if fl < 0 {
            return Err(Error::last_os(format!("fcntl fd {fd}")));
        }
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
        // SAFETY: fstatfs writes into the zeroed struct we own.
        let mut sfs: libc::statfs = unsafe { std::mem::zeroed() };
        // SAFETY: sfs is a valid out-pointer.
        let magic = if unsafe { libc::fstatfs(fd, &mut sfs) } == 0 {
            sfs.f_type as i64
        } else {
            0
        };
        let fs_name = fs_name(magic);
        let buffered = match reopen(fd, acc) {
            Ok(f) => f,
            Err(_) => {
                // SAFETY: dup of a valid fd.
                let d = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 0) };
                if d < 0 {
                    return Err(Error::last_os("dup"));
                }
                // SAFETY: d is a fresh fd.
                unsafe { OwnedFd::from_raw_fd(d) }
            }
        };
        let mut file = PosixFile {
            buffered,
            direct: None,
            offset_align: 4096,
            mem_align: 4096,
            fs_name,
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

    /// Turns the direct path off after the kernel refused a direct call.
    pub fn disable_direct(&self, why: &str) {
        self.direct_broken.store(true, Ordering::Relaxed);
        self.log_fallback(why);
    }
}

/// `statx(STATX_DIOALIGN)`; 4096 when the filesystem does not say.
fn dio_alignment(fd: RawFd) -> (usize, usize) {
    // SAFETY: zeroed statx is a valid out-buffer.
    let mut stx: libc::statx = unsafe { std::mem::zeroed() };
    let empty = c"";
    // SAFETY: empty path with AT_EMPTY_PATH refers to fd; stx is a valid out-pointer.
    let rc = unsafe {
        libc::statx(
            fd,
            empty.as_ptr(),
            libc::AT_EMPTY_PATH,
            libc::STATX_DIOALIGN,
            &mut stx,
        )
    };
    if rc == 0 && stx.stx_mask & libc::STATX_DIOALIGN != 0 && stx.stx_dio_offset_align > 0 {
        let off = stx.stx_dio_offset_align as usize;
        let mem = (stx.stx_dio_mem_align as usize).max(1);
        (off.next_power_of_two(), mem.next_power_of_two())
    } else {
        (4096, 4096)
    }
}

/// Outcome of one positional system call.
pub enum Rw {
    /// Bytes moved (0 = end of file for reads).
    Done(usize),
    /// RWF_NOWAIT: the data is not in the page cache.
    WouldBlock,
}

/// One `pread`/`preadv2`, EINTR retried.
///
/// # Safety
/// `buf` must be valid for `len` writable bytes.
pub unsafe fn pread_once(
    fd: RawFd,
    buf: *mut u8,
    len: usize,
    off: u64,
    nowait: bool,
) -> std::io::Result<Rw> {
    let len = len.min(MAX_RW_COUNT);
    loop {
        let iov = libc::iovec {
            iov_base: buf.cast(),
            iov_len: len,
        };
        let flags = if nowait { libc::RWF_NOWAIT } else { 0 };
        // SAFETY: the caller guarantees buf..buf+len is writable.
        let r = unsafe { libc::preadv2(fd, &iov, 1, off as libc::off_t, flags) };
        if r >= 0 {
            return Ok(Rw::Done(r as usize));
        }
        let e = std::io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::EAGAIN) if nowait => return Ok(Rw::WouldBlock),
            _ => return Err(e),
        }
    }
}

/// Reads until `len` bytes or end of file; returns the bytes read.
///
/// # Safety
/// `buf` must be valid for `len` writable bytes.
pub unsafe fn pread_full(fd: RawFd, buf: *mut u8, len: usize, off: u64) -> std::io::Result<usize> {
    let mut done = 0;
    while done < len {
        // SAFETY: buf+done..buf+len is inside the caller's range.
        match unsafe { pread_once(fd, buf.add(done), len - done, off + done as u64, false)? } {
            Rw::Done(0) => break,
            Rw::Done(n) => done += n,
            Rw::WouldBlock => unreachable!("blocking read cannot report EAGAIN as would-block"),
        }
    }
    Ok(done)
}

/// Writes all `len` bytes (or fails); returns `len`.
///
/// # Safety
/// `buf` must be valid for `len` readable bytes.
pub unsafe fn pwrite_full(
    fd: RawFd,
    buf: *const u8,
    len: usize,
    off: u64,
) -> std::io::Result<usize> {
    let mut done = 0;
    while done < len {
        let n = (len - done).min(MAX_RW_COUNT);
        // SAFETY: the caller guarantees the range is readable.
        let r = unsafe {
            libc::pwrite(
                fd,
                buf.add(done).cast(),
                n,
                (off + done as u64) as libc::off_t,
            )
        };
        if r < 0 {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            if done > 0 {
                return Ok(done);
            }
            return Err(e);
        }
        if r == 0 {
            return Err(std::io::Error::from_raw_os_error(libc::EIO));
        }
        done += r as usize;
    }
    Ok(done)
}

/// Returns a fresh aligned allocation for O_DIRECT bounce use.
pub struct AlignedBuf {
    ptr: *mut u8,
    layout: std::alloc::Layout,
}

// SAFETY: AlignedBuf owns its allocation exclusively.
unsafe impl Send for AlignedBuf {}

impl AlignedBuf {
    /// `len` bytes aligned to `align` (a power of two).
    pub fn new(len: usize, align: usize) -> Result<AlignedBuf> {
        let layout = std::alloc::Layout::from_size_align(len.max(1), align.max(4096))
            .map_err(|e| Error::new(OpError::InvalidValue, format!("bounce layout: {e}")))?;
        // SAFETY: layout has non-zero size.
        let ptr = unsafe { std::alloc::alloc(layout) };
        if ptr.is_null() {
            return Err(Error::new(
                OpError::InternalError,
                "out of memory for bounce buffer",
            ));
        }
        Ok(AlignedBuf { ptr, layout })
    }

    /// The memory.
    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        self.ptr
    }

    /// Its length.
    pub fn len(&self) -> usize {
        self.layout.size()
    }

    /// Whether it is empty (never: at least one byte is allocated).
    pub fn is_empty(&self) -> bool {
        false
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // SAFETY: ptr came from alloc with this layout.
        unsafe { std::alloc::dealloc(self.ptr, self.layout) };
    }
}

/// Pages of `[off, off+len)` in the page cache, or `None` where the kernel
/// lacks `cachestat(2)` (before Linux 6.5).
pub fn cached_pages(fd: i32, off: u64, len: usize) -> Option<u64> {
    static MISSING: AtomicBool = AtomicBool::new(false);
    if MISSING.load(Ordering::Relaxed) {
        return None;
    }
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
    let range = Range {
        off,
        len: len as u64,
    };
    let mut stat = Stat::default();
    // SAFETY: cachestat reads `range` and writes `stat`, both ours and of
    // the kernel's layout; flags must be 0.
    let r = unsafe {
        libc::syscall(
            SYS_CACHESTAT,
            fd,
            &range as *const Range,
            &mut stat as *mut Stat,
            0u32,
        )
    };
    if r != 0 {
        if std::io::Error::last_os_error().raw_os_error() == Some(libc::ENOSYS) {
            MISSING.store(true, Ordering::Relaxed);
        }
        return None;
    }
    Some(stat.nr_cache)
}
