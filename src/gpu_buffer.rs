//! A [`Buffer`] over a device allocation without `unsafe` at the caller:
//! the buffer borrows the allocation, so it cannot outlive the memory it
//! describes. (Kept apart from `buffer.rs` and `gpu/` so it depends on the
//! public faces of both only.)

use crate::gpu::DeviceAllocation;
use crate::Buffer;

impl<'a> Buffer<'a> {
    /// A buffer covering all of `dev` (device memory, as `hipFileBufRegister`
    /// takes it), with `flags` as for [`Buffer::new`].
    pub fn from_device(dev: &'a DeviceAllocation<'_>, flags: i32) -> Buffer<'a> {
        // SAFETY: `dev` is a live device allocation of `dev.len()` bytes and
        // stays allocated while the returned buffer borrows it.
        unsafe { Buffer::new(dev.ptr() as *mut u8, dev.len(), flags) }
    }
}
