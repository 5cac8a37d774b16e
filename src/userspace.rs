//! What a userspace filesystem provides so `FileHandleType::UserspaceFs`
//! handles can dispatch to it: the hipfs remote client is one implementation,
//! the C ABI's `hipFileFSOps_t` callbacks are another.

use crate::error::{Error, OpError, Result};

/// Where a read's bytes go (or a write's come from): lent memory for one
/// filesystem call. Made only by the library (or by `unsafe`
/// [`UserspaceBuf::new`]), so a filesystem may trust what it describes.
#[derive(Debug)]
pub struct UserspaceBuf(UserspaceMem);

impl UserspaceBuf {
    /// A buffer describing `mem`.
    ///
    /// # Safety
    /// The memory `mem` describes (its host range, or host alias) must be
    /// valid for reads and writes of its length, and used by nobody else,
    /// until the filesystem call it is passed to returns.
    pub unsafe fn new(mem: UserspaceMem) -> UserspaceBuf {
        UserspaceBuf(mem)
    }

    /// A buffer over `dst`, borrowed for the call.
    pub fn from_slice(dst: &mut [u8]) -> UserspaceBuf {
        UserspaceBuf(UserspaceMem::Host {
            ptr: dst.as_mut_ptr(),
            len: dst.len(),
        })
    }

    /// For memory an `unsafe` entry point of the crate already vouched for
    /// (a validated request of a registered or lent buffer; see `crate::lent`),
    /// or a slice a write only reads.
    pub(crate) fn vouched(mem: UserspaceMem) -> UserspaceBuf {
        UserspaceBuf(mem)
    }

    /// What the buffer describes (reading the addresses is safe; using them
    /// as memory is the filesystem's own `unsafe`, or [`UserspaceBuf`]'s
    /// crate-internal views).
    pub fn mem(&self) -> &UserspaceMem {
        &self.0
    }

    /// The description, by value.
    pub fn into_mem(self) -> UserspaceMem {
        self.0
    }
}

/// The kinds of memory a [`UserspaceBuf`] describes.
#[derive(Debug)]
pub enum UserspaceMem {
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

// UserspaceBuf is Send: lent memory crosses threads with the call that owns
// it (the impl and its reasoning are in `crate::lent`).

/// The errno a filesystem meant by a negative `ssize_t` return (`-errno`).
/// Anything that is not a real errno (`-100000`, `isize::MIN`) is `EIO`:
/// the caller must see a failure it can understand, never errno 100000.
/// Linux errnos are 1..=4095 (`MAX_ERRNO`).
///
/// ```
/// assert_eq!(hipfs::userspace::errno_of_negative_return(-28), libc::ENOSPC);
/// assert_eq!(hipfs::userspace::errno_of_negative_return(-100_000), libc::EIO);
/// ```
pub fn errno_of_negative_return(ret: isize) -> i32 {
    const MAX_ERRNO: isize = 4095;
    match ret.checked_neg() {
        Some(e @ 1..=MAX_ERRNO) => e as i32,
        _ => libc::EIO,
    }
}

/// A userspace filesystem's per-file operations.
pub trait UserspaceFs: Send + Sync {
    /// Name of the filesystem type (for logs and `hipfs stats`).
    fn fs_type(&self) -> String;
    /// Says which file this is (server, export, remote file) for logs.
    fn identify(&self) -> String {
        self.fs_type()
    }
    /// Whether a read can place bytes straight into the device memory
    /// `[addr, addr + len)` (RDMA into registered GPU memory): then `read`
    /// gets a [`UserspaceMem::Rdma`] without a host alias; otherwise the
    /// library stages device memory through pinned host buffers.
    fn places_device(&self, addr: usize, len: usize) -> bool {
        let _ = (addr, len);
        false
    }
    /// Whether a read can place bytes straight into device memory the
    /// library hands it within a staged request (a chunk of the caller's
    /// device memory, or a readahead device slab), as [`places_device`]
    /// says for a whole request: the staged pipeline then gives `read` a
    /// [`UserspaceMem::Rdma`] of that memory instead of a pinned bounce
    /// slab. Off unless the filesystem says so.
    ///
    /// [`places_device`]: UserspaceFs::places_device
    fn places_device_chunks(&self) -> bool {
        false
    }
    /// Reads up to `buf.len` bytes at `offset`; short only at end of file.
    fn read(&self, buf: UserspaceBuf, offset: u64) -> Result<usize>;
    /// Writes `buf.len` bytes at `offset`.
    fn write(&self, buf: UserspaceBuf, offset: u64) -> Result<usize>;
    /// Whether the library may read ahead of sequential reads staged into
    /// device memory: call `read` from its own threads, at offsets the
    /// application has not asked for yet (see `io::readahead`). Off unless
    /// the filesystem says so.
    fn reads_ahead(&self) -> bool {
        false
    }
    /// Calls worth keeping in flight at once when a large transfer is
    /// staged through host memory (each worker stages one chunk).
    fn parallelism(&self) -> usize {
        4
    }
}

/// Reads up to `dst.len()` bytes at `offset` of `fs` into `dst`; a
/// filesystem that reports more than it was given is an `InternalError`.
pub(crate) fn read_into(fs: &dyn UserspaceFs, dst: &mut [u8], offset: u64) -> Result<usize> {
    let len = dst.len();
    let n = fs.read(UserspaceBuf::from_slice(dst), offset)?;
    at_most(n, len)
}

/// Reads up to `dst.len()` bytes at `offset` of `fs` straight into device
/// memory `dst`, which the library lends for the call (a chunk of a staged
/// request's device memory, or a readahead device slab), for a filesystem
/// that [places device chunks](UserspaceFs::places_device_chunks) itself.
pub(crate) fn read_into_device(
    fs: &dyn UserspaceFs,
    dst: crate::gpu::LentDevice,
    offset: u64,
) -> Result<usize> {
    let buf = UserspaceBuf::vouched(UserspaceMem::Rdma {
        desc: String::new(),
        addr: dst.addr(),
        len: dst.len(),
        host_ptr: None,
    });
    at_most(fs.read(buf, offset)?, dst.len())
}

/// `n` bytes reported for a `len`-byte read: more is an `InternalError`.
fn at_most(n: usize, len: usize) -> Result<usize> {
    if n > len {
        return Err(Error::new(
            OpError::InternalError,
            format!("userspace filesystem reported {n} bytes for a {len}-byte read"),
        ));
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::errno_of_negative_return;

    #[test]
    fn a_negative_return_that_is_no_errno_becomes_eio() {
        assert_eq!(
            errno_of_negative_return(-libc::ENOSPC as isize),
            libc::ENOSPC
        );
        assert_eq!(errno_of_negative_return(-4095), 4095);
        for bad in [-100_000, -4096, isize::MIN, 0, 5] {
            assert_eq!(errno_of_negative_return(bad), libc::EIO, "{bad}");
        }
    }
}
