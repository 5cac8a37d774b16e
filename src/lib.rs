//! hipfs: the hipFile GPU-direct storage API in Rust and the hipfs remote
//! dataset filesystem (the C ABI, `libhipfile.so`, is the `hipfile-capi`
//! crate over this one).
//!
//! ```no_run
//! use hipfs::{Buffer, Driver, FileHandle, FileHandleType};
//! let _drv = Driver::open()?;
//! let mut fh = FileHandle::new("/data/shard-0", libc::O_RDONLY, 0, FileHandleType::OpaqueFd);
//! fh.open()?;
//! let mut mem = vec![0u8; 64 << 20];
//! let mut buf = Buffer::from_slice(&mut mem, 0);
//! buf.register()?;
//! let n = fh.read(&mut buf, 64 << 20, 0, 0)?;
//! println!("read {n} bytes");
//! # Ok::<(), hipfs::Error>(())
//! ```

pub mod batch;
pub mod buffer;
pub mod config;
pub mod driver;
pub mod error;
pub mod gpu;
pub mod handle;
pub mod io;
pub(crate) mod job_pool;
mod lent;
pub mod registry;
pub mod remote;
pub mod stats;
pub mod stream;
pub mod units;
pub mod userspace;

pub use batch::{BatchIo, IoEvent, IoParams, Opcode, Status};
pub use buffer::{Buffer, BufferView, IoMemory, RDMA_REGISTER, RDMA_RELAXED_ORDERING};
pub use config::{BoolParam, DriverProperties, SizeTParam, StringParam};
pub use driver::{
    driver_close, driver_get_properties, driver_open, driver_set_max_cache_size,
    driver_set_max_direct_io_size, driver_set_max_pinned_mem_size, driver_set_poll_mode,
    get_parameter_bool, get_parameter_size, get_parameter_string, set_parameter_bool,
    set_parameter_size, set_parameter_string, use_count, Driver,
};
pub use error::{op_error_string, Error, OpError, Result};
pub use handle::{FileHandle, FileHandleType};
pub use stream::{
    stream_deregister, stream_register, AsyncArgs, STREAM_FIXED_BUF_OFFSET,
    STREAM_FIXED_FILE_OFFSET, STREAM_FIXED_FILE_SIZE, STREAM_FLAGS_MASK,
    STREAM_PAGE_ALIGNED_INPUTS,
};
pub use userspace::{UserspaceBuf, UserspaceFs, UserspaceMem};

/// Library version (the hipFile 0.5 line).
pub const VERSION_MAJOR: u32 = 0;
/// Minor version of the hipFile API implemented.
pub const VERSION_MINOR: u32 = 5;
/// Patch version.
pub const VERSION_PATCH: u32 = 0;

/// `(major, minor, patch)` of the library.
pub fn get_version() -> (u32, u32, u32) {
    (VERSION_MAJOR, VERSION_MINOR, VERSION_PATCH)
}

/// Number of RDMA (verbs) devices on this host; 0 where there are none.
pub fn rdma_device_count() -> usize {
    hipfs_rdma::devices().map_or(0, |d| d.len())
}
