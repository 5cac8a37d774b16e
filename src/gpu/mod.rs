//! GPU runtimes behind one small trait, chosen at run time among those
//! compiled in. `host` (system memory) is always there; a runtime whose
//! library is missing is skipped with a log line, never a crash.

use crate::error::{Error, OpError, Result};
use std::sync::OnceLock;

mod host;
pub use host::HostRuntime;

/// What memory a pointer points at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemoryKind {
    /// Ordinary pageable host memory.
    Host,
    /// Host memory pinned by the GPU runtime.
    PinnedHost,
    /// Device memory.
    Device,
    /// Managed (unified) memory.
    Managed,
}

/// What the runtime knows of a pointer's allocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PointerInfo {
    pub kind: MemoryKind,
    /// First byte of the allocation holding the pointer.
    pub base: usize,
    /// Size of that allocation.
    pub size: usize,
    /// Device ordinal (-1 for host memory).
    pub device: i32,
}

/// A GPU runtime: pointer queries and the copies the bounce path needs.
pub trait GpuRuntime: Send + Sync {
    /// `cuda`, `hip` or `host`.
    fn name(&self) -> &'static str;
    /// Number of devices visible.
    fn device_count(&self) -> usize;
    /// The allocation holding `ptr`, or `None` when the runtime does not know
    /// the pointer (plain pageable host memory).
    fn pointer_info(&self, ptr: usize) -> Option<PointerInfo>;
    /// Copies host bytes to device memory, synchronously.
    fn copy_to_device(&self, dst: usize, src: &[u8]) -> Result<()>;
    /// Copies device bytes to host memory, synchronously.
    fn copy_from_device(&self, dst: &mut [u8], src: usize) -> Result<()>;
    /// Runs `f` when `stream` reaches this point (stream-ordered async I/O).
    fn launch_host_func(&self, stream: usize, f: Box<dyn FnOnce() + Send>) -> Result<()>;
    /// Waits until everything enqueued on `stream` has run.
    fn stream_synchronize(&self, stream: usize) -> Result<()>;
    /// Makes `stream` wait, on the device and without holding a host
    /// thread, until the 32-bit word at `flag` (memory from
    /// [`GpuRuntime::alloc_pinned`]) is at least `value` (wrapping compare).
    /// `Ok(false)`: this runtime cannot, nothing was enqueued. Async I/O
    /// uses it so the I/O's own GPU calls never run while a host function
    /// holds the stream (which can deadlock against implicit synchronisation).
    fn stream_wait_value32(&self, stream: usize, flag: usize, value: u32) -> Result<bool> {
        let _ = (stream, flag, value);
        Ok(false)
    }

    // What follows is what the pipelined bounce path and the GPU tests need.
    // The defaults say "not here", which is right for the host runtime.

    /// Like [`GpuRuntime::pointer_info`], but a pointer the runtime knows and
    /// hipFile cannot use is an error (`HipMemoryTypeInvalid`).
    fn check_pointer(&self, ptr: usize) -> Result<Option<PointerInfo>> {
        Ok(self.pointer_info(ptr))
    }
    /// Makes `device` the calling thread's device until the guard drops
    /// (which restores what was current before).
    fn bind(&self, device: i32) -> Result<DeviceGuard> {
        let _ = device;
        Err(no_gpu())
    }
    /// `len` bytes of pinned host memory usable by every device.
    fn alloc_pinned(&self, len: usize) -> Result<usize> {
        let _ = len;
        Err(no_gpu())
    }
    /// Frees what [`GpuRuntime::alloc_pinned`] returned.
    fn free_pinned(&self, ptr: usize) {
        let _ = ptr;
    }
    /// Pins (page-locks) existing host memory for DMA.
    fn register_host(&self, ptr: usize, len: usize) -> Result<()> {
        let _ = (ptr, len);
        Err(no_gpu())
    }
    /// Undoes [`GpuRuntime::register_host`].
    fn unregister_host(&self, ptr: usize) {
        let _ = ptr;
    }
    /// A new non-blocking stream on `device` (the device must be bound).
    fn stream_create(&self, device: i32) -> Result<usize> {
        let _ = device;
        Err(no_gpu())
    }
    /// Destroys a stream made by [`GpuRuntime::stream_create`].
    fn stream_destroy(&self, stream: usize) {
        let _ = stream;
    }
    /// Enqueues a host-to-device copy on `stream`.
    ///
    /// # Safety
    /// `src` must stay valid and unchanged for `len` bytes until the copy is
    /// known complete (event or stream synchronisation); `dst..dst+len` must
    /// be device memory of the stream's device.
    unsafe fn copy_to_device_async(
        &self,
        dst: usize,
        src: *const u8,
        len: usize,
        stream: usize,
    ) -> Result<()> {
        let _ = (dst, src, len, stream);
        Err(no_gpu())
    }
    /// Enqueues a device-to-host copy on `stream`.
    ///
    /// # Safety
    /// `dst` must stay valid and untouched for `len` bytes until the copy is
    /// known complete.
    unsafe fn copy_from_device_async(
        &self,
        dst: *mut u8,
        src: usize,
        len: usize,
        stream: usize,
    ) -> Result<()> {
        let _ = (dst, src, len, stream);
        Err(no_gpu())
    }
    /// A new event (no timing) on the bound device.
    fn event_create(&self) -> Result<usize> {
        Err(no_gpu())
    }
    /// Records `event` at the current end of `stream`.
    fn event_record(&self, event: usize, stream: usize) -> Result<()> {
        let _ = (event, stream);
        Err(no_gpu())
    }
    /// Waits until `event` has completed (immediately if never recorded).
    fn event_synchronize(&self, event: usize) -> Result<()> {
        let _ = event;
        Err(no_gpu())
    }
    /// Destroys an event.
    fn event_destroy(&self, event: usize) {
        let _ = event;
    }
    /// `len` bytes of device memory on `device` (tests and benchmarks).
    fn device_alloc(&self, device: i32, len: usize) -> Result<usize> {
        let _ = (device, len);
        Err(no_gpu())
    }
    /// Frees what [`GpuRuntime::device_alloc`] returned.
    fn device_free(&self, ptr: usize) {
        let _ = ptr;
    }
    /// Sets `len` bytes of device memory to `byte`.
    fn device_memset(&self, ptr: usize, byte: u8, len: usize) -> Result<()> {
        let _ = (ptr, byte, len);
        Err(no_gpu())
    }
    /// The vendor's peer-to-peer file read straight into device memory
    /// (AMD's `hipAmdFileRead`), where the runtime has one.
    fn p2p_file_io(&self) -> Option<&dyn P2pFileIo> {
        None
    }
}

/// A runtime's file-to-device DMA without a host bounce.
pub trait P2pFileIo: Send + Sync {
    /// Reads `len` bytes at `offset` of the O_DIRECT `fd` into device memory.
    /// `Ok(None)` means "this runtime cannot do it here; use the bounce path".
    fn read(&self, fd: i32, dev: usize, len: usize, offset: u64) -> Result<Option<usize>>;
    /// Writes `len` bytes of device memory to the O_DIRECT `fd` at `offset`.
    fn write(&self, fd: i32, dev: usize, len: usize, offset: u64) -> Result<Option<usize>>;
}

/// Restores the thread's previous device context when dropped.
pub struct DeviceGuard {
    restore: Option<Box<dyn FnOnce()>>,
}

impl DeviceGuard {
    /// A guard that runs `restore` on drop (`None`: nothing to undo).
    pub fn new(restore: Option<Box<dyn FnOnce()>>) -> DeviceGuard {
        DeviceGuard { restore }
    }
}

impl Drop for DeviceGuard {
    fn drop(&mut self) {
        if let Some(f) = self.restore.take() {
            f();
        }
    }
}

/// Device memory allocated through a runtime, freed when dropped.
pub struct DeviceAllocation<'a> {
    rt: &'a dyn GpuRuntime,
    ptr: usize,
    len: usize,
}

impl<'a> DeviceAllocation<'a> {
    /// `len` bytes on `device`.
    pub fn new(rt: &'a dyn GpuRuntime, device: i32, len: usize) -> Result<DeviceAllocation<'a>> {
        let ptr = rt.device_alloc(device, len)?;
        Ok(DeviceAllocation { rt, ptr, len })
    }
    /// The device address of the first byte.
    pub fn ptr(&self) -> usize {
        self.ptr
    }
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for DeviceAllocation<'_> {
    fn drop(&mut self) {
        self.rt.device_free(self.ptr);
    }
}

fn no_gpu() -> Error {
    Error::new(OpError::DeviceNotFound, "no GPU runtime is active")
}

static RUNTIME: OnceLock<Box<dyn GpuRuntime>> = OnceLock::new();

/// The runtime in use: the first compiled-in GPU runtime that finds a device,
/// else `host`. `HIPFS_GPU_RUNTIME=host|cuda|hip` picks one explicitly.
pub fn runtime() -> &'static dyn GpuRuntime {
    RUNTIME.get_or_init(select).as_ref()
}

/// Every runtime compiled in, with why each is or is not usable.
pub fn probe_report() -> Vec<(String, std::result::Result<usize, String>)> {
    let mut out = Vec::new();
    for (name, probe) in candidates() {
        out.push((name.to_string(), probe().map(|rt| rt.device_count())));
    }
    out.push(("host".to_string(), Ok(0)));
    out
}

type Probe = fn() -> std::result::Result<Box<dyn GpuRuntime>, String>;

#[allow(clippy::vec_init_then_push)]
fn candidates() -> Vec<(&'static str, Probe)> {
    // Which pushes exist depends on the features compiled in.
    #[allow(unused_mut)]
    let mut v: Vec<(&'static str, Probe)> = Vec::new();
    #[cfg(feature = "cuda")]
    v.push(("cuda", cuda_probe));
    #[cfg(feature = "hip")]
    v.push(("hip", hip_probe));
    v
}

#[cfg(feature = "cuda")]
fn cuda_probe() -> std::result::Result<Box<dyn GpuRuntime>, String> {
    cuda::CudaRuntime::probe().map(|r| Box::new(r) as Box<dyn GpuRuntime>)
}

#[cfg(feature = "hip")]
fn hip_probe() -> std::result::Result<Box<dyn GpuRuntime>, String> {
    hip::HipRuntime::probe().map(|r| Box::new(r) as Box<dyn GpuRuntime>)
}

#[cfg(feature = "cuda")]
pub mod cuda;
#[cfg(feature = "hip")]
pub mod hip;

static SELECTION: OnceLock<String> = OnceLock::new();

/// Why the runtime in use was chosen, in one line (also logged once).
pub fn selection_message() -> &'static str {
    runtime();
    SELECTION.get().map_or("", String::as_str)
}

fn select() -> Box<dyn GpuRuntime> {
    let wanted = std::env::var("HIPFS_GPU_RUNTIME").ok();
    let (rt, why) = choose(wanted.as_deref());
    log::info!("{why}");
    let _ = SELECTION.set(why);
    rt
}

fn choose(wanted: Option<&str>) -> (Box<dyn GpuRuntime>, String) {
    if wanted == Some("host") {
        return (
            Box::new(HostRuntime::new()),
            "GPU runtime: host (HIPFS_GPU_RUNTIME=host)".to_string(),
        );
    }
    let mut tried = Vec::new();
    for (name, probe) in candidates() {
        if wanted.is_some_and(|w| w != name) {
            continue;
        }
        match probe() {
            Ok(rt) if rt.device_count() > 0 => {
                let msg = format!("GPU runtime: {name} with {} device(s)", rt.device_count());
                return (rt, msg);
            }
            Ok(_) => tried.push(format!("{name}: no device")),
            Err(why) => tried.push(format!("{name}: {why}")),
        }
    }
    if let Some(w) = wanted.filter(|w| !candidates().iter().any(|(n, _)| n == w)) {
        tried.push(format!("HIPFS_GPU_RUNTIME={w} is not compiled in"));
    }
    let detail = if tried.is_empty() {
        "no GPU runtime compiled in".to_string()
    } else {
        tried.join("; ")
    };
    (
        Box::new(HostRuntime::new()),
        format!("GPU runtime: host memory only ({detail})"),
    )
}

/// Classifies `ptr`: the runtime's answer, or pageable host memory.
pub fn classify(ptr: usize) -> PointerInfo {
    runtime().pointer_info(ptr).unwrap_or(PointerInfo {
        kind: MemoryKind::Host,
        base: ptr,
        size: usize::MAX - ptr,
        device: -1,
    })
}

/// Checks that `[ptr, ptr+len)` lies in one allocation the runtime or the
/// kernel knows, with the codes the spec gives.
pub fn validate_range(ptr: usize, len: usize) -> Result<PointerInfo> {
    if ptr == 0 {
        return Err(Error::new(OpError::InvalidValue, "buffer pointer is null"));
    }
    let end = ptr
        .checked_add(len)
        .ok_or_else(|| Error::new(OpError::HipPointerRangeError, "pointer + length overflows"))?;
    match runtime().check_pointer(ptr)? {
        Some(info) => {
            if end > info.base.saturating_add(info.size) {
                return Err(Error::new(
                    OpError::HipPointerRangeError,
                    format!(
                        "range of {len} bytes at {ptr:#x} passes the end of its {}-byte allocation",
                        info.size
                    ),
                ));
            }
            Ok(info)
        }
        None => {
            host::check_mapped(ptr, len)?;
            Ok(PointerInfo {
                kind: MemoryKind::Host,
                base: ptr,
                size: len,
                device: -1,
            })
        }
    }
}
