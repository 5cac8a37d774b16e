//! The driver: a process-wide, reference-counted state holding the active
//! configuration and every registered file handle and buffer.

use crate::buffer::RegisteredBuffer;
use crate::config::{BoolParam, Config, DriverProperties, SizeTParam, StringParam};
use crate::error::{Error, OpError, Result};
use crate::handle::RegisteredFile;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};

pub(crate) struct DriverState {
    pub use_count: i64,
    /// What the parameter API edits; copied to `active` at open.
    pub staged: Config,
    pub active: Arc<Config>,
    pub handles: HashMap<u64, Arc<RegisteredFile>>,
    /// Handle registered for each user fd (the same fd twice is an error).
    pub fds: HashMap<i32, u64>,
    pub buffers: BTreeMap<usize, Arc<RegisteredBuffer>>,
    pub next_id: u64,
}

static STATE: Mutex<Option<DriverState>> = Mutex::new(None);

/// Runs `f` on the driver state (created on first use, from the environment).
pub(crate) fn with_state<T>(f: impl FnOnce(&mut DriverState) -> T) -> T {
    let mut guard: MutexGuard<'_, Option<DriverState>> =
        STATE.lock().unwrap_or_else(|p| p.into_inner());
    let state = guard.get_or_insert_with(|| {
        let staged = Config::from_env();
        DriverState {
            use_count: 0,
            active: Arc::new(staged.clone()),
            staged,
            handles: HashMap::new(),
            fds: HashMap::new(),
            buffers: BTreeMap::new(),
            next_id: 1,
        }
    });
    f(state)
}

fn open_locked(s: &mut DriverState) {
    if s.use_count == 0 {
        s.active = Arc::new(s.staged.clone());
        init_logging();
    }
    s.use_count += 1;
}

/// Opens the driver (increments the reference count).
pub fn driver_open() -> Result<()> {
    with_state(open_locked);
    Ok(())
}

/// Opens the driver if it is closed (what registration does implicitly).
pub(crate) fn ensure_open(s: &mut DriverState) {
    if s.use_count == 0 {
        open_locked(s);
    }
}

/// Closes the driver once; at zero every handle and buffer is deregistered.
pub fn driver_close() -> Result<()> {
    let dropped = with_state(|s| {
        if s.use_count <= 0 {
            return Err(Error::new(
                OpError::DriverNotInitialized,
                "driver close without a matching open",
            ));
        }
        s.use_count -= 1;
        if s.use_count == 0 {
            s.fds.clear();
            let handles: Vec<_> = s.handles.drain().map(|(_, h)| h).collect();
            let buffers = std::mem::take(&mut s.buffers);
            return Ok(Some((handles, buffers, s.active.stats_level)));
        }
        Ok(None)
    })?;
    // Handles and buffers are dropped outside the lock (closing fds can block).
    if let Some((handles, buffers, stats_level)) = dropped {
        drop(handles);
        drop(buffers);
        if stats_level > 0 || std::env::var_os("HIPFS_STATS").is_some_and(|v| v == "1") {
            eprintln!("hipfs stats at driver close:\n{}", crate::stats::snapshot());
        }
    }
    Ok(())
}

/// The driver's reference count.
pub fn use_count() -> i64 {
    with_state(|s| s.use_count)
}

/// The active configuration if the driver is open.
pub(crate) fn active_config() -> Option<Arc<Config>> {
    with_state(|s| (s.use_count > 0).then(|| Arc::clone(&s.active)))
}

/// For one I/O: the active configuration and the buffer registered at
/// `base`, under one lock; `None` when the driver is closed.
pub(crate) fn io_context(base: usize) -> Option<(Arc<Config>, Option<Arc<RegisteredBuffer>>)> {
    with_state(|s| {
        (s.use_count > 0).then(|| (Arc::clone(&s.active), s.buffers.get(&base).cloned()))
    })
}

/// The active configuration, or the staged one when the driver is closed.
pub fn current_config() -> Arc<Config> {
    with_state(|s| {
        if s.use_count > 0 {
            Arc::clone(&s.active)
        } else {
            Arc::new(s.staged.clone())
        }
    })
}

fn init_logging() {
    // A library must not fight the application over the logger: this only
    // installs ours when nobody has, and honours RUST_LOG.
    let _ = env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn"))
        .is_test(cfg!(test))
        .try_init();
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
    with_state(|s| {
        let mut c = (*s.active).clone();
        f(&mut c);
        f_staged_copy(&mut s.staged, &c);
        s.active = Arc::new(c);
    });
    Ok(())
}

fn f_staged_copy(staged: &mut Config, active: &Config) {
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
    with_state(|s| {
        if s.use_count > 0 {
            return Err(Error::new(
                OpError::DriverAlreadyOpen,
                "parameters can be set only while the driver is closed",
            ));
        }
        f(&mut s.staged)
    })
}

/// Reads a size parameter (the staged value, which is what the next open uses).
pub fn get_parameter_size(p: SizeTParam) -> usize {
    with_state(|s| s.staged.size(p))
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
    with_state(|s| s.staged.get_bool(p))
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
    with_state(|s| s.staged.string(p).to_string())
}

/// Sets a string parameter; only while the driver is closed.
pub fn set_parameter_string(p: StringParam, v: &str) -> Result<()> {
    closed_config(|c| c.set_string(p, v))
}
