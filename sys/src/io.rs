//! Positional reads and writes.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, RawFd};

/// The kernel's cap on one read/write.
pub const MAX_RW_COUNT: usize = 0x7fff_f000;

fn off_t(off: u64) -> io::Result<libc::off_t> {
    libc::off_t::try_from(off).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

/// One `pread(2)` into `buf`, `EINTR` retried; 0 at end of file.
pub fn pread(fd: BorrowedFd<'_>, buf: &mut [u8], off: u64) -> io::Result<usize> {
    let off = off_t(off)?;
    let len = buf.len().min(MAX_RW_COUNT);
    // SAFETY: the kernel writes at most `len <= buf.len()` bytes into `buf`.
    let n = crate::cvt_retry(|| unsafe {
        libc::pread(fd.as_raw_fd(), buf.as_mut_ptr().cast(), len, off)
    })?;
    Ok(n as usize)
}

/// Reads until `buf` is full or end of file; returns the bytes read.
pub fn pread_full(fd: BorrowedFd<'_>, buf: &mut [u8], off: u64) -> io::Result<usize> {
    let mut done = 0;
    while done < buf.len() {
        match pread(fd, &mut buf[done..], off + done as u64)? {
            0 => break,
            n => done += n,
        }
    }
    Ok(done)
}

/// Writes all of `data` at `off`. A failure after some bytes went out
/// returns the count written so far (the caller reports a short write);
/// a failure before any is the error.
pub fn pwrite_all(fd: BorrowedFd<'_>, data: &[u8], off: u64) -> io::Result<usize> {
    // SAFETY: `data` is readable for its length for the whole call.
    unsafe { pwrite_full_raw(fd.as_raw_fd(), data.as_ptr(), data.len(), off) }
}

/// Outcome of one positional system call.
pub enum Rw {
    /// Bytes moved (0 = end of file for reads).
    Done(usize),
    /// RWF_NOWAIT: the data is not in the page cache.
    WouldBlock,
}

/// One `preadv2(2)` into raw memory, `EINTR` retried; with `nowait`,
/// `RWF_NOWAIT` (uncached data is [`Rw::WouldBlock`]).
///
/// # Safety
/// `buf` must be valid for `len` writable bytes, and `fd` must stay open
/// for the call.
pub unsafe fn pread_once(
    fd: RawFd,
    buf: *mut u8,
    len: usize,
    off: u64,
    nowait: bool,
) -> io::Result<Rw> {
    let len = len.min(MAX_RW_COUNT);
    let off = off_t(off)?;
    loop {
        let iov = libc::iovec {
            iov_base: buf.cast(),
            iov_len: len,
        };
        let flags = if nowait { libc::RWF_NOWAIT } else { 0 };
        // SAFETY: the caller guarantees buf..buf+len is writable.
        let r = unsafe { libc::preadv2(fd, &iov, 1, off, flags) };
        if r >= 0 {
            return Ok(Rw::Done(r as usize));
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::EAGAIN) if nowait => return Ok(Rw::WouldBlock),
            _ => return Err(e),
        }
    }
}

/// One `preadv2(2)` into `buf`, `EINTR` retried; with `nowait`,
/// `RWF_NOWAIT` (uncached data is [`Rw::WouldBlock`]).
pub fn pread_once_into(
    fd: BorrowedFd<'_>,
    buf: &mut [u8],
    off: u64,
    nowait: bool,
) -> io::Result<Rw> {
    // SAFETY: `buf` is writable for its length for the call, and the
    // borrowed fd stays open for it.
    unsafe { pread_once(fd.as_raw_fd(), buf.as_mut_ptr(), buf.len(), off, nowait) }
}

/// Reads into raw memory until `len` bytes or end of file; returns the
/// bytes read.
///
/// # Safety
/// As [`pread_once`].
pub unsafe fn pread_full_raw(fd: RawFd, buf: *mut u8, len: usize, off: u64) -> io::Result<usize> {
    let mut done = 0;
    while done < len {
        // SAFETY: buf+done..buf+len is inside the caller's range.
        match unsafe { pread_once(fd, buf.add(done), len - done, off + done as u64, false)? } {
            Rw::Done(0) => break,
            Rw::Done(n) => done += n,
            // A read without RWF_NOWAIT never reports EAGAIN as would-block.
            Rw::WouldBlock => return Err(io::Error::from_raw_os_error(libc::EAGAIN)),
        }
    }
    Ok(done)
}

/// Writes `len` bytes from raw memory (see [`pwrite_all`] for short writes).
///
/// # Safety
/// `buf` must be valid for `len` readable bytes, and `fd` must stay open
/// for the call.
pub unsafe fn pwrite_full_raw(
    fd: RawFd,
    buf: *const u8,
    len: usize,
    off: u64,
) -> io::Result<usize> {
    let mut done = 0;
    while done < len {
        let n = (len - done).min(MAX_RW_COUNT);
        let at = off_t(off + done as u64)?;
        // SAFETY: the caller guarantees the range is readable.
        let r = unsafe { libc::pwrite(fd, buf.add(done).cast(), n, at) };
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            if done > 0 {
                return Ok(done);
            }
            return Err(e);
        }
        if r == 0 {
            return Err(io::Error::from_raw_os_error(libc::EIO));
        }
        done += r as usize;
    }
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn pwrite_all_then_pread_full_round_trips_and_stops_at_end_of_file() {
        let f = tempfile_in_tmp();
        let data: Vec<u8> = (0..100_000u32).map(|i| i as u8).collect();
        assert_eq!(pwrite_all(f.as_fd(), &data, 10).unwrap(), data.len());
        let mut back = vec![0u8; data.len() + 50];
        let n = pread_full(f.as_fd(), &mut back, 10).unwrap();
        assert_eq!(n, data.len());
        assert_eq!(&back[..n], &data[..]);
    }

    #[test]
    fn an_offset_beyond_off_t_is_einval() {
        let f = tempfile_in_tmp();
        let e = pread(f.as_fd(), &mut [0u8; 4], u64::MAX).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EINVAL));
    }

    fn tempfile_in_tmp() -> std::fs::File {
        let p = std::env::temp_dir().join(format!("hipfs-sys-io-{}", crate::rand::u64().unwrap()));
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&p)
            .unwrap();
        std::fs::remove_file(&p).unwrap();
        f
    }
}
