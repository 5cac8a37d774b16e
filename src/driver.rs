//! The driver face: the reference-counted [`Driver`] guard and the
//! parameter API, over the process-wide state in [`crate::registry`].

use crate::config::{BoolParam, Config, DriverProperties, SizeTParam, StringParam};
use crate::error::{Error, OpError, Result};
use crate::registry;
use std::sync::Arc;

/// Opens the driver (increments the reference count).
pub fn driver_open() -> Result<()> {
    registry::open();
    Ok(())
}

/// Closes the driver once; at zero every handle and buffer is deregistered.
pub fn driver_close() -> Result<()> {
    if let Some(closed) = registry::close()? {
        if closed.stats_level > 0 || std::env::var_os("HIPFS_STATS").is_some_and(|v| v == "1") {
            eprintln!("hipfs stats at driver close:\n{}", crate::stats::snapshot());
        }
    }
    Ok(())
}

/// The driver's reference count.
pub fn use_count() -> i64 {
    registry::use_count()
}

/// The active configuration, or the staged one when the driver is closed.
pub fn current_config() -> Arc<Config> {
    registry::current_config()
}

/// An open reference on the driver; closes it when dropped.
///
/// ```
/// let drv = hipfs::Driver::open().unwrap();
/// assert!(hipfs::Driver::use_count() >= 1);
/// drv.close().unwrap();
/// ```
#[derive(Debug)]
pub struct Driver {
    open: bool,
}

impl Driver {
    /// Opens the driver and returns a guard holding one reference.
    pub fn open() -> Result<Driver> {
        driver_open()?;
        Ok(Driver { open: true })
    }

    /// Releases this guard's reference now, reporting errors.
    pub fn close(mut self) -> Result<()> {
        self.open = false;
        driver_close()
    }

    /// The driver's reference count.
    pub fn use_count() -> i64 {
        use_count()
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        if self.open {
            if let Err(e) = driver_close() {
                log::warn!("closing the driver on drop: {e}");
            }
        }
    }
}

/// The driver properties (sizes in KiB).
pub fn driver_get_properties() -> Result<DriverProperties> {
    Ok(current_config().properties())
}

fn edit_active(f: impl FnOnce(&mut Config)) -> Result<()> {
    registry::edit_active(f, copy_active_limits_to_staged);
    Ok(())
}

/// What the `driver_set_*` calls change in the active configuration also
/// holds for the next open.
fn copy_active_limits_to_staged(staged: &mut Config, active: &Config) {
    for p in [
        SizeTParam::PollthresholdSizeKB,
        SizeTParam::PropertiesMaxDirectIOSizeKB,
        SizeTParam::PropertiesMaxDeviceCacheSizeKB,
        SizeTParam::PropertiesMaxDevicePinnedMemSizeKB,
    ] {
        staged.set_size(p, active.size(p));
    }
    staged.set_bool(
        BoolParam::PropertiesUsePollMode,
        active.get_bool(BoolParam::PropertiesUsePollMode),
    );
}

/// Sets poll mode and its threshold (KiB).
pub fn driver_set_poll_mode(poll: bool, threshold_kb: usize) -> Result<()> {
    edit_active(|c| {
        c.set_bool(BoolParam::PropertiesUsePollMode, poll);
        c.set_size(SizeTParam::PollthresholdSizeKB, threshold_kb);
    })
}

fn nonzero(kb: usize, what: &str) -> Result<()> {
    if kb == 0 {
        return Err(Error::new(
            OpError::DriverUnsupportedLimit,
            format!("{what} must be greater than zero"),
        ));
    }
    Ok(())
}

/// Sets the largest single direct I/O (KiB); also the worker chunk size.
pub fn driver_set_max_direct_io_size(kb: usize) -> Result<()> {
    nonzero(kb, "max direct I/O size")?;
    edit_active(|c| c.set_size(SizeTParam::PropertiesMaxDirectIOSizeKB, kb))
}

/// Sets the bounce-buffer cache size (KiB).
pub fn driver_set_max_cache_size(kb: usize) -> Result<()> {
    nonzero(kb, "max cache size")?;
    edit_active(|c| c.set_size(SizeTParam::PropertiesMaxDeviceCacheSizeKB, kb))
}

/// Sets the pinned-memory limit (KiB).
pub fn driver_set_max_pinned_mem_size(kb: usize) -> Result<()> {
    nonzero(kb, "max pinned memory size")?;
    edit_active(|c| c.set_size(SizeTParam::PropertiesMaxDevicePinnedMemSizeKB, kb))
}

fn closed_config<T>(f: impl FnOnce(&mut Config) -> Result<T>) -> Result<T> {
    registry::edit_staged(f)
}

/// Reads a size parameter (the staged value, which is what the next open uses).
pub fn get_parameter_size(p: SizeTParam) -> usize {
    registry::staged(|c| c.size(p))
}

/// Sets a size parameter; only while the driver is closed.
pub fn set_parameter_size(p: SizeTParam, v: usize) -> Result<()> {
    closed_config(|c| {
        c.set_size(p, v);
        Ok(())
    })
}

/// Reads a boolean parameter.
pub fn get_parameter_bool(p: BoolParam) -> bool {
    registry::staged(|c| c.get_bool(p))
}

/// Sets a boolean parameter; only while the driver is closed.
pub fn set_parameter_bool(p: BoolParam, v: bool) -> Result<()> {
    closed_config(|c| {
        c.set_bool(p, v);
        Ok(())
    })
}

/// Reads a string parameter.
pub fn get_parameter_string(p: StringParam) -> String {
    registry::staged(|c| c.string(p).to_string())
}

/// Sets a string parameter; only while the driver is closed.
pub fn set_parameter_string(p: StringParam, v: &str) -> Result<()> {
    closed_config(|c| c.set_string(p, v))
}
