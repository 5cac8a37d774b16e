//! File handles, buffers and synchronous I/O.

use crate::types::{HOff, HipFileDescr, HipFileError};
use hipfs_cabi::{ffi_ssize, ffi_status, io, Flavor};
use std::ffi::{c_int, c_void};

/// Registers `descr->handle.fd` and returns its handle in `*fh` (opening
/// the driver implicitly; a bad argument leaves a closed driver closed).
///
/// `hipFileHandleTypeUserspaceFS` with `fs_ops == NULL` is accepted only for
/// files of a hipfs mount (bound to the built-in remote client); any other
/// fd gives `hipFileInvalidValue`, as upstream.
///
/// # Safety
/// `fh` is NULL or writable; `descr` is NULL or a valid `hipFileDescr_t`
/// whose `fs_ops`, if non-NULL, points to a valid `hipFileFSOps_t`.
#[no_mangle]
pub unsafe extern "C" fn hipFileHandleRegister(
    fh: *mut *mut c_void,
    descr: *mut HipFileDescr,
) -> HipFileError {
    // SAFETY: forwarded caller guarantee.
    ffi_status(|| unsafe { io::handle_register(fh, descr, Flavor::HipFile) })
}

/// Deregisters a handle; unknown handles are ignored.
#[no_mangle]
pub extern "C" fn hipFileHandleDeregister(fh: *mut c_void) {
    io::handle_deregister(fh)
}

/// Registers `[base, base+length)` (opening the driver implicitly). With
/// `HIPFILE_RDMA_REGISTER`, host memory that no RDMA transport claimed gets a
/// process-local descriptor (see `hipfile.h`, "RDMA descriptor").
#[no_mangle]
pub extern "C" fn hipFileBufRegister(
    base: *const c_void,
    length: usize,
    flags: c_int,
) -> HipFileError {
    ffi_status(|| io::buf_register(base, length, flags))
}

/// Deregisters the buffer registered at `base`.
#[no_mangle]
pub extern "C" fn hipFileBufDeregister(base: *const c_void) -> HipFileError {
    ffi_status(|| io::buf_deregister(base))
}

/// Reads `size` bytes at `file_offset` into `base + buffer_offset`.
///
/// # Safety
/// `base + buffer_offset` has `size` writable bytes (or is device memory of
/// that size) for the duration of the call.
#[no_mangle]
pub unsafe extern "C" fn hipFileRead(
    fh: *mut c_void,
    base: *mut c_void,
    size: usize,
    file_offset: HOff,
    buffer_offset: HOff,
) -> isize {
    // SAFETY: forwarded caller guarantee.
    ffi_ssize(|| unsafe { io::read(fh, base, size, file_offset, buffer_offset) })
}

/// Writes `size` bytes from `base + buffer_offset` at `file_offset`.
///
/// # Safety
/// `base + buffer_offset` has `size` readable bytes for the duration of the call.
#[no_mangle]
pub unsafe extern "C" fn hipFileWrite(
    fh: *mut c_void,
    base: *const c_void,
    size: usize,
    file_offset: HOff,
    buffer_offset: HOff,
) -> isize {
    // SAFETY: forwarded caller guarantee.
    ffi_ssize(|| unsafe { io::write(fh, base, size, file_offset, buffer_offset) })
}
