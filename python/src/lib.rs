//! `hipfile._hipfile`: the native half of the `hipfile` Python package.
//!
//! It exposes the hipfs core as plain functions over integers (handles,
//! addresses, sizes); the classes users see (`Driver`, `FileHandle`,
//! `Buffer`, the enums and `HipFileException`) live in the pure-Python
//! package around it, where Python semantics (context managers, enums,
//! properties) are simplest to get exactly right.

mod api;
mod errors;
mod memory;

use pyo3::prelude::*;

#[pymodule]
fn _hipfile(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add_function(wrap_pyfunction!(api::get_version, m)?)?;
    m.add_function(wrap_pyfunction!(api::driver_get_properties, m)?)?;
    m.add_function(wrap_pyfunction!(api::driver_open, m)?)?;
    m.add_function(wrap_pyfunction!(api::driver_close, m)?)?;
    m.add_function(wrap_pyfunction!(api::use_count, m)?)?;
    m.add_function(wrap_pyfunction!(api::op_error_string, m)?)?;
    m.add_function(wrap_pyfunction!(api::handle_register, m)?)?;
    m.add_function(wrap_pyfunction!(api::handle_deregister, m)?)?;
    m.add_function(wrap_pyfunction!(api::read, m)?)?;
    m.add_function(wrap_pyfunction!(api::write, m)?)?;
    m.add_function(wrap_pyfunction!(api::buf_register, m)?)?;
    m.add_function(wrap_pyfunction!(api::buf_deregister, m)?)?;
    m.add_function(wrap_pyfunction!(api::stream_synchronize, m)?)?;
    m.add_function(wrap_pyfunction!(memory::export_buffer, m)?)?;
    m.add_function(wrap_pyfunction!(memory::dlpack_info, m)?)?;
    m.add_class::<memory::BufferExport>()?;
    m.add("OP_ERRORS", api::op_error_table(py)?)?;
    m.add("HANDLE_TYPES", api::handle_type_table(py)?)?;
    m.add("RDMA_REGISTER", hipfs::RDMA_REGISTER)?;
    m.add("RDMA_RELAXED_ORDERING", hipfs::RDMA_RELAXED_ORDERING)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
