//! File handles, buffers and synchronous I/O, as both C ABIs take them.
//!
//! A C file handle is the core's handle id cast to a pointer.

use crate::fsops::{host_descriptor, CallbackFs};
use crate::stats::{self, Op};
use crate::types::{Descr, HOff};
use crate::{invalid, write_out, Flavor};
use hipfs::error::{Error, OpError, Result};
use hipfs::gpu::MemoryKind;
use hipfs::handle::{self, FileHandleType, UnboundHipfsFile};
use hipfs::userspace::UserspaceFs;
use std::ffi::{c_int, c_void};
use std::sync::Arc;

/// The core handle id behind a C file handle.
pub fn handle_id(fh: *mut c_void) -> u64 {
    fh as usize as u64
}

/// Registers `descr->handle.fd` and writes its handle to `*fh` (opening the
/// driver implicitly). USERSPACE_FS with `fs_ops == NULL` is accepted only
/// for files of a hipfs mount. [`Flavor::CuFile`] opens the driver even when
/// the arguments are bad, as NVIDIA's library does.
///
/// # Safety
/// `fh` is NULL or writable; `descr` is NULL or a valid descriptor whose
/// `fs_ops`, if non-NULL, points to a valid callback table.
pub unsafe fn handle_register(
    fh: *mut *mut c_void,
    descr: *const Descr,
    flavor: Flavor,
) -> Result<()> {
    if flavor == Flavor::CuFile && hipfs::use_count() == 0 {
        hipfs::driver_open()?;
    }
    // SAFETY: forwarded caller guarantee.
    let r = unsafe { register(fh, descr, flavor) };
    stats::count(Op::HandleRegister, r.is_ok());
    r
}

/// # Safety
/// As [`handle_register`].
unsafe fn register(fh: *mut *mut c_void, descr: *const Descr, flavor: Flavor) -> Result<()> {
    if fh.is_null() || descr.is_null() {
        return Err(invalid("fh and descr must not be NULL"));
    }
    // SAFETY: non-NULL; the caller guarantees a valid descriptor.
    let d = unsafe { descr.read_unaligned() };
    let kind =
        FileHandleType::from_raw(d.type_).ok_or_else(|| invalid("unknown file handle type"))?;
    if kind == FileHandleType::OpaqueWin32 {
        return Err(Error::new(
            OpError::IoNotSupported,
            "Win32 handles do not exist on Linux",
        ));
    }
    // SAFETY: every bit pattern is a valid c_int, whichever member was written.
    let fd: c_int = unsafe { d.handle.fd };
    let fs: Option<Arc<dyn UserspaceFs>> = match kind {
        FileHandleType::UserspaceFs if !d.fs_ops.is_null() => {
            // SAFETY: non-NULL; the caller guarantees it is a valid table.
            let ops = unsafe { d.fs_ops.read_unaligned() };
            Some(Arc::new(CallbackFs::new(fd, ops)))
        }
        _ => None,
    };
    // cuFile clients only know OPAQUE_FD handles; on a hipfs mount the core
    // binds them to the direct path as it does hipFile's (the same switch,
    // log line and counters), and for cuFile a file it cannot bind is read
    // through the mount instead of failing.
    let unbound = match flavor {
        Flavor::CuFile => UnboundHipfsFile::ThroughMount,
        Flavor::HipFile => UnboundHipfsFile::Fail,
    };
    let no_ops = kind == FileHandleType::UserspaceFs && fs.is_none();
    let id = handle::handle_register_with(fd, kind, fs, unbound).map_err(|e| {
        if no_ops && e.op() == OpError::IoNotSupported {
            invalid("USERSPACE_FS registration needs fs_ops (the fd is on no hipfs mount)")
        } else {
            e
        }
    })?;
    // SAFETY: checked non-NULL above; writable (caller's contract).
    unsafe { write_out(fh, id as usize as *mut c_void, "fh") }
}

/// Deregisters a handle; unknown handles are ignored (the C function is void).
pub fn handle_deregister(fh: *mut c_void) {
    let id = handle_id(fh);
    let ok = crate::ffi_value(false, || handle::handle_deregister(id));
    stats::count(Op::HandleDeregister, ok);
}

/// Registers `[base, base+length)` (opening the driver implicitly). With the
/// RDMA flag, host memory no transport claimed gets a process-local descriptor.
pub fn buf_register(base: *const c_void, length: usize, flags: c_int) -> Result<()> {
    let r = hipfs::buffer::buf_register(base as usize, length, flags).map(|reg| {
        if flags & hipfs::buffer::RDMA_REGISTER != 0 && reg.info.kind != MemoryKind::Device {
            // Transports ran their hooks inside buf_register; an existing
            // descriptor wins (`set` fails harmlessly then).
            let _ = reg.rdma_desc.set(host_descriptor(reg.base, reg.len));
        }
    });
    stats::count(Op::BufRegister, r.is_ok());
    r
}

/// Deregisters the buffer registered at `base`.
pub fn buf_deregister(base: *const c_void) -> Result<()> {
    let r = hipfs::buffer::buf_deregister(base as usize);
    stats::count(Op::BufDeregister, r.is_ok());
    r
}

/// Arguments both APIs refuse before any I/O: sizes beyond `ssize_t` are
/// `InvalidValue`; negative offsets are `-1`/`EINVAL` (hipFile 0.4.0's rule,
/// as for `pread`).
fn check_args(size: usize, file_offset: HOff, buffer_offset: HOff) -> Result<()> {
    if isize::try_from(size).is_err() {
        return Err(invalid("size does not fit ssize_t"));
    }
    if file_offset < 0 || buffer_offset < 0 {
        return Err(Error::system(
            libc::EINVAL,
            "negative file or buffer offset",
        ));
    }
    Ok(())
}

/// One synchronous transfer of `size` bytes between the file at
/// `file_offset` and `base + buffer_offset`, timed and counted as `op`.
///
/// # Safety
/// For `Op::Read` the buffer range is writable, for `Op::Write` readable,
/// memory (or device memory) of `size` bytes for the duration of the call.
unsafe fn transfer(
    op: Op,
    fh: *mut c_void,
    base: usize,
    size: usize,
    file_offset: HOff,
    buffer_offset: HOff,
) -> Result<usize> {
    let timer = stats::Timer::start();
    let r = handle::lookup(handle_id(fh)).and_then(|file| {
        check_args(size, file_offset, buffer_offset)?;
        // SAFETY: forwarded caller guarantee: the caller lends `base`
        // (+offset, size bytes) for the call, writable for a read.
        unsafe {
            if op == Op::Read {
                handle::read(&file, base, size, file_offset, buffer_offset)
            } else {
                handle::write(&file, base, size, file_offset, buffer_offset)
            }
        }
    });
    timer.finish(op, &r);
    r
}

/// Reads `size` bytes at `file_offset` into `base + buffer_offset`.
///
/// # Safety
/// `base + buffer_offset` has `size` writable bytes (or is device memory of
/// that size) for the duration of the call.
pub unsafe fn read(
    fh: *mut c_void,
    base: *mut c_void,
    size: usize,
    file_offset: HOff,
    buffer_offset: HOff,
) -> Result<usize> {
    // SAFETY: forwarded caller guarantee (writable).
    unsafe {
        transfer(
            Op::Read,
            fh,
            base as usize,
            size,
            file_offset,
            buffer_offset,
        )
    }
}

/// Writes `size` bytes from `base + buffer_offset` at `file_offset`.
///
/// # Safety
/// `base + buffer_offset` has `size` readable bytes for the duration of the call.
pub unsafe fn write(
    fh: *mut c_void,
    base: *const c_void,
    size: usize,
    file_offset: HOff,
    buffer_offset: HOff,
) -> Result<usize> {
    // SAFETY: forwarded caller guarantee (readable).
    unsafe {
        transfer(
            Op::Write,
            fh,
            base as usize,
            size,
            file_offset,
            buffer_offset,
        )
    }
}
