//! The FUSE adapter's integration tests, one binary: one module per area,
//! the helpers as a module.

mod common;

mod caching;
mod posix;
mod robustness;
mod session;
