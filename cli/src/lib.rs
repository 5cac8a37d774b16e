//! The `hipfs` command's subcommands and every benchmark, outside the core
//! library: this package owns flags, process control (signals, the
//! background mount) and measurements; the core `hipfs` has none of them,
//! so `libhipfile.so` and the Python extension do not carry them.

// No `unsafe` here, and none may be added: process control goes through
// std, rustix and signal-hook; the benchmarks use the core's typed GPU
// handles (PinnedHost, DeviceAllocation, Stream::scope for async copies)
// and Buffer::as_host_slice to read a registered buffer back.
#![forbid(unsafe_code)]

pub mod bench;
pub mod check;
pub mod remote_cmds;
