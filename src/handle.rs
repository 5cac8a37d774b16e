//! File handles: the core registration of an fd (shared by the Rust, C and
//! Python faces) and the Rust [`FileHandle`] object on top.

use crate::buffer::IoMemory;
use crate::error::{Error, OpError, Result};
use crate::io::{self, posix::PosixFile, Dir, FileBackend, Span};
use crate::registry;
use crate::userspace::UserspaceFs;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use crate::registry::{FileHandleType, RegisteredFile};

/// What an `OPAQUE_FD` registration of a hipfs file does when the direct
/// path cannot bind it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnboundHipfsFile {
    /// Fail the registration (hipFile: a silent fall back to FUSE would
    /// hide a misconfigured mount).
    Fail,
    /// Register the fd as any other file, read through the mount (cuFile:
    /// NVIDIA's library takes files it cannot accelerate in compat mode,
    /// and its clients expect registration to succeed).
    ThroughMount,
}

/// Registers `fd` (opening the driver implicitly). For `UserspaceFs`,
/// `fs` is the filesystem (C callbacks); `None` binds files of a hipfs
/// mount to the remote client.
pub fn handle_register(
    fd: RawFd,
    kind: FileHandleType,
    fs: Option<Arc<dyn UserspaceFs>>,
) -> Result<u64> {
    handle_register_with(fd, kind, fs, UnboundHipfsFile::Fail)
}

/// [`handle_register`], choosing what an `OPAQUE_FD` hipfs file the direct
/// path cannot bind does.
pub fn handle_register_with(
    fd: RawFd,
    kind: FileHandleType,
    fs: Option<Arc<dyn UserspaceFs>>,
    unbound: UnboundHipfsFile,
) -> Result<u64> {
    if fd < 0 {
        return Err(Error::new(
            OpError::InvalidValue,
            format!("file descriptor {fd} is negative"),
        ));
    }
    if registry::fd_registered(fd) {
        return Err(Error::new(
            OpError::HandleAlreadyRegistered,
            format!("fd {fd} is already registered"),
        ));
    }
    let backend = match kind {
        FileHandleType::OpaqueWin32 => {
            return Err(Error::new(
                OpError::IoNotSupported,
                "Win32 handles do not exist on Linux",
            ))
        }
        FileHandleType::OpaqueFd => {
            let config = registry::current_config();
            match (opaque_on_hipfs(fd, &config), unbound) {
                (Some(Ok(fs)), _) => FileBackend::userspace(fs),
                (Some(Err(e)), UnboundHipfsFile::Fail) => return Err(e),
                (Some(Err(e)), UnboundHipfsFile::ThroughMount) => {
                    log::warn!(
                        "fd {fd} is on a hipfs mount but its direct path failed ({e}); reading through the mount"
                    );
                    FileBackend::Posix(PosixFile::open(fd, &config)?)
                }
                (None, _) => FileBackend::Posix(PosixFile::open(fd, &config)?),
            }
        }
        FileHandleType::UserspaceFs => match fs {
            Some(fs) => FileBackend::userspace(fs),
            None => FileBackend::userspace(resolve_userspace(fd)?),
        },
    };
    registry::insert_file(fd, kind, backend)
}

/// The userspace filesystem serving `fd`: hipfs mounts are always known
/// (every face, Rust, C and Python, gets them); any other file needs
/// `fs_ops` callbacks through the C API.
fn resolve_userspace(fd: RawFd) -> Result<Arc<dyn UserspaceFs>> {
    crate::remote::client::direct::resolve(fd).unwrap_or_else(|| {
        Err(Error::new(
            OpError::IoNotSupported,
            "UserspaceFs needs a file on a hipfs mount (or fs_ops callbacks through the C API); this file is on no userspace filesystem hipfs knows",
        ))
    })
}

/// An OPAQUE_FD handle on a hipfs mount is bound to the server exactly as
/// a UserspaceFs handle is: the programs people run (PyTorch's GdsFile,
/// KvikIO, safetensors loaders) register OPAQUE_FD handles, and through
/// FUSE they would get a fraction of the direct path's speed. `None`: not a
/// hipfs file, or the switch is off (`HIPFS_OPAQUE_FD_DIRECT=0`, parameter
/// `HipfsOpaqueFdDirect`); then the handle is a POSIX file as any other.
/// A hipfs file the direct path cannot bind fails the registration, as the
/// same file registered as UserspaceFs would (a silent fall back to FUSE
/// would hide a misconfigured mount).
fn opaque_on_hipfs(
    fd: RawFd,
    config: &crate::config::Config,
) -> Option<Result<Arc<dyn UserspaceFs>>> {
    use std::sync::atomic::{AtomicBool, Ordering};
    static SAID_DIRECT: AtomicBool = AtomicBool::new(false);
    static SAID_OFF: AtomicBool = AtomicBool::new(false);
    let first = |said: &AtomicBool| !said.swap(true, Ordering::Relaxed);
    if !config.opaque_fd_direct() {
        // Only the first such handle is logged: no mount-table read after.
        if !SAID_OFF.load(Ordering::Relaxed)
            && hipfs_fusefs::is_hipfs_fd(fd).unwrap_or(false)
            && first(&SAID_OFF)
        {
            log::info!(
                "OPAQUE_FD handle on a hipfs mount: through FUSE (the direct path is off: HIPFS_OPAQUE_FD_DIRECT / HipfsOpaqueFdDirect)"
            );
        }
        return None;
    }
    let bound =
        crate::remote::client::direct::resolve_for(fd, hipfs_fusefs::IdentifyPurpose::OpaqueFd)?;
    match &bound {
        Ok(fs) if first(&SAID_DIRECT) => log::info!(
            "OPAQUE_FD handle on a hipfs mount: direct path to the server ({})",
            fs.identify()
        ),
        Err(e) => log::warn!("OPAQUE_FD handle on a hipfs mount: the direct path refused it: {e}"),
        Ok(_) => {}
    }
    Some(bound)
}

/// Deregisters a handle; unknown handles are ignored (as upstream's void API).
pub fn handle_deregister(id: u64) -> bool {
    registry::remove_file(id).is_some()
}

/// The registered file for a handle id.
pub fn lookup(id: u64) -> Result<Arc<RegisteredFile>> {
    registry::file(id)
}

/// Reads `size` bytes at `file_offset` into `base + buffer_offset` with the
/// active configuration and whatever registration starts at `base`; the
/// raw-address form the C and Python faces use. Returns bytes read (short
/// only at end of file).
///
/// # Safety
/// `[base + buffer_offset, +size)` must be memory the caller lends for the
/// call: host memory writable for `size` bytes (or device memory of the
/// active GPU runtime), not read or written by anyone else until it returns.
pub unsafe fn read(
    file: &RegisteredFile,
    base: usize,
    size: usize,
    file_offset: i64,
    buffer_offset: i64,
) -> Result<usize> {
    transfer_vouched(Dir::Read, file, base, size, file_offset, buffer_offset)
}

/// Writes `size` bytes from `base + buffer_offset` at `file_offset`: see [`read`].
///
/// # Safety
/// As [`read`], the memory readable for `size` bytes and not written by
/// anyone else until the call returns.
pub unsafe fn write(
    file: &RegisteredFile,
    base: usize,
    size: usize,
    file_offset: i64,
    buffer_offset: i64,
) -> Result<usize> {
    transfer_vouched(Dir::Write, file, base, size, file_offset, buffer_offset)
}

/// [`read`] or [`write`] for an address an `unsafe` entry point already
/// vouched for (`batch_submit`, `read_async`) or a [`FileHandle`] borrow:
/// the crate's engines only.
pub(crate) fn transfer_vouched(
    dir: Dir,
    file: &RegisteredFile,
    base: usize,
    size: usize,
    file_offset: i64,
    buffer_offset: i64,
) -> Result<usize> {
    // One lock for both: this runs on every I/O.
    let (config, target) = registry::io_context(base)?;
    let span = Span {
        base,
        size,
        file_offset,
        buffer_offset,
    };
    io::transfer(dir, &file.backend, &target, span, &config)
}

/// A file opened by path and registered with the driver: the Rust face of
/// `hipFileHandleRegister`.
///
/// ```no_run
/// use hipfs::{Buffer, FileHandle, FileHandleType};
/// let mut fh = FileHandle::new("/data/x", libc::O_RDONLY, 0o644, FileHandleType::OpaqueFd);
/// fh.open().unwrap();
/// let mut mem = vec![0u8; 1 << 20];
/// let mut buf = Buffer::from_slice(&mut mem, 0);
/// let n = fh.read(&mut buf, 1 << 20, 0, 0).unwrap();
/// # let _ = n;
/// ```
#[derive(Debug)]
pub struct FileHandle {
    path: PathBuf,
    flags: i32,
    mode: u32,
    handle_type: FileHandleType,
    fd: Option<OwnedFd>,
    id: Option<u64>,
}

impl FileHandle {
    /// Describes a file to open; nothing is opened until [`FileHandle::open`].
    pub fn new(
        path: impl AsRef<Path>,
        flags: i32,
        mode: u32,
        handle_type: FileHandleType,
    ) -> FileHandle {
        FileHandle {
            path: path.as_ref().to_path_buf(),
            flags,
            mode,
            handle_type,
            fd: None,
            id: None,
        }
    }

    /// Opens the file and registers it; on registration failure the fd is closed again.
    pub fn open(&mut self) -> Result<()> {
        if self.fd.is_some() {
            return Err(Error::new(
                OpError::HandleAlreadyRegistered,
                format!("{} is already open", self.path.display()),
            ));
        }
        if self.handle_type == FileHandleType::OpaqueWin32 {
            return Err(Error::new(
                OpError::IoNotSupported,
                "OpaqueWin32 handles are not implemented",
            ));
        }
        if self.path.as_os_str().as_bytes().contains(&0) {
            return Err(Error::new(
                OpError::InvalidValue,
                "path contains a NUL byte",
            ));
        }
        // open(2) gets the caller's flags and mode as given: the access mode
        // through read/write, everything else (O_CREAT, O_TRUNC, O_DIRECT,
        // ...) through custom_flags; std adds O_CLOEXEC.
        let acc = self.flags & libc::O_ACCMODE;
        if acc == libc::O_ACCMODE {
            return Err(Error::system(
                libc::EINVAL,
                format!("open {}: bad access mode", self.path.display()),
            ));
        }
        let file = std::fs::OpenOptions::new()
            .read(acc == libc::O_RDONLY || acc == libc::O_RDWR)
            .write(acc == libc::O_WRONLY || acc == libc::O_RDWR)
            .custom_flags(self.flags & !libc::O_ACCMODE)
            .mode(self.mode)
            .open(&self.path)
            .map_err(|e| {
                Error::system(
                    e.raw_os_error().unwrap_or(libc::EIO),
                    format!("open {}", self.path.display()),
                )
            })?;
        let fd = OwnedFd::from(file);
        let id = handle_register(fd.as_raw_fd(), self.handle_type, None)
            .map_err(|e| e.with_context(self.path.display()))?;
        self.fd = Some(fd);
        self.id = Some(id);
        Ok(())
    }

    /// Deregisters and closes; calling it again does nothing.
    pub fn close(&mut self) {
        if let Some(id) = self.id.take() {
            handle_deregister(id);
        }
        self.fd = None;
    }

    fn registered(&self) -> Result<Arc<RegisteredFile>> {
        let id = self.id.ok_or_else(|| {
            Error::new(
                OpError::HandleNotRegistered,
                format!("{} is not open", self.path.display()),
            )
        })?;
        lookup(id)
    }

    /// Reads `size` bytes at `file_offset` into `buffer` at `buffer_offset`;
    /// returns the bytes read (short only at end of file).
    ///
    /// `buffer` is a [`Buffer`](crate::Buffer) or a [`BufferView`](crate::BufferView)
    /// of one, borrowed mutably: the read writes its bytes, so no other
    /// access may share them meanwhile. Disjoint views of one registered
    /// buffer (from [`Buffer::split_at_mut`](crate::Buffer::split_at_mut))
    /// can be read into from several threads at once, each still using the
    /// buffer's registration.
    ///
    /// Sharing one buffer between two reads at once does not compile:
    ///
    /// ```compile_fail
    /// use hipfs::{Buffer, FileHandle, FileHandleType};
    /// let fh = FileHandle::new("/data/x", libc::O_RDONLY, 0, FileHandleType::OpaqueFd);
    /// let mut mem = vec![0u8; 8192];
    /// let mut buf = Buffer::from_slice(&mut mem, 0);
    /// std::thread::scope(|s| {
    ///     s.spawn(|| fh.read(&mut buf, 4096, 0, 0));
    ///     s.spawn(|| fh.read(&mut buf, 4096, 0, 0));
    /// });
    /// ```
    ///
    /// Disjoint halves of it do:
    ///
    /// ```no_run
    /// use hipfs::{Buffer, FileHandle, FileHandleType};
    /// let fh = FileHandle::new("/data/x", libc::O_RDONLY, 0, FileHandleType::OpaqueFd);
    /// let mut mem = vec![0u8; 8192];
    /// let mut buf = Buffer::from_slice(&mut mem, 0);
    /// let (mut lo, mut hi) = buf.split_at_mut(4096)?;
    /// std::thread::scope(|s| {
    ///     s.spawn(|| fh.read(&mut lo, 4096, 0, 0));
    ///     s.spawn(|| fh.read(&mut hi, 4096, 4096, 0));
    /// });
    /// # Ok::<(), hipfs::Error>(())
    /// ```
    pub fn read<M: IoMemory + ?Sized>(
        &self,
        buffer: &mut M,
        size: usize,
        file_offset: i64,
        buffer_offset: i64,
    ) -> Result<usize> {
        self.transfer(Dir::Read, &*buffer, size, file_offset, buffer_offset)
    }

    /// Writes `size` bytes from `buffer` at `buffer_offset` to `file_offset`.
    pub fn write<M: IoMemory + ?Sized>(
        &self,
        buffer: &M,
        size: usize,
        file_offset: i64,
        buffer_offset: i64,
    ) -> Result<usize> {
        self.transfer(Dir::Write, buffer, size, file_offset, buffer_offset)
    }

    fn transfer<M: IoMemory + ?Sized>(
        &self,
        dir: Dir,
        buffer: &M,
        size: usize,
        file_offset: i64,
        buffer_offset: i64,
    ) -> Result<usize> {
        let file = self.registered()?;
        let mem = buffer.io_memory();
        check_buffer_range(mem.len, size, buffer_offset)?;
        // A view's bytes start `mem.offset` into the buffer it came from:
        // the I/O names the buffer's base so its registration applies.
        let offset = i64::try_from(mem.offset)
            .ok()
            .and_then(|o| o.checked_add(buffer_offset))
            .ok_or_else(|| Error::new(OpError::InvalidValue, "buffer offset overflows"))?;
        transfer_vouched(dir, &file, mem.base, size, file_offset, offset)
    }

    /// The path given at construction.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The open flags.
    pub fn flags(&self) -> i32 {
        self.flags
    }

    /// The creation mode.
    pub fn mode(&self) -> u32 {
        self.mode
    }

    /// The opaque driver handle, `None` when closed.
    pub fn handle(&self) -> Option<u64> {
        self.id
    }

    /// The fd, `None` when closed.
    pub fn fd(&self) -> Option<RawFd> {
        self.fd.as_ref().map(|f| f.as_raw_fd())
    }

    /// Whether the file is open and registered.
    pub fn is_open(&self) -> bool {
        self.id.is_some()
    }

    /// The handle type used at registration.
    pub fn handle_type(&self) -> FileHandleType {
        self.handle_type
    }

    /// Changes the handle type: only while closed; `OpaqueWin32` is not implemented.
    pub fn set_handle_type(&mut self, t: FileHandleType) -> Result<()> {
        if self.is_open() {
            return Err(Error::new(
                OpError::HandleAlreadyRegistered,
                "the handle type cannot change while the file is open",
            ));
        }
        if t == FileHandleType::OpaqueWin32 {
            return Err(Error::new(
                OpError::IoNotSupported,
                "OpaqueWin32 handles are not implemented",
            ));
        }
        self.handle_type = t;
        Ok(())
    }
}

fn check_buffer_range(len: usize, size: usize, buffer_offset: i64) -> Result<()> {
    let off = usize::try_from(buffer_offset)
        .map_err(|_| Error::new(OpError::InvalidValue, "buffer offset is negative"))?;
    if off.checked_add(size).is_none_or(|end| end > len) {
        return Err(Error::new(
            OpError::InvalidValue,
            format!("{size} bytes at buffer offset {off} pass the end of the {len}-byte buffer"),
        ));
    }
    Ok(())
}

impl Drop for FileHandle {
    fn drop(&mut self) {
        self.close();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Buffer, Driver};

    #[test]
    fn two_threads_read_disjoint_halves_of_one_registered_buffer_at_once() {
        let _d = Driver::open().unwrap();
        let half = 1 << 20;
        let data: Vec<u8> = (0..2 * half).map(|i| (i * 7 + i / 4093) as u8).collect();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("halves");
        std::fs::write(&path, &data).unwrap();
        let mut fh = FileHandle::new(&path, libc::O_RDONLY, 0, FileHandleType::OpaqueFd);
        fh.open().unwrap();
        let mut mem = vec![0u8; 2 * half];
        let base = mem.as_mut_ptr() as usize;
        let mut buf = Buffer::from_slice(&mut mem, 0);
        buf.register().unwrap();
        {
            let (mut lo, mut hi) = buf.split_at_mut(half).unwrap();
            assert_eq!((lo.offset(), hi.offset(), hi.len()), (0, half, half));
            std::thread::scope(|s| {
                let fh = &fh;
                let a = s.spawn(move || fh.read(&mut lo, half, 0, 0));
                let b = s.spawn(move || fh.read(&mut hi, half, half as i64, 0));
                assert_eq!(a.join().unwrap().unwrap(), half);
                assert_eq!(b.join().unwrap().unwrap(), half);
            });
        }
        // Both views went through the buffer's own registration.
        assert!(crate::buffer::lookup(base).is_some());
        let (mut lo, _) = buf.split_at_mut(half).unwrap();
        assert_eq!(
            fh.read(&mut lo, half + 1, 0, 0).unwrap_err().op(),
            OpError::InvalidValue,
            "a view must not read past its own end"
        );
        assert!(buf.split_at_mut(2 * half + 1).is_err());
        buf.deregister().unwrap();
        drop(buf);
        assert!(mem == data);
    }
}
