//! The `hipfs` command's subcommands and every benchmark, outside the core
//! library: this package owns flags, process control (signals, the
//! background mount) and measurements; the core `hipfs` has none of them,
//! so `libhipfile.so` and the Python extension do not carry them.

// No `unsafe` here: process control goes through std, rustix and
// signal-hook. Three bench sites still need it and carry
// `#[allow(unsafe_code)]`: two in bench/gpu.rs (raw pinned memory and the
// runtime's async copies, until the core has typed pinned-host and stream
// handles) and one in bench/remote.rs (reading a registered host buffer
// back, until the buffer API has a safe view).
#![deny(unsafe_code)]

pub mod bench;
pub mod check;
pub mod remote_cmds;
