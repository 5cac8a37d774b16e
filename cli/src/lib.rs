//! The `hipfs` command's subcommands and every benchmark, outside the core
//! library: this package owns flags, process control (signals, the
//! background mount) and measurements; the core `hipfs` has none of them,
//! so `libhipfile.so` and the Python extension do not carry them.

// No `unsafe` here: process control goes through std, rustix and
// signal-hook. The two GPU bench sites that still need it are marked (they
// go once the core has typed pinned-host and stream handles).
#![deny(unsafe_code)]

pub mod bench;
pub mod check;
pub mod remote_cmds;
