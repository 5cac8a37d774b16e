//! The I/O engine: validates a request, picks the path for its destination
//! and splits large requests across the worker pool.
//!
//! The engine is pure over its arguments: it is handed the file's backend,
//! what is known about the memory ([`MemTarget`]) and the configuration,
//! and never reaches back into the driver's registry, so it can be used and
//! tested without an open driver.

pub mod bounce_pool;
mod host_path;
pub mod posix;
pub mod readahead;
pub mod staged;
pub mod workers;

use crate::config::Config;
use crate::error::{Error, OpError, Result};
use crate::gpu::{self, MemoryKind};
use crate::lent::{LentChunks, LentSpan};
use crate::stats::{self, IoPath};
use crate::userspace::{UserspaceBuf, UserspaceFs, UserspaceMem};
use posix::PosixFile;
use std::sync::Arc;

/// How a registered file moves its bytes.
pub enum FileBackend {
    /// A local file: O_DIRECT and buffered fds.
    Posix(PosixFile),
    /// A userspace filesystem's file.
    Userspace(UserspaceFile),
}

/// A userspace filesystem's file and what the engine keeps for it.
pub struct UserspaceFile {
    /// The filesystem serving it.
    pub fs: Arc<dyn UserspaceFs>,
    /// Sequential readahead of staged reads.
    ahead: readahead::Readahead,
}

impl FileBackend {
    /// The backend of a file `fs` serves.
    pub fn userspace(fs: Arc<dyn UserspaceFs>) -> FileBackend {
        FileBackend::Userspace(UserspaceFile {
            ahead: readahead::Readahead::new(&*fs),
            fs,
        })
    }
}

/// What the engine knows about the memory of one I/O: taken from the
/// buffer's registration when there is one.
#[derive(Debug, Clone, Default)]
pub struct MemTarget {
    /// The memory's kind; `None`: classify the address at I/O time.
    pub kind: Option<MemoryKind>,
    /// The registered length from the buffer's base (bounds the request).
    pub registered_len: Option<usize>,
    /// The RDMA descriptor of the registration, when a transport gave it one.
    pub rdma_desc: Option<String>,
}

impl MemTarget {
    /// Memory that is not registered with the driver.
    pub fn unregistered() -> MemTarget {
        MemTarget::default()
    }
}

/// One I/O as the API gives it: `size` bytes at `file_offset`, to or from
/// `base + buffer_offset`.
#[derive(Debug, Clone, Copy)]
pub struct Span {
    /// Address of the buffer's first byte.
    pub base: usize,
    /// Bytes to move.
    pub size: usize,
    /// Where in the file.
    pub file_offset: i64,
    /// Where in the buffer, from `base`.
    pub buffer_offset: i64,
}

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
    registered_len: Option<usize>,
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
    if let Some(len) = registered_len {
        if boff.checked_add(size).is_none_or(|end| end > len) {
            return Err(Error::new(
                OpError::InvalidValue,
                format!(
                    "{size} bytes at buffer offset {boff} pass the end of the {len}-byte registered buffer"
                ),
            ));
        }
    }
    Ok((mem, foff))
}

/// Moves one request in `dir`.
pub(crate) fn transfer(
    dir: Dir,
    backend: &FileBackend,
    target: &MemTarget,
    span: Span,
    config: &Config,
) -> Result<usize> {
    let (mem, foff) = validate(
        span.base,
        span.size,
        span.file_offset,
        span.buffer_offset,
        target.registered_len,
    )?;
    if span.size == 0 {
        return Ok(0);
    }
    let req = Request {
        dir,
        mem,
        size: span.size,
        file_offset: foff,
    };
    let kind = target.kind.unwrap_or_else(|| gpu::classify(mem).kind);
    match backend {
        FileBackend::Posix(pf) if cufile_rules() && !pf.allows(req.dir) => Err(Error::new(
            OpError::InvalidFileOpenFlag,
            match req.dir {
                Dir::Read => "the file was opened write-only: it cannot be read",
                Dir::Write => "the file was opened read-only: it cannot be written",
            },
        )),
        FileBackend::Posix(pf) => match kind {
            MemoryKind::Host | MemoryKind::PinnedHost | MemoryKind::Managed => {
                host_path::transfer(pf, &req, config)
            }
            MemoryKind::Device => staged::transfer(pf, &req, config),
        },
        FileBackend::Userspace(file) => {
            let r = userspace_transfer(file, &req, target.rdma_desc.as_deref(), kind, config);
            if req.dir == Dir::Write {
                // Bytes fetched ahead before this write ended (before it
                // or while it ran) are not used after it.
                file.ahead.note_write();
            }
            r
        }
    }
}

fn userspace_transfer(
    file: &UserspaceFile,
    req: &Request,
    rdma_desc: Option<&str>,
    kind: MemoryKind,
    config: &Config,
) -> Result<usize> {
    let fs = &*file.fs;
    let host_ok = kind != MemoryKind::Device;
    // The request's memory was validated against its buffer by the API
    // face that made it (see crate::lent).
    // Device memory the filesystem can place reads in (RDMA into a dmabuf
    // or peer-memory registration) needs no staging; asked once.
    let device_ok = !host_ok && req.dir == Dir::Read && fs.places_device(req.mem, req.size);
    let rdma_desc = rdma_desc.filter(|_| host_ok || device_ok);
    let buf = UserspaceBuf::vouched(match rdma_desc {
        Some(desc) => UserspaceMem::Rdma {
            desc: desc.to_string(),
            addr: req.mem as u64,
            len: req.size,
            host_ptr: host_ok.then_some(req.mem as *mut u8),
        },
        None if host_ok => UserspaceMem::Host {
            ptr: req.mem as *mut u8,
            len: req.size,
        },
        None if device_ok => UserspaceMem::Rdma {
            desc: String::new(),
            addr: req.mem as u64,
            len: req.size,
            host_ptr: None,
        },
        None => return staged::userspace_transfer(file, req, config),
    });
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

pub(crate) use crate::lent::Chunks;

static CUFILE_RULES: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Makes this process's library answer as NVIDIA's cuFile where cuFile and
/// hipFile differ in the I/O path: reading a write-only file (or writing a
/// read-only one) is `InvalidFileOpenFlag` ("unsupported file open flags",
/// what KvikIO's tests expect) instead of the system error EBADF that
/// hipFile, like pread, gives. `libcufile.so.0` turns it on when it loads;
/// it carries its own copy of the core, so `libhipfile.so` is unaffected.
pub fn set_cufile_rules(on: bool) {
    CUFILE_RULES.store(on, std::sync::atomic::Ordering::Relaxed);
}

fn cufile_rules() -> bool {
    CUFILE_RULES.load(std::sync::atomic::Ordering::Relaxed)
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

/// Cuts `mem` (the request's lent memory, `mem_len` bytes for the file
/// range at `off`) at multiples of `chunk` and runs `each(chunk_offset,
/// chunk_memory)`, on the worker pool when `parallel`; returns
/// [`contiguous_prefix`] of what moved.
pub(crate) fn run_chunks(
    mem: LentSpan,
    off: u64,
    size: usize,
    chunk: usize,
    threads: usize,
    parallel: bool,
    each: &(dyn Fn(u64, &mut [u8]) -> Result<usize> + Sync),
) -> Result<usize> {
    let chunks = LentChunks::new(mem, Chunks::new(off, size, chunk.max(4096)))
        .ok_or_else(|| Error::new(OpError::InternalError, "chunks do not cover the request"))?;
    let n = chunks.chunks().count();
    let results = chunk_results(chunks.chunks());
    let stop = std::sync::atomic::AtomicBool::new(false);
    let work = |_worker: usize| loop {
        if stop.load(std::sync::atomic::Ordering::Relaxed) {
            break;
        }
        let Some(c) = chunks.claim() else { break };
        let len = c.mem.len();
        let r = each(c.file_offset, c.mem);
        if !matches!(r, Ok(got) if got == len) {
            // A short chunk (EOF) or an error: later chunks are moot.
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
        }
        *results[c.index].lock().unwrap_or_else(|p| p.into_inner()) = Some(r);
    };
    if n == 1 || !parallel || threads <= 1 {
        work(0);
    } else {
        workers::run_parallel(threads.min(n), &work)?;
    }
    contiguous_prefix(chunks.chunks(), results)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_engine_reads_a_file_with_a_config_value_and_no_driver() {
        // No Driver is opened and no registry is consulted: the engine is
        // given the backend, the memory and the configuration.
        let data: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("engine");
        std::fs::write(&path, &data).unwrap();
        let file = std::fs::File::open(&path).unwrap();
        let config = Config::default();
        let backend = FileBackend::Posix(
            PosixFile::open(std::os::fd::AsRawFd::as_raw_fd(&file), &config).unwrap(),
        );
        let mut mem = vec![0u8; 300_000];
        let span = Span {
            base: mem.as_mut_ptr() as usize,
            size: 299_990,
            file_offset: 10,
            buffer_offset: 10,
        };
        let n = transfer(
            Dir::Read,
            &backend,
            &MemTarget::unregistered(),
            span,
            &config,
        )
        .unwrap();
        assert_eq!(n, 299_990);
        assert!(mem[10..] == data[10..]);
        let short = MemTarget {
            registered_len: Some(100),
            ..MemTarget::unregistered()
        };
        assert_eq!(
            transfer(Dir::Read, &backend, &short, span, &config)
                .unwrap_err()
                .op(),
            OpError::InvalidValue
        );
    }
}
