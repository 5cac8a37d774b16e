//! The C ABI types whose layouts `hipfile.h` and `cufile.h` share, `#[repr(C)]`.
//!
//! C enums are carried as `c_int`/`c_uint` fields, never as Rust enums: a C
//! caller can put any integer there, and a Rust enum holding an undeclared
//! value would be undefined behaviour.
//!
//! The fields are those of `include/hipfile.h` under the same names; the
//! header documents them, so they carry no doc comments of their own here.
#![allow(missing_docs)]

use std::ffi::{c_char, c_int, c_uint, c_void};

/// `hoff_t` (`off_t`: 64 bits on every LP64 Linux).
pub type HOff = libc::off_t;

/// `hipFileError_t` and `CUfileError_t` (same layout), returned by value.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CStatus {
    /// `hipFileOpError_t` / `CUfileOpError`.
    pub err: c_int,
    /// The GPU runtime's error (`hipError_t`, or a CUDA driver `CUresult`)
    /// when `err` is the driver-error code 5011.
    pub drv_err: c_int,
}

/// `hipFileDescr_t.handle`.
#[repr(C)]
#[derive(Clone, Copy)]
pub union DescrHandle {
    pub fd: c_int,
    pub h_file: *mut c_void,
}

/// `hipFileDescr_t`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Descr {
    /// `hipFileFileHandleType_t`.
    pub type_: c_int,
    pub handle: DescrHandle,
    pub fs_ops: *const FsOps,
}

/// `hipFileRDMAInfo_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct RdmaInfo {
    pub version: c_int,
    pub desc_len: c_int,
    pub desc_str: *const c_char,
}

/// `hipFileFSOps_t`: five callbacks, in the C order.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct FsOps {
    pub fs_type: Option<unsafe extern "C" fn(handle: *mut c_void) -> *const c_char>,
    pub get_rdma_device_list: Option<
        unsafe extern "C" fn(handle: *mut c_void, hostaddrs: *mut *mut libc::sockaddr) -> c_int,
    >,
    pub get_rdma_device_priority: Option<
        unsafe extern "C" fn(
            handle: *mut c_void,
            buf: *mut c_char,
            len: usize,
            off: HOff,
            hostaddr: *mut libc::sockaddr,
        ) -> c_int,
    >,
    pub read: Option<
        unsafe extern "C" fn(
            handle: *mut c_void,
            buf: *mut c_char,
            len: usize,
            off: HOff,
            rdma_info: *mut RdmaInfo,
        ) -> isize,
    >,
    pub write: Option<
        unsafe extern "C" fn(
            handle: *mut c_void,
            buf: *const c_char,
            len: usize,
            off: HOff,
            rdma_info: *mut RdmaInfo,
        ) -> isize,
    >,
}

/// `hipFileIOParams_t.u.batch`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct BatchParams {
    pub dev_ptr_base: *mut c_void,
    pub file_offset: i64,
    pub dev_ptr_offset: i64,
    pub size: usize,
}

/// `hipFileIOParams_t.u`.
#[repr(C)]
#[derive(Clone, Copy)]
pub union IoParamsU {
    pub batch: BatchParams,
}

/// `hipFileIOParams_t`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct IoParams {
    /// `hipFileBatchMode_t`.
    pub mode: c_int,
    pub u: IoParamsU,
    pub fh: *mut c_void,
    /// `hipFileOpcode_t`.
    pub opcode: c_int,
    pub cookie: *mut c_void,
}

/// `hipFileIOEvents_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct IoEvents {
    pub cookie: *mut c_void,
    /// `hipFileStatus_t`.
    pub status: c_int,
    pub ret: usize,
}

/// `hipFileFileHandleType_t` values.
pub const HANDLE_TYPE_OPAQUE_FD: c_int = 1;
pub const HANDLE_TYPE_OPAQUE_WIN32: c_int = 2;
pub const HANDLE_TYPE_USERSPACE_FS: c_int = 3;

/// `hipFileBatchMode_t`: `hipFileBatch`.
pub const BATCH_MODE_BATCH: c_int = 1;
/// `hipFileOpcode_t`.
pub const OPCODE_READ: c_int = 0;
pub const OPCODE_WRITE: c_int = 1;

/// `hipFileStatus_t`.
pub const STATUS_WAITING: c_int = 1;
pub const STATUS_PENDING: c_int = 2;
pub const STATUS_INVALID: c_int = 4;
pub const STATUS_CANCELED: c_int = 8;
pub const STATUS_COMPLETE: c_int = 16;
pub const STATUS_TIMEOUT: c_int = 32;
pub const STATUS_FAILED: c_int = 64;

/// Stream flags.
pub const STREAM_FIXED_BUF_OFFSET: c_uint = 1;
pub const STREAM_FIXED_FILE_OFFSET: c_uint = 2;
pub const STREAM_FIXED_FILE_SIZE: c_uint = 4;
pub const STREAM_PAGE_ALIGNED_INPUTS: c_uint = 8;
pub const STREAM_FLAGS_MASK: c_uint = 0xf;

/// Version of the `hipFileRDMAInfo_t` this library fills in.
pub const RDMA_INFO_VERSION: c_int = 1;

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    #[test]
    fn structs_have_the_lp64_c_layouts() {
        assert_eq!(size_of::<CStatus>(), 8);
        assert_eq!(size_of::<Descr>(), 24);
        assert_eq!(offset_of!(Descr, handle), 8);
        assert_eq!(offset_of!(Descr, fs_ops), 16);
        assert_eq!(size_of::<RdmaInfo>(), 16);
        assert_eq!(offset_of!(RdmaInfo, desc_str), 8);
        assert_eq!(size_of::<FsOps>(), 40);
        assert_eq!(offset_of!(FsOps, write), 32);
        assert_eq!(size_of::<IoParams>(), 64);
        assert_eq!(offset_of!(IoParams, u), 8);
        assert_eq!(offset_of!(IoParams, fh), 40);
        assert_eq!(offset_of!(IoParams, opcode), 48);
        assert_eq!(offset_of!(IoParams, cookie), 56);
        assert_eq!(size_of::<IoEvents>(), 24);
        assert_eq!(offset_of!(IoEvents, status), 8);
        assert_eq!(offset_of!(IoEvents, ret), 16);
    }
}
