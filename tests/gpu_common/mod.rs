//! What the GPU tests share: the runtime (or a printed reason to skip) and
//! device memory that frees itself.
#![allow(dead_code)]

use hipfs::gpu::{self, GpuRuntime};
use hipfs::Buffer;

/// The GPU runtime when it finds a device; otherwise prints why the test
/// skips and gives None.
pub fn gpu() -> Option<&'static dyn GpuRuntime> {
    let rt = gpu::runtime();
    if rt.device_count() == 0 {
        println!("skipped: no GPU ({})", gpu::selection_message());
        return None;
    }
    Some(rt)
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
