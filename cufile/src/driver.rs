//! Driver open/close, use count, properties and version.

use crate::status;
use crate::types::{CUfileDrvProps, CUfileError, CUfileNvfsProps};
use hipfs_cabi::{ffi_value, invalid, write_out};
use std::ffi::{c_int, c_long};

/// Opens the driver (one more reference).
#[no_mangle]
pub extern "C" fn cuFileDriverOpen() -> CUfileError {
    log::debug!("{}: cuFileDriverOpen", crate::IDENT);
    // This library's copy of the core answers as cuFile (see set_cufile_rules).
    hipfs::io::set_cufile_rules(true);
    status(hipfs::driver_open)
}

/// Drops one reference; at zero every handle and buffer is deregistered.
/// `cufile.h` maps `cuFileDriverClose` to this symbol.
#[no_mangle]
pub extern "C" fn cuFileDriverClose_v2() -> CUfileError {
    status(hipfs::driver_close)
}

/// The pre-1.4 name, which `dlsym` users (cuda-python) look up literally.
#[no_mangle]
pub extern "C" fn cuFileDriverClose() -> CUfileError {
    cuFileDriverClose_v2()
}

/// The driver's reference count.
#[no_mangle]
pub extern "C" fn cuFileUseCount() -> c_long {
    ffi_value(-1, || hipfs::use_count() as c_long)
}

fn kb32(v: u64) -> u32 {
    u32::try_from(v).unwrap_or(u32::MAX)
}

/// Fills `*props` (sizes in KiB; cache sizes saturate at `UINT_MAX`).
///
/// # Safety
/// `props` is NULL or points to a writable `CUfileDrvProps_t`.
#[no_mangle]
pub unsafe extern "C" fn cuFileDriverGetProperties(props: *mut CUfileDrvProps) -> CUfileError {
    status(|| {
        if props.is_null() {
            return Err(invalid("props is NULL"));
        }
        let p = hipfs::driver_get_properties()?;
        let out = CUfileDrvProps {
            nvfs: CUfileNvfsProps {
                major_version: p.major_version,
                minor_version: p.minor_version,
                poll_thresh_size: p.poll_thresh_size as usize,
                max_direct_io_size: p.max_direct_io_size as usize,
                dstatusflags: p.driver_status_flags,
                dcontrolflags: p.driver_control_flags,
            },
            fflags: p.feature_flags,
            max_device_cache_size: kb32(p.max_device_cache_size),
            per_buffer_cache_size: kb32(p.per_buffer_cache_size),
            max_device_pinned_mem_size: kb32(p.max_device_pinned_mem_size),
            max_batch_io_size: p.max_batch_io_count,
            max_batch_io_timeout_msecs: p.max_batch_io_timeout_msecs,
        };
        // SAFETY: non-NULL; the caller guarantees it is writable.
        unsafe { write_out(props, out, "props") }
    })
}

/// Sets poll mode and its threshold (KiB); `poll` is a C `bool`.
#[no_mangle]
pub extern "C" fn cuFileDriverSetPollMode(poll: u8, poll_threshold_size: usize) -> CUfileError {
    status(|| hipfs::driver_set_poll_mode(poll != 0, poll_threshold_size))
}

/// Sets the largest direct I/O (KiB).
#[no_mangle]
pub extern "C" fn cuFileDriverSetMaxDirectIOSize(max_direct_io_size: usize) -> CUfileError {
    status(|| hipfs::driver_set_max_direct_io_size(max_direct_io_size))
}

/// Sets the bounce cache size (KiB).
#[no_mangle]
pub extern "C" fn cuFileDriverSetMaxCacheSize(max_cache_size: usize) -> CUfileError {
    status(|| hipfs::driver_set_max_cache_size(max_cache_size))
}

/// Sets the pinned memory limit (KiB).
#[no_mangle]
pub extern "C" fn cuFileDriverSetMaxPinnedMemSize(max_pinned_size: usize) -> CUfileError {
    status(|| hipfs::driver_set_max_pinned_mem_size(max_pinned_size))
}

/// Writes [`crate::CUFILE_API_VERSION`] (1150) to `*version`.
///
/// # Safety
/// `version` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn cuFileGetVersion(version: *mut c_int) -> CUfileError {
    // SAFETY: forwarded caller guarantee.
    status(|| unsafe { write_out(version, crate::CUFILE_API_VERSION, "version") })
}

/// The BAR size of GPU `gpu_index` in KiB. hipfs maps no BAR (device I/O
/// goes through pinned bounce buffers or the GPU's own copy engines), so
/// this reports the device-pinned memory limit, the most one GPU's
/// registrations may pin; an index past the GPU count is `InvalidValue`.
///
/// # Safety
/// `bar_size` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn cuFileGetBARSizeInKB(
    gpu_index: c_int,
    bar_size: *mut usize,
) -> CUfileError {
    status(|| {
        let n = hipfs::gpu::runtime().device_count();
        if usize::try_from(gpu_index).map_or(true, |i| i >= n) {
            return Err(invalid(&format!(
                "GPU index {gpu_index} is not one of the {n} GPUs"
            )));
        }
        let kb = hipfs::get_parameter_size(hipfs::SizeTParam::PropertiesMaxDevicePinnedMemSizeKB);
        // SAFETY: forwarded caller guarantee.
        unsafe { write_out(bar_size, kb, "bar_size") }
    })
}
