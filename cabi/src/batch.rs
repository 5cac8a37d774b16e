//! Batch and stream-ordered I/O, as both C ABIs take them.
//!
//! A C batch handle is the core batch id cast to a pointer; a stream
//! (`hipStream_t`, `CUstream`) is passed to the core as its address.

use crate::io::handle_id;
use crate::stats::{self, Op};
use crate::types::{HOff, IoEvents, IoParams, BATCH_MODE_BATCH, OPCODE_READ};
use crate::{invalid, write_out, Flavor};
use hipfs::batch::{self, Opcode};
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
pub unsafe fn setup(batch_idp: *mut *mut c_void, max_nr: c_uint) -> Result<()> {
    let r = (|| {
        if batch_idp.is_null() {
            return Err(invalid("batch_idp is NULL"));
        }
        let id = batch::batch_setup(max_nr)?;
        // SAFETY: non-NULL and writable (caller's contract).
        unsafe { write_out(batch_idp, id as usize as *mut c_void, "batch_idp") }
    })();
    stats::count(Op::BatchSetup, r.is_ok());
    r
}

fn convert(i: usize, p: &IoParams) -> Result<batch::IoParams> {
    if p.mode != BATCH_MODE_BATCH {
        return Err(invalid(&format!(
            "operation {i}: mode {} is not batch",
            p.mode
        )));
    }
    let opcode = u32::try_from(p.opcode)
        .map_err(|_| invalid(&format!("operation {i}: negative opcode")))
        .and_then(Opcode::from_raw)?;
    // SAFETY: `batch` is the union's only member; every field is plain data.
    let b = unsafe { p.u.batch };
    Ok(batch::IoParams {
        handle: handle_id(p.fh),
        opcode,
        buf_base: b.dev_ptr_base as usize,
        buf_offset: b.dev_ptr_offset,
        file_offset: b.file_offset,
        size: b.size,
        cookie: p.cookie as usize,
    })
}

/// Queues `nr` (1..=128) operations, all or nothing.
///
/// # Safety
/// `params` is NULL or points to `nr` entries; each operation's memory stays
/// valid until its event is collected or the batch is canceled/destroyed.
pub unsafe fn submit(
    batch_idp: *mut c_void,
    nr: c_uint,
    params: *const IoParams,
    flags: c_uint,
) -> Result<()> {
    let r = (|| {
        if nr > MAX_BATCH_IO_COUNT {
            // Refused before touching the array: no batch holds more.
            return Err(Error::new(
                OpError::BatchFull,
                format!("{nr} operations exceed the batch limit of {MAX_BATCH_IO_COUNT}"),
            ));
        }
        if nr == 0 || params.is_null() {
            return Err(invalid(
                "submit needs nr > 0 operations and a non-NULL array",
            ));
        }
        // SAFETY: non-NULL and `nr` entries long (caller's contract).
        let raw = unsafe { std::slice::from_raw_parts(params, nr as usize) };
        let ops = raw
            .iter()
            .enumerate()
            .map(|(i, p)| convert(i, p))
            .collect::<Result<Vec<_>>>()?;
        // SAFETY: forwarded caller guarantee on the operations' memory.
        unsafe { batch::batch_submit(batch_id(batch_idp), &ops, flags) }?;
        for p in raw {
            // SAFETY: as in `convert`.
            let size = unsafe { p.u.batch }.size;
            stats::batch_bytes(p.opcode == OPCODE_READ, size);
        }
        Ok(())
    })();
    stats::count(Op::BatchSubmit, r.is_ok());
    r
}

/// The wait `timeout` asks for. hipFile refuses a malformed timespec.
/// cuFile clients pass odd ones (cuda-python hands a pointer to a 4-byte
/// int, so what follows it is whatever the heap holds), so for cuFile a
/// malformed one (negative seconds, nanoseconds outside 0..1e9) waits
/// without limit, as NULL does: the wait never outlasts what the batch can
/// still produce, and those callers want their `min_nr` events.
fn timeout(ts: *const libc::timespec, flavor: Flavor) -> Result<Option<Duration>> {
    if ts.is_null() {
        return Ok(None);
    }
    // SAFETY: non-NULL; the caller guarantees 16 readable bytes.
    let ts = unsafe { ts.read_unaligned() };
    let secs = u64::try_from(ts.tv_sec).ok();
    let nanos = u32::try_from(ts.tv_nsec)
        .ok()
        .filter(|n| *n < 1_000_000_000);
    match (secs, nanos, flavor) {
        (Some(s), Some(n), _) => Ok(Some(Duration::new(s, n))),
        (_, _, Flavor::CuFile) => Ok(None),
        (None, _, Flavor::HipFile) => Err(invalid("timeout is negative")),
        (_, None, Flavor::HipFile) => Err(invalid("timeout tv_nsec is outside 0..1e9")),
    }
}

/// Collects up to `*nr` (>= 1) events, waiting for at least `min_nr`
/// (<= `*nr`) until `timeout` (relative; NULL waits without limit); `*nr`
/// becomes the count.
///
/// # Safety
/// `nr` is NULL or valid; `events` is NULL or has `*nr` writable entries;
/// `timeout_p` is NULL or valid.
pub unsafe fn get_status(
    batch_idp: *mut c_void,
    min_nr: c_uint,
    nr: *mut c_uint,
    events: *mut IoEvents,
    timeout_p: *const libc::timespec,
    flavor: Flavor,
) -> Result<()> {
    if nr.is_null() || events.is_null() {
        return Err(invalid("nr and events must not be NULL"));
    }
    // SAFETY: non-NULL, valid (caller's contract).
    let max = unsafe { nr.read_unaligned() };
    if max == 0 || min_nr > max {
        return Err(invalid("get-status needs 0 < *nr and min_nr <= *nr"));
    }
    let wait = timeout(timeout_p, flavor)?;
    let got = batch::batch_get_status(batch_id(batch_idp), min_nr as usize, max as usize, wait)?;
    for (i, ev) in got.iter().enumerate() {
        let out = IoEvents {
            cookie: ev.cookie as *mut c_void,
            status: ev.status as i32,
            // A negative error is handed over cast to size_t, as upstream.
            ret: ev.ret as usize,
        };
        stats::count(Op::BatchComplete, ev.status == batch::Status::Complete);
        // SAFETY: i < got.len() <= max entries, writable (caller's contract).
        unsafe { events.add(i).write_unaligned(out) };
    }
    // SAFETY: as above.
    unsafe { nr.write_unaligned(got.len() as c_uint) };
    Ok(())
}

/// Cancels the batch's operations that have not started.
pub fn cancel(batch_idp: *mut c_void) -> Result<()> {
    let r = batch::batch_cancel(batch_id(batch_idp));
    stats::count(Op::BatchCancel, r.is_ok());
    r
}

/// Destroys a batch (waiting for running operations); unknown ids are
/// ignored (the C function is void).
pub fn destroy(batch_idp: *mut c_void) {
    let id = batch_id(batch_idp);
    let r = crate::ffi_value(Err(Error::new(OpError::InternalError, "panic")), || {
        batch::batch_destroy(id)
    });
    if let Err(e) = &r {
        log::debug!("batch destroy {id}: {e}");
    }
    stats::count(Op::BatchDestroy, r.is_ok());
}

/// Enqueues a read (`dir_read`) or write on `stream`. An unregistered
/// stream acts as one registered with flags 0 (both APIs' rule now).
///
/// # Safety
/// The pointers stay valid until the stream has run the operation.
#[allow(clippy::too_many_arguments)]
pub unsafe fn enqueue(
    dir_read: bool,
    fh: *mut c_void,
    base: *mut c_void,
    size_p: *mut usize,
    file_offset_p: *mut HOff,
    buffer_offset_p: *mut HOff,
    bytes_p: *mut isize,
    stream: *mut c_void,
) -> Result<()> {
    let f = if dir_read {
        hipfs::stream::read_async
    } else {
        hipfs::stream::write_async
    };
    // SAFETY: forwarded caller guarantee.
    unsafe {
        f(
            handle_id(fh),
            base as usize,
            size_p,
            file_offset_p,
            buffer_offset_p,
            bytes_p,
            stream as usize,
        )
    }
}
