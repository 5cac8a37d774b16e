//! The CUDA runtime (cudarc, loaded dynamically). Being written: until then
//! the probe reports it unavailable and the host runtime is used.

use super::GpuRuntime;

/// NVIDIA GPUs through the CUDA driver API.
pub struct CudaRuntime;

impl CudaRuntime {
    /// Finds libcuda and its devices.
    pub fn probe() -> Result<CudaRuntime, String> {
        Err("the CUDA runtime is not built yet".to_string())
    }
}

impl GpuRuntime for CudaRuntime {
    fn name(&self) -> &'static str {
        "cuda"
    }
    fn device_count(&self) -> usize {
        0
    }
    fn pointer_info(&self, _ptr: usize) -> Option<super::PointerInfo> {
        None
    }
    fn copy_to_device(&self, _dst: usize, _src: &[u8]) -> crate::Result<()> {
        Err(crate::Error::new(crate::OpError::DeviceNotFound, "no CUDA"))
    }
    fn copy_from_device(&self, _dst: &mut [u8], _src: usize) -> crate::Result<()> {
        Err(crate::Error::new(crate::OpError::DeviceNotFound, "no CUDA"))
    }
    fn launch_host_func(&self, _s: usize, _f: Box<dyn FnOnce() + Send>) -> crate::Result<()> {
        Err(crate::Error::new(crate::OpError::DeviceNotFound, "no CUDA"))
    }
    fn stream_synchronize(&self, _s: usize) -> crate::Result<()> {
        Err(crate::Error::new(crate::OpError::DeviceNotFound, "no CUDA"))
    }
}
