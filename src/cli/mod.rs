//! The `hipfs` command's subcommands, as library functions so the binary
//! stays a thin layer.

pub mod bench;
pub mod bench_gpu;
pub mod check;
pub mod remote_cmds;
