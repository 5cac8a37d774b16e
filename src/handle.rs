//! File handles: the core registration of an fd (shared by the Rust, C and
//! Python faces) and the Rust [`FileHandle`] object on top.

use crate::driver::{ensure_open, with_state};
use crate::error::{Error, OpError, Result};
use crate::io::posix::PosixFile;
use crate::userspace::UserspaceFs;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

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

/// How a registered file moves its bytes.
pub enum FileBackend {
    /// A local file: O_DIRECT and buffered fds.
    Posix(PosixFile),
    /// A userspace filesystem's file.
    Userspace(Arc<dyn UserspaceFs>),
}

/// A file registered with the driver.
pub struct RegisteredFile {
    /// The handle id.
    pub id: u64,
    /// The descriptor the user registered.
    pub user_fd: RawFd,
    /// The handle type.
    pub kind: FileHandleType,
    /// How its I/O is done.
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

/// Registers `fd` (opening the driver implicitly). For `UserspaceFs`,
/// `fs` is the filesystem (C callbacks); `None` asks the known resolvers
/// (the hipfs mount client).
pub fn handle_register(
    fd: RawFd,
    kind: FileHandleType,
    fs: Option<Arc<dyn UserspaceFs>>,
) -> Result<u64> {
    if fd < 0 {
        return Err(Error::new(
            OpError::InvalidValue,
            format!("file descriptor {fd} is negative"),
        ));
    }
    let exists = with_state(|s| s.fds.contains_key(&fd));
    if exists {
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
            let config = crate::driver::current_config();
            FileBackend::Posix(PosixFile::open(fd, &config)?)
        }
        FileHandleType::UserspaceFs => match fs {
            Some(fs) => FileBackend::Userspace(fs),
            None => FileBackend::Userspace(crate::userspace::resolve_fd(fd)?),
        },
    };
    with_state(|s| {
        ensure_open(s);
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
        Ok(id)
    })
}

/// Deregisters a handle; unknown handles are ignored (as upstream's void API).
pub fn handle_deregister(id: u64) -> bool {
    let removed = with_state(|s| {
        let h = s.handles.remove(&id)?;
        s.fds.remove(&h.user_fd);
        Some(h)
    });
    removed.is_some()
}

/// The registered file for a handle id.
pub fn lookup(id: u64) -> Result<Arc<RegisteredFile>> {
    with_state(|s| {
        if s.use_count == 0 {
            return Err(Error::new(
                OpError::DriverNotInitialized,
                "the driver is not open",
            ));
        }
        s.handles.get(&id).cloned().ok_or_else(|| {
            Error::new(
                OpError::HandleNotRegistered,
                format!("handle {id} is not registered"),
            )
        })
    })
}

/// A file opened by path and registered with the driver: the Rust face of
/// `hipFileHandleRegister`.
///
/// ```no_run
/// use hipfs::{Buffer, FileHandle, FileHandleType};
/// let mut fh = FileHandle::new("/data/x", libc::O_RDONLY, 0o644, FileHandleType::OpaqueFd);
/// fh.open().unwrap();
/// let mut mem = vec![0u8; 1 << 20];
/// let buf = Buffer::from_slice(&mut mem, 0);
/// let n = fh.read(&buf, 1 << 20, 0, 0).unwrap();
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
    pub fn read(
        &self,
        buffer: &crate::Buffer<'_>,
        size: usize,
        file_offset: i64,
        buffer_offset: i64,
    ) -> Result<usize> {
        self.transfer(crate::io::read, buffer, size, file_offset, buffer_offset)
    }

    /// Writes `size` bytes from `buffer` at `buffer_offset` to `file_offset`.
    pub fn write(
        &self,
        buffer: &crate::Buffer<'_>,
        size: usize,
        file_offset: i64,
        buffer_offset: i64,
    ) -> Result<usize> {
        self.transfer(crate::io::write, buffer, size, file_offset, buffer_offset)
    }

    fn transfer(
        &self,
        op: fn(&RegisteredFile, usize, usize, i64, i64) -> Result<usize>,
        buffer: &crate::Buffer<'_>,
        size: usize,
        file_offset: i64,
        buffer_offset: i64,
    ) -> Result<usize> {
        let file = self.registered()?;
        check_buffer_range(buffer, size, buffer_offset)?;
        op(
            &file,
            buffer.ptr() as usize,
            size,
            file_offset,
            buffer_offset,
        )
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

fn check_buffer_range(buffer: &crate::Buffer<'_>, size: usize, buffer_offset: i64) -> Result<()> {
    let off = usize::try_from(buffer_offset)
        .map_err(|_| Error::new(OpError::InvalidValue, "buffer offset is negative"))?;
    if off.checked_add(size).is_none_or(|end| end > buffer.len()) {
        return Err(Error::new(
            OpError::InvalidValue,
            format!(
                "{size} bytes at buffer offset {off} pass the end of the {}-byte buffer",
                buffer.len()
            ),
        ));
    }
    Ok(())
}

impl Drop for FileHandle {
    fn drop(&mut self) {
        self.close();
    }
}
