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
