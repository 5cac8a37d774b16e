//! Host memory the I/O paths own: aligned heap blocks and anonymous
//! mappings.

use std::io;
use std::ptr::NonNull;

/// An aligned heap allocation (O_DIRECT bounce memory), freed on drop.
pub struct AlignedBuf {
    ptr: NonNull<u8>,
    layout: std::alloc::Layout,
}

// SAFETY: AlignedBuf owns its allocation exclusively; moving it between
// threads moves that ownership.
unsafe impl Send for AlignedBuf {}

impl AlignedBuf {
    /// `len` bytes (at least one) aligned to `align` (a power of two; at
    /// least 4096). `InvalidInput` for a bad alignment, `OutOfMemory` when
    /// the allocator fails.
    pub fn new(len: usize, align: usize) -> io::Result<AlignedBuf> {
        let layout = std::alloc::Layout::from_size_align(len.max(1), align.max(4096))
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, format!("layout: {e}")))?;
        // Zeroed, so the bytes are initialised and can be handed out as a
        // slice (the buffer is allocated once per thread and reused).
        // SAFETY: layout has non-zero size.
        let ptr = NonNull::new(unsafe { std::alloc::alloc_zeroed(layout) }).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::OutOfMemory,
                "out of memory for bounce buffer",
            )
        })?;
        Ok(AlignedBuf { ptr, layout })
    }

    /// The memory.
    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Its length.
    pub fn len(&self) -> usize {
        self.layout.size()
    }

    /// The memory as a slice.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: the allocation is ours, `len()` bytes, zero-initialised in
        // new(), and borrowed exclusively through `&mut self`.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.layout.size()) }
    }

    /// Whether it is empty (never: at least one byte is allocated).
    pub fn is_empty(&self) -> bool {
        false
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // SAFETY: ptr came from alloc with this layout.
        unsafe { std::alloc::dealloc(self.ptr.as_ptr(), self.layout) };
    }
}

/// An anonymous private read-write mapping, unmapped on drop.
pub struct AnonMap {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is owned exclusively by this value.
unsafe impl Send for AnonMap {}
// SAFETY: shared references hand out only the address, never the bytes.
unsafe impl Sync for AnonMap {}

impl AnonMap {
    /// Maps `len` bytes (rounded up by the kernel to pages); with
    /// `huge_pages`, advises `MADV_HUGEPAGE` (a hint; where transparent
    /// huge pages are off it changes nothing).
    pub fn new(len: usize, huge_pages: bool) -> io::Result<AnonMap> {
        // SAFETY: an anonymous private mapping; no existing memory is touched.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let ptr = NonNull::new(p.cast::<u8>()).ok_or_else(|| io::Error::other("mmap gave NULL"))?;
        if huge_pages {
            // SAFETY: p..p+len is our fresh mapping; the advice changes no contents.
            unsafe { libc::madvise(p, len, libc::MADV_HUGEPAGE) };
        }
        Ok(AnonMap { ptr, len })
    }

    /// The first byte.
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Bytes mapped.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no bytes are mapped.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for AnonMap {
    fn drop(&mut self) {
        // SAFETY: the mapping made in new(), owned by us alone.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

/// A shared read-write mapping: of a device's memory (a DRM buffer) or
/// of anonymous shared pages; unmapped on drop. Its users treat it as
/// device memory: bytes move in and out by copies (bounds-checked), never
/// through slices, and a NIC may write it through a registration.
pub struct SharedMap {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is owned by this value alone; writes through it take
// `&mut self`.
unsafe impl Send for SharedMap {}
// SAFETY: shared references only copy bytes out or hand out the address.
unsafe impl Sync for SharedMap {}

impl SharedMap {
    /// `len` bytes (whole pages) of anonymous shared memory: ordinary pages
    /// that `pin_user_pages` (an RDMA registration) can pin.
    pub fn anonymous(len: usize) -> io::Result<SharedMap> {
        let len = len.max(1).div_ceil(4096) * 4096;
        // SAFETY: a new anonymous mapping; no existing memory is touched.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        SharedMap::made(p, len)
    }

    /// `len` bytes of `fd` at `offset`, mapped shared read-write (for
    /// device memory behind a descriptor: see `drm`).
    pub(crate) fn of_fd(
        fd: std::os::fd::BorrowedFd<'_>,
        len: usize,
        offset: libc::off_t,
    ) -> io::Result<SharedMap> {
        use std::os::fd::AsRawFd;
        // SAFETY: a new shared mapping of the caller's descriptor; no
        // existing memory is touched.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                offset,
            )
        };
        SharedMap::made(p, len)
    }

    fn made(p: *mut libc::c_void, len: usize) -> io::Result<SharedMap> {
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let ptr = NonNull::new(p.cast::<u8>()).ok_or_else(|| io::Error::other("mmap gave NULL"))?;
        Ok(SharedMap { ptr, len })
    }

    /// The first byte as an address (for pointer tables and registrations).
    pub fn addr(&self) -> usize {
        self.ptr.as_ptr() as usize
    }

    /// Bytes mapped.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no bytes are mapped.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn span(&self, off: usize, len: usize) -> io::Result<*mut u8> {
        match off.checked_add(len) {
            // SAFETY: off <= self.len: inside (or one past) the mapping.
            Some(end) if end <= self.len => Ok(unsafe { self.ptr.as_ptr().add(off) }),
            _ => Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "{len} bytes at {off} pass the end of a {}-byte mapping",
                    self.len
                ),
            )),
        }
    }

    /// Copies `src` into the mapping at `off`.
    pub fn write_at(&mut self, off: usize, src: &[u8]) -> io::Result<()> {
        let dst = self.span(off, src.len())?;
        // SAFETY: dst..dst+len lies in the mapping (checked), which `&mut
        // self` keeps every other method of this value off meanwhile; `src`
        // is a live slice, and the mapping is never lent out as one, so
        // they do not overlap.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), dst, src.len()) };
        Ok(())
    }

    /// Copies `dst.len()` bytes of the mapping at `off` into `dst`.
    pub fn read_at(&self, off: usize, dst: &mut [u8]) -> io::Result<()> {
        let src = self.span(off, dst.len())?;
        // SAFETY: src..src+len lies in the mapping (checked); writers hold
        // `&mut self`, so none runs now (a NIC writing through a
        // registration is a device, as for GPU memory); `dst` is a live
        // slice, distinct as in write_at.
        unsafe { std::ptr::copy_nonoverlapping(src, dst.as_mut_ptr(), dst.len()) };
        Ok(())
    }

    /// Sets `len` bytes of the mapping at `off` to `byte`.
    pub fn fill(&mut self, off: usize, len: usize, byte: u8) -> io::Result<()> {
        let dst = self.span(off, len)?;
        // SAFETY: as in write_at.
        unsafe { std::ptr::write_bytes(dst, byte, len) };
        Ok(())
    }

    /// Copies `len` bytes from `src` into the mapping at `off`.
    ///
    /// # Safety
    /// `src..src+len` must be readable memory that nothing writes during
    /// the call.
    pub unsafe fn write_from(&mut self, off: usize, src: *const u8, len: usize) -> io::Result<()> {
        let dst = self.span(off, len)?;
        // SAFETY: dst as in write_at; src is the caller's promise.
        unsafe { std::ptr::copy(src, dst, len) };
        Ok(())
    }

    /// Copies `len` bytes of the mapping at `off` to `dst`.
    ///
    /// # Safety
    /// `dst..dst+len` must be writable memory that nothing else reads or
    /// writes during the call.
    pub unsafe fn read_into(&self, off: usize, dst: *mut u8, len: usize) -> io::Result<()> {
        let src = self.span(off, len)?;
        // SAFETY: src as in read_at; dst is the caller's promise.
        unsafe { std::ptr::copy(src, dst, len) };
        Ok(())
    }
}

impl Drop for SharedMap {
    fn drop(&mut self) {
        // SAFETY: the mapping made in made(), owned by us alone.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

/// A host dmabuf of `len` bytes, for probing whether an RDMA NIC registers
/// dmabufs where no GPU exports one: `/dev/udmabuf` over a sealed memfd,
/// else a dumb buffer of a DRM device exported through PRIME (`vgem`, the
/// virtual GEM driver, makes one anywhere). The error says why neither.
pub fn host_dmabuf(len: usize) -> io::Result<std::os::fd::OwnedFd> {
    let udmabuf = match udmabuf(len) {
        Ok(fd) => return Ok(fd),
        Err(e) => e,
    };
    match drm_dumb_dmabuf(len) {
        Ok(fd) => Ok(fd),
        Err(e) => Err(io::Error::new(
            e.kind(),
            format!("/dev/udmabuf: {udmabuf}; DRM dumb buffer: {e}"),
        )),
    }
}

/// A dmabuf of a DRM dumb buffer (at least `len` bytes) from the first
/// `/dev/dri/card*` that makes one; the dmabuf keeps the memory alive.
fn drm_dumb_dmabuf(len: usize) -> io::Result<std::os::fd::OwnedFd> {
    crate::drm::DumbBuffer::new(len, false)?.export_dmabuf()
}

/// A dmabuf from `/dev/udmabuf` over a sealed memfd of `len` bytes.
fn udmabuf(len: usize) -> io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    #[repr(C)]
    struct UdmabufCreate {
        memfd: u32,
        flags: u32,
        offset: u64,
        size: u64,
    }
    // _IOW('u', 0x42, struct udmabuf_create): dir 1, size 24.
    const UDMABUF_CREATE: u32 = (1 << 30) | (24 << 16) | ((b'u' as u32) << 8) | 0x42;
    // SAFETY: a NUL-terminated name; the new fd is owned below.
    let memfd = crate::cvt(unsafe {
        libc::memfd_create(c"hipfs-dmabuf-probe".as_ptr(), libc::MFD_ALLOW_SEALING)
    })?;
    // SAFETY: memfd_create returned a new descriptor nobody else owns.
    let memfd = unsafe { OwnedFd::from_raw_fd(memfd) };
    let size =
        libc::off_t::try_from(len).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: plain calls on our own descriptor.
    crate::cvt(unsafe { libc::ftruncate(memfd.as_raw_fd(), size) })?;
    // SAFETY: as above; udmabuf needs the memfd sealed against shrinking.
    crate::cvt(unsafe { libc::fcntl(memfd.as_raw_fd(), libc::F_ADD_SEALS, libc::F_SEAL_SHRINK) })?;
    let dev = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/udmabuf")?;
    let arg = UdmabufCreate {
        memfd: memfd.as_raw_fd() as u32,
        flags: 0x01, // UDMABUF_FLAGS_CLOEXEC
        offset: 0,
        size: len as u64,
    };
    // SAFETY: the request's encoded size is that of `arg`, which the kernel
    // only reads; it returns a new dmabuf fd.
    let fd = crate::cvt(unsafe {
        libc::ioctl(
            dev.as_raw_fd(),
            UDMABUF_CREATE as _,
            &arg as *const UdmabufCreate,
        )
    })?;
    // SAFETY: the ioctl returned a new descriptor nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shared_map_moves_bytes_in_and_out_only_inside_its_pages() {
        let mut m = SharedMap::anonymous(5000).unwrap();
        assert_eq!(m.len(), 8192, "whole pages");
        m.write_at(4090, b"across a page").unwrap();
        m.fill(0, 10, 7).unwrap();
        let mut got = [0u8; 13];
        m.read_at(4090, &mut got).unwrap();
        assert_eq!(&got, b"across a page");
        let mut head = [0u8; 11];
        m.read_at(0, &mut head).unwrap();
        assert_eq!(head, [7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 0]);
        assert!(m.write_at(8190, &[1, 2, 3]).is_err(), "past the end");
        assert!(
            m.read_at(usize::MAX, &mut [0]).is_err(),
            "overflowing offset"
        );
        let src = [9u8; 4];
        // SAFETY: `src` is live and unchanged during the call.
        unsafe { m.write_from(8188, src.as_ptr(), 4) }.unwrap();
        let mut out = [0u8; 4];
        // SAFETY: `out` is ours alone during the call.
        unsafe { m.read_into(8188, out.as_mut_ptr(), 4) }.unwrap();
        assert_eq!(out, src);
    }
}
