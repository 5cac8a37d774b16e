//! Batch and stream-ordered I/O over the core's `batch` and `stream` modules.
//!
//! A C `hipFileBatchHandle_t` is the core batch id cast to a pointer; a
//! `hipStream_t` is passed to the core as its address.

use crate::io::handle_id;
use crate::types::{HOff, HipFileError, HipFileIoEvents, HipFileIoParams, BATCH_MODE_BATCH};
use crate::{ffi_status, invalid};
use hipfs::batch::{self, IoParams, Opcode};
use hipfs::config::MAX_BATCH_IO_COUNT;
use hipfs::error::{Error, OpError, Result};
use std::ffi::{c_uint, c_void};
use std::time::Duration;

fn batch_id(p: *mut c_void) -> u64 {
    p as usize as u64
}

/// Sets up a batch of at most `max_nr` (1..=128) operations.
///
/// # Safety
/// `batch_idp` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn hipFileBatchIOSetUp(
    batch_idp: *mut *mut c_void,
    max_nr: c_uint,
) -> HipFileError {
    ffi_status(|| {
        if batch_idp.is_null() {
            return Err(invalid("batch_idp is NULL"));
        }
        let id = batch::batch_setup(max_nr)?;
        // SAFETY: non-NULL and writable (caller's contract).
        unsafe { batch_idp.write_unaligned(id as usize as *mut c_void) };
        Ok(())
    })
}

fn convert(i: usize, p: &HipFileIoParams) -> Result<IoParams> {
    if p.mode != BATCH_MODE_BATCH {
        return Err(invalid(&format!(
            "operation {i}: mode {} is not hipFileBatch",
            p.mode
        )));
    }
    let opcode = u32::try_from(p.opcode)
        .map_err(|_| invalid(&format!("operation {i}: negative opcode")))
        .and_then(Opcode::from_raw)?;
    // SAFETY: `batch` is the union's only member; every field is plain data.
    let b = unsafe { p.u.batch };
    Ok(IoParams {
        handle: handle_id(p.fh),
        opcode,
        buf_base: b.dev_ptr_base as usize,
        buf_offset: b.dev_ptr_offset,
        file_offset: b.file_offset,
        size: b.size,
        cookie: p.cookie as usize,
    })
}

/// Queues `nr` operations, all or nothing.
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
    ffi_status(|| {
        if nr > MAX_BATCH_IO_COUNT {
            // Refused before touching the array: no batch holds more.
            return Err(Error::new(
                OpError::BatchFull,
                format!("{nr} operations exceed the batch limit of {MAX_BATCH_IO_COUNT}"),
            ));
        }
        if nr > 0 && params.is_null() {
            return Err(invalid("params is NULL"));
        }
        let raw: &[HipFileIoParams] = if nr == 0 {
            &[]
        } else {
            // SAFETY: non-NULL and `nr` entries long (caller's contract).
            unsafe { std::slice::from_raw_parts(params, nr as usize) }
        };
        let ops = raw
            .iter()
            .enumerate()
            .map(|(i, p)| convert(i, p))
            .collect::<Result<Vec<_>>>()?;
        // SAFETY: forwarded caller guarantee on the operations' memory.
        unsafe { batch::batch_submit(batch_id(batch_idp), &ops, flags) }
    })
}

fn timeout(ts: *const libc::timespec) -> Result<Option<Duration>> {
    if ts.is_null() {
        return Ok(None);
    }
    // SAFETY: non-NULL; the caller guarantees a valid timespec.
    let ts = unsafe { ts.read_unaligned() };
    let secs = u64::try_from(ts.tv_sec).map_err(|_| invalid("timeout is negative"))?;
    let nanos = u32::try_from(ts.tv_nsec)
        .ok()
        .filter(|n| *n < 1_000_000_000)
        .ok_or_else(|| invalid("timeout tv_nsec is outside 0..1e9"))?;
    Ok(Some(Duration::new(secs, nanos)))
}

/// Collects up to `*nr` events, waiting for at least `min_nr` until
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
    timeout_p: *mut libc::timespec,
) -> HipFileError {
    ffi_status(|| {
        if nr.is_null() {
            return Err(invalid("nr is NULL"));
        }
        // SAFETY: non-NULL, valid (caller's contract).
        let max = unsafe { nr.read_unaligned() };
        if max > 0 && events.is_null() {
            return Err(invalid("events is NULL"));
        }
        let wait = timeout(timeout_p)?;
        let got =
            batch::batch_get_status(batch_id(batch_idp), min_nr as usize, max as usize, wait)?;
        for (i, ev) in got.iter().enumerate() {
            let out = HipFileIoEvents {
                cookie: ev.cookie as *mut c_void,
                status: ev.status as i32,
                // A negative error is handed over cast to size_t, as upstream.
                ret: ev.ret as usize,
            };
            // SAFETY: i < got.len() <= max entries, writable (caller's contract).
            unsafe { events.add(i).write_unaligned(out) };
        }
        // SAFETY: as above.
        unsafe { nr.write_unaligned(got.len() as c_uint) };
        Ok(())
    })
}

/// Cancels the batch's operations that have not started.
#[no_mangle]
pub extern "C" fn hipFileBatchIOCancel(batch_idp: *mut c_void) -> HipFileError {
    ffi_status(|| batch::batch_cancel(batch_id(batch_idp)))
}

/// Destroys a batch (waiting for running operations); unknown ids are ignored.
#[no_mangle]
pub extern "C" fn hipFileBatchIODestroy(batch_idp: *mut c_void) {
    let id = batch_id(batch_idp);
    match std::panic::catch_unwind(|| batch::batch_destroy(id)) {
        Ok(Ok(())) => {}
        Ok(Err(e)) => log::debug!("hipFileBatchIODestroy: {e}"),
        Err(_) => log::error!("hipFileBatchIODestroy: internal error destroying batch {id}"),
    }
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
    ffi_status(|| {
        // SAFETY: forwarded caller guarantee.
        unsafe {
            hipfs::stream::read_async(
                handle_id(fh),
                base as usize,
                size_p,
                file_offset_p,
                buffer_offset_p,
                bytes_read_p,
                stream as usize,
            )
        }
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
    ffi_status(|| {
        // SAFETY: forwarded caller guarantee.
        unsafe {
            hipfs::stream::write_async(
                handle_id(fh),
                base as usize,
                size_p,
                file_offset_p,
                buffer_offset_p,
                bytes_written_p,
                stream as usize,
            )
        }
    })
}

/// Registers `stream` for async I/O with `flags` (within `HIPFILE_STREAM_FLAGS_MASK`).
#[no_mangle]
pub extern "C" fn hipFileStreamRegister(stream: *mut c_void, flags: c_uint) -> HipFileError {
    ffi_status(|| hipfs::stream::stream_register(stream as usize, flags))
}

/// Deregisters `stream`.
#[no_mangle]
pub extern "C" fn hipFileStreamDeregister(stream: *mut c_void) -> HipFileError {
    ffi_status(|| hipfs::stream::stream_deregister(stream as usize))
}
