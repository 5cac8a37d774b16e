//! Buffers: memory the caller owns, optionally registered with the driver.

use crate::error::{Error, OpError, Result};
use crate::gpu;
use crate::registry;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

pub use crate::registry::{RegisteredBuffer, RDMA_REGISTER, RDMA_RELAXED_ORDERING};

const VALID_FLAGS: i32 = RDMA_REGISTER | RDMA_RELAXED_ORDERING;

/// Registers `[base, base+len)` with the driver (opening it implicitly).
pub fn buf_register(base: usize, len: usize, flags: i32) -> Result<Arc<RegisteredBuffer>> {
    if base == 0 {
        return Err(Error::new(OpError::InvalidValue, "buffer pointer is null"));
    }
    if len == 0 {
        return Err(Error::new(OpError::InvalidValue, "buffer length is zero"));
    }
    if flags & !VALID_FLAGS != 0 {
        return Err(Error::new(
            OpError::InvalidValue,
            format!("unknown buffer flags {flags:#x}"),
        ));
    }
    let info = gpu::validate_range(base, len)?;
    let reg = registry::insert_buffer(base, len, flags, info)?;
    if reg.info.kind == gpu::MemoryKind::Device {
        // Set up the pinned bounce lanes now so the first read does not pay
        // for them; failing here only means the first read sets them up.
        if let Some(config) = registry::active_config() {
            if let Err(e) = crate::io::staged::prepare(reg.info.device, &config) {
                log::info!("bounce lanes for device {}: {e}", reg.info.device);
            }
        }
    }
    if flags & RDMA_REGISTER != 0 {
        crate::remote::client::on_rdma_register(&reg);
    }
    Ok(reg)
}

/// Deregisters the buffer registered at `base`.
pub fn buf_deregister(base: usize) -> Result<()> {
    registry::remove_buffer(base)
}

/// The registration whose base is `base`, if any.
pub fn lookup(base: usize) -> Option<Arc<RegisteredBuffer>> {
    registry::buffer_at(base)
}

/// Where an I/O's bytes are: `len` bytes starting `offset` bytes into the
/// buffer whose first byte is `base` (so that the buffer's registration,
/// keyed by `base`, applies to a view of part of it).
#[doc(hidden)]
#[derive(Debug, Clone, Copy)]
pub struct MemSpan {
    pub base: usize,
    pub offset: usize,
    pub len: usize,
}

mod sealed {
    pub trait Sealed {}
}

/// Memory a [`FileHandle`](crate::FileHandle) can read into or write from:
/// a [`Buffer`] or a [`BufferView`] of one.
pub trait IoMemory: sealed::Sealed {
    #[doc(hidden)]
    fn io_memory(&self) -> MemSpan;
}

/// A buffer the caller owns; registering it tells the driver about it.
/// A `Buffer` never owns or frees the memory.
///
/// ```
/// let mut data = vec![0u8; 4096];
/// let buf = hipfs::Buffer::from_slice(&mut data, 0);
/// buf.register().unwrap();
/// buf.deregister().unwrap();
/// ```
#[derive(Debug)]
pub struct Buffer<'a> {
    ptr: usize,
    len: usize,
    flags: i32,
    registered: AtomicBool,
    /// Set when made from a slice: the memory can be viewed again.
    loan: Option<crate::lent::SliceLoan>,
    _memory: PhantomData<&'a mut [u8]>,
}

impl Buffer<'static> {
    /// A buffer over raw memory (host or GPU).
    ///
    /// # Safety
    /// `ptr` must point to `length` bytes that stay valid, and that nothing
    /// else accesses during I/O, for as long as this `Buffer` is used.
    pub unsafe fn new(ptr: *mut u8, length: usize, flags: i32) -> Buffer<'static> {
        Buffer {
            ptr: ptr as usize,
            len: length,
            flags,
            registered: AtomicBool::new(false),
            loan: None,
            _memory: PhantomData,
        }
    }
}

impl<'a> Buffer<'a> {
    /// A buffer covering all of `dev` (device memory, as `hipFileBufRegister`
    /// takes it), with `flags` as for [`Buffer::new`]. The buffer borrows the
    /// allocation, so it cannot outlive the memory it describes.
    pub fn from_device(dev: &'a gpu::DeviceAllocation<'_>, flags: i32) -> Buffer<'a> {
        Buffer {
            ptr: dev.ptr(),
            len: dev.len(),
            flags,
            registered: AtomicBool::new(false),
            loan: None,
            _memory: PhantomData,
        }
    }

    /// A buffer over a byte slice, borrowed for the buffer's life.
    pub fn from_slice(mem: &'a mut [u8], flags: i32) -> Buffer<'a> {
        Buffer {
            ptr: mem.as_mut_ptr() as usize,
            len: mem.len(),
            flags,
            registered: AtomicBool::new(false),
            loan: Some(crate::lent::SliceLoan::new(mem)),
            _memory: PhantomData,
        }
    }

    /// The bytes of a buffer made with [`Buffer::from_slice`] (`None` for
    /// the other kinds), e.g. to check what a read put there while the
    /// buffer stays registered.
    ///
    /// ```
    /// let mut data = vec![5u8; 64];
    /// let buf = hipfs::Buffer::from_slice(&mut data, 0);
    /// assert_eq!(buf.as_host_slice().map(|b| b[63]), Some(5));
    /// ```
    pub fn as_host_slice(&self) -> Option<&[u8]> {
        self.loan.as_ref().map(crate::lent::SliceLoan::get)
    }

    /// The memory's address.
    pub fn ptr(&self) -> *mut u8 {
        self.ptr as *mut u8
    }

    /// The memory's length.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the length is zero.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The registration flags.
    pub fn flags(&self) -> i32 {
        self.flags
    }

    /// Whether this buffer is registered with the driver.
    pub fn is_registered(&self) -> bool {
        self.registered.load(Ordering::Acquire)
    }

    /// Registers the buffer (opening the driver implicitly if needed).
    pub fn register(&self) -> Result<()> {
        buf_register(self.ptr, self.len, self.flags)?;
        self.registered.store(true, Ordering::Release);
        Ok(())
    }

    /// Deregisters the buffer; a no-op when it is not registered.
    pub fn deregister(&self) -> Result<()> {
        if !self.registered.swap(false, Ordering::AcqRel) {
            return Ok(());
        }
        match buf_deregister(self.ptr) {
            // The driver closed to zero and already dropped the registration.
            Err(e)
                if matches!(
                    e.op(),
                    OpError::DriverClosing | OpError::MemoryNotRegistered
                ) =>
            {
                Ok(())
            }
            other => other,
        }
    }
}

impl<'a> Buffer<'a> {
    /// All of the buffer as one view.
    pub fn view_mut(&mut self) -> BufferView<'_> {
        BufferView {
            base: self.ptr,
            offset: 0,
            len: self.len,
            _memory: PhantomData,
        }
    }

    /// Two disjoint views, `[0, mid)` and `[mid, len)`, that can be read into
    /// from two threads at once; both keep the buffer's registration.
    /// `mid` past the end is an error.
    pub fn split_at_mut(&mut self, mid: usize) -> Result<(BufferView<'_>, BufferView<'_>)> {
        self.view_mut().split_at_mut(mid)
    }

    /// Disjoint views of `chunk` bytes each (the last may be shorter), in
    /// order: one per worker of a parallel load. A zero `chunk` is an error.
    pub fn chunks_mut(&mut self, chunk: usize) -> Result<Vec<BufferView<'_>>> {
        if chunk == 0 {
            return Err(Error::new(OpError::InvalidValue, "chunk size is zero"));
        }
        let mut views = Vec::with_capacity(self.len.div_ceil(chunk));
        let mut rest = self.view_mut();
        while rest.len > chunk {
            let (head, tail) = rest.split_at_mut(chunk)?;
            views.push(head);
            rest = tail;
        }
        if !rest.is_empty() {
            views.push(rest);
        }
        Ok(views)
    }
}

impl sealed::Sealed for Buffer<'_> {}

impl IoMemory for Buffer<'_> {
    fn io_memory(&self) -> MemSpan {
        MemSpan {
            base: self.ptr,
            offset: 0,
            len: self.len,
        }
    }
}

/// An exclusive view of part of a [`Buffer`]: I/O into it uses the
/// buffer's registration, and views from [`Buffer::split_at_mut`] never
/// overlap, so each can go to its own thread.
#[derive(Debug)]
pub struct BufferView<'b> {
    base: usize,
    offset: usize,
    len: usize,
    _memory: PhantomData<&'b mut [u8]>,
}

impl<'b> BufferView<'b> {
    /// Splits this view at `mid` into `[0, mid)` and `[mid, len)`.
    pub fn split_at_mut(self, mid: usize) -> Result<(BufferView<'b>, BufferView<'b>)> {
        if mid > self.len {
            return Err(Error::new(
                OpError::InvalidValue,
                format!("split at {mid} is past the {}-byte view", self.len),
            ));
        }
        let lo = BufferView {
            base: self.base,
            offset: self.offset,
            len: mid,
            _memory: PhantomData,
        };
        let hi = BufferView {
            base: self.base,
            offset: self.offset + mid,
            len: self.len - mid,
            _memory: PhantomData,
        };
        Ok((lo, hi))
    }

    /// The first byte of the view.
    pub fn ptr(&self) -> *mut u8 {
        (self.base + self.offset) as *mut u8
    }

    /// Where the view starts in its buffer.
    pub fn offset(&self) -> usize {
        self.offset
    }

    /// The view's length.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the view is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl sealed::Sealed for BufferView<'_> {}

impl IoMemory for BufferView<'_> {
    fn io_memory(&self) -> MemSpan {
        MemSpan {
            base: self.base,
            offset: self.offset,
            len: self.len,
        }
    }
}

impl Drop for Buffer<'_> {
    fn drop(&mut self) {
        if let Err(e) = self.deregister() {
            log::warn!("deregistering buffer {:#x} on drop: {e}", self.ptr);
        }
    }
}
