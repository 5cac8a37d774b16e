//! The hipFile 0.5 statistics API: `hipFileGetStatsL1/L2/L3`. As upstream,
//! the level comes from `HIPFILE_STATS_LEVEL` (0 = off); a query above the
//! level is `hipFileInvalidValue`.

use crate::types::{HipFileError, StatsLevel1, StatsLevel2, StatsLevel3};
use hipfs_cabi::{ffi_status, stats};

/// Level-1 statistics (needs level >= 1).
///
/// # Safety
/// `stats` is NULL or points to a writable `hipFileStatsLevel1_t`.
#[no_mangle]
pub unsafe extern "C" fn hipFileGetStatsL1(out: *mut StatsLevel1) -> HipFileError {
    // SAFETY: forwarded caller guarantee.
    ffi_status(|| unsafe { stats::get_l1(out) })
}

/// Level-2 statistics (needs level >= 2).
///
/// # Safety
/// `stats` is NULL or points to a writable `hipFileStatsLevel2_t`.
#[no_mangle]
pub unsafe extern "C" fn hipFileGetStatsL2(out: *mut StatsLevel2) -> HipFileError {
    // SAFETY: forwarded caller guarantee.
    ffi_status(|| unsafe { stats::get_l2(out) })
}

/// Level-3 statistics (needs level 3).
///
/// # Safety
/// `stats` is NULL or points to a writable `hipFileStatsLevel3_t`.
#[no_mangle]
pub unsafe extern "C" fn hipFileGetStatsL3(out: *mut StatsLevel3) -> HipFileError {
    // SAFETY: forwarded caller guarantee.
    ffi_status(|| unsafe { stats::get_l3(out) })
}
