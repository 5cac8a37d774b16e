//! The I/O engine: validates a request, picks the path for its destination
//! and splits large requests across the worker pool.

pub mod bounce_pool;
mod host_path;
pub mod posix;
pub mod staged;
pub mod workers;

use crate::buffer;
use crate::config::Config;
use crate::error::{Error, OpError, Result};
use crate::gpu::{self, MemoryKind};
use crate::handle::{FileBackend, RegisteredFile};
use crate::stats::{self, IoPath};
use crate::userspace::UserspaceBuf;

/// Direction of a transfer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dir {
    /// File to memory.
    Read,
    /// Memory to file.
    Write,
}

/// A validated request.
#[derive(Debug, Clone, Copy)]
pub struct Request {
    /// Read or write.
    pub dir: Dir,
    /// First byte of the destination (read) or source (write) memory.
    pub mem: usize,
    /// Bytes to move.
    pub size: usize,
    /// Offset in the file.
    pub file_offset: u64,
}

fn validate(
    base: usize,
    size: usize,
    file_offset: i64,
    buffer_offset: i64,
    reg: Option<&buffer::RegisteredBuffer>,
) -> Result<(usize, u64)> {
    if base == 0 {
        return Err(Error::new(OpError::InvalidValue, "buffer pointer is null"));
    }
    let foff = u64::try_from(file_offset)
        .map_err(|_| Error::new(OpError::InvalidValue, "file offset is negative"))?;
    let boff = usize::try_from(buffer_offset)
        .map_err(|_| Error::new(OpError::InvalidValue, "buffer offset is negative"))?;
    foff.checked_add(size as u64)
        .filter(|end| *end <= i64::MAX as u64)
        .ok_or_else(|| Error::new(OpError::InvalidValue, "file offset + size overflows"))?;
    let mem = base
        .checked_add(boff)
        .filter(|m| m.checked_add(size).is_some())
        .ok_or_else(|| Error::new(OpError::InvalidValue, "buffer offset + size overflows"))?;
    if let Some(r) = reg {
        if boff.checked_add(size).is_none_or(|end| end > r.len) {
            return Err(Error::new(
                OpError::InvalidValue,
                format!(
                    "{size} bytes at buffer offset {boff} pass the end of the {}-byte registered buffer",
                    r.len
                ),
            ));
        }
    }
    Ok((mem, foff))
}

/// Reads into `base + buffer_offset`; returns bytes read (short only at EOF).
pub fn read(
    file: &RegisteredFile,
    base: usize,
    size: usize,
    file_offset: i64,
    buffer_offset: i64,
) -> Result<usize> {
    transfer(Dir::Read, file, base, size, file_offset, buffer_offset)
}

/// Writes from `base + buffer_offset`; returns bytes written.
pub fn write(
    file: &RegisteredFile,
    base: usize,
    size: usize,
    file_offset: i64,
    buffer_offset: i64,
) -> Result<usize> {
    transfer(Dir::Write, file, base, size, file_offset, buffer_offset)
}

fn transfer(
    dir: Dir,
    file: &RegisteredFile,
    base: usize,
    size: usize,
    file_offset: i64,
    buffer_offset: i64,
) -> Result<usize> {
    // One lock for both: this runs on every I/O.
    let (config, reg) = crate::driver::io_context(base)
        .ok_or_else(|| Error::new(OpError::DriverNotInitialized, "the driver is not open"))?;
    let (mem, foff) = validate(base, size, file_offset, buffer_offset, reg.as_deref())?;
    if size == 0 {
        return Ok(0);
    }
    let req = Request {
        dir,
        mem,
        size,
        file_offset: foff,
    };
    let kind = match &reg {
        Some(r) => r.info.kind,
        None => gpu::classify(mem).kind,
    };
    match &file.backend {
        FileBackend::Posix(pf) => match kind {
            MemoryKind::Host | MemoryKind::PinnedHost | MemoryKind::Managed => {
                host_path::transfer(pf, &req, &config)
            }
            MemoryKind::Device => staged::transfer(pf, &req, &config),
        },
        FileBackend::Userspace(fs) => {
            userspace_transfer(fs.as_ref(), &req, reg.as_deref(), kind, &config)
        }
    }
}

fn userspace_transfer(
    fs: &dyn crate::userspace::UserspaceFs,
    req: &Request,
    reg: Option<&buffer::RegisteredBuffer>,
    kind: MemoryKind,
    config: &Config,
) -> Result<usize> {
    let host_ok = kind != MemoryKind::Device;
    let buf = match reg.and_then(|r| r.rdma_desc.get().map(|d| (r, d))) {
        Some((_, desc)) => UserspaceBuf::Rdma {
            desc: desc.clone(),
            addr: req.mem as u64,
            len: req.size,
            host_ptr: host_ok.then_some(req.mem as *mut u8),
        },
        None if host_ok => UserspaceBuf::Host {
            ptr: req.mem as *mut u8,
            len: req.size,
        },
        None => return staged::userspace_transfer(fs, req, config),
    };
    let n = match req.dir {
        Dir::Read => fs.read(buf, req.file_offset)?,
        Dir::Write => fs.write(buf, req.file_offset)?,
    };
    if n > req.size {
        return Err(Error::new(
            OpError::InternalError,
            format!(
                "userspace filesystem reported {n} bytes for a {}-byte request",
                req.size
            ),
        ));
    }
    match req.dir {
        Dir::Read => stats::record_read(IoPath::Remote, n),
        Dir::Write => stats::record_write(IoPath::Remote, n),
    }
    Ok(n)
}

/// `[off, off+size)` cut at multiples of `chunk` (file-offset boundaries,
/// so only the request's own edges can be unaligned).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Chunks {
    off: u64,
    end: u64,
    chunk: u64,
    first: u64,
}

impl Chunks {
    /// The chunks of a non-empty range.
    pub(crate) fn new(off: u64, size: usize, chunk: usize) -> Chunks {
        let chunk = chunk.max(1) as u64;
        Chunks {
            off,
            end: off + size as u64,
            chunk,
            first: off / chunk,
        }
    }

    /// How many chunks there are.
    pub(crate) fn count(&self) -> usize {
        ((self.end - 1) / self.chunk - self.first + 1) as usize
    }

    /// Chunk `i`: (file offset, length, offset from the request's start).
    pub(crate) fn get(&self, i: usize) -> (u64, usize, usize) {
        let k = self.first + i as u64;
        let s = (k * self.chunk).max(self.off);
        let e = ((k + 1) * self.chunk).min(self.end);
        (s, (e - s) as usize, (s - self.off) as usize)
    }
}

/// One slot per chunk, filled by whichever worker moved it.
pub(crate) type ChunkResults = Vec<std::sync::Mutex<Option<Result<usize>>>>;

/// Empty result slots for `chunks`.
pub(crate) fn chunk_results(chunks: &Chunks) -> ChunkResults {
    (0..chunks.count())
        .map(|_| std::sync::Mutex::new(None))
        .collect()
}

/// What a request reports: the contiguous prefix of bytes moved, stopping
/// at the first short or missing chunk (so what is reported is exactly
/// what is in place), or the first error when nothing moved.
pub(crate) fn contiguous_prefix(chunks: &Chunks, results: ChunkResults) -> Result<usize> {
    let mut total = 0;
    for (i, slot) in results.into_iter().enumerate() {
        let (_, len, _) = chunks.get(i);
        match slot.into_inner().unwrap_or_else(|p| p.into_inner()) {
            Some(Ok(got)) => {
                total += got;
                if got < len {
                    break;
                }
            }
            Some(Err(e)) if total == 0 => return Err(e),
            _ => break,
        }
    }
    Ok(total)
}

/// Splits `[off, off+size)` at multiples of `chunk` and runs `each(index,
/// chunk_offset, chunk_len, mem_offset)`, on the worker pool when
/// `parallel`; returns [`contiguous_prefix`] of what moved.
pub(crate) fn run_chunks(
    off: u64,
    size: usize,
    chunk: usize,
    threads: usize,
    parallel: bool,
    each: &(dyn Fn(usize, u64, usize, usize) -> Result<usize> + Sync),
) -> Result<usize> {
    let chunks = Chunks::new(off, size, chunk.max(4096));
    let n = chunks.count();
    let results = chunk_results(&chunks);
    let next = std::sync::atomic::AtomicUsize::new(0);
    let stop = std::sync::atomic::AtomicBool::new(false);
    let work = |_worker: usize| loop {
        if stop.load(std::sync::atomic::Ordering::Relaxed) {
            break;
        }
        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if i >= n {
            break;
        }
        let (s, len, m) = chunks.get(i);
        let r = each(i, s, len, m);
        if !matches!(r, Ok(got) if got == len) {
            // A short chunk (EOF) or an error: later chunks are moot.
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
        }
        *results[i].lock().unwrap_or_else(|p| p.into_inner()) = Some(r);
    };
    if n == 1 || !parallel || threads <= 1 {
        work(0);
    } else {
        workers::run_parallel(threads.min(n), &work)?;
    }
    contiguous_prefix(&chunks, results)
}
