//! Integration tests of the `hipfs` command and the remote filesystem end
//! to end, one binary. They live in this package because only its tests
//! get `CARGO_BIN_EXE_hipfs`. The helpers shared with the core's tests are
//! the same files (`tests/it/` of the core), included by path.

#[macro_use]
#[path = "../../../tests/it/remote_common.rs"]
mod remote_common;
#[path = "../../../tests/it/common.rs"]
mod common;
mod serve;

mod cufile_mount;
mod remote_campaign;
mod remote_coherence;
mod remote_conformance;
mod remote_data;
mod remote_fast;
mod remote_faults;
mod remote_held;
mod remote_honest;
mod remote_limits;
mod remote_multi;
mod remote_opaque_fd;
mod remote_posix;
mod remote_scripts;
mod remote_security;
mod remote_tls;
mod remote_userspace;
mod remote_verbs_device_vm;
mod remote_verbs_vm;
