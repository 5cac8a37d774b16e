//! The driver's process-wide state: the active and staged configuration,
//! the use count, every registered file handle and buffer, the fd map and
//! the id allocator.
//!
//! hipFile's C semantics make this state process-wide. It sits behind one
//! private lock, and nothing outside this module touches it except through
//! the narrow functions below, so every invariant (one handle per fd, no
//! overlapping buffers, registrations dropped at the last close) lives here.
//!
//! It depends only on `config`, `error`, `gpu` and `io` (a registered file
//! owns its [`io::FileBackend`]); the API faces (`driver`, `handle`,
//! `buffer`, `batch`, `stream`) and the remote client sit above it.

use crate::config::Config;
use crate::error::{Error, OpError, Result};
use crate::gpu::PointerInfo;
use crate::io::{self, FileBackend};
use std::collections::{BTreeMap, HashMap};
use std::os::fd::RawFd;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

/// `HIPFILE_RDMA_REGISTER`: also register the buffer with the RDMA transport.
pub const RDMA_REGISTER: i32 = 1;
/// `HIPFILE_RDMA_RELAXED_ORDERING`.
pub const RDMA_RELAXED_ORDERING: i32 = 1 << 1;

/// `hipFileFileHandleType_t`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(i32)]
pub enum FileHandleType {
    /// A POSIX file descriptor.
    OpaqueFd = 1,
    /// A Windows handle (not implemented on Linux).
    OpaqueWin32 = 2,
    /// A file of a userspace filesystem (hipfs mount or `hipFileFSOps_t`).
    UserspaceFs = 3,
}

impl FileHandleType {
    /// The type for a C value.
    pub fn from_raw(v: i32) -> Option<FileHandleType> {
        match v {
            1 => Some(FileHandleType::OpaqueFd),
            2 => Some(FileHandleType::OpaqueWin32),
            3 => Some(FileHandleType::UserspaceFs),
            _ => None,
        }
    }
}

/// A file registered with the driver.
pub struct RegisteredFile {
    /// The handle's id (the value behind `hipFileHandle_t`).
    pub id: u64,
    /// The caller's fd it was registered for.
    pub user_fd: RawFd,
    /// How it was registered.
    pub kind: FileHandleType,
    /// How its bytes move.
    pub backend: FileBackend,
}

impl std::fmt::Debug for RegisteredFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegisteredFile")
            .field("id", &self.id)
            .field("user_fd", &self.user_fd)
            .field("kind", &self.kind)
            .finish()
    }
}

/// A buffer registration held by the driver.
#[derive(Debug)]
pub struct RegisteredBuffer {
    /// First byte.
    pub base: usize,
    /// Length in bytes.
    pub len: usize,
    /// Registration flags (`RDMA_REGISTER`, ...).
    pub flags: i32,
    /// What the GPU runtime knows of the memory.
    pub info: PointerInfo,
    /// The RDMA descriptor string, set by the transport when the buffer is
    /// registered with one (UserspaceFs path).
    pub rdma_desc: OnceLock<String>,
    /// Keeps transport registrations alive as long as the buffer is registered.
    pub rdma_keepalive: Mutex<Vec<Box<dyn std::any::Any + Send + Sync>>>,
}

impl RegisteredBuffer {
    /// Whether `[ptr, ptr+len)` lies inside this registration.
    pub fn contains(&self, ptr: usize, len: usize) -> bool {
        ptr >= self.base && ptr.saturating_add(len) <= self.base + self.len
    }

    /// What the I/O engine needs to know about this memory.
    pub fn target(&self) -> io::MemTarget {
        io::MemTarget {
            kind: Some(self.info.kind),
            registered_len: Some(self.len),
            rdma_desc: self.rdma_desc.get().cloned(),
        }
    }
}

struct Registry {
    use_count: i64,
    /// What the parameter API edits; copied to `active` at open.
    staged: Config,
    active: Arc<Config>,
    handles: HashMap<u64, Arc<RegisteredFile>>,
    /// Handle registered for each user fd (the same fd twice is an error).
    fds: HashMap<i32, u64>,
    buffers: BTreeMap<usize, Arc<RegisteredBuffer>>,
    /// Streams registered for stream-ordered I/O and their flags. Kept
    /// across driver close, as hipFile keeps them (a stream belongs to the
    /// application, not to one open of the driver).
    streams: HashMap<usize, u32>,
    next_id: u64,
}

static STATE: Mutex<Option<Registry>> = Mutex::new(None);

/// Runs `f` on the state (created on first use, from the environment).
fn with_state<T>(f: impl FnOnce(&mut Registry) -> T) -> T {
    let mut guard: MutexGuard<'_, Option<Registry>> =
        STATE.lock().unwrap_or_else(|p| p.into_inner());
    let state = guard.get_or_insert_with(|| {
        let staged = Config::from_env();
        Registry {
            use_count: 0,
            active: Arc::new(staged.clone()),
            staged,
            handles: HashMap::new(),
            fds: HashMap::new(),
            buffers: BTreeMap::new(),
            streams: HashMap::new(),
            next_id: 1,
        }
    });
    f(state)
}

impl Registry {
    /// Opens once more; the first open makes the staged configuration active.
    /// Returns whether this was the first open.
    fn open(&mut self) -> bool {
        let first = self.use_count == 0;
        if first {
            self.active = Arc::new(self.staged.clone());
        }
        self.use_count += 1;
        first
    }

    fn not_open() -> Error {
        Error::new(OpError::DriverNotInitialized, "the driver is not open")
    }
}

/// Opens the driver (one more reference).
pub(crate) fn open() {
    if with_state(Registry::open) {
        init_logging();
    }
}

fn init_logging() {
    // A library must not fight the application over the logger: this only
    // installs ours when nobody has, and honours RUST_LOG.
    let _ = env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn"))
        .is_test(cfg!(test))
        .try_init();
}

/// What the last close hands back: the stats level of the configuration
/// that was active, for the report at close.
pub(crate) struct Closed {
    pub stats_level: u32,
}

/// Closes once; at zero every handle and buffer is deregistered (and
/// dropped outside the lock, since closing fds can block).
pub(crate) fn close() -> Result<Option<Closed>> {
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
    Ok(dropped.map(|(handles, buffers, stats_level)| {
        drop(handles);
        drop(buffers);
        Closed { stats_level }
    }))
}

/// The driver's reference count.
pub(crate) fn use_count() -> i64 {
    with_state(|s| s.use_count)
}

/// The active configuration if the driver is open.
pub(crate) fn active_config() -> Option<Arc<Config>> {
    with_state(|s| (s.use_count > 0).then(|| Arc::clone(&s.active)))
}

/// The active configuration, or the staged one when the driver is closed.
pub(crate) fn current_config() -> Arc<Config> {
    with_state(|s| {
        if s.use_count > 0 {
            Arc::clone(&s.active)
        } else {
            Arc::new(s.staged.clone())
        }
    })
}

/// Edits the active configuration (while open or closed); `sync_staged`
/// then carries what the edit may change into the staged one.
pub(crate) fn edit_active(f: impl FnOnce(&mut Config), sync_staged: fn(&mut Config, &Config)) {
    with_state(|s| {
        let mut c = (*s.active).clone();
        f(&mut c);
        sync_staged(&mut s.staged, &c);
        s.active = Arc::new(c);
    });
}

/// Edits the staged configuration; only while the driver is closed.
pub(crate) fn edit_staged<T>(f: impl FnOnce(&mut Config) -> Result<T>) -> Result<T> {
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

/// Reads the staged configuration (what the next open uses).
pub(crate) fn staged<T>(f: impl FnOnce(&Config) -> T) -> T {
    with_state(|s| f(&s.staged))
}

/// Whether `fd` already has a handle.
pub(crate) fn fd_registered(fd: RawFd) -> bool {
    with_state(|s| s.fds.contains_key(&fd))
}

/// Registers `fd` with its backend under a new id (opening the driver
/// implicitly); the same fd twice is an error.
pub(crate) fn insert_file(fd: RawFd, kind: FileHandleType, backend: FileBackend) -> Result<u64> {
    let (id, first) = with_state(|s| {
        let first = s.use_count == 0 && s.open();
        if s.fds.contains_key(&fd) {
            return Err(Error::new(
                OpError::HandleAlreadyRegistered,
                format!("fd {fd} is already registered"),
            ));
        }
        let id = s.next_id;
        s.next_id += 1;
        s.fds.insert(fd, id);
        s.handles.insert(
            id,
            Arc::new(RegisteredFile {
                id,
                user_fd: fd,
                kind,
                backend,
            }),
        );
        Ok((id, first))
    })?;
    if first {
        init_logging();
    }
    Ok(id)
}

/// The registered file for a handle id (the driver must be open).
pub(crate) fn file(id: u64) -> Result<Arc<RegisteredFile>> {
    with_state(|s| {
        if s.use_count == 0 {
            return Err(Registry::not_open());
        }
        s.handles.get(&id).cloned().ok_or_else(|| {
            Error::new(
                OpError::HandleNotRegistered,
                format!("handle {id} is not registered"),
            )
        })
    })
}

/// Removes a handle; returns it (dropped by the caller, outside the lock).
pub(crate) fn remove_file(id: u64) -> Option<Arc<RegisteredFile>> {
    with_state(|s| {
        let h = s.handles.remove(&id)?;
        s.fds.remove(&h.user_fd);
        Some(h)
    })
}

/// Registers `[base, base+len)` (opening the driver implicitly); a range
/// that overlaps an existing registration is refused.
pub(crate) fn insert_buffer(
    base: usize,
    len: usize,
    flags: i32,
    info: PointerInfo,
) -> Result<Arc<RegisteredBuffer>> {
    let end = base + len;
    let (reg, first) = with_state(|s| {
        let first = s.use_count == 0 && s.open();
        if s.buffers.contains_key(&base) {
            return Err(Error::new(
                OpError::MemoryAlreadyRegistered,
                format!("{base:#x} is already registered"),
            ));
        }
        // Overlap with the registration just below or just above.
        let below = s.buffers.range(..base).next_back();
        let above = s.buffers.range(base..end).next();
        if below.is_some_and(|(_, b)| b.base + b.len > base) || above.is_some() {
            return Err(Error::new(
                OpError::MemoryAlreadyRegistered,
                format!("[{base:#x}, {end:#x}) overlaps a registered buffer"),
            ));
        }
        let reg = Arc::new(RegisteredBuffer {
            base,
            len,
            flags,
            info,
            rdma_desc: OnceLock::new(),
            rdma_keepalive: Mutex::new(Vec::new()),
        });
        s.buffers.insert(base, Arc::clone(&reg));
        Ok((reg, first))
    })?;
    if first {
        init_logging();
    }
    Ok(reg)
}

/// Deregisters the buffer registered at `base`.
pub(crate) fn remove_buffer(base: usize) -> Result<()> {
    let removed = with_state(|s| {
        if s.use_count == 0 {
            return Err(Error::new(
                OpError::DriverClosing,
                "the driver is not open; no buffer is registered",
            ));
        }
        if base == 0 {
            return Err(Error::new(OpError::InvalidValue, "buffer pointer is null"));
        }
        s.buffers.remove(&base).ok_or_else(|| {
            Error::new(
                OpError::MemoryNotRegistered,
                format!("{base:#x} is not a registered buffer"),
            )
        })
    })?;
    // Transport keep-alives may deregister memory: outside the lock.
    drop(removed);
    Ok(())
}

/// The registration whose base is `base`, if any.
pub fn buffer_at(base: usize) -> Option<Arc<RegisteredBuffer>> {
    with_state(|s| s.buffers.get(&base).cloned())
}

/// The registration that holds all of `[ptr, ptr+len)`, if any.
pub fn buffer_containing(ptr: usize, len: usize) -> Option<Arc<RegisteredBuffer>> {
    with_state(|s| s.buffers.range(..=ptr).next_back().map(|(_, b)| b.clone()))
        .filter(|b| b.contains(ptr, len))
}

/// For one I/O: the active configuration and what is known about the
/// memory at `base` (its registration, if any), under one lock; an error
/// when the driver is closed.
pub(crate) fn io_context(base: usize) -> Result<(Arc<Config>, io::MemTarget)> {
    with_state(|s| {
        if s.use_count == 0 {
            return Err(Registry::not_open());
        }
        let target = s
            .buffers
            .get(&base)
            .map_or_else(io::MemTarget::unregistered, |r| r.target());
        Ok((Arc::clone(&s.active), target))
    })
}

/// Registers `stream` with `flags` (replacing earlier flags).
pub(crate) fn insert_stream(stream: usize, flags: u32) {
    with_state(|s| s.streams.insert(stream, flags));
}

/// Forgets `stream`; whether it was registered.
pub(crate) fn remove_stream(stream: usize) -> bool {
    with_state(|s| s.streams.remove(&stream).is_some())
}

/// The flags `stream` is registered with.
pub(crate) fn stream_flags(stream: usize) -> Option<u32> {
    with_state(|s| s.streams.get(&stream).copied())
}
