//! Buffers: memory the caller owns, optionally registered with the driver.

use crate::driver::{ensure_open, with_state};
use crate::error::{Error, OpError, Result};
use crate::gpu::{self, PointerInfo};
use std::marker::PhantomData;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

/// `HIPFILE_RDMA_REGISTER`: also register the buffer with the RDMA transport.
pub const RDMA_REGISTER: i32 = 1;
/// `HIPFILE_RDMA_RELAXED_ORDERING`.
pub const RDMA_RELAXED_ORDERING: i32 = 1 << 1;
const VALID_FLAGS: i32 = RDMA_REGISTER | RDMA_RELAXED_ORDERING;

/// A registration held by the driver.
#[derive(Debug)]
pub struct RegisteredBuffer {
    /// First byte.
    pub base: usize,
    /// Length in bytes.
    pub len: usize,
    /// Registration flags.
    pub flags: i32,
    /// What the runtime knows of the memory.
    pub info: PointerInfo,
    /// The RDMA descriptor string, set by the transport when the buffer is
    /// registered with one (UserspaceFs path).
    pub rdma_desc: OnceLock<String>,
    /// Keeps transport registrations alive as long as the buffer is registered.
    pub rdma_keepalive: std::sync::Mutex<Vec<Box<dyn std::any::Any + Send + Sync>>>,
}

impl RegisteredBuffer {
    /// Whether `[ptr, ptr+len)` lies inside this registration.
    pub fn contains(&self, ptr: usize, len: usize) -> bool {
        ptr >= self.base && ptr.saturating_add(len) <= self.base + self.len
    }
}

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
    let end = base + len;
    let reg = with_state(|s| {
        ensure_open(s);
        if s.buffers.contains_key(&base) {
            return Err(Error::new(
                OpError::MemoryAlreadyRegistered,
                format!("{base:#x} is already registered"),
            ));
        }
        // Overlap with the registration just below or just above.
        let below = s.buffers.range(..base).next_back();
        let above = s.buffers.range(base..end).next();
        if below.is_some_and(|(_, b)| b.base + b.len > base) || above.is_some() {
            return Err(Error::new(
                OpError::MemoryAlreadyRegistered,
                format!("[{base:#x}, {end:#x}) overlaps a registered buffer"),
            ));
        }
        let reg = Arc::new(RegisteredBuffer {
            base,
            len,
            flags,
            info,
            rdma_desc: OnceLock::new(),
            rdma_keepalive: std::sync::Mutex::new(Vec::new()),
        });
        s.buffers.insert(base, Arc::clone(&reg));
        Ok(reg)
    })?;
    if reg.info.kind == gpu::MemoryKind::Device {
        // Set up the pinned bounce lanes now so the first read does not pay
        // for them; failing here only means the first read sets them up.
        if let Err(e) = crate::io::staged::prepare(reg.info.device) {
            log::info!("bounce lanes for device {}: {e}", reg.info.device);
        }
    }
    if flags & RDMA_REGISTER != 0 {
        crate::rdma_hooks::on_rdma_register(&reg);
    }
    Ok(reg)
}

/// Deregisters the buffer registered at `base`.
pub fn buf_deregister(base: usize) -> Result<()> {
    with_state(|s| {
        if s.use_count == 0 {
            return Err(Error::new(
                OpError::DriverClosing,
                "the driver is not open; no buffer is registered",
            ));
        }
        if base == 0 {
            return Err(Error::new(OpError::InvalidValue, "buffer pointer is null"));
        }
        s.buffers.remove(&base).map(|_| ()).ok_or_else(|| {
            Error::new(
                OpError::MemoryNotRegistered,
                format!("{base:#x} is not a registered buffer"),
            )
        })
    })
}

/// The registration whose base is `base`, if any.
pub fn lookup(base: usize) -> Option<Arc<RegisteredBuffer>> {
    with_state(|s| s.buffers.get(&base).cloned())
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
            _memory: PhantomData,
        }
    }
}

impl<'a> Buffer<'a> {
    /// A buffer over a byte slice, borrowed for the buffer's life.
    pub fn from_slice(mem: &'a mut [u8], flags: i32) -> Buffer<'a> {
        Buffer {
            ptr: mem.as_mut_ptr() as usize,
            len: mem.len(),
            flags,
            registered: AtomicBool::new(false),
            _memory: PhantomData,
        }
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

impl Drop for Buffer<'_> {
    fn drop(&mut self) {
        if let Err(e) = self.deregister() {
            log::warn!("deregistering buffer {:#x} on drop: {e}", self.ptr);
        }
    }
}
