//! The HIP runtime: AMD GPUs through libamdhip64 (`hip-sys`, cargo feature
//! `hip`). Where the runtime exports AMD's peer-to-peer file entry points
//! (`hipAmdFileRead`/`hipAmdFileWrite`, not in any public header, so found
//! with `dlsym`), aligned O_DIRECT requests go straight between the file
//! and device memory; when the kernel says it cannot (ENODEV, EREMOTEIO:
//! no AIS support, no P2P route) the bounce path takes over, as upstream
//! hipFile does.

use super::{
    DeviceGuard, DevicePtr, EventId, GpuRuntime, MemoryKind, P2pFileIo, PointerInfo, StreamId,
};
use crate::error::{Error, OpError, Result};
use hip_sys::hiprt as hip;
use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, Ordering};

/// `hipPointerAttribute_t` with the memory type kept as a plain number: its
/// values changed between ROCm 5 and 6, and a Rust enum must never receive
/// a value it does not list.
#[repr(C)]
struct RawPointerAttributes {
    memory_type: u32,
    device: i32,
    device_pointer: *mut c_void,
    host_pointer: *mut c_void,
    is_managed: i32,
    allocation_flags: u32,
}

#[link(name = "amdhip64")]
extern "C" {
    #[link_name = "hipPointerGetAttributes"]
    fn raw_pointer_get_attributes(attr: *mut RawPointerAttributes, ptr: *const c_void) -> u32;
    /// Used for stream-ordered host functions: `hipLaunchHostFunc` is missing
    /// from older runtimes (Debian's ROCm 5.2), the callback API never is.
    /// The status is taken as a plain number for the same reason as above.
    #[link_name = "hipStreamAddCallback"]
    fn raw_stream_add_callback(
        stream: *mut c_void,
        callback: Option<unsafe extern "C" fn(*mut c_void, u32, *mut c_void)>,
        data: *mut c_void,
        flags: u32,
    ) -> u32;
}

/// The file handle `hipAmdFileRead` takes: an fd in an 8-byte union.
#[repr(C)]
#[derive(Clone, Copy)]
union AmdFileHandle {
    handle: *mut c_void,
    fd: i32,
    pad: [u8; 8],
}

type AmdFileIo =
    unsafe extern "C" fn(AmdFileHandle, *mut c_void, u64, i64, *mut u64, *mut i32) -> u32;

struct Ais {
    read: AmdFileIo,
    write: AmdFileIo,
    /// Set once the kernel said it cannot: later requests bounce directly.
    refused: AtomicBool,
}

/// AMD GPUs through the HIP runtime.
pub struct HipRuntime {
    devices: usize,
    /// ROCm 6 renumbered `hipMemoryType`.
    rocm6: bool,
    ais: Option<Ais>,
}

fn check(r: hip::hipError_t, what: &str) -> Result<()> {
    if r == hip::hipError_t::hipSuccess {
        return Ok(());
    }
    // SAFETY: hipGetErrorString returns a static NUL-terminated string.
    let text = unsafe { std::ffi::CStr::from_ptr(hip::hipGetErrorString(r)) };
    Err(Error::new(
        OpError::HipDriverError,
        format!("{what}: {} ({r:?})", text.to_string_lossy()),
    ))
}

fn symbol(name: &std::ffi::CStr) -> Option<AmdFileIo> {
    // SAFETY: dlsym on the global namespace (libamdhip64 is linked in).
    let p = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) };
    // SAFETY: when present, the symbol has hipAmdFileRead's C signature.
    (!p.is_null()).then(|| unsafe { std::mem::transmute::<*mut c_void, AmdFileIo>(p) })
}

impl HipRuntime {
    /// Asks the HIP runtime for devices.
    pub fn probe() -> std::result::Result<HipRuntime, String> {
        let mut count = 0;
        // SAFETY: out-pointer to a local. With no AMD GPU this returns
        // hipErrorNoDevice, which is "zero devices", not a failure.
        let r = unsafe { hip::hipGetDeviceCount(&mut count) };
        if r == hip::hipError_t::hipErrorNoDevice {
            count = 0;
        } else if r != hip::hipError_t::hipSuccess {
            return Err(format!("hipGetDeviceCount: {r:?}"));
        }
        let mut version = 0;
        // SAFETY: out-pointer to a local.
        unsafe { hip::hipRuntimeGetVersion(&mut version) };
        let ais = match (symbol(c"hipAmdFileRead"), symbol(c"hipAmdFileWrite")) {
            (Some(read), Some(write)) => Some(Ais {
                read,
                write,
                refused: AtomicBool::new(false),
            }),
            _ => None,
        };
        Ok(HipRuntime {
            devices: usize::try_from(count).unwrap_or(0),
            rocm6: version >= 60_000_000,
            ais,
        })
    }

    /// Whether the runtime exports the peer-to-peer file entry points.
    pub fn has_p2p(&self) -> bool {
        self.ais.is_some()
    }

    fn kind(&self, raw: u32, managed: bool) -> Option<std::result::Result<MemoryKind, u32>> {
        if managed {
            return Some(Ok(MemoryKind::Managed));
        }
        // ROCm 5: Host 0, Device 1, Array 2, Unified 3.
        // ROCm 6: Unregistered 0, Host 1, Device 2, Managed 3, Array 10, Unified 11.
        Some(match (self.rocm6, raw) {
            (true, 0) => return None,
            (true, 1) | (false, 0) => Ok(MemoryKind::PinnedHost),
            (true, 2) | (false, 1) => Ok(MemoryKind::Device),
            (true, 3) | (true, 11) | (false, 3) => Ok(MemoryKind::Managed),
            (_, other) => Err(other),
        })
    }
}

unsafe extern "C" fn run_boxed(_stream: *mut c_void, _status: u32, data: *mut c_void) {
    // SAFETY: data is the Box<Box<dyn FnOnce>> leaked by launch_host_func;
    // the runtime calls each host function once.
    let f = unsafe { Box::from_raw(data as *mut Box<dyn FnOnce() + Send>) };
    if std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).is_err() {
        log::error!("a stream-ordered host function panicked");
    }
}

impl GpuRuntime for HipRuntime {
    fn name(&self) -> &'static str {
        "hip"
    }

    fn device_count(&self) -> usize {
        self.devices
    }

    fn pointer_info(&self, ptr: usize) -> Option<PointerInfo> {
        self.check_pointer(ptr).ok().flatten()
    }

    fn check_pointer(&self, ptr: usize) -> Result<Option<PointerInfo>> {
        let mut a = RawPointerAttributes {
            memory_type: 0,
            device: -1,
            device_pointer: std::ptr::null_mut(),
            host_pointer: std::ptr::null_mut(),
            is_managed: 0,
            allocation_flags: 0,
        };
        // SAFETY: a is a valid out-struct of the C layout.
        let r = unsafe { raw_pointer_get_attributes(&mut a, ptr as *const c_void) };
        if r != 0 {
            // Unknown to HIP: plain host memory (the caller checks the mapping).
            return Ok(None);
        }
        let kind = match self.kind(a.memory_type, a.is_managed != 0) {
            None => return Ok(None),
            Some(Ok(k)) => k,
            Some(Err(t)) => {
                return Err(Error::new(
                    OpError::HipMemoryTypeInvalid,
                    format!("{ptr:#x} is HIP memory of type {t}, which file I/O cannot address"),
                ))
            }
        };
        let mut base: hip::hipDeviceptr_t = std::ptr::null_mut();
        let mut size = 0usize;
        // SAFETY: out-pointers to locals.
        let r =
            unsafe { hip::hipMemGetAddressRange(&mut base, &mut size, ptr as hip::hipDeviceptr_t) };
        let (base, size) = if r == hip::hipError_t::hipSuccess && size > 0 {
            (base as usize, size)
        } else {
            (ptr, usize::MAX - ptr)
        };
        Ok(Some(PointerInfo {
            kind,
            base,
            size,
            device: if kind == MemoryKind::PinnedHost {
                -1
            } else {
                a.device
            },
        }))
    }

    unsafe fn copy_to_device(&self, dst: DevicePtr, src: &[u8]) -> Result<()> {
        let dst = dst.0 as usize;
        check(
            // SAFETY: src is a live slice; dst the caller's device range.
            unsafe {
                hip::hipMemcpy(
                    dst as *mut c_void,
                    src.as_ptr().cast(),
                    src.len(),
                    hip::hipMemcpyKind::hipMemcpyHostToDevice,
                )
            },
            "hipMemcpy",
        )
    }

    unsafe fn copy_from_device(&self, dst: &mut [u8], src: DevicePtr) -> Result<()> {
        let src = src.0 as usize;
        check(
            // SAFETY: dst is a live mutable slice.
            unsafe {
                hip::hipMemcpy(
                    dst.as_mut_ptr().cast(),
                    src as *const c_void,
                    dst.len(),
                    hip::hipMemcpyKind::hipMemcpyDeviceToHost,
                )
            },
            "hipMemcpy",
        )
    }

    unsafe fn launch_host_func(&self, stream: StreamId, f: Box<dyn FnOnce() + Send>) -> Result<()> {
        let stream = stream.0;
        let data = Box::into_raw(Box::new(f));
        // SAFETY: run_boxed owns data once the stream reaches it (the
        // runtime calls each callback exactly once); flags must be 0.
        let r = unsafe {
            raw_stream_add_callback(stream as *mut c_void, Some(run_boxed), data.cast(), 0)
        };
        if r != 0 {
            // SAFETY: refused, so never handed over.
            drop(unsafe { Box::from_raw(data) });
            return Err(Error::new(
                OpError::HipDriverError,
                format!("hipStreamAddCallback failed (hipError {r})"),
            ));
        }
        Ok(())
    }

    unsafe fn stream_synchronize(&self, stream: StreamId) -> Result<()> {
        let stream = stream.0;
        check(
            // SAFETY: a stream handle (0: the null stream).
            unsafe { hip::hipStreamSynchronize(stream as hip::hipStream_t) },
            "hipStreamSynchronize",
        )
    }

    fn bind(&self, device: i32) -> Result<DeviceGuard> {
        let mut prev = 0;
        // SAFETY: out-pointer to a local.
        check(unsafe { hip::hipGetDevice(&mut prev) }, "hipGetDevice")?;
        if prev == device {
            return Ok(DeviceGuard::new(None));
        }
        // SAFETY: plain call.
        check(unsafe { hip::hipSetDevice(device) }, "hipSetDevice")?;
        Ok(DeviceGuard::new(Some(Box::new(move || {
            // SAFETY: restoring the thread's previous device.
            unsafe { hip::hipSetDevice(prev) };
        }))))
    }

    fn alloc_pinned(&self, len: usize) -> Result<usize> {
        let mut p: *mut c_void = std::ptr::null_mut();
        check(
            // SAFETY: out-pointer; flag 1 = hipHostMallocPortable.
            unsafe { hip::hipHostMalloc(&mut p, len.max(1), 1) },
            "hipHostMalloc",
        )?;
        Ok(p as usize)
    }

    unsafe fn free_pinned(&self, ptr: usize) {
        // SAFETY: from hipHostMalloc, freed once.
        unsafe { hip::hipHostFree(ptr as *mut c_void) };
    }

    unsafe fn register_host(&self, ptr: usize, len: usize) -> Result<()> {
        check(
            // SAFETY: the caller owns the range; flag 1 = hipHostRegisterPortable.
            unsafe { hip::hipHostRegister(ptr as *mut c_void, len, 1) },
            "hipHostRegister",
        )
    }

    unsafe fn unregister_host(&self, ptr: usize) {
        // SAFETY: registered by register_host.
        unsafe { hip::hipHostUnregister(ptr as *mut c_void) };
    }

    fn stream_create(&self, device: i32) -> Result<StreamId> {
        let _g = self.bind(device)?;
        let mut s: hip::hipStream_t = std::ptr::null_mut();
        check(
            // SAFETY: out-pointer; flag 1 = hipStreamNonBlocking.
            unsafe { hip::hipStreamCreateWithFlags(&mut s, 1) },
            "hipStreamCreateWithFlags",
        )?;
        Ok(StreamId(s as usize))
    }

    unsafe fn stream_destroy(&self, stream: StreamId) {
        let stream = stream.0;
        // SAFETY: from stream_create, destroyed once.
        unsafe { hip::hipStreamDestroy(stream as hip::hipStream_t) };
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
            // SAFETY: forwarded caller guarantees (HIP's signature takes *mut but only reads).
            unsafe {
                hip::hipMemcpyHtoDAsync(
                    dst as hip::hipDeviceptr_t,
                    src as *mut c_void,
                    len,
                    stream as hip::hipStream_t,
                )
            },
            "hipMemcpyHtoDAsync",
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
                hip::hipMemcpyDtoDAsync(
                    dst as hip::hipDeviceptr_t,
                    src as hip::hipDeviceptr_t,
                    len,
                    stream as hip::hipStream_t,
                )
            },
            "hipMemcpyDtoDAsync",
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
                hip::hipMemcpyDtoHAsync(
                    dst.cast(),
                    src as hip::hipDeviceptr_t,
                    len,
                    stream as hip::hipStream_t,
                )
            },
            "hipMemcpyDtoHAsync",
        )
    }

    fn event_create(&self) -> Result<EventId> {
        let mut e: hip::hipEvent_t = std::ptr::null_mut();
        check(
            // SAFETY: out-pointer; flag 2 = hipEventDisableTiming.
            unsafe { hip::hipEventCreateWithFlags(&mut e, 2) },
            "hipEventCreateWithFlags",
        )?;
        Ok(EventId(e as usize))
    }

    unsafe fn event_record(&self, event: EventId, stream: StreamId) -> Result<()> {
        let stream = stream.0;
        let event = event.0;
        check(
            // SAFETY: handles from event_create / stream_create.
            unsafe { hip::hipEventRecord(event as hip::hipEvent_t, stream as hip::hipStream_t) },
            "hipEventRecord",
        )
    }

    unsafe fn event_synchronize(&self, event: EventId) -> Result<()> {
        let event = event.0;
        check(
            // SAFETY: handle from event_create.
            unsafe { hip::hipEventSynchronize(event as hip::hipEvent_t) },
            "hipEventSynchronize",
        )
    }

    unsafe fn event_query(&self, event: EventId) -> Result<bool> {
        let event = event.0;
        // SAFETY: handle from event_create.
        match unsafe { hip::hipEventQuery(event as hip::hipEvent_t) } {
            hip::hipError_t::hipErrorNotReady => Ok(false),
            r => check(r, "hipEventQuery").map(|()| true),
        }
    }

    unsafe fn event_destroy(&self, event: EventId) {
        let event = event.0;
        // SAFETY: from event_create, destroyed once.
        unsafe { hip::hipEventDestroy(event as hip::hipEvent_t) };
    }

    fn device_alloc(&self, device: i32, len: usize) -> Result<DevicePtr> {
        let _g = self.bind(device)?;
        let mut p: *mut c_void = std::ptr::null_mut();
        // SAFETY: out-pointer to a local.
        check(unsafe { hip::hipMalloc(&mut p, len.max(1)) }, "hipMalloc")?;
        Ok(DevicePtr(p as u64))
    }

    unsafe fn device_free(&self, ptr: DevicePtr) {
        let ptr = ptr.0 as usize;
        // SAFETY: from device_alloc, freed once.
        unsafe { hip::hipFree(ptr as *mut c_void) };
    }

    unsafe fn device_memset(&self, ptr: DevicePtr, byte: u8, len: usize) -> Result<()> {
        let ptr = ptr.0 as usize;
        check(
            // SAFETY: the caller's device range.
            unsafe { hip::hipMemset(ptr as *mut c_void, byte as i32, len) },
            "hipMemset",
        )?;
        check(
            // SAFETY: plain call.
            unsafe { hip::hipDeviceSynchronize() },
            "hipDeviceSynchronize",
        )
    }

    fn p2p_file_io(&self) -> Option<&dyn P2pFileIo> {
        match &self.ais {
            Some(a) if !a.refused.load(Ordering::Relaxed) => Some(a),
            _ => None,
        }
    }
}

impl Ais {
    fn call(
        &self,
        f: AmdFileIo,
        what: &str,
        fd: i32,
        dev: usize,
        len: usize,
        offset: u64,
    ) -> Result<Option<usize>> {
        // Zero all eight bytes, then set the fd in the low four.
        let mut handle = AmdFileHandle { pad: [0; 8] };
        handle.fd = fd;
        let mut copied: u64 = 0;
        let mut status: i32 = 0;
        // SAFETY: the signature of hipAmdFileRead/Write; dev..dev+len is
        // validated device memory; out-pointers to locals.
        let r = unsafe {
            f(
                handle,
                dev as *mut c_void,
                len as u64,
                offset as i64,
                &mut copied,
                &mut status,
            )
        };
        let errno = status.abs();
        if errno == libc::ENODEV || errno == libc::EREMOTEIO {
            if !self.refused.swap(true, Ordering::Relaxed) {
                log::info!(
                    "hipfs: {what} reports {} (no peer-to-peer route); using the bounce path",
                    std::io::Error::from_raw_os_error(errno)
                );
            }
            return Ok(None);
        }
        if errno != 0 {
            return Err(Error::system(errno, what));
        }
        if r != 0 {
            return Err(Error::new(
                OpError::HipDriverError,
                format!("{what} failed (hipError {r})"),
            ));
        }
        // Some runtime versions never fill in the byte count; the kernel
        // fails short transfers (EIO), so success means all of it.
        Ok(Some(if copied == 0 { len } else { copied as usize }))
    }
}

impl P2pFileIo for Ais {
    fn read(&self, fd: i32, dev: usize, len: usize, offset: u64) -> Result<Option<usize>> {
        self.call(self.read, "hipAmdFileRead", fd, dev, len, offset)
    }

    fn write(&self, fd: i32, dev: usize, len: usize, offset: u64) -> Result<Option<usize>> {
        self.call(self.write, "hipAmdFileWrite", fd, dev, len, offset)
    }
}
