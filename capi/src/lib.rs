//! `libhipfile.so`: the drop-in hipFile C ABI.
//!
//! The exported functions live in the core crate (`hipfs::capi`), so that
//! they are one implementation over the core and unit-testable from Rust;
//! this crate only turns them into a shared library with the right SONAME and
//! symbol table (see `build.rs` and `hipfile.map`).

pub use hipfs::capi::*;
