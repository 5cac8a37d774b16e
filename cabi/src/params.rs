//! The parameter API's ordinals and C conventions (both headers number the
//! size_t, bool and string parameters alike; cuFile adds a few at the end,
//! which `cufile/` keeps itself).

use crate::{invalid, write_out};
use hipfs::config::{BoolParam, SizeTParam, StringParam};
use hipfs::error::Result;
use std::ffi::{c_char, c_int, CStr};

/// The size_t parameter with ordinal `param`.
pub fn size_param(param: c_int) -> Result<SizeTParam> {
    u32::try_from(param)
        .ok()
        .and_then(SizeTParam::from_ordinal)
        .ok_or_else(|| invalid("unknown size_t parameter"))
}

/// The bool parameter with ordinal `param` (hipfs's own at 100).
pub fn bool_param(param: c_int) -> Result<BoolParam> {
    u32::try_from(param)
        .ok()
        .and_then(BoolParam::from_c_ordinal)
        .ok_or_else(|| invalid("unknown bool parameter"))
}

/// The string parameter with ordinal `param`.
pub fn string_param(param: c_int) -> Result<StringParam> {
    u32::try_from(param)
        .ok()
        .and_then(StringParam::from_ordinal)
        .ok_or_else(|| invalid("unknown string parameter"))
}

/// Reads a size_t parameter (the value the next open uses).
///
/// # Safety
/// `value` is NULL or writable.
pub unsafe fn get_size(param: c_int, value: *mut usize) -> Result<()> {
    let p = size_param(param)?;
    // SAFETY: forwarded caller guarantee.
    unsafe { write_out(value, hipfs::get_parameter_size(p), "value") }
}

/// Reads a bool parameter into a C `bool` (one byte, 0 or 1).
///
/// # Safety
/// `value` is NULL or points to a writable C `bool`.
pub unsafe fn get_bool(param: c_int, value: *mut u8) -> Result<()> {
    let p = bool_param(param)?;
    // SAFETY: forwarded caller guarantee.
    unsafe { write_out(value, u8::from(hipfs::get_parameter_bool(p)), "value") }
}

/// Copies `value` into `desc_str` (`len` bytes, always NUL-terminated,
/// truncated when longer).
///
/// # Safety
/// `desc_str` is NULL or points to `len` writable bytes.
pub unsafe fn copy_string(value: &str, desc_str: *mut c_char, len: c_int) -> Result<()> {
    if desc_str.is_null() {
        return Err(invalid("desc_str is NULL"));
    }
    let cap = usize::try_from(len)
        .ok()
        .filter(|n| *n > 0)
        .ok_or_else(|| invalid("len must be positive"))?;
    let n = value.len().min(cap - 1);
    // SAFETY: desc_str has cap >= n + 1 writable bytes (caller's contract)
    // and cannot overlap the string we were given (ours, not the caller's).
    unsafe {
        std::ptr::copy_nonoverlapping(value.as_ptr(), desc_str.cast::<u8>(), n);
        desc_str.add(n).write(0);
    }
    Ok(())
}

/// Copies a string parameter into `desc_str`.
///
/// # Safety
/// As [`copy_string`].
pub unsafe fn get_string(param: c_int, desc_str: *mut c_char, len: c_int) -> Result<()> {
    let p = string_param(param)?;
    // SAFETY: forwarded caller guarantee.
    unsafe { copy_string(&hipfs::get_parameter_string(p), desc_str, len) }
}

/// A C string argument as UTF-8.
///
/// # Safety
/// `value` is NULL or a NUL-terminated string.
pub unsafe fn c_str<'a>(value: *const c_char) -> Result<&'a str> {
    if value.is_null() {
        return Err(invalid("value is NULL"));
    }
    // SAFETY: non-NULL, and the caller guarantees NUL termination.
    let s = unsafe { CStr::from_ptr(value) };
    s.to_str().map_err(|_| invalid("value is not UTF-8"))
}

/// Sets a string parameter; only while the driver is closed.
///
/// # Safety
/// `value` is NULL or a NUL-terminated string.
pub unsafe fn set_string(param: c_int, value: *const c_char) -> Result<()> {
    let p = string_param(param)?;
    // SAFETY: forwarded caller guarantee.
    let s = unsafe { c_str(value) }?;
    hipfs::set_parameter_string(p, s)
}
