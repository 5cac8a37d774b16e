//! Batch and stream-ordered I/O, with cuFile's rules: an unregistered stream
//! acts as flags 0 (the core's rule too) and batch timeouts are read leniently.

use crate::status;
use crate::types::{CUfileError, IoEvents, IoParams};
use hipfs_cabi::{batch, Flavor};
use std::ffi::{c_uint, c_void};

/// Sets up a batch of at most `nr` (1..=128) operations.
///
/// # Safety
/// `batch_idp` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn cuFileBatchIOSetUp(
    batch_idp: *mut *mut c_void,
    nr: c_uint,
) -> CUfileError {
    // SAFETY: forwarded caller guarantee.
    status(|| unsafe { batch::setup(batch_idp, nr) })
}

/// Queues `nr` (1..=128) operations, all or nothing.
///
/// # Safety
/// `iocbp` is NULL or has `nr` entries whose memory stays valid until each
/// event is collected or the batch is canceled/destroyed.
#[no_mangle]
pub unsafe extern "C" fn cuFileBatchIOSubmit(
    batch_idp: *mut c_void,
    nr: c_uint,
    iocbp: *mut IoParams,
    flags: c_uint,
) -> CUfileError {
    // SAFETY: forwarded caller guarantee.
    status(|| unsafe { batch::submit(batch_idp, nr, iocbp, flags) })
}

/// Collects up to `*nr` events, waiting for `min_nr` until `timeout`
/// (NULL, or a malformed timespec: no limit, never longer than the batch
/// can still produce events).
///
/// # Safety
/// `nr` is NULL or valid; `iocbp` is NULL or has `*nr` writable entries;
/// `timeout` is NULL or points to 16 readable bytes.
#[no_mangle]
pub unsafe extern "C" fn cuFileBatchIOGetStatus(
    batch_idp: *mut c_void,
    min_nr: c_uint,
    nr: *mut c_uint,
    iocbp: *mut IoEvents,
    timeout: *mut libc::timespec,
) -> CUfileError {
    // SAFETY: forwarded caller guarantee.
    status(|| unsafe { batch::get_status(batch_idp, min_nr, nr, iocbp, timeout, Flavor::CuFile) })
}

/// Cancels the batch's operations that have not started.
#[no_mangle]
pub extern "C" fn cuFileBatchIOCancel(batch_idp: *mut c_void) -> CUfileError {
    status(|| batch::cancel(batch_idp))
}

/// Destroys a batch; unknown ones are ignored.
#[no_mangle]
pub extern "C" fn cuFileBatchIODestroy(batch_idp: *mut c_void) {
    batch::destroy(batch_idp)
}

/// Enqueues a read on `stream` (NULL: the legacy default stream).
///
/// # Safety
/// The pointers stay valid until the stream has run the operation.
#[no_mangle]
pub unsafe extern "C" fn cuFileReadAsync(
    fh: *mut c_void,
    buf_ptr_base: *mut c_void,
    size_p: *mut usize,
    file_offset_p: *mut libc::off_t,
    buf_ptr_offset_p: *mut libc::off_t,
    bytes_read_p: *mut isize,
    stream: *mut c_void,
) -> CUfileError {
    // SAFETY: forwarded caller guarantee.
    status(|| unsafe {
        batch::enqueue(
            true,
            fh,
            buf_ptr_base,
            size_p,
            file_offset_p,
            buf_ptr_offset_p,
            bytes_read_p,
            stream,
        )
    })
}

/// Enqueues a write on `stream`.
///
/// # Safety
/// The pointers stay valid until the stream has run the operation.
#[no_mangle]
pub unsafe extern "C" fn cuFileWriteAsync(
    fh: *mut c_void,
    buf_ptr_base: *mut c_void,
    size_p: *mut usize,
    file_offset_p: *mut libc::off_t,
    buf_ptr_offset_p: *mut libc::off_t,
    bytes_written_p: *mut isize,
    stream: *mut c_void,
) -> CUfileError {
    // SAFETY: forwarded caller guarantee.
    status(|| unsafe {
        batch::enqueue(
            false,
            fh,
            buf_ptr_base,
            size_p,
            file_offset_p,
            buf_ptr_offset_p,
            bytes_written_p,
            stream,
        )
    })
}

/// Registers `stream` with `flags` (`CU_FILE_STREAM_*`, within 0xf); a
/// registered stream is `CU_FILE_INVALID_VALUE`.
#[no_mangle]
pub extern "C" fn cuFileStreamRegister(stream: *mut c_void, flags: c_uint) -> CUfileError {
    status(|| hipfs::stream::stream_register(stream as usize, flags))
}

/// Deregisters `stream`; an unregistered one is `CU_FILE_INVALID_VALUE`.
#[no_mangle]
pub extern "C" fn cuFileStreamDeregister(stream: *mut c_void) -> CUfileError {
    status(|| hipfs::stream::stream_deregister(stream as usize))
}
