//! Lent memory: the one module where memory a caller lends to hipfs by
//! address becomes `&[u8]` / `&mut [u8]`.
//!
//! hipFile's API takes memory as addresses: the C ABI's `hipFileRead(fh,
//! buffer_base, ...)`, `hipFileBufRegister(ptr, len)`, the Python face, and
//! the Rust face's [`Buffer`](crate::Buffer). Whoever creates such an
//! address promises, through an `unsafe` constructor, that the bytes stay
//! valid and that nothing else touches them while an I/O on them runs:
//! [`Buffer::new`](crate::Buffer::new) (`unsafe fn`), the C ABI's `unsafe
//! extern "C"` functions (their documented contract), or
//! [`Buffer::from_slice`](crate::Buffer::from_slice), which establishes it
//! by borrowing a `&mut [u8]` for the buffer's life. The engine then checks
//! each request against the registered length (`io::validate`) and carries
//! it as a [`LentSpan`].
//!
//! This module turns those spans into slices, so that everything above it
//! (the host path, the staged path's file side, the remote client) is safe
//! code over slices:
//! - [`LentChunks`] cuts a request into chunks at file-offset multiples and
//!   hands each chunk out exactly once, as a `&mut [u8]`; chunks never
//!   overlap, so workers on several threads each own theirs.
//! - [`host_bytes`] / [`host_bytes_mut`] view the host memory of a
//!   [`UserspaceBuf`] (which the engine builds from a validated span) for
//!   the one call of a userspace filesystem that receives it.
//! - [`register_with`] registers lent memory with a transport connection
//!   (the transport's `unsafe register` contract is the lent-memory one).
//! - [`SliceLoan`] lets a [`Buffer`](crate::Buffer) made from a slice view
//!   its bytes again through `&self` (`Buffer::as_host_slice`).
//! - [`CallerSlots`] reads and writes the C caller's argument and result
//!   pointers of a stream-ordered I/O (`hipFileReadAsync`).
//! - [`LentSpan::device_range`] hands the staged path bounded ranges of a
//!   request's device memory for its async copies (`gpu::StagingSlot`).
//!
//! What this module cannot check is the promise itself: a span is built
//! from an address the API faces received. The crate's raw-address
//! functions (`handle::read`/`write`, `UserspaceBuf`'s pointer fields) are
//! the faces of that promise for the C and Python layers.

use crate::userspace::{UserspaceBuf, UserspaceMem};
use std::marker::PhantomData;
use std::sync::atomic::{AtomicUsize, Ordering};

/// `len` bytes at `addr` lent to one I/O by its caller (see the module
/// doc), already checked against the buffer's registration.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LentSpan {
    addr: usize,
    len: usize,
}

impl LentSpan {
    /// The span of a validated request: `addr..addr+len` lies inside memory
    /// the API face received under the lent-memory contract.
    pub(crate) fn of_request(addr: usize, len: usize) -> LentSpan {
        LentSpan { addr, len }
    }

    /// The whole memory of a buffer registration, `[base, base+len)`.
    pub(crate) fn of_registration(base: usize, len: usize) -> LentSpan {
        LentSpan { addr: base, len }
    }
}

impl LentSpan {
    /// `len` bytes at `off` in the span, as lent device memory (the span is
    /// a request into a device buffer); `None` past the span's end.
    pub(crate) fn device_range(&self, off: usize, len: usize) -> Option<crate::gpu::LentDevice> {
        let end = off.checked_add(len)?;
        (end <= self.len).then(|| {
            crate::gpu::LentDevice::vouched(crate::gpu::DevicePtr::from_addr(self.addr + off), len)
        })
    }
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

    /// Bytes covered.
    fn size(&self) -> usize {
        (self.end - self.off) as usize
    }
}

/// A lent span cut into [`Chunks`], each handed out once by [`claim`]
/// (from any thread), so the slices never alias.
///
/// [`claim`]: LentChunks::claim
pub(crate) struct LentChunks<'a> {
    span: LentSpan,
    chunks: Chunks,
    next: AtomicUsize,
    // Behaves like the `&mut [u8]` it splits.
    _memory: PhantomData<&'a mut [u8]>,
}

/// One claimed chunk: its index, file offset and bytes.
pub(crate) struct Claimed<'a> {
    /// Which chunk (for the result slot).
    pub index: usize,
    /// Where in the file.
    pub file_offset: u64,
    /// The chunk's memory.
    pub mem: &'a mut [u8],
}

impl<'a> LentChunks<'a> {
    /// Chunks of `span`; `None` when the cut does not cover exactly the span
    /// (a caller's arithmetic slip, never a chunk past the lent bytes).
    pub(crate) fn new(span: LentSpan, chunks: Chunks) -> Option<LentChunks<'a>> {
        (chunks.size() == span.len).then_some(LentChunks {
            span,
            chunks,
            next: AtomicUsize::new(0),
            _memory: PhantomData,
        })
    }

    /// The cut.
    pub(crate) fn chunks(&self) -> &Chunks {
        &self.chunks
    }

    /// The next unclaimed chunk, or `None` when all are out.
    pub(crate) fn claim(&self) -> Option<Claimed<'_>> {
        let i = self.next.fetch_add(1, Ordering::Relaxed);
        if i >= self.chunks.count() {
            return None;
        }
        let (file_offset, len, m) = self.chunks.get(i);
        // Chunk i lies inside the span (Chunks covers exactly span.len, as
        // checked in new()), and is handed out only here, once.
        debug_assert!(m + len <= self.span.len);
        // SAFETY: [addr+m, addr+m+len) is lent memory (module doc), inside
        // the span, and disjoint from every other claimed chunk because each
        // index is returned by exactly one fetch_add; the borrow of `self`
        // keeps the slice from outliving the I/O that lent the span.
        let mem = unsafe { std::slice::from_raw_parts_mut((self.span.addr + m) as *mut u8, len) };
        Some(Claimed {
            index: i,
            file_offset,
            mem,
        })
    }
}

// LentChunks is Send + Sync by its fields (an address, an atomic and a
// `PhantomData<&mut [u8]>`): sharing it between the workers of one request
// is what splitting a `&mut [u8]` allows, since each chunk goes out once.

/// A byte slice a [`Buffer`](crate::Buffer) was made from, kept as an
/// address (the buffer describes the memory to I/O that writes it) and
/// viewed again only through a shared borrow of the buffer, while no I/O
/// can write it (reads into a buffer take it by `&mut`).
#[derive(Debug)]
pub(crate) struct SliceLoan {
    addr: usize,
    len: usize,
}

impl SliceLoan {
    /// Records `mem`; the buffer holding the loan borrows `mem` for its life.
    pub(crate) fn new(mem: &mut [u8]) -> SliceLoan {
        SliceLoan {
            addr: mem.as_mut_ptr() as usize,
            len: mem.len(),
        }
    }

    /// The bytes, for as long as the holder is borrowed.
    pub(crate) fn get(&self) -> &[u8] {
        // SAFETY: the memory came from a `&'a mut [u8]` that the holder
        // (a `Buffer<'a>`) borrows for its whole life, so it is valid and
        // initialised; the holder hands this out only from `&self`, and
        // every write into it (a read I/O) takes the holder by `&mut`.
        unsafe { std::slice::from_raw_parts(self.addr as *const u8, self.len) }
    }
}

/// The four argument/result pointers of a C-ABI stream-ordered I/O
/// (`hipFileReadAsync`'s `size_p`, `file_offset_p`, `buffer_offset_p`,
/// `bytes_read_p`), lent until the stream has run the operation: the
/// contract of the `unsafe` entry points (`stream::read_async` /
/// `write_async`), which alone make one ([`CallerSlots::vouched`]).
/// Addresses, so the value may cross to the stream's thread; C callers may
/// not align them, so every access is unaligned.
#[derive(Debug)]
pub(crate) struct CallerSlots {
    size: usize,
    file_offset: usize,
    buffer_offset: usize,
    out: usize,
}

impl CallerSlots {
    /// The pointers a caller of an unsafe entry point vouched for; `None`
    /// when one is null.
    pub(crate) fn vouched(
        size: *const usize,
        file_offset: *const i64,
        buffer_offset: *const i64,
        out: *mut isize,
    ) -> Option<CallerSlots> {
        if size.is_null() || file_offset.is_null() || buffer_offset.is_null() || out.is_null() {
            return None;
        }
        Some(CallerSlots {
            size: size as usize,
            file_offset: file_offset as usize,
            buffer_offset: buffer_offset as usize,
            out: out as usize,
        })
    }

    /// `*size_p` now.
    pub(crate) fn size(&self) -> usize {
        // SAFETY: valid until the stream ran the operation (the entry
        // point's contract), and this runs before the result is written.
        unsafe { std::ptr::read_unaligned(self.size as *const usize) }
    }

    /// `*file_offset_p` now.
    pub(crate) fn file_offset(&self) -> i64 {
        // SAFETY: as in size().
        unsafe { std::ptr::read_unaligned(self.file_offset as *const i64) }
    }

    /// `*buffer_offset_p` now.
    pub(crate) fn buffer_offset(&self) -> i64 {
        // SAFETY: as in size().
        unsafe { std::ptr::read_unaligned(self.buffer_offset as *const i64) }
    }

    /// Writes the result (`*bytes_read_p`).
    pub(crate) fn finish(&self, v: isize) {
        // SAFETY: as in size(); the result pointer is writable.
        unsafe { std::ptr::write_unaligned(self.out as *mut isize, v) }
    }
}

/// The host bytes of `buf` for reading, or `None` for device memory with
/// no host alias.
pub(crate) fn host_bytes(buf: &UserspaceBuf) -> Option<&[u8]> {
    let (ptr, len) = host_range(buf)?;
    // SAFETY: a UserspaceBuf's host pointer is lent memory of `len` bytes
    // for the duration of the filesystem call that received `buf` (the
    // UserspaceFs contract, built by the engine from a validated span);
    // the borrow of `buf` ends with that call.
    Some(unsafe { std::slice::from_raw_parts(ptr, len) })
}

/// The host bytes of `buf` for writing into: see [`host_bytes`].
pub(crate) fn host_bytes_mut(buf: &mut UserspaceBuf) -> Option<&mut [u8]> {
    let (ptr, len) = host_range(buf)?;
    // SAFETY: as in host_bytes; the exclusive borrow of `buf` (which is not
    // Clone) makes this the only view of the bytes.
    Some(unsafe { std::slice::from_raw_parts_mut(ptr, len) })
}

fn host_range(buf: &UserspaceBuf) -> Option<(*mut u8, usize)> {
    match *buf.mem() {
        UserspaceMem::Host { ptr, len } => Some((ptr, len)),
        UserspaceMem::Rdma {
            host_ptr: Some(p),
            len,
            ..
        } => Some((p, len)),
        UserspaceMem::Rdma { .. } => None,
    }
}

// SAFETY: a UserspaceBuf describes lent memory for one filesystem call and
// is only dereferenced (through host_bytes*) by the call that owns it;
// handing it to the thread that runs the call is moving that borrow.
unsafe impl Send for UserspaceBuf {}

/// Registers lent memory `mem` with a transport connection, so the peer
/// can place a read's bytes into it.
///
/// The region must be dropped before the borrow of `mem` ends; the
/// remote client keeps it in the request's own frame (`read_piece`) and
/// drops it when the request returns.
pub(crate) fn register_with(
    conn: &dyn hipfs_rdma::Connection,
    mem: &mut [u8],
) -> hipfs_rdma::Result<std::sync::Arc<hipfs_rdma::LocalRegion>> {
    // SAFETY: `mem` is valid for writes for the borrow; the caller keeps
    // the region only while that borrow lasts (see above), so the peer's
    // writes land in memory this request owns.
    unsafe { conn.register(mem.as_mut_ptr(), mem.len()) }
}

/// Registers a registered buffer's whole memory (`span`, its `[base,
/// base+len)`) with a connection; the buffer's own keep-alive then holds
/// the region, so it is dropped with the registration.
pub(crate) fn register_buffer_with(
    conn: &dyn hipfs_rdma::Connection,
    span: LentSpan,
) -> hipfs_rdma::Result<std::sync::Arc<hipfs_rdma::LocalRegion>> {
    // SAFETY: a registered buffer's memory was lent under the lent-memory
    // contract and stays valid while it is registered; the region lives in
    // the registration's keepalive, dropped with it.
    unsafe { conn.register(span.addr as *mut u8, span.len) }
}

/// Registers device memory `span` (a driver registration or a device
/// allocation, lent under the lent-memory contract) with a verbs connection
/// through its dmabuf `export`; the caller keeps `export` with the region.
pub(crate) fn register_device_dmabuf_with(
    conn: &dyn hipfs_rdma::Connection,
    export: &crate::gpu::DmabufExport,
    span: LentSpan,
) -> hipfs_rdma::Result<std::sync::Arc<hipfs_rdma::LocalRegion>> {
    use std::os::fd::AsRawFd;
    let at = crate::gpu::DevicePtr(span.addr as u64);
    // SAFETY: `export.fd` is a dmabuf the caller keeps open as long as the
    // region (both live in one DeviceRegion).
    unsafe {
        conn.register_dmabuf(
            export.fd.as_raw_fd(),
            export.offset_of(at),
            span.len,
            span.addr as u64,
        )
    }
}

/// Registers device memory `span` with a verbs connection by its device
/// address (peer memory: nvidia-peermem, amdgpu peer-direct). Only for
/// connections that never touch the bytes with the CPU (verbs: the NIC
/// reads and writes them); the caller checks the transport.
pub(crate) fn register_device_address_with(
    conn: &dyn hipfs_rdma::Connection,
    span: LentSpan,
) -> hipfs_rdma::Result<std::sync::Arc<hipfs_rdma::LocalRegion>> {
    debug_assert_eq!(conn.kind(), hipfs_rdma::TransportKind::Verbs);
    // SAFETY: device memory lent under the lent-memory contract (a driver
    // registration or an allocation the caller keeps registered in its
    // cache); the verbs transport hands the address to the NIC only, which
    // pins it through its peer-memory client or refuses.
    unsafe { conn.register(span.addr as *mut u8, span.len) }
}

/// Registers device memory `span`, lent for one read, with a TCP
/// connection as a WRITE target whose bytes reach it through `sink`'s lane
/// staging (`remote::client::lane_staging`). The caller keeps the region
/// only while the read runs (the request's own frame, as `register_with`).
pub(crate) fn register_device_staged_with(
    conn: &dyn hipfs_rdma::Connection,
    span: LentSpan,
    sink: std::sync::Arc<dyn hipfs_rdma::DeviceSink>,
) -> hipfs_rdma::Result<std::sync::Arc<hipfs_rdma::LocalRegion>> {
    // SAFETY: device memory lent for this read (the lent-memory contract,
    // or a readahead slab the fetch holds until the read returned); the
    // region is dropped when the read returns, and the transport reaches
    // the range only through `sink`'s device copies, never with the CPU.
    unsafe { conn.register_device(span.addr as u64, span.len, sink) }
}

/// Copies device memory a read just placed (`span`, lent for that read)
/// back to the host, to check it against its hash.
pub(crate) fn copy_back_device(span: LentSpan, host: &mut [u8]) -> crate::error::Result<()> {
    let n = span.len.min(host.len());
    // SAFETY: `span` is device memory the caller lent for this read, not
    // written by anyone else until it returns.
    unsafe {
        crate::gpu::runtime()
            .copy_from_device(&mut host[..n], crate::gpu::DevicePtr(span.addr as u64))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_chunk_is_claimed_once_and_the_chunks_tile_the_span() {
        let mut mem = vec![0u8; 10_000];
        let span = LentSpan::of_request(mem.as_mut_ptr() as usize, mem.len());
        // File offset 100: the first chunk is short, so only the edges are unaligned.
        let chunks = LentChunks::new(span, Chunks::new(100, 10_000, 4096)).unwrap();
        let mut seen = Vec::new();
        while let Some(c) = chunks.claim() {
            c.mem.fill(c.index as u8 + 1);
            seen.push((c.index, c.file_offset, c.mem.len()));
        }
        assert_eq!(seen, vec![(0, 100, 3996), (1, 4096, 4096), (2, 8192, 1908)]);
        assert!(chunks.claim().is_none(), "no chunk is handed out twice");
        assert!(mem[..3996].iter().all(|&b| b == 1));
        assert!(mem[3996..8092].iter().all(|&b| b == 2));
        assert!(mem[8092..].iter().all(|&b| b == 3));
    }

    #[test]
    fn a_cut_that_does_not_cover_the_span_exactly_is_refused() {
        let mut mem = vec![0u8; 100];
        let span = LentSpan::of_request(mem.as_mut_ptr() as usize, mem.len());
        assert!(LentChunks::new(span, Chunks::new(0, 101, 4096)).is_none());
        assert!(LentChunks::new(span, Chunks::new(0, 99, 4096)).is_none());
    }

    #[test]
    fn device_ranges_stay_inside_the_span() {
        let span = LentSpan::of_request(0x10_0000, 4096);
        assert!(span.device_range(0, 4096).is_some());
        assert!(span.device_range(4000, 96).is_some());
        assert!(span.device_range(4000, 97).is_none());
        assert!(span.device_range(usize::MAX, 2).is_none());
    }

    #[test]
    fn a_userspace_buffer_without_a_host_alias_has_no_host_bytes() {
        let mut mem = vec![7u8; 16];
        let mut host = UserspaceBuf::from_slice(&mut mem);
        host_bytes_mut(&mut host).unwrap()[0] = 1;
        assert_eq!(host_bytes(&host).unwrap()[..2], [1, 7]);
        // SAFETY: no host alias: nothing here is memory to touch.
        let device = unsafe {
            UserspaceBuf::new(UserspaceMem::Rdma {
                desc: String::new(),
                addr: 0,
                len: 16,
                host_ptr: None,
            })
        };
        assert!(host_bytes(&device).is_none());
    }
}
