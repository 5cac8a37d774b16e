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

fn candidates() -> Vec<(&'static str, Probe)> {
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

fn select() -> Box<dyn GpuRuntime> {
    let wanted = std::env::var("HIPFS_GPU_RUNTIME").ok();
    if wanted.as_deref() == Some("host") {
        return Box::new(HostRuntime::new());
    }
    for (name, probe) in candidates() {
        if wanted.as_deref().is_some_and(|w| w != name) {
            continue;
        }
        match probe() {
            Ok(rt) if rt.device_count() > 0 => {
                log::info!("GPU runtime {name}: {} device(s)", rt.device_count());
                return rt;
            }
            Ok(_) => log::info!("GPU runtime {name}: no device; using host memory"),
            Err(why) => log::info!("GPU runtime {name} unavailable ({why}); using host memory"),
        }
    }
    Box::new(HostRuntime::new())
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
    match runtime().pointer_info(ptr) {
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
