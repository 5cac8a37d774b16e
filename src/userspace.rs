//! What a userspace filesystem provides so `FileHandleType::UserspaceFs`
//! handles can dispatch to it: the hipfs remote client is one implementation,
//! the C ABI's `hipFileFSOps_t` callbacks are another.

use crate::error::Result;

/// Where a read's bytes go (or a write's come from).
#[derive(Debug)]
pub enum UserspaceBuf {
    /// Host-accessible memory the filesystem may touch directly.
    Host {
        /// First byte.
        ptr: *mut u8,
        /// Length in bytes.
        len: usize,
    },
    /// A buffer registered for RDMA: `desc` is its transport descriptor (the
    /// versioned string the C ABI hands over as `desc_str`), `addr` the first
    /// byte of this request inside it.
    Rdma {
        /// The buffer's transport descriptor.
        desc: String,
        /// First byte of this request inside it.
        addr: u64,
        /// Bytes of this request.
        len: usize,
        /// A host-accessible alias of the same bytes when one exists
        /// (host memory registered for RDMA), for filesystems that cannot do RDMA.
        host_ptr: Option<*mut u8>,
    },
}

// SAFETY: the raw pointers are only dereferenced by the filesystem while the
// caller's read/write call (which owns the borrow of the memory) is running.
unsafe impl Send for UserspaceBuf {}

/// A userspace filesystem's per-file operations.
pub trait UserspaceFs: Send + Sync {
    /// Name of the filesystem type (for logs and `hipfs stats`).
    fn fs_type(&self) -> String;
    /// Says which file this is (server, export, remote file) for logs.
    fn identify(&self) -> String {
        self.fs_type()
    }
    /// Reads up to `buf.len` bytes at `offset`; short only at end of file.
    fn read(&self, buf: UserspaceBuf, offset: u64) -> Result<usize>;
    /// Writes `buf.len` bytes at `offset`.
    fn write(&self, buf: UserspaceBuf, offset: u64) -> Result<usize>;
    /// Calls worth keeping in flight at once when a large transfer is
    /// staged through host memory (each worker stages one chunk).
    fn parallelism(&self) -> usize {
        4
    }
}

type Resolver = fn(std::os::fd::RawFd) -> Option<Result<std::sync::Arc<dyn UserspaceFs>>>;

static RESOLVERS: std::sync::Mutex<Vec<Resolver>> = std::sync::Mutex::new(Vec::new());

/// Adds a resolver that recognises fds of a userspace filesystem (the hipfs
/// remote client registers one) and binds them to an implementation.
pub fn add_resolver(r: Resolver) {
    let mut v = RESOLVERS.lock().unwrap_or_else(|p| p.into_inner());
    if !v.iter().any(|x| std::ptr::fn_addr_eq(*x, r)) {
        v.push(r);
    }
}

/// Finds the userspace filesystem serving `fd`, or says why there is none.
pub fn resolve_fd(fd: std::os::fd::RawFd) -> Result<std::sync::Arc<dyn UserspaceFs>> {
    // hipfs mounts are always known: every face (Rust, C, Python) gets them.
    crate::remote::install_userspace_resolver();
    let resolvers: Vec<Resolver> = RESOLVERS.lock().unwrap_or_else(|p| p.into_inner()).clone();
    for r in resolvers {
        if let Some(fs) = r(fd) {
            return fs;
        }
    }
    Err(crate::Error::new(
        crate::OpError::IoNotSupported,
        "UserspaceFs needs a file on a hipfs mount (or fs_ops callbacks through the C API); this file is on no userspace filesystem hipfs knows",
    ))
}
