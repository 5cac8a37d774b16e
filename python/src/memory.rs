//! Finding the bytes behind Python objects: the buffer protocol (bytearray,
//! numpy, ctypes arrays, mmap, ...) and DLPack capsules (PyTorch, CuPy,
//! JAX, numpy). `__cuda_array_interface__` is a plain dict and is read in
//! Python.

use crate::errors::BindError;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::PyCapsule;
use std::ffi::c_void;
use std::sync::Mutex;

/// A `Py_buffer` obtained from `PyObject_GetBuffer`, released on drop.
///
/// Boxed because exporters may point fields (`shape`, `strides`) into the
/// struct itself, so it must not move while held.
struct HeldView(Box<ffi::Py_buffer>);

// SAFETY: a Py_buffer is plain data plus a strong reference to the exporter;
// it is only read through `&self` and released with the interpreter attached.
unsafe impl Send for HeldView {}
// SAFETY: see above: shared access never mutates it.
unsafe impl Sync for HeldView {}

impl HeldView {
    /// Requests strides (not `format`, not suboffsets): any exporter whose
    /// bytes are addressable, including ctypes arrays, which give no strides
    /// (meaning C order).
    fn get(obj: &Bound<'_, PyAny>) -> PyResult<HeldView> {
        let mut view = Box::new(ffi::Py_buffer::new());
        // SAFETY: `obj` is a live object (we hold a reference) and `view`
        // points to a writable Py_buffer that outlives the call.
        let rc = unsafe { ffi::PyObject_GetBuffer(obj.as_ptr(), &mut *view, ffi::PyBUF_STRIDES) };
        if rc != 0 {
            return Err(PyErr::fetch(obj.py()));
        }
        Ok(HeldView(view))
    }

    /// Whether the bytes form one contiguous range (C or Fortran order:
    /// either way the transfer fills memory order).
    fn contiguous(&self) -> bool {
        // SAFETY: the view was filled by a successful PyObject_GetBuffer.
        unsafe { ffi::PyBuffer_IsContiguous(&*self.0, b'A' as std::ffi::c_char) != 0 }
    }
}

impl Drop for HeldView {
    fn drop(&mut self) {
        Python::attach(|_py| {
            // SAFETY: the view came from a successful PyObject_GetBuffer and is
            // released exactly once, here, with the interpreter attached.
            unsafe { ffi::PyBuffer_Release(&mut *self.0) }
        });
    }
}

/// A held buffer-protocol export of an object. While it is held the
/// exporter must keep the memory where it is (a `bytearray` cannot be
/// resized, for example), so the address stays valid; `release()` (or
/// garbage collection) lets go.
#[pyclass(frozen, module = "hipfile._hipfile")]
pub struct BufferExport {
    view: Mutex<Option<HeldView>>,
    ptr: usize,
    nbytes: usize,
    readonly: bool,
}

#[pymethods]
impl BufferExport {
    /// Address of the first byte.
    #[getter]
    fn ptr(&self) -> usize {
        self.ptr
    }

    /// Length in bytes.
    #[getter]
    fn nbytes(&self) -> usize {
        self.nbytes
    }

    /// Whether the exporter forbids writing (then it cannot be read into).
    #[getter]
    fn readonly(&self) -> bool {
        self.readonly
    }

    /// Whether the export is still held.
    #[getter]
    fn held(&self) -> bool {
        self.view.lock().map(|v| v.is_some()).unwrap_or(false)
    }

    /// Lets go of the export; later calls do nothing.
    fn release(&self) {
        let view = match self.view.lock() {
            Ok(mut v) => v.take(),
            Err(poisoned) => poisoned.into_inner().take(),
        };
        drop(view);
    }

    fn __repr__(&self) -> String {
        format!(
            "BufferExport(ptr={:#x}, nbytes={}, readonly={})",
            self.ptr, self.nbytes, self.readonly
        )
    }
}

/// Takes a buffer-protocol export of `obj`; the memory must be contiguous.
#[pyfunction]
pub fn export_buffer(obj: &Bound<'_, PyAny>) -> PyResult<BufferExport> {
    let view = HeldView::get(obj)?;
    if !view.contiguous() {
        return Err(BindError::NotContiguous("the buffer").into());
    }
    let nbytes = usize::try_from(view.0.len).map_err(|_| BindError::TooLarge("the buffer"))?;
    Ok(BufferExport {
        ptr: view.0.buf as usize,
        nbytes,
        readonly: view.0.readonly != 0,
        view: Mutex::new(Some(view)),
    })
}

// The DLPack ABI (dlpack.h, stable since v0.x): only the fields read here.
#[repr(C)]
struct DlDevice {
    device_type: i32,
    device_id: i32,
}

#[repr(C)]
struct DlDataType {
    code: u8,
    bits: u8,
    lanes: u16,
}

#[repr(C)]
struct DlTensor {
    data: *mut c_void,
    device: DlDevice,
    ndim: i32,
    dtype: DlDataType,
    shape: *const i64,
    strides: *const i64,
    byte_offset: u64,
}

/// `DLManagedTensor`: the tensor comes first, so a pointer to the managed
/// tensor is a pointer to its `DLTensor`.
#[repr(C)]
struct DlManagedTensor {
    dl_tensor: DlTensor,
    manager_ctx: *mut c_void,
    deleter: Option<unsafe extern "C" fn(*mut DlManagedTensor)>,
}

/// Reads a legacy `"dltensor"` capsule (what `obj.__dlpack__()` returns)
/// without consuming it: `(address, nbytes, device_type, device_id)`.
///
/// The capsule keeps the tensor alive; the caller holds it as long as it
/// uses the address, and the producer's deleter runs when it is collected.
#[pyfunction]
pub fn dlpack_info(capsule: &Bound<'_, PyCapsule>) -> PyResult<(usize, usize, i32, i32)> {
    // Fails with ValueError for a consumed ("used_dltensor") or foreign capsule.
    let raw = capsule.pointer_checked(Some(c"dltensor"))?;
    // SAFETY: a capsule named "dltensor" holds a DLManagedTensor (DLPack
    // contract) that stays valid while the unconsumed capsule is alive, and
    // we hold a reference to the capsule for the whole call.
    let t = unsafe { &raw.cast::<DlManagedTensor>().as_ref().dl_tensor };
    let ndim =
        usize::try_from(t.ndim).map_err(|_| BindError::BadShape(format!("ndim {}", t.ndim)))?;
    let shape: &[i64] = if ndim == 0 {
        &[]
    } else if t.shape.is_null() {
        return Err(BindError::BadShape("shape is null".into()).into());
    } else {
        // SAFETY: DLPack gives `ndim` shape entries behind a non-null `shape`.
        unsafe { std::slice::from_raw_parts(t.shape, ndim) }
    };
    let strides: Option<&[i64]> = if ndim == 0 || t.strides.is_null() {
        None
    } else {
        // SAFETY: a non-null `strides` has `ndim` entries, as `shape` does.
        Some(unsafe { std::slice::from_raw_parts(t.strides, ndim) })
    };
    let mut count: usize = 1;
    for &d in shape {
        let d = usize::try_from(d).map_err(|_| BindError::BadShape(format!("dimension {d}")))?;
        count = count
            .checked_mul(d)
            .ok_or(BindError::TooLarge("the tensor"))?;
    }
    if let Some(strides) = strides {
        if count > 0 && !c_contiguous(shape, strides) {
            return Err(BindError::NotContiguous("the DLPack tensor").into());
        }
    }
    let item_bits = usize::from(t.dtype.bits) * usize::from(t.dtype.lanes.max(1));
    let nbytes = count
        .checked_mul(item_bits.div_ceil(8))
        .ok_or(BindError::TooLarge("the tensor"))?;
    let offset = usize::try_from(t.byte_offset).map_err(|_| BindError::TooLarge("byte_offset"))?;
    let addr = (t.data as usize)
        .checked_add(offset)
        .ok_or(BindError::TooLarge("data + byte_offset"))?;
    Ok((addr, nbytes, t.device.device_type, t.device.device_id))
}

/// Whether element strides describe row-major contiguous storage
/// (dimensions of extent 1 may have any stride).
fn c_contiguous(shape: &[i64], strides: &[i64]) -> bool {
    let mut expected: i64 = 1;
    for (&d, &s) in shape.iter().zip(strides).rev() {
        if d != 1 && s != expected {
            return false;
        }
        expected = expected.saturating_mul(d);
    }
    true
}
