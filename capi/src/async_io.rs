//! Batch and stream-ordered I/O.

use crate::types::{HOff, HipFileError, HipFileIoEvents, HipFileIoParams};
use hipfs_cabi::{batch, ffi_status, Flavor};
use std::ffi::{c_uint, c_void};

/// Sets up a batch of at most `max_nr` (1..=128) operations.
///
/// # Safety
/// `batch_idp` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn hipFileBatchIOSetUp(
    batch_idp: *mut *mut c_void,
    max_nr: c_uint,
) -> HipFileError {
    // SAFETY: forwarded caller guarantee.
    ffi_status(|| unsafe { batch::setup(batch_idp, max_nr) })
}

/// Queues `nr` (1..=128) operations, all or nothing.
///
/// # Safety
/// `params` is NULL or points to `nr` entries; each operation's memory stays
/// valid until its event is collected or the batch is canceled/destroyed.
#[no_mangle]
pub unsafe extern "C" fn hipFileBatchIOSubmit(
    batch_idp: *mut c_void,
    nr: c_uint,
    params: *mut HipFileIoParams,
    flags: c_uint,
) -> HipFileError {
    // SAFETY: forwarded caller guarantee.
    ffi_status(|| unsafe { batch::submit(batch_idp, nr, params, flags) })
}

/// Collects up to `*nr` (>= 1) events, waiting for at least `min_nr` until
/// `timeout` (relative; NULL waits without limit); `*nr` becomes the count.
///
/// # Safety
/// `nr` is NULL or valid; `events` is NULL or has `*nr` writable entries;
/// `timeout` is NULL or valid.
#[no_mangle]
pub unsafe extern "C" fn hipFileBatchIOGetStatus(
    batch_idp: *mut c_void,
    min_nr: c_uint,
    nr: *mut c_uint,
    events: *mut HipFileIoEvents,
    timeout: *mut libc::timespec,
) -> HipFileError {
    // SAFETY: forwarded caller guarantee.
    ffi_status(|| unsafe {
        batch::get_status(batch_idp, min_nr, nr, events, timeout, Flavor::HipFile)
    })
}

/// Cancels the batch's operations that have not started.
#[no_mangle]
pub extern "C" fn hipFileBatchIOCancel(batch_idp: *mut c_void) -> HipFileError {
    ffi_status(|| batch::cancel(batch_idp))
}

/// Destroys a batch (waiting for running operations); unknown ids are ignored.
#[no_mangle]
pub extern "C" fn hipFileBatchIODestroy(batch_idp: *mut c_void) {
    batch::destroy(batch_idp)
}

/// Enqueues a read on `stream` (see the stream rules in `hipfile.h`).
///
/// # Safety
/// The pointers stay valid until the stream has run the operation.
#[no_mangle]
pub unsafe extern "C" fn hipFileReadAsync(
    fh: *mut c_void,
    base: *mut c_void,
    size_p: *mut usize,
    file_offset_p: *mut HOff,
    buffer_offset_p: *mut HOff,
    bytes_read_p: *mut isize,
    stream: *mut c_void,
) -> HipFileError {
    // SAFETY: forwarded caller guarantee.
    ffi_status(|| unsafe {
        batch::enqueue(
            true,
            fh,
            base,
            size_p,
            file_offset_p,
            buffer_offset_p,
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
pub unsafe extern "C" fn hipFileWriteAsync(
    fh: *mut c_void,
    base: *mut c_void,
    size_p: *mut usize,
    file_offset_p: *mut HOff,
    buffer_offset_p: *mut HOff,
    bytes_written_p: *mut isize,
    stream: *mut c_void,
) -> HipFileError {
    // SAFETY: forwarded caller guarantee.
    ffi_status(|| unsafe {
        batch::enqueue(
            false,
            fh,
            base,
            size_p,
            file_offset_p,
            buffer_offset_p,
            bytes_written_p,
            stream,
        )
    })
}

/// Registers `stream` for async I/O with `flags` (within
/// `HIPFILE_STREAM_FLAGS_MASK`); a registered stream is `hipFileInvalidValue`.
#[no_mangle]
pub extern "C" fn hipFileStreamRegister(stream: *mut c_void, flags: c_uint) -> HipFileError {
    ffi_status(|| hipfs::stream::stream_register(stream as usize, flags))
}

/// Deregisters `stream`.
#[no_mangle]
pub extern "C" fn hipFileStreamDeregister(stream: *mut c_void) -> HipFileError {
    ffi_status(|| hipfs::stream::stream_deregister(stream as usize))
}
