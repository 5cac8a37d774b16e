//! How failures become Python exceptions.
//!
//! Core errors that carry an errno become `OSError` (with `errno` set, so
//! `FileNotFoundError` and friends appear where they apply); every other core
//! error becomes `hipfile.HipFileException`, the class the pure-Python layer
//! defines. Problems this crate finds in the objects it is given are
//! [`BindError`]s.

use pyo3::exceptions::{PyBufferError, PyOSError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyType;

static HIPFILE_EXCEPTION: PyOnceLock<Py<PyType>> = PyOnceLock::new();

/// The Python exception for a core error.
pub fn core_error(py: Python<'_>, e: hipfs::Error) -> PyErr {
    if let Some(errno) = e.errno() {
        return PyOSError::new_err((errno, e.to_string()));
    }
    hipfile_exception(py, e.op().code(), e.gpu_code(), e.context())
}

/// A `HipFileException(code, gpu_code, detail)`; if the Python layer cannot
/// be imported (a broken install), the import error says so instead.
pub fn hipfile_exception(py: Python<'_>, code: i32, gpu_code: i32, detail: &str) -> PyErr {
    let made = HIPFILE_EXCEPTION
        .import(py, "hipfile._errors", "HipFileException")
        .and_then(|ty| ty.call1((code, gpu_code, detail)));
    match made {
        Ok(value) => PyErr::from_value(value),
        Err(import_failed) => import_failed,
    }
}

/// What can be wrong with memory handed to hipfile.
#[derive(Debug, thiserror::Error)]
pub enum BindError {
    /// Strided memory: one transfer moves one contiguous byte range.
    #[error("{0} is not C-contiguous; hipfile moves one contiguous byte range")]
    NotContiguous(&'static str),
    /// A DLPack tensor with a negative dimension or an unreadable shape.
    #[error("DLPack tensor has an invalid shape: {0}")]
    BadShape(String),
    /// Shape times element size does not fit in the address space.
    #[error("{0} is larger than the address space")]
    TooLarge(&'static str),
}

impl From<BindError> for PyErr {
    fn from(e: BindError) -> PyErr {
        match e {
            BindError::NotContiguous(_) => PyBufferError::new_err(e.to_string()),
            BindError::BadShape(_) | BindError::TooLarge(_) => PyValueError::new_err(e.to_string()),
        }
    }
}
