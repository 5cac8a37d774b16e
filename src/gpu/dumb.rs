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
//! `pinnable-test` (`HIPFS_GPU_RUNTIME=pinnable-test`) is the same runtime
//! with device memory of anonymous shared pages, which any NIC can pin and
//! which has no dmabuf exporter: a stand-in for a GPU whose peer-memory
//! client is loaded, so that the zero-copy way (the server RDMA-WRITEs
//! straight into registered device memory) runs on real verbs too.
//!
//! Copies are `memcpy` through the mapping. "Async" copies complete before
//! they return, after what was enqueued on the stream before them (host
//! functions run on the host runtime's per-stream threads); an event
//! recorded on a stream is complete once recorded.

use super::{DeviceGuard, DevicePtr, DmabufExport, EventId, GpuRuntime, HostRuntime};
use super::{MemoryKind, PointerInfo, StreamId};
use crate::error::{Error, OpError, Result};
use hipfs_sys::drm::DumbBuffer;
use hipfs_sys::mem::{AnonMap, SharedMap};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// The value of `HIPFS_GPU_RUNTIME` that selects this runtime with DRM
/// dumb buffers, and its name.
pub const NAME: &str = "dmabuf-test";
/// The same with pinnable memory (see the module doc).
pub const NAME_PINNABLE: &str = "pinnable-test";

/// One allocation's memory.
enum Memory {
    /// A mapped DRM dumb buffer (dmabuf exporter; not pinnable).
    Dumb(DumbBuffer),
    /// Anonymous shared pages (pinnable; no exporter).
    Pages(SharedMap),
}

impl Memory {
    fn map(&self) -> std::io::Result<&SharedMap> {
        match self {
            Memory::Dumb(b) => b.mapping(),
            Memory::Pages(m) => Some(m),
        }
        .ok_or_else(|| std::io::Error::other("dumb buffer not mapped"))
    }
    fn map_mut(&mut self) -> std::io::Result<&mut SharedMap> {
        match self {
            Memory::Dumb(b) => b.mapping_mut(),
            Memory::Pages(m) => Some(m),
        }
        .ok_or_else(|| std::io::Error::other("dumb buffer not mapped"))
    }
}

struct Allocation {
    id: u64,
    buf: Arc<Mutex<Memory>>,
}

/// Device memory of DRM dumb buffers, or of pinnable pages (see the
/// module doc).
pub struct DumbRuntime {
    /// `pinnable-test`: allocations are anonymous shared pages.
    pinnable: bool,
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

impl DumbRuntime {
    /// The runtime, if a DRM device here makes mapped dumb buffers (the
    /// reason when none does); with `pinnable`, of anonymous shared pages
    /// (always there).
    pub fn probe(pinnable: bool) -> std::result::Result<DumbRuntime, String> {
        if !pinnable {
            DumbBuffer::new(4096, true)
                .map_err(|e| format!("no DRM device makes mapped dumb buffers ({e}; load vgem)"))?;
        }
        Ok(DumbRuntime {
            pinnable,
            device: Mutex::new(BTreeMap::new()),
            pinned: Mutex::new(HashMap::new()),
            host: HostRuntime::new(),
            next_id: AtomicU64::new(1),
            next_handle: AtomicUsize::new(1),
        })
    }

    fn not_device(&self, ptr: u64, len: usize) -> Error {
        Error::new(
            OpError::HipMemoryTypeInvalid,
            format!(
                "{len} bytes at {ptr:#x} are not one allocation of the {} runtime",
                self.name()
            ),
        )
    }

    /// The allocation holding `[ptr, ptr + len)`: its base, id and memory.
    fn find(&self, ptr: u64, len: usize) -> Result<(usize, u64, Arc<Mutex<Memory>>)> {
        let addr = usize::try_from(ptr).map_err(|_| self.not_device(ptr, len))?;
        let device = self.device.lock().unwrap_or_else(|p| p.into_inner());
        let (&base, a) = device
            .range(..=addr)
            .next_back()
            .ok_or_else(|| self.not_device(ptr, len))?;
        let size = size_of(&a.buf);
        match addr.checked_add(len) {
            Some(end) if end <= base + size => Ok((base, a.id, a.buf.clone())),
            _ => Err(self.not_device(ptr, len)),
        }
    }

    /// Runs `f` on the mapping holding `len` bytes at `ptr`, with the
    /// offset (one copy at a time per allocation).
    fn with_map<T>(
        &self,
        ptr: DevicePtr,
        len: usize,
        f: impl FnOnce(&mut SharedMap, usize) -> std::io::Result<T>,
    ) -> Result<T> {
        let (base, _, buf) = self.find(ptr.0, len)?;
        let mut b = buf.lock().unwrap_or_else(|p| p.into_inner());
        b.map_mut()
            .and_then(|m| f(m, ptr.addr() - base))
            .map_err(|e| sys_err(e, "copy through device memory"))
    }
}

fn size_of(buf: &Mutex<Memory>) -> usize {
    buf.lock()
        .unwrap_or_else(|p| p.into_inner())
        .map()
        .map_or(0, SharedMap::len)
}

impl GpuRuntime for DumbRuntime {
    fn name(&self) -> &'static str {
        if self.pinnable {
            NAME_PINNABLE
        } else {
            NAME
        }
    }

    fn device_count(&self) -> usize {
        1
    }

    fn pointer_info(&self, ptr: usize) -> Option<PointerInfo> {
        if let Ok((base, _, buf)) = self.find(ptr as u64, 1) {
            let size = size_of(&buf);
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
        self.with_map(dst, src.len(), |b, off| b.write_at(off, src))
    }

    unsafe fn copy_from_device(&self, dst: &mut [u8], src: DevicePtr) -> Result<()> {
        self.with_map(src, dst.len(), |b, off| b.read_at(off, dst))
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
                format!(
                    "the {} runtime has device 0 only, not {device}",
                    self.name()
                ),
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
        self.with_map(dst, len, |b, off| unsafe { b.write_from(off, src, len) })
    }

    unsafe fn copy_device_async(
        &self,
        dst: DevicePtr,
        src: DevicePtr,
        len: usize,
        stream: StreamId,
    ) -> Result<()> {
        // SAFETY: as in copy_to_device_async.
        unsafe { self.host.stream_synchronize(stream) }?;
        // Through host memory: the two ranges may lie in one buffer, whose
        // lock is taken once at a time.
        let mut bounce = vec![0u8; len];
        // SAFETY: `bounce` has `len` writable bytes.
        self.with_map(src, len, |b, off| unsafe {
            b.read_into(off, bounce.as_mut_ptr(), len)
        })?;
        // SAFETY: `bounce` has `len` readable bytes.
        self.with_map(dst, len, |b, off| unsafe {
            b.write_from(off, bounce.as_ptr(), len)
        })
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
        self.with_map(src, len, |b, off| unsafe { b.read_into(off, dst, len) })
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
        let made = if self.pinnable {
            SharedMap::anonymous(len).map(Memory::Pages)
        } else {
            DumbBuffer::new(len, true).map(Memory::Dumb)
        };
        let buf = made.map_err(|e| {
            Error::new(
                OpError::DeviceNotFound,
                format!("{}: {len} bytes of device memory: {e}", self.name()),
            )
        })?;
        let addr = buf
            .map()
            .map_err(|e| Error::new(OpError::InternalError, e.to_string()))?
            .addr();
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
        self.with_map(ptr, len, |b, off| b.fill(off, len, byte))
    }

    fn export_dmabuf(&self, ptr: DevicePtr, len: usize) -> Result<DmabufExport> {
        let (base, _, buf) = self.find(ptr.0, len)?;
        let b = buf.lock().unwrap_or_else(|p| p.into_inner());
        match &*b {
            Memory::Dumb(d) => Ok(DmabufExport {
                fd: d
                    .export_dmabuf()
                    .map_err(|e| sys_err(e, "DRM_IOCTL_PRIME_HANDLE_TO_FD"))?,
                start: DevicePtr(base as u64),
                len: d.len(),
            }),
            Memory::Pages(_) => Err(Error::new(
                OpError::IoNotSupported,
                format!("{NAME_PINNABLE} memory (anonymous pages) has no dmabuf exporter"),
            )),
        }
    }

    fn allocation_id(&self, ptr: DevicePtr) -> Option<u64> {
        self.find(ptr.0, 1).ok().map(|(_, id, _)| id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::{DeviceAllocation, PinnedHost};

    fn pinnable() -> &'static DumbRuntime {
        static RT: std::sync::OnceLock<DumbRuntime> = std::sync::OnceLock::new();
        RT.get_or_init(|| DumbRuntime::probe(true).unwrap())
    }

    #[test]
    fn device_memory_is_known_by_address_and_copies_move_bytes_through_its_mapping() {
        let rt = pinnable();
        assert_eq!(rt.name(), NAME_PINNABLE);
        let mut a = DeviceAllocation::new(rt, 0, 10_000).unwrap();
        let b = DeviceAllocation::new(rt, 0, 4096).unwrap();
        let info = rt.pointer_info(a.ptr() + 9_999).unwrap();
        assert_eq!(
            (info.kind, info.base, info.size, info.device),
            (MemoryKind::Device, a.ptr(), 12_288, 0)
        );
        assert!(rt
            .pointer_info(b.ptr() + 4096)
            .is_none_or(|i| i.base != b.ptr()));
        assert_ne!(
            rt.allocation_id(a.device_ptr()),
            rt.allocation_id(b.device_ptr())
        );
        a.fill(3).unwrap();
        a.write(100, b"device bytes").unwrap();
        let mut got = [0u8; 14];
        a.read(99, &mut got).unwrap();
        assert_eq!(&got, b"\x03device bytes\x03");
        assert!(a.write(12_280, &[0; 9]).is_err(), "past the allocation");
        // Host memory is not this runtime's device memory.
        let host = [0u8; 16];
        assert!(rt.pointer_info(host.as_ptr() as usize).is_none());
        assert!(
            rt.export_dmabuf(a.device_ptr(), 4096).is_err(),
            "no exporter"
        );
        let gone = b.device_ptr();
        drop(b);
        assert!(rt.pointer_info(gone.addr()).is_none(), "freed");
    }

    #[test]
    fn async_copies_through_pinned_memory_complete_in_stream_order() {
        let rt = pinnable();
        let a = DeviceAllocation::new(rt, 0, 8192).unwrap();
        let mut slab = PinnedHost::alloc(rt, 8192).unwrap();
        assert_eq!(
            rt.pointer_info(slab.ptr() as usize).unwrap().kind,
            MemoryKind::PinnedHost
        );
        slab.as_mut_slice().fill(0x5a);
        let s = rt.stream_create(0).unwrap();
        let ran = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let r2 = ran.clone();
        // SAFETY: a stream of this runtime; the slab and the allocation
        // outlive the copies, which complete before the calls return.
        unsafe {
            rt.launch_host_func(
                s,
                Box::new(move || {
                    std::thread::sleep(std::time::Duration::from_millis(50));
                    r2.store(true, Ordering::SeqCst);
                }),
            )
            .unwrap();
            rt.copy_to_device_async(a.device_ptr().offset(10), slab.ptr(), 100, s)
                .unwrap();
        }
        assert!(
            ran.load(Ordering::SeqCst),
            "the copy ran after the host function before it"
        );
        let mut got = vec![0u8; 102];
        a.read(9, &mut got).unwrap();
        assert_eq!((got[0], got[1], got[100], got[101]), (0, 0x5a, 0x5a, 0));
        slab.as_mut_slice().fill(0);
        // SAFETY: as above.
        unsafe {
            rt.copy_from_device_async(slab.ptr(), a.device_ptr().offset(10), 100, s)
                .unwrap();
        }
        assert!(slab.as_mut_slice()[..100].iter().all(|&b| b == 0x5a));
        assert_eq!(slab.as_mut_slice()[100], 0);
    }
}
