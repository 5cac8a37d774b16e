//! Driver, version, error strings and the parameter API.

use crate::types::{HipFileDriverProps, HipFileError, HipFileNvfsProps};
use hipfs::error::OpError;
use hipfs_cabi::params::{self, bool_param, size_param};
use hipfs_cabi::{ffi_status, ffi_value, invalid, op_status};
use std::ffi::{c_char, c_int, c_uint, CStr, CString};
use std::sync::OnceLock;

/// Opens the driver (one more reference).
#[no_mangle]
pub extern "C" fn hipFileDriverOpen() -> HipFileError {
    ffi_status(hipfs::driver_open)
}

/// Drops one reference; at zero every handle and buffer is deregistered.
#[no_mangle]
pub extern "C" fn hipFileDriverClose() -> HipFileError {
    ffi_status(hipfs::driver_close)
}

/// The driver's reference count.
#[no_mangle]
pub extern "C" fn hipFileUseCount() -> i64 {
    ffi_value(-1, hipfs::use_count)
}

/// Fills `*props` (sizes in KiB).
///
/// # Safety
/// `props` is NULL or points to a writable `hipFileDriverProps_t`.
#[no_mangle]
pub unsafe extern "C" fn hipFileDriverGetProperties(
    props: *mut HipFileDriverProps,
) -> HipFileError {
    ffi_status(|| {
        if props.is_null() {
            return Err(invalid("props is NULL"));
        }
        let p = hipfs::driver_get_properties()?;
        let out = HipFileDriverProps {
            nvfs: HipFileNvfsProps {
                major_version: p.major_version,
                minor_version: p.minor_version,
                poll_thresh_size: p.poll_thresh_size,
                max_direct_io_size: p.max_direct_io_size,
                driver_status_flags: p.driver_status_flags,
                driver_control_flags: p.driver_control_flags,
            },
            feature_flags: p.feature_flags,
            max_device_cache_size: p.max_device_cache_size,
            per_buffer_cache_size: p.per_buffer_cache_size,
            max_device_pinned_mem_size: p.max_device_pinned_mem_size,
            max_batch_io_count: p.max_batch_io_count,
            max_batch_io_timeout_msecs: p.max_batch_io_timeout_msecs,
        };
        // SAFETY: checked non-NULL; the caller guarantees it is writable.
        unsafe { props.write_unaligned(out) };
        Ok(())
    })
}

/// Sets poll mode and its threshold (KiB). `poll` is a C `bool`, taken as
/// a byte so that any non-zero value means true.
#[no_mangle]
pub extern "C" fn hipFileDriverSetPollMode(
    poll: u8,
    poll_threshold_size_kb: usize,
) -> HipFileError {
    ffi_status(|| hipfs::driver_set_poll_mode(poll != 0, poll_threshold_size_kb))
}

/// Sets the largest direct I/O (KiB).
#[no_mangle]
pub extern "C" fn hipFileDriverSetMaxDirectIOSize(max_direct_io_size_kb: usize) -> HipFileError {
    ffi_status(|| hipfs::driver_set_max_direct_io_size(max_direct_io_size_kb))
}

/// Sets the bounce cache size (KiB).
#[no_mangle]
pub extern "C" fn hipFileDriverSetMaxCacheSize(max_cache_size_kb: usize) -> HipFileError {
    ffi_status(|| hipfs::driver_set_max_cache_size(max_cache_size_kb))
}

/// Sets the pinned memory limit (KiB).
#[no_mangle]
pub extern "C" fn hipFileDriverSetMaxPinnedMemSize(max_pinned_size_kb: usize) -> HipFileError {
    ffi_status(|| hipfs::driver_set_max_pinned_mem_size(max_pinned_size_kb))
}

/// The library version; NULL outputs are skipped. Always succeeds.
///
/// # Safety
/// Each pointer is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn hipFileGetVersion(
    major: *mut c_uint,
    minor: *mut c_uint,
    patch: *mut c_uint,
) -> HipFileError {
    let (a, b, c) = hipfs::get_version();
    for (p, v) in [(major, a), (minor, b), (patch, c)] {
        if !p.is_null() {
            // SAFETY: non-NULL, and the caller guarantees it is writable.
            unsafe { p.write_unaligned(v) };
        }
    }
    op_status(OpError::Success)
}

/// NUL-terminated copies of every code's string, made once.
fn error_strings() -> &'static [(c_int, CString)] {
    static STRINGS: OnceLock<Vec<(c_int, CString)>> = OnceLock::new();
    STRINGS.get_or_init(|| {
        OpError::ALL
            .iter()
            .filter_map(|op| Some((op.code(), CString::new(op.as_str()).ok()?)))
            .collect()
    })
}

/// The string for a code; unknown codes give "Unknown hipFile error".
/// The pointer is static: callers never free it.
#[no_mangle]
pub extern "C" fn hipFileGetOpErrorString(status: c_int) -> *const c_char {
    const UNKNOWN: &CStr = c"Unknown hipFile error";
    ffi_value(UNKNOWN.as_ptr(), || {
        error_strings()
            .iter()
            .find(|(code, _)| *code == status)
            .map_or(UNKNOWN.as_ptr(), |(_, s)| s.as_ptr())
    })
}

/// Reads a `size_t` parameter (the value the next open uses).
///
/// # Safety
/// `value` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn hipFileGetParameterSizeT(param: c_int, value: *mut usize) -> HipFileError {
    // SAFETY: forwarded caller guarantee.
    ffi_status(|| unsafe { params::get_size(param, value) })
}

/// Sets a `size_t` parameter; only while the driver is closed.
#[no_mangle]
pub extern "C" fn hipFileSetParameterSizeT(param: c_int, value: usize) -> HipFileError {
    ffi_status(|| hipfs::set_parameter_size(size_param(param)?, value))
}

/// Reads a bool parameter (written as a C `bool`: one byte, 0 or 1).
///
/// # Safety
/// `value` is NULL or points to a writable C `bool`.
#[no_mangle]
pub unsafe extern "C" fn hipFileGetParameterBool(param: c_int, value: *mut u8) -> HipFileError {
    // SAFETY: forwarded caller guarantee.
    ffi_status(|| unsafe { params::get_bool(param, value) })
}

/// Sets a bool parameter; only while the driver is closed.
#[no_mangle]
pub extern "C" fn hipFileSetParameterBool(param: c_int, value: u8) -> HipFileError {
    ffi_status(|| hipfs::set_parameter_bool(bool_param(param)?, value != 0))
}

/// Copies a string parameter into `desc_str` (`len` bytes, always
/// NUL-terminated, truncated when longer).
///
/// # Safety
/// `desc_str` is NULL or points to `len` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn hipFileGetParameterString(
    param: c_int,
    desc_str: *mut c_char,
    len: c_int,
) -> HipFileError {
    // SAFETY: forwarded caller guarantee.
    ffi_status(|| unsafe { params::get_string(param, desc_str, len) })
}

/// Sets a string parameter; only while the driver is closed.
///
/// # Safety
/// `value` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn hipFileSetParameterString(
    param: c_int,
    value: *const c_char,
) -> HipFileError {
    // SAFETY: forwarded caller guarantee.
    ffi_status(|| unsafe { params::set_string(param, value) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_codes_get_the_unknown_string() {
        let s = |c| {
            // SAFETY: the function returns static NUL-terminated strings.
            unsafe { CStr::from_ptr(hipFileGetOpErrorString(c)) }
                .to_str()
                .unwrap()
        };
        assert_eq!(s(5032), "Unknown hipFile error");
        assert_eq!(s(-1), "Unknown hipFile error");
        assert_eq!(s(5027), "File handle for GPU IO is not registered");
        assert_eq!(s(0), "hipFile success");
    }
}
