//! The parameter API: the size_t/bool/string parameters cuFile shares with
//! hipFile go to the core; cuFile's extras (bool 12–13, string 3, the slab
//! arrays) are kept here with the same rule (set only while the driver is
//! closed) and have no effect on I/O: hipfs sizes its own pools.

use crate::status;
use crate::types::CUfileError;
use hipfs::config::SizeTParam;
use hipfs::error::{Error, OpError, Result};
use hipfs_cabi::params::{self, bool_param, c_str, copy_string, size_param, string_param};
use hipfs_cabi::{invalid, write_out};
use std::ffi::{c_char, c_int};
use std::sync::{Mutex, MutexGuard};

/// `CUFILE_PARAM_PROPERTIES_POSIX_IO_MODE`, the first cuFile-only bool.
const FIRST_EXTRA_BOOL: c_int = 12;
/// `CUFILE_PARAM_RDMA_TRANSPORT`, the cuFile-only string.
const RDMA_TRANSPORT: c_int = 3;
/// Most entries of a slab array.
const MAX_SLABS: usize = 16;
/// What the slab arrays read before any is set: (KiB, count) pairs.
const DEFAULT_SLABS: [(usize, usize); 4] = [(4, 256), (64, 64), (1024, 16), (16384, 4)];

struct Extras {
    bools: [bool; 2],
    rdma_transport: String,
    /// (sizes in KiB, counts) of the POSIX pool and of the GPU bounce buffers.
    slabs: [(Vec<usize>, Vec<usize>); 2],
}

static EXTRAS: Mutex<Extras> = Mutex::new(Extras {
    bools: [false, false],
    rdma_transport: String::new(),
    slabs: [(Vec::new(), Vec::new()), (Vec::new(), Vec::new())],
});

fn extras() -> MutexGuard<'static, Extras> {
    EXTRAS.lock().unwrap_or_else(|p| p.into_inner())
}

fn closed() -> Result<()> {
    if hipfs::use_count() > 0 {
        return Err(Error::new(
            OpError::DriverAlreadyOpen,
            "parameters are set while the driver is closed",
        ));
    }
    Ok(())
}

/// Reads a size_t parameter.
///
/// # Safety
/// `value` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn cuFileGetParameterSizeT(param: c_int, value: *mut usize) -> CUfileError {
    // SAFETY: forwarded caller guarantee.
    status(|| unsafe { params::get_size(param, value) })
}

/// Sets a size_t parameter (driver closed).
#[no_mangle]
pub extern "C" fn cuFileSetParameterSizeT(param: c_int, value: usize) -> CUfileError {
    status(|| hipfs::set_parameter_size(size_param(param)?, value))
}

/// Reads a bool parameter into a C `bool`.
///
/// # Safety
/// `value` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn cuFileGetParameterBool(param: c_int, value: *mut u8) -> CUfileError {
    status(|| {
        if let Some(i) = extra_bool(param) {
            let v = u8::from(extras().bools[i]);
            // SAFETY: forwarded caller guarantee.
            return unsafe { write_out(value, v, "value") };
        }
        // SAFETY: forwarded caller guarantee.
        unsafe { params::get_bool(param, value) }
    })
}

fn extra_bool(param: c_int) -> Option<usize> {
    usize::try_from(param - FIRST_EXTRA_BOOL)
        .ok()
        .filter(|i| *i < 2)
}

/// Sets a bool parameter (driver closed).
#[no_mangle]
pub extern "C" fn cuFileSetParameterBool(param: c_int, value: u8) -> CUfileError {
    status(|| {
        if let Some(i) = extra_bool(param) {
            closed()?;
            extras().bools[i] = value != 0;
            return Ok(());
        }
        hipfs::set_parameter_bool(bool_param(param)?, value != 0)
    })
}

/// Copies a string parameter into `desc_str` (`len` bytes, NUL-terminated).
///
/// # Safety
/// `desc_str` is NULL or has `len` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn cuFileGetParameterString(
    param: c_int,
    desc_str: *mut c_char,
    len: c_int,
) -> CUfileError {
    status(|| {
        if param == RDMA_TRANSPORT {
            let v = extras().rdma_transport.clone();
            // SAFETY: forwarded caller guarantee.
            return unsafe { copy_string(&v, desc_str, len) };
        }
        // SAFETY: forwarded caller guarantee.
        unsafe { params::get_string(param, desc_str, len) }
    })
}

/// Sets a string parameter (driver closed).
///
/// # Safety
/// `desc_str` is NULL or NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn cuFileSetParameterString(
    param: c_int,
    desc_str: *const c_char,
) -> CUfileError {
    status(|| {
        if param == RDMA_TRANSPORT {
            // SAFETY: forwarded caller guarantee.
            let v = unsafe { c_str(desc_str) }?;
            closed()?;
            extras().rdma_transport = v.to_string();
            return Ok(());
        }
        string_param(param)?;
        // SAFETY: forwarded caller guarantee.
        unsafe { params::set_string(param, desc_str) }
    })
}

/// The range `cuFileSetParameterSizeT` documents for each parameter (ours:
/// what the core can use; it stores any value).
fn range(p: SizeTParam) -> (usize, usize) {
    use SizeTParam::*;
    match p {
        ProfileStats => (0, 3),
        ExecutionMaxIOQueueDepth => (1, 65536),
        ExecutionMaxIOThreads | ExecutionMaxRequestParallelism => (0, 1024),
        ExecutionMinIOThresholdSizeKB => (0, 1 << 20),
        PropertiesMaxDirectIOSizeKB | PropertiesPerBufferCacheSizeKB => (4, 1 << 30),
        PropertiesMaxDeviceCacheSizeKB | PropertiesMaxDevicePinnedMemSizeKB => (0, 1 << 40),
        PropertiesIOBatchsize => (1, hipfs::config::MAX_BATCH_IO_COUNT as usize),
        PollthresholdSizeKB => (0, 1 << 30),
        PropertiesBatchIOTimeoutMs => (0, 1 << 31),
    }
}

/// The smallest and largest value of a size_t parameter.
///
/// # Safety
/// `min_value` and `max_value` are NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn cuFileGetParameterMinMaxValue(
    param: c_int,
    min_value: *mut usize,
    max_value: *mut usize,
) -> CUfileError {
    status(|| {
        let (lo, hi) = range(size_param(param)?);
        if min_value.is_null() || max_value.is_null() {
            return Err(invalid("min_value and max_value must not be NULL"));
        }
        // SAFETY: both non-NULL; writable (caller's contract).
        unsafe {
            write_out(min_value, lo, "min_value")?;
            write_out(max_value, hi, "max_value")
        }
    })
}

/// # Safety
/// Both arrays are NULL or have `len` readable entries.
unsafe fn set_slabs(
    which: usize,
    sizes: *const usize,
    counts: *const usize,
    len: c_int,
) -> Result<()> {
    let n = usize::try_from(len)
        .ok()
        .filter(|n| (1..=MAX_SLABS).contains(n))
        .ok_or_else(|| invalid("len must be 1..=16"))?;
    if sizes.is_null() || counts.is_null() {
        return Err(invalid("size and count arrays must not be NULL"));
    }
    // SAFETY: non-NULL, `n` entries each (caller's contract).
    let (s, c) = unsafe {
        (
            std::slice::from_raw_parts(sizes, n),
            std::slice::from_raw_parts(counts, n),
        )
    };
    if s.contains(&0) {
        return Err(invalid("slab sizes must be positive"));
    }
    closed()?;
    extras().slabs[which] = (s.to_vec(), c.to_vec());
    Ok(())
}

/// # Safety
/// Both arrays are NULL or have `len` writable entries.
unsafe fn get_slabs(which: usize, sizes: *mut usize, counts: *mut usize, len: c_int) -> Result<()> {
    if sizes.is_null() || counts.is_null() {
        return Err(invalid("size and count arrays must not be NULL"));
    }
    let (mut s, mut c) = extras().slabs[which].clone();
    if s.is_empty() {
        (s, c) = DEFAULT_SLABS.iter().copied().unzip();
    }
    if usize::try_from(len).ok() != Some(s.len()) {
        return Err(invalid(&format!(
            "len {len} differs from the {} slabs set",
            s.len()
        )));
    }
    // SAFETY: non-NULL, `len` writable entries each (caller's contract),
    // not overlapping the vectors we own.
    unsafe {
        std::ptr::copy_nonoverlapping(s.as_ptr(), sizes, s.len());
        std::ptr::copy_nonoverlapping(c.as_ptr(), counts, c.len());
    }
    Ok(())
}

/// Sets the POSIX pool's slab sizes (KiB) and counts (driver closed).
///
/// # Safety
/// Both arrays are NULL or have `len` readable entries.
#[no_mangle]
pub unsafe extern "C" fn cuFileSetParameterPosixPoolSlabArray(
    size_values: *const usize,
    count_values: *const usize,
    len: c_int,
) -> CUfileError {
    // SAFETY: forwarded caller guarantee.
    status(|| unsafe { set_slabs(0, size_values, count_values, len) })
}

/// Reads the POSIX pool's slab arrays; `len` must be the number set.
///
/// # Safety
/// Both arrays are NULL or have `len` writable entries.
#[no_mangle]
pub unsafe extern "C" fn cuFileGetParameterPosixPoolSlabArray(
    size_values: *mut usize,
    count_values: *mut usize,
    len: c_int,
) -> CUfileError {
    // SAFETY: forwarded caller guarantee.
    status(|| unsafe { get_slabs(0, size_values, count_values, len) })
}

/// Sets the GPU bounce buffers' slab sizes (KiB) and counts (driver closed).
///
/// # Safety
/// Both arrays are NULL or have `len` readable entries.
#[no_mangle]
pub unsafe extern "C" fn cuFileSetParameterGpuBounceBufferSlabArray(
    size_values: *const usize,
    count_values: *const usize,
    len: c_int,
) -> CUfileError {
    // SAFETY: forwarded caller guarantee.
    status(|| unsafe { set_slabs(1, size_values, count_values, len) })
}

/// Reads the GPU bounce buffers' slab arrays; `len` must be the number set.
///
/// # Safety
/// Both arrays are NULL or have `len` writable entries.
#[no_mangle]
pub unsafe extern "C" fn cuFileGetParameterGpuBounceBufferSlabArray(
    size_values: *mut usize,
    count_values: *mut usize,
    len: c_int,
) -> CUfileError {
    // SAFETY: forwarded caller guarantee.
    status(|| unsafe { get_slabs(1, size_values, count_values, len) })
}
