//! File handles, buffers and synchronous I/O.

use crate::fsops::{host_descriptor, CallbackFs};
use crate::types::{HOff, HipFileDescr, HipFileError};
use crate::{ffi_ssize, ffi_status, invalid};
use hipfs::error::{Error, OpError};
use hipfs::gpu::MemoryKind;
use hipfs::handle::{self, FileHandleType};
use hipfs::userspace::UserspaceFs;
use std::ffi::{c_int, c_void};
use std::sync::Arc;

/// The core handle id behind a C `hipFileHandle_t`.
pub(crate) fn handle_id(fh: *mut c_void) -> u64 {
    fh as usize as u64
}

/// Registers `descr->handle.fd` and returns its handle in `*fh` (opening
/// the driver implicitly).
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
    ffi_status(|| {
        if fh.is_null() || descr.is_null() {
            return Err(invalid("fh and descr must not be NULL"));
        }
        // SAFETY: non-NULL; the caller guarantees a valid descriptor.
        let d = unsafe { descr.read_unaligned() };
        let kind = FileHandleType::from_raw(d.type_)
            .ok_or_else(|| invalid("unknown hipFileFileHandleType_t"))?;
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
        let no_ops = kind == FileHandleType::UserspaceFs && fs.is_none();
        let id = handle::handle_register(fd, kind, fs).map_err(|e| {
            if no_ops && e.op() == OpError::IoNotSupported {
                invalid("USERSPACE_FS registration needs fs_ops (the fd is on no hipfs mount)")
            } else {
                e
            }
        })?;
        // SAFETY: non-NULL and writable (caller's contract).
        unsafe { fh.write_unaligned(id as usize as *mut c_void) };
        Ok(())
    })
}

/// Deregisters a handle; unknown handles are ignored.
#[no_mangle]
pub extern "C" fn hipFileHandleDeregister(fh: *mut c_void) {
    let id = handle_id(fh);
    if std::panic::catch_unwind(|| handle::handle_deregister(id)).is_err() {
        log::error!("hipFileHandleDeregister: internal error deregistering handle {id}");
    }
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
    ffi_status(|| {
        let reg = hipfs::buffer::buf_register(base as usize, length, flags)?;
        if flags & hipfs::buffer::RDMA_REGISTER != 0 && reg.info.kind != MemoryKind::Device {
            // Transports ran their hooks inside buf_register; an existing
            // descriptor wins (`set` fails harmlessly then).
            let _ = reg.rdma_desc.set(host_descriptor(reg.base, reg.len));
        }
        Ok(())
    })
}

/// Deregisters the buffer registered at `base`.
#[no_mangle]
pub extern "C" fn hipFileBufDeregister(base: *const c_void) -> HipFileError {
    ffi_status(|| hipfs::buffer::buf_deregister(base as usize))
}

fn check_size(size: usize) -> hipfs::Result<()> {
    if isize::try_from(size).is_err() {
        return Err(invalid("size does not fit ssize_t"));
    }
    Ok(())
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
    ffi_ssize(|| {
        let file = handle::lookup(handle_id(fh))?;
        check_size(size)?;
        // SAFETY: hipFileRead's contract: the caller lends `base` (+offset,
        // size bytes) for the call.
        unsafe { handle::read(&file, base as usize, size, file_offset, buffer_offset) }
    })
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
    ffi_ssize(|| {
        let file = handle::lookup(handle_id(fh))?;
        check_size(size)?;
        // SAFETY: hipFileWrite's contract: the caller lends `base` (+offset,
        // size bytes) for the call.
        unsafe { handle::write(&file, base as usize, size, file_offset, buffer_offset) }
    })
}
