//! `libhipfile.so`: the drop-in hipFile C ABI (`include/hipfile.h`) over
//! the hipfs core's public API. The 31 `hipFile*` functions are each a thin
//! shell that converts arguments and results and keeps panics from crossing
//! the FFI boundary; `build.rs` and `hipfile.map` give the library its
//! SONAME and keep its dynamic symbol table to those functions.
//!
//! Return conventions (the spec's): `hipFileError_t` by value;
//! `hipFileRead/Write` return bytes, `-1` with `errno` for a system error,
//! `-hipFileOpError` otherwise, and `-1`/`EINVAL` before the driver is open.
//! A C `hipFileHandle_t` is the core's handle id cast to a pointer.

mod async_io;
mod driver;
mod fsops;
mod io;
pub mod types;

pub use async_io::*;
pub use driver::*;
pub use io::*;
pub use types::*;

use hipfs::{Error, OpError, Result};
use std::panic::{catch_unwind, AssertUnwindSafe};

/// `hipFileError_t` for an op code with no GPU error.
pub(crate) fn op_status(op: OpError) -> HipFileError {
    HipFileError {
        err: op.code(),
        hip_drv_err: 0,
    }
}

/// `hipFileError_t` for a core error.
pub(crate) fn error_status(e: &Error) -> HipFileError {
    log::debug!("hipFile C API: {e}");
    HipFileError {
        err: e.op().code(),
        hip_drv_err: e.gpu_code(),
    }
}

/// Runs a status-returning body; a panic becomes `hipFileInternalError`.
pub(crate) fn ffi_status(f: impl FnOnce() -> Result<()>) -> HipFileError {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => op_status(OpError::Success),
        Ok(Err(e)) => error_status(&e),
        Err(_) => op_status(OpError::InternalError),
    }
}

/// Runs a byte-count-returning body with the read/write conventions.
pub(crate) fn ffi_ssize(f: impl FnOnce() -> Result<usize>) -> isize {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(n)) => isize::try_from(n).unwrap_or(isize::MAX),
        Ok(Err(e)) => ssize_error(&e),
        Err(_) => -(OpError::InternalError.code() as isize),
    }
}

/// The negative return of `hipFileRead/Write` for an error (setting errno).
pub(crate) fn ssize_error(e: &Error) -> isize {
    log::debug!("hipFile C API: {e}");
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
pub(crate) fn invalid(what: &str) -> Error {
    Error::new(OpError::InvalidValue, what)
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
        assert_eq!((g.err, g.hip_drv_err), (5011, 700));
    }
}
