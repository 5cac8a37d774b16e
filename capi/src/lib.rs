//! `libhipfile.so`: the drop-in hipFile 0.5 C ABI (`include/hipfile.h`) over
//! the hipfs core's public API. Each `hipFile*` function is a thin shell over
//! `hipfs_cabi` (shared with `libcufile.so.0`), which converts arguments and
//! results and keeps panics from crossing the FFI boundary; `build.rs` and
//! `hipfile.map` give the library its SONAME and keep its dynamic symbol
//! table to those functions.
//!
//! Return conventions (the spec's): `hipFileError_t` by value;
//! `hipFileRead/Write` return bytes, `-1` with `errno` for a system error
//! (and for a negative offset, `EINVAL`), `-hipFileOpError` otherwise, and
//! `-1`/`EINVAL` before the driver is open. A C `hipFileHandle_t` is the
//! core's handle id cast to a pointer.

mod async_io;
mod driver;
mod io;
mod stats;
pub mod types;

pub use async_io::*;
pub use driver::*;
pub use io::*;
pub use stats::*;
pub use types::*;
