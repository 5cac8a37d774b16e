//! hipFile's own C types: the 72-byte `hipFileDriverProps_t` (its cache
//! sizes are 64-bit, unlike cuFile's); every other layout is shared with
//! cuFile and lives in `hipfs_cabi::types`.
#![allow(missing_docs)]

pub use hipfs_cabi::stats::{OpCounter, PerGpuStats, StatsLevel1, StatsLevel2, StatsLevel3};
pub use hipfs_cabi::types::*;
use std::ffi::c_uint;

/// `hipFileError_t`.
pub type HipFileError = CStatus;
/// `hipFileDescr_t`.
pub type HipFileDescr = Descr;
/// `hipFileIOParams_t`.
pub type HipFileIoParams = IoParams;
/// `hipFileIOEvents_t`.
pub type HipFileIoEvents = IoEvents;

/// `hipFileDriverProps_t.nvfs`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct HipFileNvfsProps {
    pub major_version: c_uint,
    pub minor_version: c_uint,
    pub poll_thresh_size: u64,
    pub max_direct_io_size: u64,
    pub driver_status_flags: c_uint,
    pub driver_control_flags: c_uint,
}

/// `hipFileDriverProps_t` (sizes in KiB; the cache sizes are 64-bit, unlike cuFile).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct HipFileDriverProps {
    pub nvfs: HipFileNvfsProps,
    pub feature_flags: c_uint,
    pub max_device_cache_size: u64,
    pub per_buffer_cache_size: u64,
    pub max_device_pinned_mem_size: u64,
    pub max_batch_io_count: c_uint,
    pub max_batch_io_timeout_msecs: c_uint,
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    #[test]
    fn driver_props_have_the_lp64_c_layout() {
        assert_eq!(size_of::<HipFileNvfsProps>(), 32);
        assert_eq!(size_of::<HipFileDriverProps>(), 72);
        assert_eq!(offset_of!(HipFileDriverProps, feature_flags), 32);
        assert_eq!(offset_of!(HipFileDriverProps, max_device_cache_size), 40);
        assert_eq!(offset_of!(HipFileDriverProps, max_batch_io_count), 64);
        assert_eq!(
            offset_of!(HipFileDriverProps, max_batch_io_timeout_msecs),
            68
        );
    }
}
