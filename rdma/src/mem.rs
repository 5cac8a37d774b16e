//! Page-aligned, zeroed heap memory owned by the crate (message rings,
//! benchmark buffers).

use crate::error::{Error, Result};

pub(crate) struct PageBuffer {
    ptr: *mut u8,
    layout: std::alloc::Layout,
}

// SAFETY: a plain heap allocation; users synchronise access to its bytes.
unsafe impl Send for PageBuffer {}
// SAFETY: as above.
unsafe impl Sync for PageBuffer {}

impl PageBuffer {
    pub(crate) fn new(len: usize) -> Result<Self> {
        let layout = std::alloc::Layout::from_size_align(len.max(1), 4096)
            .map_err(|e| Error::InvalidArgument(format!("buffer of {len} bytes: {e}")))?;
        // SAFETY: layout has a non-zero size.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        if ptr.is_null() {
            return Err(Error::InvalidArgument(format!(
                "cannot allocate {len} bytes"
            )));
        }
        Ok(PageBuffer { ptr, layout })
    }

    pub(crate) fn ptr(&self) -> *mut u8 {
        self.ptr
    }

    pub(crate) fn len(&self) -> usize {
        self.layout.size()
    }
}

impl Drop for PageBuffer {
    fn drop(&mut self) {
        // SAFETY: allocated in new() with this layout.
        unsafe { std::alloc::dealloc(self.ptr, self.layout) };
    }
}
