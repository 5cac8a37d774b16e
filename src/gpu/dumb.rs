//! `dmabuf-test`: dmabuf-backed device memory for tests, never chosen
//! unless asked for (`HIPFS_GPU_RUNTIME=dmabuf-test`).
//!
//! Its "device memory" is DRM dumb buffers (`vgem` makes them on any
//! Linux machine, a VM included) mapped into the process. To an RDMA NIC
//! that is a GPU's memory: the runtime exports a real dmabuf of it, and its
//! mapping is the driver's (`VM_PFNMAP` on vgem), which `ibv_reg_mr`
//! cannot pin, as with a GPU BAR without a peer-memory client. So the whole
//! device registration chain (dmabuf, peer memory, staging) runs against a
//! real NIC, soft-RoCE included, on a machine without a GPU.
//!
//! Copies are `memcpy` through the mapping. "Async" copies complete before
//! they return, after what was enqueued on the stream before them (host
//! functions run on the host runtime's per-stream threads); an event
//! recorded on a stream is complete once recorded.

use super::{DeviceGuard, DevicePtr, DmabufExport, EventId, GpuRuntime, HostRuntime};
use super::{MemoryKind, PointerInfo, StreamId};
use crate::error::{Error, OpError, Result};
use hipfs_sys::drm::DumbBuffer;
use hipfs_sys::mem::AnonMap;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// The value of `HIPFS_GPU_RUNTIME` that selects this runtime, and its name.
pub const NAME: &str = "dmabuf-test";

struct Allocation {
    id: u64,
    buf: Arc<Mutex<DumbBuffer>>,
}

/// Device memory of DRM dumb buffers (see the module doc).
pub struct DumbRuntime {
    /// Device allocations by base address.
    device: Mutex<BTreeMap<usize, Allocation>>,
    /// "Pinned" host memory: anonymous mappings (a verbs registration pins
    /// them itself).
    pinned: Mutex<HashMap<usize, AnonMap>>,
    /// Streams and host functions.
    host: HostRuntime,
    next_id: AtomicU64,
    next_handle: AtomicUsize,
}

fn sys_err(e: std::io::Error, what: &str) -> Error {
    Error::system(e.raw_os_error().unwrap_or(libc::EIO), what)
}

fn not_device(ptr: u64, len: usize) -> Error {
    Error::new(
        OpError::HipMemoryTypeInvalid,
        format!("{len} bytes at {ptr:#x} are not one allocation of the {NAME} runtime"),
    )
}

impl DumbRuntime {
    /// The runtime, if a DRM device here makes mapped dumb buffers (the
    /// reason when none does).
    pub fn probe() -> std::result::Result<DumbRuntime, String> {
        DumbBuffer::new(4096, true)
            .map_err(|e| format!("no DRM device makes mapped dumb buffers ({e}; load vgem)"))?;
        Ok(DumbRuntime {
            device: Mutex::new(BTreeMap::new()),
            pinned: Mutex::new(HashMap::new()),
            host: HostRuntime::new(),
            next_id: AtomicU64::new(1),
            next_handle: AtomicUsize::new(1),
        })
    }

    /// The allocation holding `[ptr, ptr + len)`: its base, id and buffer.
    fn find(&self, ptr: u64, len: usize) -> Result<(usize, u64, Arc<Mutex<DumbBuffer>>)> {
        let addr = usize::try_from(ptr).map_err(|_| not_device(ptr, len))?;
        let device = self.device.lock().unwrap_or_else(|p| p.into_inner());
        let (&base, a) = device
            .range(..=addr)
            .next_back()
            .ok_or_else(|| not_device(ptr, len))?;
        let size = a.buf.lock().unwrap_or_else(|p| p.into_inner()).len();
        match addr.checked_add(len) {
            Some(end) if end <= base + size => Ok((base, a.id, a.buf.clone())),
            _ => Err(not_device(ptr, len)),
        }
    }

    /// Runs `f` on the buffer holding `len` bytes at `ptr`, with the offset.
    fn with_buf<T>(
        &self,
        ptr: DevicePtr,
        len: usize,
        f: impl FnOnce(&mut DumbBuffer, usize) -> std::io::Result<T>,
    ) -> Result<T> {
        let (base, _, buf) = self.find(ptr.0, len)?;
        let mut b = buf.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut b, ptr.addr() - base).map_err(|e| sys_err(e, "copy through a dumb buffer"))
    }
}

impl GpuRuntime for DumbRuntime {
    fn name(&self) -> &'static str {
        NAME
    }

    fn device_count(&self) -> usize {
        1
    }

    fn pointer_info(&self, ptr: usize) -> Option<PointerInfo> {
        if let Ok((base, _, buf)) = self.find(ptr as u64, 1) {
            let size = buf.lock().unwrap_or_else(|p| p.into_inner()).len();
            return Some(PointerInfo {
                kind: MemoryKind::Device,
                base,
                size,
                device: 0,
            });
        }
        let pinned = self.pinned.lock().unwrap_or_else(|p| p.into_inner());
        pinned
            .iter()
            .find(|(&base, m)| ptr >= base && ptr < base + m.len())
            .map(|(&base, m)| PointerInfo {
                kind: MemoryKind::PinnedHost,
                base,
                size: m.len(),
                device: -1,
            })
    }

    unsafe fn copy_to_device(&self, dst: DevicePtr, src: &[u8]) -> Result<()> {
        self.with_buf(dst, src.len(), |b, off| b.write_at(off, src))
    }

    unsafe fn copy_from_device(&self, dst: &mut [u8], src: DevicePtr) -> Result<()> {
        self.with_buf(src, dst.len(), |b, off| b.read_at(off, dst))
    }

    unsafe fn launch_host_func(&self, stream: StreamId, f: Box<dyn FnOnce() + Send>) -> Result<()> {
        // SAFETY: the caller's promise (a live stream), passed on.
        unsafe { self.host.launch_host_func(stream, f) }
    }

    unsafe fn stream_synchronize(&self, stream: StreamId) -> Result<()> {
        // SAFETY: as above.
        unsafe { self.host.stream_synchronize(stream) }
    }

    fn bind(&self, device: i32) -> Result<DeviceGuard> {
        if device != 0 {
            return Err(Error::new(
                OpError::InvalidValue,
                format!("the {NAME} runtime has device 0 only, not {device}"),
            ));
        }
        Ok(DeviceGuard::new(None))
    }

    fn alloc_pinned(&self, len: usize) -> Result<usize> {
        let map = AnonMap::new(len.max(1), false).map_err(|e| sys_err(e, "mmap"))?;
        let addr = map.as_ptr() as usize;
        self.pinned
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(addr, map);
        Ok(addr)
    }

    unsafe fn free_pinned(&self, ptr: usize) {
        self.pinned
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&ptr);
    }

    unsafe fn register_host(&self, _ptr: usize, _len: usize) -> Result<()> {
        // Ordinary pages: nothing to pin for memcpy, and verbs pins what
        // it registers.
        Ok(())
    }

    fn stream_create(&self, _device: i32) -> Result<StreamId> {
        Ok(StreamId(self.next_handle.fetch_add(1, Ordering::Relaxed)))
    }

    unsafe fn copy_to_device_async(
        &self,
        dst: DevicePtr,
        src: *const u8,
        len: usize,
        stream: StreamId,
    ) -> Result<()> {
        // In stream order: what was enqueued before runs first.
        // SAFETY: the caller's promise (a live stream), passed on.
        unsafe { self.host.stream_synchronize(stream) }?;
        // SAFETY: `src` is readable and unchanged for `len` bytes until the
        // copy is complete (the caller's promise), which is before return.
        self.with_buf(dst, len, |b, off| unsafe { b.write_from(off, src, len) })
    }

    unsafe fn copy_from_device_async(
        &self,
        dst: *mut u8,
        src: DevicePtr,
        len: usize,
        stream: StreamId,
    ) -> Result<()> {
        // SAFETY: as in copy_to_device_async.
        unsafe { self.host.stream_synchronize(stream) }?;
        // SAFETY: `dst` is writable and untouched for `len` bytes until the
        // copy is complete (the caller's promise), which is before return.
        self.with_buf(src, len, |b, off| unsafe { b.read_into(off, dst, len) })
    }

    fn event_create(&self) -> Result<EventId> {
        Ok(EventId(self.next_handle.fetch_add(1, Ordering::Relaxed)))
    }

    unsafe fn event_record(&self, _event: EventId, stream: StreamId) -> Result<()> {
        // Complete once recorded: everything before it on the stream has
        // run (copies complete at once; host functions are waited for).
        // SAFETY: the caller's promise (a live stream), passed on.
        unsafe { self.host.stream_synchronize(stream) }
    }

    unsafe fn event_synchronize(&self, _event: EventId) -> Result<()> {
        Ok(())
    }

    fn device_alloc(&self, device: i32, len: usize) -> Result<DevicePtr> {
        drop(self.bind(device)?);
        let buf = DumbBuffer::new(len, true).map_err(|e| {
            Error::new(
                OpError::DeviceNotFound,
                format!("{NAME}: a dumb buffer of {len} bytes: {e}"),
            )
        })?;
        let addr = buf
            .addr()
            .ok_or_else(|| Error::new(OpError::InternalError, "dumb buffer not mapped"))?;
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        self.device
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(
                addr,
                Allocation {
                    id,
                    buf: Arc::new(Mutex::new(buf)),
                },
            );
        Ok(DevicePtr(addr as u64))
    }

    unsafe fn device_free(&self, ptr: DevicePtr) {
        self.device
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&ptr.addr());
    }

    unsafe fn device_memset(&self, ptr: DevicePtr, byte: u8, len: usize) -> Result<()> {
        self.with_buf(ptr, len, |b, off| b.fill(off, len, byte))
    }

    fn export_dmabuf(&self, ptr: DevicePtr, len: usize) -> Result<DmabufExport> {
        let (base, _, buf) = self.find(ptr.0, len)?;
        let b = buf.lock().unwrap_or_else(|p| p.into_inner());
        let fd = b
            .export_dmabuf()
            .map_err(|e| sys_err(e, "DRM_IOCTL_PRIME_HANDLE_TO_FD"))?;
        Ok(DmabufExport {
            fd,
            start: DevicePtr(base as u64),
            len: b.len(),
        })
    }

    fn allocation_id(&self, ptr: DevicePtr) -> Option<u64> {
        self.find(ptr.0, 1).ok().map(|(_, id, _)| id)
    }
}
