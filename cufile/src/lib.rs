//! `libcufile.so.0`: NVIDIA's cuFile C ABI (`include/cufile.h`, ours) over
//! the hipfs core, so programs built for cuFile (PyTorch GDS, KvikIO,
//! cuda-python, NIXL, fio) run on hipfs unchanged.
//!
//! The functions are thin shells over `hipfs_cabi`, the code shared with
//! `libhipfile.so`; what is cuFile's own lives here: the 56-byte
//! `CUfileDrvProps_t`, `cuFileGetVersion` (1150: the cuFile 1.15 layouts and
//! functions, plus 1.20's `cuFileReadv/Writev`), the error numbers 5039–5050,
//! the extra parameters (bool 12–13, string 3, slab arrays, min/max), the
//! statistics controls, and cuFile's rules where they differ from hipFile's
//! (a bad `cuFileHandleRegister` still opens the driver; batch timeouts are
//! read leniently). `CUfileError_t.cu_err` carries a CUDA driver `CUresult`
//! (the core's CUDA runtime is the driver API).

mod batch_async;
mod driver;
mod io;
mod params;
mod stats;
pub mod types;

pub use batch_async::*;
pub use driver::*;
pub use io::*;
pub use params::*;
pub use stats::*;
pub use types::*;

use hipfs::{Error, OpError, Result};

/// The string that tells this library from NVIDIA's: `hipfs check` looks
/// for it in the file a program would load (it is logged at driver open, so
/// the linker keeps it).
pub const IDENT: &str = "hipfs libcufile.so.0 (cuFile drop-in over the hipfs core)";

/// `CUFILE_VERSION`-style number `cuFileGetVersion` reports: 1000 * major +
/// 10 * minor of the cuFile level whose layouts and functions are here.
pub const CUFILE_API_VERSION: i32 = 1150;

/// cuFile-only error numbers (after hipFile's 5038).
pub mod codes {
    /// `CU_FILE_NOMEM_ERROR`.
    pub const NOMEM: i32 = 5043;
    /// `CU_FILE_IO_ERROR`.
    pub const IO: i32 = 5044;
    /// `CU_FILE_IO_MAX_ERROR`: one past the largest.
    pub const IO_MAX: i32 = 5050;
}

/// `CUfileError_t` for a core error: the core's codes, except that hipFile's
/// "max" marker 5039 means something else in cuFile (it is never a real
/// error, so it becomes internal), and allocation or I/O failures of the
/// system get cuFile's own numbers.
pub(crate) fn cufile_status(e: &Error) -> CUfileError {
    let mut s = hipfs_cabi::error_status(e);
    s.err = match (e.op(), e.errno()) {
        (OpError::IoMaxError, _) => OpError::InternalError.code(),
        (_, Some(libc::ENOMEM)) => codes::NOMEM,
        (OpError::InternalError, Some(libc::EIO)) => codes::IO,
        _ => s.err,
    };
    s
}

/// Runs a status-returning body with cuFile's codes; a panic is internal.
pub(crate) fn status(f: impl FnOnce() -> Result<()>) -> CUfileError {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(Ok(())) => hipfs_cabi::op_status(OpError::Success),
        Ok(Err(e)) => cufile_status(&e),
        Err(_) => hipfs_cabi::op_status(OpError::InternalError),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hipfile_only_and_system_codes_map_to_cufile_numbers() {
        let c = |e: Error| status(|| Err(e)).err;
        assert_eq!(c(Error::new(OpError::IoMaxError, "x")), 5030);
        assert_eq!(c(Error::system(libc::ENOMEM, "x")), 5043);
        assert_eq!(c(Error::system(libc::EIO, "x")), 5044);
        assert_eq!(c(Error::new(OpError::HandleNotRegistered, "x")), 5027);
        let g = status(|| Err(Error::gpu(700, "copy")));
        assert_eq!((g.err, g.drv_err), (5011, 700));
        assert_eq!(status(|| panic!("boom")).err, 5030);
    }
}
