//! File handles, buffers, synchronous and vectored I/O.

use crate::status;
use crate::types::{CUfileError, CUfileIoVec, Descr};
use hipfs_cabi::{ffi_ssize, invalid, io, Flavor};
use std::ffi::{c_int, c_uint, c_void};

/// Registers `descr->handle.fd`; as NVIDIA's library, this opens the
/// driver first even when the arguments turn out to be bad.
///
/// # Safety
/// `fh` is NULL or writable; `descr` is NULL or a valid `CUfileDescr_t`
/// whose `fs_ops`, if non-NULL, points to a valid `CUfileFSOps_t`.
#[no_mangle]
pub unsafe extern "C" fn cuFileHandleRegister(
    fh: *mut *mut c_void,
    descr: *mut Descr,
) -> CUfileError {
    // Registration may open the driver implicitly: cuFile's rules first.
    hipfs::io::set_cufile_rules(true);
    // SAFETY: forwarded caller guarantee.
    status(|| unsafe { io::handle_register(fh, descr, Flavor::CuFile) })
}

/// Deregisters a handle; unknown handles are ignored.
#[no_mangle]
pub extern "C" fn cuFileHandleDeregister(fh: *mut c_void) {
    io::handle_deregister(fh)
}

/// Registers `[buf_ptr_base, +length)`, device or host memory.
#[no_mangle]
pub extern "C" fn cuFileBufRegister(
    buf_ptr_base: *const c_void,
    length: usize,
    flags: c_int,
) -> CUfileError {
    status(|| io::buf_register(buf_ptr_base, length, flags))
}

/// Deregisters the buffer registered at `buf_ptr_base`.
#[no_mangle]
pub extern "C" fn cuFileBufDeregister(buf_ptr_base: *const c_void) -> CUfileError {
    status(|| io::buf_deregister(buf_ptr_base))
}

/// Reads `size` bytes at `file_offset` into `buf_ptr_base + buf_ptr_offset`:
/// bytes, `-1` with errno, or `-CUfileOpError`.
///
/// # Safety
/// The buffer range has `size` writable bytes for the duration of the call.
#[no_mangle]
pub unsafe extern "C" fn cuFileRead(
    fh: *mut c_void,
    buf_ptr_base: *mut c_void,
    size: usize,
    file_offset: libc::off_t,
    buf_ptr_offset: libc::off_t,
) -> isize {
    // SAFETY: forwarded caller guarantee.
    ffi_ssize(|| unsafe { io::read(fh, buf_ptr_base, size, file_offset, buf_ptr_offset) })
}

/// Writes `size` bytes from `buf_ptr_base + buf_ptr_offset` at `file_offset`.
///
/// # Safety
/// The buffer range has `size` readable bytes for the duration of the call.
#[no_mangle]
pub unsafe extern "C" fn cuFileWrite(
    fh: *mut c_void,
    buf_ptr_base: *const c_void,
    size: usize,
    file_offset: libc::off_t,
    buf_ptr_offset: libc::off_t,
) -> isize {
    // SAFETY: forwarded caller guarantee.
    ffi_ssize(|| unsafe { io::write(fh, buf_ptr_base, size, file_offset, buf_ptr_offset) })
}

/// The entries of a caller's vector (1..=1024 of them; flags must be 0).
///
/// # Safety
/// `iov` is NULL or has `iovcnt` readable entries.
unsafe fn vector<'a>(
    iov: *const CUfileIoVec,
    iovcnt: c_int,
    flags: c_uint,
) -> hipfs::Result<&'a [CUfileIoVec]> {
    if flags != 0 {
        return Err(invalid("readv/writev flags must be 0"));
    }
    let n = usize::try_from(iovcnt)
        .ok()
        .filter(|n| (1..=1024).contains(n))
        .ok_or_else(|| invalid("iovcnt must be 1..=1024"))?;
    if iov.is_null() {
        return Err(invalid("iov is NULL"));
    }
    // SAFETY: non-NULL, `n` entries (caller's contract).
    Ok(unsafe { std::slice::from_raw_parts(iov, n) })
}

/// Moves each vector entry in turn from `file_offset` on (as `preadv` /
/// `pwritev`): the total moved; stops early at a short transfer (end of file).
///
/// # Safety
/// `iov` is NULL or has `iovcnt` entries, each a range of its length that
/// is writable (for a read) or readable memory for the call.
unsafe fn vectored(
    read: bool,
    fh: *mut c_void,
    iov: *const CUfileIoVec,
    iovcnt: c_int,
    file_offset: libc::off_t,
    flags: c_uint,
) -> isize {
    ffi_ssize(|| {
        // SAFETY: forwarded caller guarantee.
        let v = unsafe { vector(iov, iovcnt, flags) }?;
        let mut done = 0usize;
        for e in v {
            let off = file_offset.saturating_add(done as i64);
            // SAFETY: forwarded caller guarantee on the entry's memory.
            let n = unsafe {
                if read {
                    io::read(fh, e.base, e.len, off, 0)
                } else {
                    io::write(fh, e.base, e.len, off, 0)
                }
            }?;
            done += n;
            if n < e.len {
                break;
            }
        }
        Ok(done)
    })
}

/// Reads the file from `file_offset` into each vector entry in turn.
///
/// # Safety
/// Each entry's range is writable memory of its length for the call.
#[no_mangle]
pub unsafe extern "C" fn cuFileReadv(
    fh: *mut c_void,
    iov: *const CUfileIoVec,
    iovcnt: c_int,
    file_offset: libc::off_t,
    flags: c_uint,
) -> isize {
    // SAFETY: forwarded caller guarantee.
    unsafe { vectored(true, fh, iov, iovcnt, file_offset, flags) }
}

/// Writes each vector entry in turn from `file_offset` on.
///
/// # Safety
/// Each entry's range is readable memory of its length for the call.
#[no_mangle]
pub unsafe extern "C" fn cuFileWritev(
    fh: *mut c_void,
    iov: *const CUfileIoVec,
    iovcnt: c_int,
    file_offset: libc::off_t,
    flags: c_uint,
) -> isize {
    // SAFETY: forwarded caller guarantee.
    unsafe { vectored(false, fh, iov, iovcnt, file_offset, flags) }
}
