//! `hipFileFSOps_t` callbacks as one implementation of the core's
//! [`UserspaceFs`] trait.
//!
//! The library never touches the registered fd: it hands it back, cast to
//! `void *`, as every callback's `handle`. A request whose buffer has an RDMA
//! registration gets a `hipFileRDMAInfo_t` describing it (and the buffer
//! pointer is the request's address inside that registration); otherwise
//! `rdma_info` is NULL and the pointer is host-accessible memory.

use crate::types::{FsOps, RdmaInfo, RDMA_INFO_VERSION};
use hipfs::error::{Error, OpError, Result};
use hipfs::userspace::{UserspaceBuf, UserspaceFs, UserspaceMem};
use std::ffi::{c_int, c_void, CStr, CString};

/// A file served by C callbacks.
pub struct CallbackFs {
    fd: c_int,
    ops: FsOps,
}

// SAFETY: the callbacks are plain C function pointers; hipFile's contract
// (like cuFile's) requires them to be callable from any thread.
unsafe impl Send for CallbackFs {}
// SAFETY: as above; the struct itself is immutable after construction.
unsafe impl Sync for CallbackFs {}

impl CallbackFs {
    /// Copies the callback table, so the caller's struct need not outlive registration.
    pub fn new(fd: c_int, ops: FsOps) -> CallbackFs {
        CallbackFs { fd, ops }
    }

    fn handle(&self) -> *mut c_void {
        self.fd as isize as *mut c_void
    }
}

/// What the callback is given for one request.
struct CallArgs {
    ptr: *mut u8,
    len: usize,
    /// Keeps `info.desc_str` alive for the call.
    _desc: Option<CString>,
    info: Option<RdmaInfo>,
}

fn call_args(buf: UserspaceBuf) -> Result<CallArgs> {
    match buf.into_mem() {
        UserspaceMem::Host { ptr, len } => Ok(CallArgs {
            ptr,
            len,
            _desc: None,
            info: None,
        }),
        UserspaceMem::Rdma {
            desc, addr, len, ..
        } => {
            let desc_len = c_int::try_from(desc.len())
                .map_err(|_| Error::new(OpError::InternalError, "RDMA descriptor too long"))?;
            let c = CString::new(desc)
                .map_err(|_| Error::new(OpError::InternalError, "RDMA descriptor contains NUL"))?;
            let info = RdmaInfo {
                version: RDMA_INFO_VERSION,
                desc_len,
                desc_str: c.as_ptr(),
            };
            Ok(CallArgs {
                ptr: addr as usize as *mut u8,
                len,
                _desc: Some(c),
                info: Some(info),
            })
        }
    }
}

/// A callback's `ssize_t`: bytes, or `-errno`.
fn callback_result(ret: isize, what: &str) -> Result<usize> {
    if ret >= 0 {
        return Ok(ret as usize);
    }
    let errno = hipfs::userspace::errno_of_negative_return(ret);
    Err(Error::system(
        errno,
        format!("userspace filesystem {what} callback"),
    ))
}

fn offset(off: u64) -> Result<i64> {
    i64::try_from(off).map_err(|_| Error::new(OpError::InvalidValue, "file offset too large"))
}

fn missing(what: &str) -> Error {
    Error::new(
        OpError::IoNotSupported,
        format!("the fs_ops table has no {what} callback"),
    )
}

impl UserspaceFs for CallbackFs {
    fn fs_type(&self) -> String {
        let Some(f) = self.ops.fs_type else {
            return "userspace".to_string();
        };
        // SAFETY: calling the registered C callback with its own handle.
        let p = unsafe { f(self.handle()) };
        if p.is_null() {
            return "userspace".to_string();
        }
        // SAFETY: the callback returns a NUL-terminated string (upstream contract).
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }

    fn read(&self, buf: UserspaceBuf, off: u64) -> Result<usize> {
        let f = self.ops.read.ok_or_else(|| missing("read"))?;
        let off = offset(off)?;
        let mut a = call_args(buf)?;
        let info = a
            .info
            .as_mut()
            .map_or(std::ptr::null_mut(), |i| i as *mut RdmaInfo);
        // SAFETY: the core guarantees `a.ptr..+a.len` is the caller's memory
        // for this request; `info` (if any) outlives the call.
        let ret = unsafe { f(self.handle(), a.ptr.cast(), a.len, off, info) };
        callback_result(ret, "read")
    }

    fn write(&self, buf: UserspaceBuf, off: u64) -> Result<usize> {
        let f = self.ops.write.ok_or_else(|| missing("write"))?;
        let off = offset(off)?;
        let mut a = call_args(buf)?;
        let info = a
            .info
            .as_mut()
            .map_or(std::ptr::null_mut(), |i| i as *mut RdmaInfo);
        // SAFETY: as in `read`; the callback only reads the buffer.
        let ret = unsafe { f(self.handle(), a.ptr.cast_const().cast(), a.len, off, info) };
        callback_result(ret, "write")
    }
}

/// The descriptor given to buffers registered with `HIPFILE_RDMA_REGISTER`
/// when no transport claimed them: same grammar as `hipfs_rdma`'s ASCII
/// `RemoteDescriptor` form, with transport `host` (process-local memory, no
/// remote key).
pub fn host_descriptor(addr: usize, len: usize) -> String {
    format!("hipfs-rdma:v1:host:addr={addr:#x},len={len},rkey=0x0")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn negative_callback_returns_are_errno() {
        let e = callback_result(-(libc::ENOSPC as isize), "write").unwrap_err();
        assert_eq!(e.errno(), Some(libc::ENOSPC));
        let e = callback_result(isize::MIN, "read").unwrap_err();
        assert_eq!(e.errno(), Some(libc::EIO));
        assert_eq!(callback_result(7, "read").unwrap(), 7);
    }

    #[test]
    fn host_descriptor_follows_the_rdma_ascii_grammar() {
        assert_eq!(
            host_descriptor(0x1000, 4096),
            "hipfs-rdma:v1:host:addr=0x1000,len=4096,rkey=0x0"
        );
    }
}
