//! What the GPU tests share: the runtime (a failure where it is missing) and
//! device memory that frees itself.
#![allow(dead_code)]

use hipfs::gpu::{self, GpuRuntime};
use hipfs::Buffer;

/// The GPU runtime. The tests that call this are ignored by the harness
/// where the build found no GPU (`hipfs_gpu`), so a missing device here is a
/// failure, never a silent pass.
pub fn gpu() -> &'static dyn GpuRuntime {
    let rt = gpu::runtime();
    assert!(
        rt.device_count() > 0,
        "no GPU ({}); this test is ignored on machines without one unless HIPFS_REQUIRE_GPU=1",
        gpu::selection_message()
    );
    rt
}

/// Device memory on GPU 0, freed on drop.
pub struct Dev {
    pub rt: &'static dyn GpuRuntime,
    pub ptr: usize,
    pub len: usize,
}

impl Dev {
    pub fn new(rt: &'static dyn GpuRuntime, len: usize) -> Dev {
        Dev {
            rt,
            ptr: rt.device_alloc(0, len).unwrap().addr(),
            len,
        }
    }
    /// `len` bytes, every one set to `byte`.
    pub fn filled(rt: &'static dyn GpuRuntime, len: usize, byte: u8) -> Dev {
        let d = Dev::new(rt, len);
        // SAFETY: the test's own live device allocation, in range.
        unsafe { rt.device_memset(hipfs::gpu::DevicePtr::from_addr(d.ptr), byte, len) }.unwrap();
        d
    }
    /// `n` bytes from offset `off`, copied to the host.
    pub fn fetch_at(&self, off: usize, n: usize) -> Vec<u8> {
        let mut v = vec![0u8; n];
        // SAFETY: the test's own live device allocation, in range.
        unsafe {
            self.rt
                .copy_from_device(&mut v, hipfs::gpu::DevicePtr::from_addr(self.ptr + off))
        }
        .unwrap();
        v
    }
    /// The whole allocation, copied to the host.
    pub fn fetch(&self) -> Vec<u8> {
        self.fetch_at(0, self.len)
    }
    pub fn buffer(&self) -> Buffer<'static> {
        // SAFETY: ptr is a live device allocation of len bytes that outlives the Buffer.
        unsafe { Buffer::new(self.ptr as *mut u8, self.len, 0) }
    }
}

impl Drop for Dev {
    fn drop(&mut self) {
        // SAFETY: allocated by this test, freed once, no longer used.
        unsafe {
            self.rt
                .device_free(hipfs::gpu::DevicePtr::from_addr(self.ptr))
        };
    }
}
