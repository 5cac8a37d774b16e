//! What the two C ABIs over the hipfs core share: `libhipfile.so`
//! (`capi/`, hipFile) and `libcufile.so.0` (`cufile/`, NVIDIA cuFile).
//!
//! hipFile is cuFile renamed, so most of an entry point is the same in both:
//! the identical-layout types ([`types`]), the `fs_ops` callback adapter
//! ([`fsops`]), the argument checks and conversions of handle, buffer, I/O,
//! batch and stream calls ([`io`], [`batch`]), the parameter ordinals
//! ([`params`]) and the statistics counters and layouts ([`stats`], hipFile
//! 0.5 = cuFile 1.15). Each library keeps only its `#[no_mangle]` shells,
//! its own error strings and what really differs, chosen by [`Flavor`].
//!
//! Each library links its own copy of this crate and of the core, so a
//! process that loads both gets two independent driver states.

pub mod batch;
pub mod fsops;
pub mod io;
pub mod params;
pub mod stats;
pub mod types;

use hipfs::{Error, OpError, Result};
use std::panic::{catch_unwind, AssertUnwindSafe};
use types::CStatus;

/// Where the two APIs' rules differ.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavor {
    /// AMD hipFile: a bad `HandleRegister` leaves the driver closed; a
    /// malformed batch timeout is `InvalidValue`.
    HipFile,
    /// NVIDIA cuFile: any `HandleRegister` initialises the driver; a batch
    /// timeout waits without limit, since clients pass odd ones.
    CuFile,
}

/// The status for an op code with no GPU error.
pub fn op_status(op: OpError) -> CStatus {
    CStatus {
        err: op.code(),
        drv_err: 0,
    }
}

/// The status for a core error.
pub fn error_status(e: &Error) -> CStatus {
    log::debug!("C API: {e}");
    CStatus {
        err: e.op().code(),
        drv_err: e.gpu_code(),
    }
}

/// Runs a status-returning body; a panic becomes `InternalError` (5030).
pub fn ffi_status(f: impl FnOnce() -> Result<()>) -> CStatus {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => op_status(OpError::Success),
        Ok(Err(e)) => error_status(&e),
        Err(_) => op_status(OpError::InternalError),
    }
}

/// Runs a body whose value the C function returns; a panic gives `fallback`.
pub fn ffi_value<T>(fallback: T, f: impl FnOnce() -> T) -> T {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or(fallback)
}

/// Runs a byte-count-returning body with the read/write conventions.
pub fn ffi_ssize(f: impl FnOnce() -> Result<usize>) -> isize {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(n)) => isize::try_from(n).unwrap_or(isize::MAX),
        Ok(Err(e)) => ssize_error(&e),
        Err(_) => -(OpError::InternalError.code() as isize),
    }
}

/// The negative return of a synchronous read/write for an error: `-1` with
/// errno for a system error (and `EINVAL` before the driver is open),
/// `-OpError` otherwise.
pub fn ssize_error(e: &Error) -> isize {
    log::debug!("C API: {e}");
    if e.op() == OpError::DriverNotInitialized {
        set_errno(libc::EINVAL);
        return -1;
    }
    match e.errno() {
        Some(errno) => {
            set_errno(errno);
            -1
        }
        None => -(e.op().code() as isize),
    }
}

fn set_errno(errno: i32) {
    // SAFETY: __errno_location returns this thread's errno slot, always valid.
    unsafe { *libc::__errno_location() = errno };
}

/// An error for a bad argument.
pub fn invalid(what: &str) -> Error {
    Error::new(OpError::InvalidValue, what)
}

/// Writes `v` through a caller's out-pointer, refusing NULL.
///
/// # Safety
/// `p` is NULL or valid for a write of `T`.
pub unsafe fn write_out<T>(p: *mut T, v: T, what: &str) -> Result<()> {
    if p.is_null() {
        return Err(invalid(&format!("{what} is NULL")));
    }
    // SAFETY: non-NULL; the caller guarantees it is writable.
    unsafe { p.write_unaligned(v) };
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_in_a_status_body_becomes_internal_error() {
        let r = ffi_status(|| panic!("boom"));
        assert_eq!(r.err, OpError::InternalError.code());
        assert_eq!(ffi_status(|| Ok(())).err, 0);
    }

    #[test]
    fn a_panic_in_a_read_body_becomes_minus_5030() {
        assert_eq!(ffi_ssize(|| panic!("boom")), -5030);
        assert_eq!(ffi_ssize(|| Ok(12)), 12);
        assert_eq!(ffi_value(-1, || panic!("boom")), -1);
    }

    #[test]
    fn read_errors_follow_the_return_conventions() {
        let errno = || std::io::Error::last_os_error().raw_os_error();
        assert_eq!(
            ffi_ssize(|| Err(Error::new(OpError::DriverNotInitialized, "closed"))),
            -1
        );
        assert_eq!(errno(), Some(libc::EINVAL));
        assert_eq!(ffi_ssize(|| Err(Error::system(libc::ENOSPC, "w"))), -1);
        assert_eq!(errno(), Some(libc::ENOSPC));
        assert_eq!(
            ffi_ssize(|| Err(Error::new(OpError::HandleNotRegistered, "h"))),
            -5027
        );
        let g = ffi_status(|| Err(Error::gpu(700, "copy")));
        assert_eq!((g.err, g.drv_err), (5011, 700));
    }
}
