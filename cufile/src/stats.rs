//! cuFile's statistics controls and snapshots (cuFile 1.15 layouts, which
//! `cuFileGetVersion`'s 1150 promises).

use crate::status;
use crate::types::{CUfileError, StatsLevel1, StatsLevel2, StatsLevel3};
use hipfs_cabi::{stats, write_out};
use std::ffi::c_int;

/// Sets the level (0 off, 1..=3); others are `CU_FILE_INVALID_VALUE`.
#[no_mangle]
pub extern "C" fn cuFileSetStatsLevel(level: c_int) -> CUfileError {
    status(|| stats::set_level(level))
}

/// Reads the level.
///
/// # Safety
/// `level` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn cuFileGetStatsLevel(level: *mut c_int) -> CUfileError {
    // SAFETY: forwarded caller guarantee.
    status(|| unsafe { write_out(level, stats::level(), "level") })
}

/// Resumes counting.
#[no_mangle]
pub extern "C" fn cuFileStatsStart() -> CUfileError {
    status(|| {
        stats::start();
        Ok(())
    })
}

/// Stops counting; the counters keep their values.
#[no_mangle]
pub extern "C" fn cuFileStatsStop() -> CUfileError {
    status(|| {
        stats::stop();
        Ok(())
    })
}

/// Zeroes every counter.
#[no_mangle]
pub extern "C" fn cuFileStatsReset() -> CUfileError {
    status(|| {
        stats::reset();
        Ok(())
    })
}

/// Level-1 statistics (the level must be at least 1).
///
/// # Safety
/// `out` is NULL or points to a writable `CUfileStatsLevel1_t`.
#[no_mangle]
pub unsafe extern "C" fn cuFileGetStatsL1(out: *mut StatsLevel1) -> CUfileError {
    // SAFETY: forwarded caller guarantee.
    status(|| unsafe { stats::get_l1(out) })
}

/// Level-2 statistics (the level must be at least 2).
///
/// # Safety
/// `out` is NULL or points to a writable `CUfileStatsLevel2_t`.
#[no_mangle]
pub unsafe extern "C" fn cuFileGetStatsL2(out: *mut StatsLevel2) -> CUfileError {
    // SAFETY: forwarded caller guarantee.
    status(|| unsafe { stats::get_l2(out) })
}

/// Level-3 statistics (the level must be 3).
///
/// # Safety
/// `out` is NULL or points to a writable `CUfileStatsLevel3_t`.
#[no_mangle]
pub unsafe extern "C" fn cuFileGetStatsL3(out: *mut StatsLevel3) -> CUfileError {
    // SAFETY: forwarded caller guarantee.
    status(|| unsafe { stats::get_l3(out) })
}
