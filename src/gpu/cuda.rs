//! The CUDA runtime: NVIDIA GPUs through the driver API (libcuda), loaded
//! with `dlopen` by cudarc, so a build with this runtime still starts on a
//! machine without any NVIDIA library. Every device is used through its
//! primary context (the one the CUDA runtime API and the frameworks share).

use super::{DeviceGuard, DevicePtr, EventId, GpuRuntime, MemoryKind, PointerInfo, StreamId};
use crate::error::{Error, OpError, Result};
use cudarc::driver::sys;
use std::cell::Cell;
use std::ffi::c_void;

/// Every driver symbol this runtime calls. cudarc resolves a symbol at its
/// first call and panics when it is missing, so the probe checks them all
/// up front and refuses a driver that lacks one.
const SYMBOLS: &[&str] = &[
    "cuInit",
    "cuDriverGetVersion",
    "cuDeviceGetCount",
    "cuDeviceGet",
    "cuDevicePrimaryCtxRetain",
    "cuCtxGetCurrent",
    "cuCtxSetCurrent",
    "cuPointerGetAttributes",
    "cuMemHostAlloc",
    "cuMemFreeHost",
    "cuMemHostRegister_v2",
    "cuMemHostUnregister",
    "cuStreamCreate",
    "cuStreamDestroy_v2",
    "cuStreamSynchronize",
    "cuLaunchHostFunc",
    "cuMemcpyHtoD_v2",
    "cuMemcpyDtoH_v2",
    "cuMemcpyHtoDAsync_v2",
    "cuMemcpyDtoHAsync_v2",
    "cuMemcpyDtoDAsync_v2",
    "cuEventCreate",
    "cuEventRecord",
    "cuEventSynchronize",
    "cuEventDestroy_v2",
    "cuMemAlloc_v2",
    "cuMemFree_v2",
    "cuMemsetD8_v2",
    "cuGetErrorString",
];

/// NVIDIA GPUs through the CUDA driver API.
pub struct CudaRuntime {
    /// Primary context of each device, by ordinal.
    contexts: Vec<usize>,
    driver_version: i32,
    /// Flags of the pipeline's events. By default a worker waiting for the
    /// GPU spins (the driver's default, what cudaStreamSynchronize does in
    /// peers): measured on the H200 machine it beat sleeping waits, which
    /// add a wake-up to every slab hand-over. `HIPFS_CUDA_SPIN=0` sleeps
    /// instead, leaving the cores to the application.
    event_flags: u32,
}

fn describe(r: sys::CUresult) -> String {
    let mut s: *const std::ffi::c_char = std::ptr::null();
    // SAFETY: cuGetErrorString writes a pointer to a static string (or leaves it null).
    let ok = unsafe { sys::cuGetErrorString(r, &mut s) } == sys::CUresult::CUDA_SUCCESS;
    if ok && !s.is_null() {
        // SAFETY: the driver returns a NUL-terminated static string.
        let text = unsafe { std::ffi::CStr::from_ptr(s) };
        format!("{} ({r:?})", text.to_string_lossy())
    } else {
        format!("{r:?}")
    }
}

fn check(r: sys::CUresult, what: &str) -> Result<()> {
    if r == sys::CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(Error::new(
            OpError::HipDriverError,
            format!("{what}: {}", describe(r)),
        ))
    }
}

thread_local! {
    /// The context this runtime last made current on this thread (0: none):
    /// saves a driver call per copy on worker threads.
    static BOUND: Cell<usize> = const { Cell::new(0) };
}

impl CudaRuntime {
    /// Finds libcuda (without loading it into a process that lacks it) and
    /// its devices.
    pub fn probe() -> std::result::Result<CudaRuntime, String> {
        // SAFETY: only tries to dlopen the candidate names and closes them again.
        if !unsafe { sys::is_culib_present() } {
            return Err("libcuda.so not found".to_string());
        }
        // SAFETY: the library is present (checked above), so culib() does not panic.
        let lib = unsafe { sys::culib() };
        for name in SYMBOLS {
            // SAFETY: a symbol lookup; the pointer is not called here.
            if unsafe { lib.get::<*const c_void>(name.as_bytes()) }.is_err() {
                return Err(format!("libcuda lacks {name}"));
            }
        }
        // SAFETY: cuInit(0) is the documented first call.
        let r = unsafe { sys::cuInit(0) };
        if r != sys::CUresult::CUDA_SUCCESS {
            return Err(format!("cuInit: {}", describe(r)));
        }
        let mut version = 0;
        // SAFETY: out-pointer to a local.
        unsafe { sys::cuDriverGetVersion(&mut version) };
        let mut count = 0;
        // SAFETY: out-pointer to a local.
        let r = unsafe { sys::cuDeviceGetCount(&mut count) };
        if r != sys::CUresult::CUDA_SUCCESS {
            return Err(format!("cuDeviceGetCount: {}", describe(r)));
        }
        let mut contexts = Vec::new();
        for ordinal in 0..count {
            let mut dev = 0;
            let mut ctx: sys::CUcontext = std::ptr::null_mut();
            // SAFETY: out-pointers to locals; ordinal < count.
            let r = unsafe { sys::cuDeviceGet(&mut dev, ordinal) };
            if r != sys::CUresult::CUDA_SUCCESS {
                return Err(format!("cuDeviceGet({ordinal}): {}", describe(r)));
            }
            // SAFETY: dev is a valid device; the retained context lives as
            // long as the process (the runtime is a process-wide static).
            let r = unsafe { sys::cuDevicePrimaryCtxRetain(&mut ctx, dev) };
            if r != sys::CUresult::CUDA_SUCCESS {
                return Err(format!(
                    "cuDevicePrimaryCtxRetain({ordinal}): {}",
                    describe(r)
                ));
            }
            contexts.push(ctx as usize);
        }
        let spin = std::env::var("HIPFS_CUDA_SPIN").map_or(true, |v| v.trim() != "0");
        // CU_EVENT_DISABLE_TIMING (2), plus CU_EVENT_BLOCKING_SYNC (1) unless spinning.
        let event_flags = if spin { 2 } else { 3 };
        Ok(CudaRuntime {
            contexts,
            driver_version: version,
            event_flags,
        })
    }

    /// The driver's CUDA version (e.g. 13000).
    pub fn driver_version(&self) -> i32 {
        self.driver_version
    }

    fn context(&self, device: i32) -> Result<usize> {
        usize::try_from(device)
            .ok()
            .and_then(|d| self.contexts.get(d).copied())
            .ok_or_else(|| Error::new(OpError::DeviceNotFound, format!("no CUDA device {device}")))
    }

    /// Makes a context current on this thread when none is (pointer queries
    /// and copies need one); leaves a caller's own context alone.
    fn ensure_context(&self) -> Result<()> {
        if BOUND.with(|b| b.get()) != 0 {
            return Ok(());
        }
        let mut cur: sys::CUcontext = std::ptr::null_mut();
        // SAFETY: out-pointer to a local.
        check(unsafe { sys::cuCtxGetCurrent(&mut cur) }, "cuCtxGetCurrent")?;
        if cur.is_null() {
            let ctx = self.context(0)?;
            check(
                // SAFETY: ctx is a retained primary context.
                unsafe { sys::cuCtxSetCurrent(ctx as sys::CUcontext) },
                "cuCtxSetCurrent",
            )?;
            BOUND.with(|b| b.set(ctx));
        }
        Ok(())
    }

    fn sync_copy(&self, device: i32, f: impl FnOnce() -> sys::CUresult, what: &str) -> Result<()> {
        let _guard = self.bind(device)?;
        check(f(), what)
    }
}

/// The host function trampoline of `cuLaunchHostFunc`.
unsafe extern "C" fn run_boxed(data: *mut c_void) {
    // SAFETY: data is the Box<Box<dyn FnOnce>> leaked by launch_host_func,
    // and the driver calls each host function exactly once.
    let f = unsafe { Box::from_raw(data as *mut Box<dyn FnOnce() + Send>) };
    // A panic must not unwind into the driver's thread.
    if std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).is_err() {
        log::error!("a stream-ordered host function panicked");
    }
}

impl GpuRuntime for CudaRuntime {
    fn name(&self) -> &'static str {
        "cuda"
    }

    fn device_count(&self) -> usize {
        self.contexts.len()
    }

    fn pointer_info(&self, ptr: usize) -> Option<PointerInfo> {
        self.check_pointer(ptr).ok().flatten()
    }

    fn check_pointer(&self, ptr: usize) -> Result<Option<PointerInfo>> {
        self.ensure_context()?;
        let mut mem_type: u32 = 0;
        let mut ordinal: i32 = -1;
        let mut is_managed: u32 = 0;
        let mut start: u64 = 0;
        let mut size: usize = 0;
        let mut attrs = [
            sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
            sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
            sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_IS_MANAGED,
            sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
            sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_RANGE_SIZE,
        ];
        let mut data: [*mut c_void; 5] = [
            (&mut mem_type as *mut u32).cast(),
            (&mut ordinal as *mut i32).cast(),
            (&mut is_managed as *mut u32).cast(),
            (&mut start as *mut u64).cast(),
            (&mut size as *mut usize).cast(),
        ];
        // SAFETY: each data slot points at a local of the size the attribute
        // writes (CUmemorytype: 4 bytes, ordinal: int, is_managed: bool as
        // unsigned int, range start: CUdeviceptr, range size: size_t). Unlike
        // cuPointerGetAttribute, this call succeeds on unknown pointers and
        // leaves the values at zero.
        let r = unsafe {
            sys::cuPointerGetAttributes(5, attrs.as_mut_ptr(), data.as_mut_ptr(), ptr as u64)
        };
        if r != sys::CUresult::CUDA_SUCCESS {
            return Err(Error::new(
                OpError::HipPointerInvalid,
                format!("cuPointerGetAttributes({ptr:#x}): {}", describe(r)),
            ));
        }
        const HOST: u32 = 1;
        const DEVICE: u32 = 2;
        const UNIFIED: u32 = 4;
        let kind = match (mem_type, is_managed != 0) {
            (0, _) => return Ok(None),
            (_, true) => MemoryKind::Managed,
            (HOST, false) => MemoryKind::PinnedHost,
            (DEVICE, false) => MemoryKind::Device,
            (UNIFIED, false) => MemoryKind::Managed,
            (other, _) => {
                return Err(Error::new(
                    OpError::HipMemoryTypeInvalid,
                    format!("{ptr:#x} is CUDA memory of type {other} (an array?), which file I/O cannot address"),
                ))
            }
        };
        let (base, size) = if start != 0 && size != 0 {
            (start as usize, size)
        } else {
            (ptr, usize::MAX - ptr)
        };
        let device = if kind == MemoryKind::PinnedHost {
            -1
        } else {
            ordinal
        };
        Ok(Some(PointerInfo {
            kind,
            base,
            size,
            device,
        }))
    }

    unsafe fn copy_to_device(&self, dst: DevicePtr, src: &[u8]) -> Result<()> {
        let dst = dst.0 as usize;
        let device = self.pointer_info(dst).map_or(0, |i| i.device.max(0));
        self.sync_copy(
            device,
            // SAFETY: src is a live slice; dst is the caller's device range.
            || unsafe { sys::cuMemcpyHtoD_v2(dst as u64, src.as_ptr().cast(), src.len()) },
            "cuMemcpyHtoD",
        )
    }

    unsafe fn copy_from_device(&self, dst: &mut [u8], src: DevicePtr) -> Result<()> {
        let src = src.0 as usize;
        let device = self.pointer_info(src).map_or(0, |i| i.device.max(0));
        let len = dst.len();
        let ptr = dst.as_mut_ptr();
        self.sync_copy(
            device,
            // SAFETY: dst is a live mutable slice of len bytes.
            || unsafe { sys::cuMemcpyDtoH_v2(ptr.cast(), src as u64, len) },
            "cuMemcpyDtoH",
        )
    }

    unsafe fn launch_host_func(&self, stream: StreamId, f: Box<dyn FnOnce() + Send>) -> Result<()> {
        let stream = stream.0;
        self.ensure_context()?;
        let data = Box::into_raw(Box::new(f));
        // SAFETY: run_boxed takes ownership of data exactly once when the
        // stream reaches it; stream is the caller's CUstream (0: legacy default).
        let r =
            unsafe { sys::cuLaunchHostFunc(stream as sys::CUstream, Some(run_boxed), data.cast()) };
        if r != sys::CUresult::CUDA_SUCCESS {
            // SAFETY: the driver refused it, so data was never handed over.
            drop(unsafe { Box::from_raw(data) });
        }
        check(r, "cuLaunchHostFunc")
    }

    unsafe fn stream_synchronize(&self, stream: StreamId) -> Result<()> {
        let stream = stream.0;
        self.ensure_context()?;
        check(
            // SAFETY: stream is a CUstream handle (0: legacy default stream).
            unsafe { sys::cuStreamSynchronize(stream as sys::CUstream) },
            "cuStreamSynchronize",
        )
    }

    unsafe fn stream_wait_value32(
        &self,
        stream: StreamId,
        flag: usize,
        value: u32,
    ) -> Result<bool> {
        let stream = stream.0;
        // Not in SYMBOLS: a driver without stream memory operations still
        // serves everything else, and async I/O falls back.
        static PRESENT: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        // SAFETY: this runtime exists, so libcuda is loaded; a symbol lookup only.
        let present = *PRESENT.get_or_init(|| unsafe {
            sys::culib()
                .get::<*const c_void>(b"cuStreamWaitValue32_v2")
                .is_ok()
        });
        if !present {
            return Ok(false);
        }
        self.ensure_context()?;
        // SAFETY: flag is cuMemHostAlloc memory, mapped at the same address
        // in every device's space (unified addressing), kept alive by the
        // caller for as long as the wait can be pending.
        let r = unsafe {
            sys::cuStreamWaitValue32_v2(
                stream as sys::CUstream,
                flag as u64,
                value,
                sys::CUstreamWaitValue_flags::CU_STREAM_WAIT_VALUE_GEQ as u32,
            )
        };
        check(r, "cuStreamWaitValue32")?;
        Ok(true)
    }

    fn bind(&self, device: i32) -> Result<DeviceGuard> {
        let ctx = self.context(device)?;
        if BOUND.with(|b| b.get()) == ctx {
            return Ok(DeviceGuard::new(None));
        }
        let mut prev: sys::CUcontext = std::ptr::null_mut();
        check(
            // SAFETY: out-pointer to a local.
            unsafe { sys::cuCtxGetCurrent(&mut prev) },
            "cuCtxGetCurrent",
        )?;
        if prev as usize == ctx {
            BOUND.with(|b| b.set(ctx));
            return Ok(DeviceGuard::new(None));
        }
        check(
            // SAFETY: ctx is a retained primary context.
            unsafe { sys::cuCtxSetCurrent(ctx as sys::CUcontext) },
            "cuCtxSetCurrent",
        )?;
        BOUND.with(|b| b.set(ctx));
        let prev = prev as usize;
        Ok(DeviceGuard::new(Some(Box::new(move || {
            // Give the caller's thread back the context it had.
            // SAFETY: prev was current on this thread (or null) before.
            unsafe { sys::cuCtxSetCurrent(prev as sys::CUcontext) };
            BOUND.with(|b| b.set(prev));
        }))))
    }

    fn alloc_pinned(&self, len: usize) -> Result<usize> {
        self.ensure_context()?;
        let mut p: *mut c_void = std::ptr::null_mut();
        check(
            // SAFETY: out-pointer to a local; PORTABLE makes it pinned for every context.
            unsafe { sys::cuMemHostAlloc(&mut p, len.max(1), sys::CU_MEMHOSTALLOC_PORTABLE) },
            "cuMemHostAlloc",
        )?;
        Ok(p as usize)
    }

    unsafe fn free_pinned(&self, ptr: usize) {
        // SAFETY: ptr came from cuMemHostAlloc and is freed once.
        let r = unsafe { sys::cuMemFreeHost(ptr as *mut c_void) };
        if r != sys::CUresult::CUDA_SUCCESS {
            log::warn!("cuMemFreeHost: {}", describe(r));
        }
    }

    unsafe fn register_host(&self, ptr: usize, len: usize) -> Result<()> {
        self.ensure_context()?;
        check(
            // SAFETY: the caller owns ptr..ptr+len and keeps it mapped until unregister_host.
            unsafe {
                sys::cuMemHostRegister_v2(ptr as *mut c_void, len, sys::CU_MEMHOSTREGISTER_PORTABLE)
            },
            "cuMemHostRegister",
        )
    }

    unsafe fn unregister_host(&self, ptr: usize) {
        // SAFETY: ptr was registered by register_host.
        let r = unsafe { sys::cuMemHostUnregister(ptr as *mut c_void) };
        if r != sys::CUresult::CUDA_SUCCESS {
            log::warn!("cuMemHostUnregister: {}", describe(r));
        }
    }

    fn stream_create(&self, device: i32) -> Result<StreamId> {
        let _g = self.bind(device)?;
        let mut s: sys::CUstream = std::ptr::null_mut();
        // SAFETY: out-pointer to a local. Non-blocking: the application's
        // work on the legacy default stream does not serialise with ours.
        check(unsafe { sys::cuStreamCreate(&mut s, 1) }, "cuStreamCreate")?;
        Ok(StreamId(s as usize))
    }

    unsafe fn stream_destroy(&self, stream: StreamId) {
        let stream = stream.0;
        // SAFETY: stream came from stream_create and is destroyed once.
        unsafe { sys::cuStreamDestroy_v2(stream as sys::CUstream) };
    }

    unsafe fn copy_to_device_async(
        &self,
        dst: DevicePtr,
        src: *const u8,
        len: usize,
        stream: StreamId,
    ) -> Result<()> {
        let dst = dst.0 as usize;
        let stream = stream.0;
        check(
            // SAFETY: forwarded caller guarantees.
            unsafe {
                sys::cuMemcpyHtoDAsync_v2(dst as u64, src.cast(), len, stream as sys::CUstream)
            },
            "cuMemcpyHtoDAsync",
        )
    }

    unsafe fn copy_device_async(
        &self,
        dst: DevicePtr,
        src: DevicePtr,
        len: usize,
        stream: StreamId,
    ) -> Result<()> {
        let (dst, src) = (dst.0 as usize, src.0 as usize);
        let stream = stream.0;
        check(
            // SAFETY: forwarded caller guarantees.
            unsafe {
                sys::cuMemcpyDtoDAsync_v2(dst as u64, src as u64, len, stream as sys::CUstream)
            },
            "cuMemcpyDtoDAsync",
        )
    }

    unsafe fn copy_from_device_async(
        &self,
        dst: *mut u8,
        src: DevicePtr,
        len: usize,
        stream: StreamId,
    ) -> Result<()> {
        let src = src.0 as usize;
        let stream = stream.0;
        check(
            // SAFETY: forwarded caller guarantees.
            unsafe {
                sys::cuMemcpyDtoHAsync_v2(dst.cast(), src as u64, len, stream as sys::CUstream)
            },
            "cuMemcpyDtoHAsync",
        )
    }

    fn event_create(&self) -> Result<EventId> {
        self.ensure_context()?;
        let mut e: sys::CUevent = std::ptr::null_mut();
        check(
            // SAFETY: out-pointer to a local; flags as chosen in probe().
            unsafe { sys::cuEventCreate(&mut e, self.event_flags) },
            "cuEventCreate",
        )?;
        Ok(EventId(e as usize))
    }

    unsafe fn event_record(&self, event: EventId, stream: StreamId) -> Result<()> {
        let stream = stream.0;
        let event = event.0;
        check(
            // SAFETY: handles from event_create / stream_create.
            unsafe { sys::cuEventRecord(event as sys::CUevent, stream as sys::CUstream) },
            "cuEventRecord",
        )
    }

    unsafe fn event_synchronize(&self, event: EventId) -> Result<()> {
        let event = event.0;
        check(
            // SAFETY: handle from event_create.
            unsafe { sys::cuEventSynchronize(event as sys::CUevent) },
            "cuEventSynchronize",
        )
    }

    unsafe fn event_query(&self, event: EventId) -> Result<bool> {
        let event = event.0;
        // SAFETY: handle from event_create.
        match unsafe { sys::cuEventQuery(event as sys::CUevent) } {
            sys::CUresult::CUDA_ERROR_NOT_READY => Ok(false),
            r => check(r, "cuEventQuery").map(|()| true),
        }
    }

    unsafe fn event_destroy(&self, event: EventId) {
        let event = event.0;
        // SAFETY: handle from event_create, destroyed once.
        unsafe { sys::cuEventDestroy_v2(event as sys::CUevent) };
    }

    fn device_alloc(&self, device: i32, len: usize) -> Result<DevicePtr> {
        let _g = self.bind(device)?;
        let mut p: u64 = 0;
        check(
            // SAFETY: out-pointer to a local.
            unsafe { sys::cuMemAlloc_v2(&mut p, len.max(1)) },
            "cuMemAlloc",
        )?;
        Ok(DevicePtr(p))
    }

    unsafe fn device_free(&self, ptr: DevicePtr) {
        let ptr = ptr.0 as usize;
        if self.ensure_context().is_err() {
            return;
        }
        // SAFETY: ptr came from device_alloc and is freed once.
        unsafe { sys::cuMemFree_v2(ptr as u64) };
    }

    unsafe fn device_memset(&self, ptr: DevicePtr, byte: u8, len: usize) -> Result<()> {
        let ptr = ptr.0 as usize;
        let device = self.pointer_info(ptr).map_or(0, |i| i.device.max(0));
        let _g = self.bind(device)?;
        check(
            // SAFETY: the caller's device range.
            unsafe { sys::cuMemsetD8_v2(ptr as u64, byte, len) },
            "cuMemsetD8",
        )?;
        // The memset is asynchronous to the host: finish it before returning.
        check(
            // SAFETY: the legacy default stream of the bound context.
            unsafe { sys::cuStreamSynchronize(std::ptr::null_mut()) },
            "cuStreamSynchronize",
        )
    }

    // ---- RDMA registration of device memory (dmabuf export) ----

    fn export_dmabuf(&self, ptr: DevicePtr, len: usize) -> Result<super::DmabufExport> {
        use std::os::fd::{FromRawFd, OwnedFd};
        self.ensure_context()?;
        let info = self
            .pointer_info(ptr.0 as usize)
            .filter(|i| i.kind == MemoryKind::Device)
            .ok_or_else(|| {
                Error::new(
                    OpError::InvalidValue,
                    format!("{:#x} is not CUDA device memory", ptr.0),
                )
            })?;
        // The range must be host-page aligned and inside one allocation.
        let (start, span) = super::page_span(ptr.0, len, 4096)
            .filter(|&(s, l)| {
                s >= info.base as u64 && s + l as u64 <= (info.base + info.size) as u64
            })
            .ok_or_else(|| {
                Error::new(
                    OpError::InvalidValue,
                    format!(
                        "{len} bytes at {:#x} do not fit whole pages of their allocation ({} bytes at {:#x})",
                        ptr.0, info.size, info.base
                    ),
                )
            })?;
        let _g = self.bind(info.device.max(0))?;
        let mut fd: i32 = -1;
        check(
            // SAFETY: `fd` is a local int the call writes the dmabuf fd into
            // (the documented handle type for DMA_BUF_FD); the range lies
            // inside one live allocation (checked above).
            unsafe {
                sys::cuMemGetHandleForAddressRange(
                    (&mut fd as *mut i32).cast(),
                    start,
                    span,
                    sys::CUmemRangeHandleType::CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD,
                    0,
                )
            },
            "cuMemGetHandleForAddressRange(DMA_BUF_FD)",
        )?;
        if fd < 0 {
            return Err(Error::new(
                OpError::InternalError,
                "cuMemGetHandleForAddressRange returned no fd",
            ));
        }
        Ok(super::DmabufExport {
            // SAFETY: the driver handed us this new fd; we own it from here.
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
            start: DevicePtr(start),
            len: span,
        })
    }

    fn allocation_id(&self, ptr: DevicePtr) -> Option<u64> {
        self.ensure_context().ok()?;
        let mut id: u64 = 0;
        // SAFETY: BUFFER_ID writes one unsigned long long into `id`.
        let r = unsafe {
            sys::cuPointerGetAttribute(
                (&mut id as *mut u64).cast(),
                sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_BUFFER_ID,
                ptr.0,
            )
        };
        (r == sys::CUresult::CUDA_SUCCESS && id != 0).then_some(id)
    }

    // ---- begin: copy server of stream-ordered async I/O ----

    fn alloc_mapped(&self, len: usize) -> Result<usize> {
        if !copy_server_symbols() {
            return Err(Error::new(
                OpError::HipDriverError,
                "libcuda lacks the calls of the async copy server",
            ));
        }
        self.ensure_context()?;
        let mut p: *mut c_void = std::ptr::null_mut();
        check(
            // SAFETY: out-pointer to a local; PORTABLE: pinned for every
            // context, DEVICEMAP: mapped into every device's space.
            unsafe {
                sys::cuMemHostAlloc(
                    &mut p,
                    len.max(1),
                    sys::CU_MEMHOSTALLOC_PORTABLE | sys::CU_MEMHOSTALLOC_DEVICEMAP,
                )
            },
            "cuMemHostAlloc(DEVICEMAP)",
        )?;
        let mut dev: u64 = 0;
        // SAFETY: p is the mapped allocation just made; out-pointer to a local.
        let r = unsafe { sys::cuMemHostGetDevicePointer_v2(&mut dev, p, 0) };
        if r != sys::CUresult::CUDA_SUCCESS || dev != p as u64 {
            // SAFETY: allocated above, used by nothing.
            unsafe { self.free_pinned(p as usize) };
            return Err(Error::new(
                OpError::HipDriverError,
                format!(
                    "mapped host memory is not at its host address on the device ({})",
                    describe(r)
                ),
            ));
        }
        Ok(p as usize)
    }

    fn copy_server_ready(&self, device: i32) -> bool {
        self.copy_server_fn(device).is_ok()
    }

    unsafe fn launch_copy_server(
        &self,
        stream: StreamId,
        device: i32,
        slots: usize,
        blocks: u32,
        depth: u32,
        gen: u32,
    ) -> Result<()> {
        let f = self.copy_server_fn(device)?;
        let _g = self.bind(device)?;
        let (mut slots, mut depth, mut gen) = (slots as u64, depth, gen);
        let mut params: [*mut c_void; 3] = [
            (&mut slots as *mut u64).cast(),
            (&mut depth as *mut u32).cast(),
            (&mut gen as *mut u32).cast(),
        ];
        check(
            // SAFETY: f is hipfs_copy_server(Slot*, unsigned, unsigned) of
            // this device's context, and params point at locals of those
            // types (the driver copies them before returning); the caller
            // vouches for the stream and the slots.
            unsafe {
                sys::cuLaunchKernel(
                    f as sys::CUfunction,
                    blocks,
                    1,
                    1,
                    COPY_SERVER_THREADS,
                    1,
                    1,
                    0,
                    stream.0 as sys::CUstream,
                    params.as_mut_ptr(),
                    std::ptr::null_mut(),
                )
            },
            "cuLaunchKernel(hipfs_copy_server)",
        )
    }

    // ---- end: copy server of stream-ordered async I/O ----
}

// ======== begin: copy server of stream-ordered async I/O ========

/// The kernel's PTX (source: kernels/copy_server.cu; regenerate with
/// scripts/gpu/gen-copy-server-ptx.py), NUL-terminated for cuModuleLoadData.
static COPY_SERVER_PTX: &str = concat!(include_str!("kernels/copy_server.ptx"), "\0");

/// Threads of each block: enough loads in flight to cover the latency of
/// reading host memory across PCIe.
const COPY_SERVER_THREADS: u32 = 512;

/// The loaded kernel (a CUfunction) of each device, or why it did not load.
static COPY_SERVER_FNS: std::sync::Mutex<Vec<(i32, std::result::Result<usize, String>)>> =
    std::sync::Mutex::new(Vec::new());

/// Not in SYMBOLS: a driver without them still serves everything else, and
/// async I/O falls back to worker-side copies.
fn copy_server_symbols() -> bool {
    static PRESENT: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *PRESENT.get_or_init(|| {
        [
            &b"cuModuleLoadData"[..],
            b"cuModuleGetFunction",
            b"cuLaunchKernel",
            b"cuMemHostGetDevicePointer_v2",
        ]
        .iter()
        // SAFETY: a CudaRuntime exists, so libcuda is loaded; lookups only.
        .all(|name| unsafe { sys::culib().get::<*const c_void>(*name) }.is_ok())
    })
}

impl CudaRuntime {
    /// The copy-server kernel of `device`, loaded into its primary context
    /// on first use (by the thread enqueueing, never by an I/O worker).
    fn copy_server_fn(&self, device: i32) -> Result<usize> {
        let mut fns = COPY_SERVER_FNS.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((_, r)) = fns.iter().find(|(d, _)| *d == device) {
            return r
                .clone()
                .map_err(|why| Error::new(OpError::HipDriverError, why));
        }
        let r = self.load_copy_server(device);
        if let Err(e) = &r {
            log::info!("async I/O: the copy kernel does not load on device {device}: {e}");
        }
        fns.push((device, r.clone().map_err(|e| e.to_string())));
        r
    }

    fn load_copy_server(&self, device: i32) -> Result<usize> {
        if !copy_server_symbols() {
            return Err(Error::new(
                OpError::HipDriverError,
                "libcuda lacks cuModuleLoadData/cuLaunchKernel",
            ));
        }
        let _g = self.bind(device)?;
        let mut module: sys::CUmodule = std::ptr::null_mut();
        check(
            // SAFETY: a NUL-terminated PTX image; out-pointer to a local. The
            // module stays loaded for the life of the process.
            unsafe { sys::cuModuleLoadData(&mut module, COPY_SERVER_PTX.as_ptr().cast()) },
            "cuModuleLoadData(copy_server.ptx)",
        )?;
        let mut f: sys::CUfunction = std::ptr::null_mut();
        check(
            // SAFETY: the module just loaded; a NUL-terminated name.
            unsafe { sys::cuModuleGetFunction(&mut f, module, c"hipfs_copy_server".as_ptr()) },
            "cuModuleGetFunction(hipfs_copy_server)",
        )?;
        Ok(f as usize)
    }
}

// ======== end: copy server of stream-ordered async I/O ========
