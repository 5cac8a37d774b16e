//! The core library's integration tests, one binary (each test binary links
//! the whole crate; one link instead of seven). One module per area; the
//! helpers are modules too. Tests that run the `hipfs` command live with
//! it, in `cli/tests/it/`.

#[macro_use]
mod remote_common;
mod common;
mod gpu_common;

mod api_errors;
mod batch_async;
mod c_abi;
mod driver_threads;
mod gpu_roundtrip;
mod gpu_userspace;
mod opaque_fd_io;
