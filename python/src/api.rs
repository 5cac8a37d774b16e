//! The core's hipFile calls, one Python function each. Every call that can
//! block (file opens, I/O, closing the driver) runs with the GIL released.

use crate::errors::{core_error, hipfile_exception};
use hipfs::handle::{self, FileHandleType};
use hipfs::{buffer, OpError};
use pyo3::prelude::*;
use pyo3::types::PyDict;

/// Runs a core call without the GIL and maps its error.
fn detached<T: Send>(py: Python<'_>, f: impl FnOnce() -> hipfs::Result<T> + Send) -> PyResult<T> {
    py.detach(f).map_err(|e| core_error(py, e))
}

/// `(major, minor, patch)` of the hipFile library.
#[pyfunction]
pub fn get_version() -> (u32, u32, u32) {
    hipfs::get_version()
}

/// The driver properties, flattened into one dict (sizes in KiB).
#[pyfunction]
pub fn driver_get_properties(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let p = detached(py, hipfs::driver_get_properties)?;
    let d = PyDict::new(py);
    d.set_item("nvfs_major_version", p.major_version)?;
    d.set_item("nvfs_minor_version", p.minor_version)?;
    d.set_item("nvfs_poll_thresh_size", p.poll_thresh_size)?;
    d.set_item("nvfs_max_direct_io_size", p.max_direct_io_size)?;
    d.set_item("nvfs_driver_status_flags", p.driver_status_flags)?;
    d.set_item("nvfs_driver_control_flags", p.driver_control_flags)?;
    d.set_item("feature_flags", p.feature_flags)?;
    d.set_item("max_device_cache_size", p.max_device_cache_size)?;
    d.set_item("per_buffer_cache_size", p.per_buffer_cache_size)?;
    d.set_item("max_device_pinned_mem_size", p.max_device_pinned_mem_size)?;
    d.set_item("max_batch_io_count", p.max_batch_io_count)?;
    d.set_item("max_batch_io_timeout_msecs", p.max_batch_io_timeout_msecs)?;
    Ok(d)
}

/// Opens the driver (one more reference).
#[pyfunction]
pub fn driver_open(py: Python<'_>) -> PyResult<()> {
    detached(py, hipfs::driver_open)
}

/// Closes the driver once; at zero every handle and buffer is deregistered.
#[pyfunction]
pub fn driver_close(py: Python<'_>) -> PyResult<()> {
    detached(py, hipfs::driver_close)
}

/// The driver's reference count.
#[pyfunction]
pub fn use_count() -> i64 {
    hipfs::use_count()
}

/// `hipFileGetOpErrorString`: the string for any code; unknown codes give
/// "Unknown hipFile error".
#[pyfunction]
pub fn op_error_string(code: i64) -> &'static str {
    i32::try_from(code).map_or("Unknown hipFile error", hipfs::op_error_string)
}

/// Registers an open fd; returns the opaque handle.
#[pyfunction]
pub fn handle_register(py: Python<'_>, fd: i32, handle_type: i64) -> PyResult<u64> {
    let kind = i32::try_from(handle_type)
        .ok()
        .and_then(FileHandleType::from_raw)
        .ok_or_else(|| {
            hipfile_exception(
                py,
                OpError::InvalidValue.code(),
                0,
                &format!("{handle_type} is not a hipFileFileHandleType_t value"),
            )
        })?;
    detached(py, move || handle::handle_register(fd, kind, None))
}

/// Deregisters a handle; returns whether it was registered.
#[pyfunction]
pub fn handle_deregister(py: Python<'_>, handle: u64) -> bool {
    py.detach(move || handle::handle_deregister(handle))
}

/// `hipFileRead`: reads `size` bytes at `file_offset` into `ptr + buffer_offset`.
#[pyfunction]
pub fn read(
    py: Python<'_>,
    handle: u64,
    ptr: usize,
    size: usize,
    file_offset: i64,
    buffer_offset: i64,
) -> PyResult<usize> {
    detached(py, move || {
        let file = handle::lookup(handle)?;
        // SAFETY: the Python API's contract (as hipFileRead's): `ptr` is
        // memory the caller lends for the call (the package passes buffer
        // objects' addresses it keeps alive across it).
        unsafe { handle::read(&file, ptr, size, file_offset, buffer_offset) }
    })
}

/// `hipFileWrite`: writes `size` bytes from `ptr + buffer_offset` at `file_offset`.
#[pyfunction]
pub fn write(
    py: Python<'_>,
    handle: u64,
    ptr: usize,
    size: usize,
    file_offset: i64,
    buffer_offset: i64,
) -> PyResult<usize> {
    detached(py, move || {
        let file = handle::lookup(handle)?;
        // SAFETY: as for `read`.
        unsafe { handle::write(&file, ptr, size, file_offset, buffer_offset) }
    })
}

/// `hipFileBufRegister`.
#[pyfunction]
pub fn buf_register(py: Python<'_>, ptr: usize, length: usize, flags: i32) -> PyResult<()> {
    detached(py, move || {
        buffer::buf_register(ptr, length, flags).map(drop)
    })
}

/// `hipFileBufDeregister`.
#[pyfunction]
pub fn buf_deregister(py: Python<'_>, ptr: usize) -> PyResult<()> {
    detached(py, move || buffer::buf_deregister(ptr))
}

/// Every `hipFileOpError_t` member as `{python_name: code}`, so the Python
/// enum takes its values from the core rather than redefining them.
pub fn op_error_table(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let d = PyDict::new(py);
    for op in OpError::ALL {
        d.set_item(op.python_name(), op.code())?;
    }
    Ok(d)
}

/// Every `hipFileFileHandleType_t` member as `{python_name: value}`.
pub fn handle_type_table(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let d = PyDict::new(py);
    for (name, t) in [
        ("OPAQUE_FD", FileHandleType::OpaqueFd),
        ("OPAQUE_WIN32", FileHandleType::OpaqueWin32),
        ("USERSPACE_FS", FileHandleType::UserspaceFs),
    ] {
        d.set_item(name, t as i32)?;
    }
    Ok(d)
}

/// Waits for a GPU stream (a `CUstream`/`hipStream_t` value; 1 and 2 are
/// CUDA's legacy and per-thread default streams) so that work a producer
/// queued on it (a copy into the memory we are about to write from, say)
/// has finished before the core touches the memory. Nothing to wait for
/// without a GPU runtime.
#[pyfunction]
pub fn stream_synchronize(py: Python<'_>, stream: usize) -> PyResult<()> {
    let rt = hipfs::gpu::runtime();
    if rt.name() == "host" {
        return Ok(());
    }
    // SAFETY: the stream is the Python caller's (a handle from the same
    // runtime, as the function's contract says); the FFI face trusts it as
    // the C ABI does.
    detached(py, move || unsafe {
        rt.stream_synchronize(hipfs::gpu::StreamId(stream))
    })
}
