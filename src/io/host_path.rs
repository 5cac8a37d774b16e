//! Host-memory destinations: cached pages are copied straight out of the page
//! cache (`preadv2(RWF_NOWAIT)`), the rest goes O_DIRECT for the aligned
//! middle and buffered for the unaligned edges, split across workers.

use super::posix::{
    cached_pages, pread_full, pread_once_into, pwrite_all, AlignedBuf, PosixFile, Rw,
};
use super::{run_chunks, Dir, Request};
use crate::config::Config;
use crate::error::{Error, Result};
use crate::lent::LentSpan;
use crate::stats::{self, IoPath};
use std::cell::RefCell;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::sync::atomic::Ordering;

thread_local! {
    static BOUNCE: RefCell<Option<AlignedBuf>> = const { RefCell::new(None) };
}

/// Runs `f` with this thread's aligned bounce buffer of at least `len` bytes.
pub(crate) fn with_bounce<T>(
    len: usize,
    align: usize,
    f: impl FnOnce(&mut AlignedBuf) -> T,
) -> Result<T> {
    BOUNCE.with(|cell| {
        let mut slot = cell.borrow_mut();
        if slot.as_ref().is_none_or(|b| b.len() < len) {
            *slot = Some(AlignedBuf::new(len, align)?);
        }
        match slot.as_mut() {
            Some(b) => Ok(f(b)),
            None => Err(Error::new(
                crate::OpError::InternalError,
                "bounce buffer missing",
            )),
        }
    })
}

fn round_up(x: u64, a: u64) -> u64 {
    x.div_ceil(a) * a
}

fn round_down(x: u64, a: u64) -> u64 {
    x / a * a
}

fn sys(e: std::io::Error, what: &str) -> Error {
    Error::system(e.raw_os_error().unwrap_or(libc::EIO), what)
}

/// Moves one request between host memory and the file.
pub(crate) fn transfer(pf: &PosixFile, req: &Request, config: &Config) -> Result<usize> {
    let parallel = req.size >= config.parallel_threshold()
        && config.get_bool(crate::config::BoolParam::ExecutionParallelIO);
    let chunk = round_up(config.chunk_bytes() as u64, pf.offset_align as u64) as usize;
    run_chunks(
        LentSpan::of_request(req.mem, req.size),
        req.file_offset,
        req.size,
        chunk,
        config.io_threads(),
        parallel,
        &|off, mem| match req.dir {
            Dir::Read => read_range(pf, mem, off),
            Dir::Write => write_range(pf, mem, off),
        },
    )
}

/// Reads `[off, off+dst.len())` into `dst`; returns bytes read (short at EOF).
pub(crate) fn read_range(pf: &PosixFile, dst: &mut [u8], off: u64) -> Result<usize> {
    let len = dst.len();
    let buffered = pf.buffered.as_fd();
    let Some(direct) = pf.direct_borrowed() else {
        let n = pread_full(buffered, dst, off).map_err(|e| sys(e, "pread"))?;
        stats::record_read(IoPath::Buffered, n);
        return Ok(n);
    };
    let mut done = 0usize;
    // Probing an uncached range with RWF_NOWAIT starts buffered readahead of
    // the very bytes O_DIRECT then reads again (a cold read would hit the
    // disk twice), so ask cachestat(2) first: it starts no I/O.
    let cold = cached_pages(buffered.as_raw_fd(), off, len) == Some(0);
    if !cold && pf.nowait_ok.load(Ordering::Relaxed) {
        // Pages already in the page cache: one copy, no device I/O.
        while done < len {
            match pread_once_into(buffered, &mut dst[done..], off + done as u64, true) {
                Ok(Rw::Done(0)) => {
                    stats::record_read(IoPath::Buffered, done);
                    return Ok(done);
                }
                Ok(Rw::Done(n)) => done += n,
                Ok(Rw::WouldBlock) => break,
                Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => {
                    pf.nowait_ok.store(false, Ordering::Relaxed);
                    break;
                }
                Err(e) => return Err(sys(e, "preadv2")),
            }
        }
        if done > 0 {
            stats::record_read(IoPath::Buffered, done);
        }
        if done == len {
            return Ok(done);
        }
    }
    let start = off + done as u64;
    let end = off + len as u64;
    let align = pf.offset_align as u64;
    let a = round_up(start, align).min(end);
    let b = round_down(end, align).max(a);
    let at = |x: u64| (x - off) as usize;
    // Unaligned head: buffered.
    if a > start {
        let want = (a - start) as usize;
        let n =
            pread_full(buffered, &mut dst[at(start)..at(a)], start).map_err(|e| sys(e, "pread"))?;
        stats::record_read(IoPath::Buffered, n);
        done += n;
        if n < want {
            return Ok(done);
        }
    }
    // Aligned middle: O_DIRECT.
    if b > a {
        let want = (b - a) as usize;
        let n = read_direct(pf, direct, buffered, &mut dst[at(a)..at(b)], a)?;
        done += n;
        if n < want {
            return Ok(done);
        }
    }
    // Unaligned tail: buffered.
    if end > b {
        let n = pread_full(buffered, &mut dst[at(b)..], b).map_err(|e| sys(e, "pread"))?;
        stats::record_read(IoPath::Buffered, n);
        done += n;
    }
    Ok(done)
}

/// O_DIRECT read of an aligned range, through a bounce buffer when `dst` is
/// not aligned for DMA; falls back to buffered if the kernel refuses.
fn read_direct(
    pf: &PosixFile,
    direct: BorrowedFd<'_>,
    buffered: BorrowedFd<'_>,
    dst: &mut [u8],
    off: u64,
) -> Result<usize> {
    let r = if (dst.as_ptr() as usize).is_multiple_of(pf.mem_align) {
        pread_full(direct, dst, off)
    } else {
        through_bounce(pf, dst.len(), |bounce, at| {
            let got = pread_full(direct, bounce, off + at as u64)?;
            dst[at..at + got].copy_from_slice(&bounce[..got]);
            Ok(got)
        })?
    };
    direct_or_buffered(pf, Dir::Read, r, || pread_full(buffered, dst, off))
}

/// Moves `len` bytes O_DIRECT through this thread's bounce buffer, for
/// memory not aligned for DMA, chunk by chunk: `chunk(bounce, at)` moves
/// the range's bytes `at..at + bounce.len()` through `bounce` and returns
/// how many it moved. A short count (end of file) ends the range there.
fn through_bounce(
    pf: &PosixFile,
    len: usize,
    mut chunk: impl FnMut(&mut [u8], usize) -> std::io::Result<usize>,
) -> Result<std::io::Result<usize>> {
    with_bounce(len.min(8 << 20), pf.offset_align, |bounce| {
        let bounce = bounce.as_mut_slice();
        let step = bounce.len() / pf.offset_align * pf.offset_align;
        let mut done = 0usize;
        while done < len {
            let n = (len - done).min(step);
            let moved = chunk(&mut bounce[..n], done)?;
            done += moved;
            if moved < n {
                break;
            }
        }
        Ok(done)
    })
}

/// What an O_DIRECT transfer (`r`) came to: its bytes, counted on the
/// direct path; or, when the kernel refused O_DIRECT on this file
/// (EINVAL), O_DIRECT is turned off for the file and the transfer is done
/// again by `buffered`.
fn direct_or_buffered(
    pf: &PosixFile,
    dir: Dir,
    r: std::io::Result<usize>,
    buffered: impl FnOnce() -> std::io::Result<usize>,
) -> Result<usize> {
    let (record, what, call): (fn(IoPath, usize), _, _) = match dir {
        Dir::Read => (stats::record_read, "read", "pread"),
        Dir::Write => (stats::record_write, "write", "pwrite"),
    };
    match r {
        Ok(n) => {
            record(IoPath::Direct, n);
            Ok(n)
        }
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
            pf.disable_direct(&format!("O_DIRECT {what} refused ({e})"));
            let n = buffered().map_err(|e| sys(e, call))?;
            record(IoPath::Buffered, n);
            Ok(n)
        }
        Err(e) => Err(sys(e, &format!("O_DIRECT {call}"))),
    }
}

/// Writes `src` at `[off, off+src.len())`; returns `src.len()` or fails
/// (a short count when a failure came after some bytes went out).
pub(crate) fn write_range(pf: &PosixFile, src: &[u8], off: u64) -> Result<usize> {
    let len = src.len();
    let buffered = pf.buffered.as_fd();
    let Some(direct) = pf.direct_borrowed() else {
        let n = pwrite_all(buffered, src, off).map_err(|e| sys(e, "pwrite"))?;
        stats::record_write(IoPath::Buffered, n);
        return Ok(n);
    };
    let end = off + len as u64;
    let align = pf.offset_align as u64;
    let a = round_up(off, align).min(end);
    let b = round_down(end, align).max(a);
    let at = |x: u64| (x - off) as usize;
    let mut done = 0;
    // Partial blocks go through the page cache, which keeps the rest of the
    // block intact (the kernel reads it in first).
    if a > off {
        let want = (a - off) as usize;
        let n = pwrite_all(buffered, &src[..want], off).map_err(|e| sys(e, "pwrite"))?;
        stats::record_write(IoPath::Buffered, n);
        done += n;
        if n < want {
            return Ok(done);
        }
    }
    if b > a {
        let want = (b - a) as usize;
        let n = write_direct(pf, direct, buffered, &src[at(a)..at(b)], a)?;
        done += n;
        if n < want {
            return Ok(done);
        }
    }
    if end > b {
        let n = pwrite_all(buffered, &src[at(b)..], b).map_err(|e| sys(e, "pwrite"))?;
        stats::record_write(IoPath::Buffered, n);
        done += n;
    }
    Ok(done)
}

/// O_DIRECT write of an aligned range: see [`read_direct`].
fn write_direct(
    pf: &PosixFile,
    direct: BorrowedFd<'_>,
    buffered: BorrowedFd<'_>,
    src: &[u8],
    off: u64,
) -> Result<usize> {
    let r = if (src.as_ptr() as usize).is_multiple_of(pf.mem_align) {
        pwrite_all(direct, src, off)
    } else {
        through_bounce(pf, src.len(), |bounce, at| {
            bounce.copy_from_slice(&src[at..at + bounce.len()]);
            pwrite_all(direct, bounce, off + at as u64)
        })?
    };
    direct_or_buffered(pf, Dir::Write, r, || pwrite_all(buffered, src, off))
}
