//! cuFile's own C types. Every layout cuFile shares with hipFile (descriptor,
//! fs_ops, batch parameters and events, RDMA info, statistics) comes from
//! `hipfs_cabi`; the driver properties are cuFile's 56-byte struct.
#![allow(missing_docs)]

pub use hipfs_cabi::stats::{OpCounter, PerGpuStats, StatsLevel1, StatsLevel2, StatsLevel3};
pub use hipfs_cabi::types::*;
use std::ffi::c_uint;

/// `CUfileError_t` {err, cu_err}.
pub type CUfileError = CStatus;

/// `CUfileDrvProps_t.nvfs`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct CUfileNvfsProps {
    pub major_version: c_uint,
    pub minor_version: c_uint,
    pub poll_thresh_size: usize,
    pub max_direct_io_size: usize,
    pub dstatusflags: c_uint,
    pub dcontrolflags: c_uint,
}

/// `CUfileDrvProps_t` (56 bytes; sizes in KiB, the cache sizes 32-bit).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct CUfileDrvProps {
    pub nvfs: CUfileNvfsProps,
    pub fflags: c_uint,
    pub max_device_cache_size: c_uint,
    pub per_buffer_cache_size: c_uint,
    pub max_device_pinned_mem_size: c_uint,
    pub max_batch_io_size: c_uint,
    pub max_batch_io_timeout_msecs: c_uint,
}

/// `CUfileIOVec_t` of `cuFileReadv/Writev`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct CUfileIoVec {
    pub base: *mut std::ffi::c_void,
    pub len: usize,
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    #[test]
    fn driver_props_have_cufiles_56_byte_layout() {
        assert_eq!(size_of::<CUfileNvfsProps>(), 32);
        assert_eq!(size_of::<CUfileDrvProps>(), 56);
        assert_eq!(offset_of!(CUfileDrvProps, fflags), 32);
        assert_eq!(offset_of!(CUfileDrvProps, max_device_cache_size), 36);
        assert_eq!(offset_of!(CUfileDrvProps, per_buffer_cache_size), 40);
        assert_eq!(offset_of!(CUfileDrvProps, max_device_pinned_mem_size), 44);
        assert_eq!(offset_of!(CUfileDrvProps, max_batch_io_size), 48);
        assert_eq!(offset_of!(CUfileDrvProps, max_batch_io_timeout_msecs), 52);
        assert_eq!(size_of::<CUfileIoVec>(), 16);
    }
}
