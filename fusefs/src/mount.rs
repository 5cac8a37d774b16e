//! Mounting a [`Backend`]: configuration, the background session and its teardown.
//!
//! Multi-threading: fuser 0.18 runs `n_threads` event loops itself and, with `clone_fd`, gives
//! each its own `/dev/fuse` descriptor cloned with `FUSE_DEV_IOC_CLONE`, so the kernel spreads
//! requests over the threads and each thread reads, dispatches and replies without any shared
//! queue or lock. That is libfuse's `clone_fd` multi-threaded loop, so no worker pool of our
//! own is needed: every `Filesystem` method takes `&self` and runs on the thread that read the
//! request.
//!
//! Teardown never hangs on a wedged mount: unmount is tried plainly, then lazily (`MNT_DETACH`)
//! if busy; if the session threads still have not ended after a grace period the FUSE
//! connection is aborted through `/sys/fs/fuse/connections/N/abort`.

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fuser::{BackgroundSession, Config, MountOption, Session, SessionACL};
use log::{info, warn};

use crate::adapter::{AdapterOptions, FuseAdapter};
use crate::mountinfo::{absolute_mount_path, read_mountinfo};
use crate::{Backend, FuseError};

/// The FUSE subtype of hipfs mounts: the mount table shows type `fuse.hipfs`.
pub const FS_SUBTYPE: &str = "hipfs";

/// Largest read and write the kernel may send in one request (1 MiB).
pub const DEFAULT_MAX_IO: u32 = 1 << 20;

/// Default page-cache readahead window (8 MiB): eight 1 MiB READs ahead of a sequential
/// reader. With a 1 MiB window only about two READs are in flight (the one waited for and
/// the next); with 8 MiB the session threads, the network and the kernel's copies into the
/// page cache overlap with the application's own reads. Measured with `hipfs bench mount`
/// on a 2-core machine: median 83% of the direct client's throughput against 75% with
/// 1 MiB (16 MiB gained nothing more). Only sequential readers reach the full window; the
/// kernel starts it small and grows it as reads stay sequential. Page faults of a mapping
/// read around the faulting page by the same window, so a workload of random access through
/// mmap may want a smaller one (`hipfs mount -o max_readahead=1M`).
pub const DEFAULT_MAX_READAHEAD: u32 = 8 << 20;

/// How long teardown waits for the session threads before aborting the connection.
const TEARDOWN_GRACE: Duration = Duration::from_secs(5);

/// How a mount behaves. `MountConfig::new(dir)` gives the defaults documented per field.
///
/// ```
/// use std::time::Duration;
/// let mut cfg = hipfs_fusefs::MountConfig::new("/mnt/data");
/// cfg.read_only = true;
/// cfg.attr_timeout = Duration::from_secs(5);
/// assert!(cfg.default_permissions);
/// assert_eq!(cfg.max_read, 1 << 20);
/// assert_eq!(cfg.max_readahead, 8 << 20);
/// ```
#[derive(Clone, Debug)]
pub struct MountConfig {
    /// The directory to mount on.
    pub mountpoint: PathBuf,
    /// The source shown in the mount table (e.g. `server:/export`). Default `hipfs`.
    pub fs_name: String,
    /// Mount read-only: the kernel and the adapter refuse writes with `EROFS`. Default off.
    pub read_only: bool,
    /// Let users other than the mounting one in. Default off.
    pub allow_other: bool,
    /// Without `allow_other`: keep root out too, and keep `allow_other` out of the kernel's
    /// options, so the mount table says what the mount does. `auto_unmount` needs
    /// `allow_other` in the kernel, so such a mount goes without it. Default off: then a
    /// mount without `allow_other` made through fusermount3 lets the owner and root in
    /// (libfuse's `allow_root`), which the kernel can only express as `allow_other`.
    pub owner_only: bool,
    /// The kernel checks mode bits before asking the backend. Default on.
    pub default_permissions: bool,
    /// How long the kernel caches attributes. Default 1 s.
    pub attr_timeout: Duration,
    /// How long the kernel caches name lookups. Default 1 s.
    pub entry_timeout: Duration,
    /// How long the kernel caches "no such name" answers. Default 0 (not cached), since a
    /// file created by another client should appear at once.
    pub negative_timeout: Duration,
    /// Bypass the page cache: every read and write goes to the backend at the caller's size
    /// (opens reply `FOPEN_DIRECT_IO`). Default off (page cache, with readahead).
    pub direct_io: bool,
    /// In page-cache mode, keep cached pages across opens (`FOPEN_KEEP_CACHE`); they are
    /// still dropped when the attributes show the file changed. Default on.
    pub keep_cache: bool,
    /// Largest read request (the `max_read` mount option). Default 1 MiB.
    pub max_read: u32,
    /// Largest write request. Default 1 MiB; at most 16 MiB.
    pub max_write: u32,
    /// Page-cache readahead window, set on the mount's backing device (as root; otherwise
    /// the kernel's 128 KiB stays). Default 8 MiB ([`DEFAULT_MAX_READAHEAD`]), each READ
    /// still at most `max_read`; at most 16 MiB.
    pub max_readahead: u32,
    /// Session threads, each with its own cloned `/dev/fuse` fd. Default: the CPU count,
    /// between 2 and 8.
    pub threads: usize,
    /// Let the kernel cache directory listings (`FOPEN_CACHE_DIR` with `FOPEN_KEEP_CACHE` on
    /// opendir) until the backend invalidates the directory ([`Invalidator::inode`]) or its
    /// attributes show it changed. Default off: only a backend that is told of every change
    /// may turn it on.
    pub cache_dir: bool,
    /// Let the kernel keep POSIX ACLs (`FUSE_POSIX_ACL`): it asks the backend for an inode's
    /// `system.posix_acl_*` attributes once and answers later reads, and its own permission
    /// checks, from that copy until the inode is invalidated or its mode or ACL is set
    /// through the mount. `ls -l` asks for the ACL of every file; without this each ask is a
    /// request to the backend. Only a backend that stores ACLs as those attributes and whose
    /// other changes invalidate the inode may turn it on. Default off.
    pub posix_acl: bool,
    /// Have fusermount3 unmount if this process dies (also sets the `fuse.hipfs` type in the
    /// mount table). Default on.
    pub auto_unmount: bool,
}

impl MountConfig {
    /// Defaults for a mount on `mountpoint`.
    pub fn new(mountpoint: impl Into<PathBuf>) -> MountConfig {
        let cpus = std::thread::available_parallelism().map_or(2, |n| n.get());
        MountConfig {
            mountpoint: mountpoint.into(),
            fs_name: "hipfs".to_string(),
            read_only: false,
            allow_other: false,
            owner_only: false,
            default_permissions: true,
            attr_timeout: Duration::from_secs(1),
            entry_timeout: Duration::from_secs(1),
            negative_timeout: Duration::ZERO,
            direct_io: false,
            keep_cache: true,
            max_read: DEFAULT_MAX_IO,
            max_write: DEFAULT_MAX_IO,
            max_readahead: DEFAULT_MAX_READAHEAD,
            threads: cpus.clamp(2, 8),
            cache_dir: false,
            posix_acl: false,
            auto_unmount: true,
        }
    }

    fn validate(&self) -> Result<(), FuseError> {
        let bad = |m: String| Err(FuseError::InvalidConfig(m));
        if !(1..=64).contains(&self.threads) {
            return bad(format!("threads must be 1..=64, got {}", self.threads));
        }
        const MAX_IO: u32 = 16 << 20;
        for (what, v) in [
            ("max_read", self.max_read),
            ("max_write", self.max_write),
            ("max_readahead", self.max_readahead),
        ] {
            if !(4096..=MAX_IO).contains(&v) {
                return bad(format!("{what} must be 4 KiB..=16 MiB, got {v}"));
            }
        }
        if self.fs_name.is_empty() || self.fs_name.contains([',', ' ', '\0', '\n']) {
            return bad(format!(
                "fs_name must be non-empty without commas, spaces or newlines, got {:?}",
                self.fs_name
            ));
        }
        match std::fs::metadata(&self.mountpoint) {
            Ok(m) if m.is_dir() => Ok(()),
            Ok(_) => bad(format!("{} is not a directory", self.mountpoint.display())),
            Err(e) if e.raw_os_error() == Some(libc::ENOTCONN) => bad(format!(
                "{} holds a dead FUSE mount (its server process is gone); remove it with \
                 `umount -l {}` or `hipfs umount`",
                self.mountpoint.display(),
                self.mountpoint.display()
            )),
            Err(e) => bad(format!("mountpoint {}: {e}", self.mountpoint.display())),
        }
    }

    fn adapter_options(&self) -> AdapterOptions {
        AdapterOptions {
            attr_timeout: self.attr_timeout,
            entry_timeout: self.entry_timeout,
            negative_timeout: self.negative_timeout,
            read_only: self.read_only,
            direct_io: self.direct_io,
            keep_cache: self.keep_cache,
            cache_dir: self.cache_dir,
            posix_acl: self.posix_acl,
            max_write: self.max_write,
            max_readahead: self.max_readahead,
            // Enough outstanding async reads for readahead and direct I/O to keep every
            // session thread busy.
            max_background: (self.threads * 16).min(u16::MAX as usize) as u16,
        }
    }

    fn fuser_config(&self) -> Config {
        let mut options = vec![
            MountOption::FSName(self.fs_name.clone()),
            MountOption::Subtype(FS_SUBTYPE.to_string()),
            MountOption::NoDev,
            MountOption::NoSuid,
            MountOption::CUSTOM(format!("max_read={}", self.max_read)),
        ];
        if self.default_permissions {
            options.push(MountOption::DefaultPermissions);
        }
        options.push(if self.read_only {
            MountOption::RO
        } else {
            MountOption::RW
        });
        let owner_only = self.owner_only && !self.allow_other;
        let auto_unmount = self.auto_unmount && !owner_only && fusermount_available();
        if auto_unmount {
            options.push(MountOption::AutoUnmount);
        } else if self.auto_unmount && !owner_only {
            warn!(
                "no fusermount3 or fusermount on PATH: mounting {} without auto_unmount \
                 (if this process is killed, `hipfs umount` or `umount` cleans up)",
                self.mountpoint.display()
            );
        }
        let mut config = Config::default();
        config.mount_options = options;
        // auto_unmount needs allow_other in the kernel; fuser then keeps other users out
        // itself (RootAndOwner) unless allow_other was really asked for.
        config.acl = if self.allow_other {
            SessionACL::All
        } else if auto_unmount {
            SessionACL::RootAndOwner
        } else {
            SessionACL::Owner
        };
        config.n_threads = Some(self.threads);
        config.clone_fd = self.threads > 1;
        config
    }
}

/// Whether fuser can reach a fusermount helper, which `auto_unmount` needs (fuser mounts
/// through it whenever that option is set; as root without it, fuser mounts directly).
fn fusermount_available() -> bool {
    let executable = |p: &Path| {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    // fuser runs exactly this helper when it is set.
    if let Some(p) = std::env::var_os("FUSERMOUNT_PATH") {
        return executable(Path::new(&p));
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([PathBuf::from("/sbin"), PathBuf::from("/bin")])
        .any(|dir| {
            ["fusermount3", "fusermount"]
                .iter()
                .any(|n| executable(&dir.join(n)))
        })
}

/// A session and the flag its teardown sets (see [`FuseAdapter`]).
fn new_session(
    backend: Arc<dyn Backend>,
    config: &MountConfig,
) -> Result<(Session<FuseAdapter>, Arc<AtomicBool>), FuseError> {
    config.validate()?;
    let closing = Arc::new(AtomicBool::new(false));
    let notifier = Arc::new(std::sync::OnceLock::new());
    let adapter = FuseAdapter::new(
        backend,
        config.adapter_options(),
        closing.clone(),
        notifier.clone(),
    );
    let session =
        Session::new(adapter, &config.mountpoint, &config.fuser_config()).map_err(|source| {
            FuseError::Mount {
                mountpoint: config.mountpoint.clone(),
                source,
            }
        })?;
    let _ = notifier.set(session.notifier());
    Ok((session, closing))
}

/// Mounts `backend` and serves it on background threads until the returned handle is
/// unmounted or dropped.
///
/// ```no_run
/// use std::sync::Arc;
/// use hipfs_fusefs::{mount, MemFs, MountConfig};
/// let handle = mount(Arc::new(MemFs::new()), MountConfig::new("/mnt/mem"))?;
/// std::fs::write("/mnt/mem/hello", b"hi")?;
/// handle.unmount()?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn mount(backend: Arc<dyn Backend>, config: MountConfig) -> Result<MountHandle, FuseError> {
    let (session, closing) = new_session(backend, &config)?;
    let mountpoint =
        absolute_mount_path(&config.mountpoint).map_err(|source| FuseError::Mount {
            mountpoint: config.mountpoint.clone(),
            source,
        })?;
    let device = mount_device(&mountpoint);
    let connection = device.map(|(major, minor)| (major << 20) | minor);
    let abort = connection.and_then(open_abort_switch);
    if let Some((major, minor)) = device {
        if !config.direct_io {
            raise_readahead(major, minor, config.max_readahead);
        }
    }
    let background = session.spawn().map_err(|source| FuseError::Session {
        mountpoint: mountpoint.clone(),
        source,
    })?;
    info!(
        "mounted {} ({} threads)",
        mountpoint.display(),
        config.threads
    );
    Ok(MountHandle {
        session: Some(background),
        mountpoint,
        connection,
        abort,
        closing,
    })
}

/// This connection's abort switch, opened now: the open file stays this connection's even
/// after it ends (the kernel then ignores writes to it), while its number may be given to
/// a later mount's connection, which a switch opened by number at teardown would abort.
/// `None` where fusectl is out of reach (not root).
fn open_abort_switch(id: u32) -> Option<std::fs::File> {
    ensure_fusectl_mounted();
    let path = format!("/sys/fs/fuse/connections/{id}/abort");
    match std::fs::OpenOptions::new().write(true).open(&path) {
        Ok(f) => Some(f),
        Err(e) => {
            info!("no abort switch for this mount ({path}: {e}); teardown can only unmount it");
            None
        }
    }
}

/// Mounts `backend` and serves it on the calling thread (plus `threads - 1` more) until the
/// filesystem is unmounted from outside (`umount`, `fusermount3 -u`, `hipfs umount`).
///
/// A daemon that wants to leave cleanly on SIGTERM calls [`unmount_path`] on the mount point
/// from its signal-handling thread; this function then returns `Ok(())`.
pub fn mount_foreground(backend: Arc<dyn Backend>, config: MountConfig) -> Result<(), FuseError> {
    let (session, _closing) = new_session(backend, &config)?;
    session.run().map_err(|source| FuseError::Session {
        mountpoint: config.mountpoint.clone(),
        source,
    })
}

/// The device number of the mount at `mountpoint`, from the mount table rather than `stat`
/// (which would need the session to answer). The FUSE connection's directory under
/// `/sys/fs/fuse/connections` is named after the kernel's dev_t, `major << 20 | minor`.
fn mount_device(mountpoint: &Path) -> Option<(u32, u32)> {
    let entries = read_mountinfo().ok()?;
    let m = entries.iter().rev().find(|m| m.mount_point == mountpoint)?;
    Some((m.major, m.minor))
}

/// The kernel offers FUSE only its default readahead (128 KiB) at INIT, so page-cache reads
/// would reach the backend in 128 KiB requests however large `max_readahead` is; the mount's
/// backing device takes a larger window through sysfs (root only; otherwise the default
/// stays, logged).
fn raise_readahead(major: u32, minor: u32, bytes: u32) {
    let path = format!("/sys/class/bdi/{major}:{minor}/read_ahead_kb");
    if let Err(e) = std::fs::write(&path, format!("{}", bytes / 1024)) {
        info!("readahead stays at the kernel default: cannot write {path}: {e}");
    }
}

/// Drops entries and attributes the kernel cached (FUSE's notify calls). Errors are ignored:
/// `ENOENT` only means the kernel held nothing under that name or number.
#[derive(Clone)]
pub struct Invalidator {
    notifier: fuser::Notifier,
}

impl std::fmt::Debug for Invalidator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Invalidator")
    }
}

impl Invalidator {
    /// Forgets the name `name` in directory `parent` (positive or negative entry).
    pub fn entry(&self, parent: crate::Ino, name: &std::ffi::OsStr) {
        let _ = self.notifier.inval_entry(fuser::INodeNo(parent), name);
    }

    /// Forgets the attributes of `ino` and, with `data`, its cached pages (for a directory:
    /// its cached listing).
    pub fn inode(&self, ino: crate::Ino, data: bool) {
        let _ = self
            .notifier
            .inval_inode(fuser::INodeNo(ino), if data { 0 } else { -1 }, 0);
    }
}

/// A live mount served in the background. Unmounts when dropped.
#[derive(Debug)]
pub struct MountHandle {
    session: Option<BackgroundSession>,
    mountpoint: PathBuf,
    connection: Option<u32>,
    /// The connection's abort switch, opened at mount (see `open_abort_switch`).
    abort: Option<std::fs::File>,
    /// Set first thing in teardown, so requests a backend keeps retrying
    /// (hard mounts) end and the session threads can stop.
    closing: Arc<AtomicBool>,
}

impl MountHandle {
    /// The mount point, absolute.
    pub fn mountpoint(&self) -> &Path {
        &self.mountpoint
    }

    /// Tells this mount's kernel to drop what it cached, for a backend that learns of changes
    /// made elsewhere. Calls made through it may block while a request on the same directory
    /// or inode is in progress, so make them from a thread of their own, never from a
    /// backend method.
    pub fn invalidator(&self) -> Option<Invalidator> {
        self.session.as_ref().map(|s| Invalidator {
            notifier: s.notifier(),
        })
    }

    /// Whether this mount's FUSE session has ended: the kernel ended the connection (an
    /// unmount from outside, an abort). Unlike looking at the mount table by path, this
    /// is about this mount only, whatever is mounted at the same place now.
    pub fn session_ended(&self) -> bool {
        self.session.as_ref().is_none_or(|s| s.guard.is_finished())
    }

    /// Unmounts and waits for the session threads to end.
    pub fn unmount(mut self) -> Result<(), FuseError> {
        self.shutdown()
    }

    /// Whether the mount on top at the mount point is this one (by its device number): an
    /// unmount by path must never take away a mount someone made there since.
    fn ours_on_top(&self) -> bool {
        let Some(id) = self.connection else {
            return true;
        };
        mount_device(&self.mountpoint).is_none_or(|(major, minor)| (major << 20) | minor == id)
    }

    fn shutdown(&mut self) -> Result<(), FuseError> {
        let Some(session) = self.session.take() else {
            return Ok(());
        };
        self.closing.store(true, Ordering::SeqCst);
        if session.guard.is_finished() {
            // The kernel ended this session (unmounted from outside): nothing of ours is
            // left to unmount, and whatever is mounted there now is someone else's.
            return session.join().map_err(|source| FuseError::Session {
                mountpoint: self.mountpoint.clone(),
                source,
            });
        }
        let unmounted = if self.ours_on_top() {
            unmount_path(&self.mountpoint)
        } else {
            Err(io::Error::other(
                "another mount now covers the mount point; not unmounting by path",
            ))
        };
        if let Err(e) = &unmounted {
            warn!(
                "unmount {}: {e}; aborting the connection",
                self.mountpoint.display()
            );
            self.abort_connection();
        }
        if !wait_finished(&session, TEARDOWN_GRACE) {
            warn!(
                "FUSE session on {} still busy after {:?}; aborting the connection",
                self.mountpoint.display(),
                TEARDOWN_GRACE
            );
            // Through the switch opened at mount: a no-op if the connection already ended,
            // never another mount's.
            self.abort_connection();
            if !wait_finished(&session, TEARDOWN_GRACE) {
                // Dropping the handle detaches the threads: better a leaked thread than a hang.
                return Err(FuseError::Session {
                    mountpoint: self.mountpoint.clone(),
                    source: io::Error::new(
                        io::ErrorKind::TimedOut,
                        "session threads did not stop after the connection was aborted",
                    ),
                });
            }
        }
        let joined = session.join().map_err(|source| FuseError::Session {
            mountpoint: self.mountpoint.clone(),
            source,
        });
        unmounted.map_err(|source| FuseError::Unmount {
            mountpoint: self.mountpoint.clone(),
            source,
        })?;
        joined
    }

    fn abort_connection(&self) {
        use std::io::Write;
        let Some(mut f) = self.abort.as_ref() else {
            warn!(
                "cannot abort the FUSE connection of {}: no abort switch",
                self.mountpoint.display()
            );
            return;
        };
        if let Err(e) = f.write_all(b"1") {
            warn!(
                "cannot abort the FUSE connection of {}: {e}",
                self.mountpoint.display()
            );
        }
    }
}

impl Drop for MountHandle {
    fn drop(&mut self) {
        if let Err(e) = self.shutdown() {
            warn!("{e}");
        }
    }
}

/// The abort switch lives in the fusectl filesystem, which minimal systems (containers, no
/// systemd) do not mount; mount it the way systemd would at boot. Needs root; failures only
/// mean the abort is unavailable and are logged by the caller's write attempt.
fn ensure_fusectl_mounted() {
    const DIR: &str = "/sys/fs/fuse/connections";
    match read_mountinfo() {
        Ok(entries) if entries.iter().any(|m| m.fs_type == "fusectl") => return,
        Ok(_) => {}
        Err(_) => return,
    }
    let (Ok(src), Ok(dir), Ok(fstype)) = (
        CString::new("fusectl"),
        CString::new(DIR),
        CString::new("fusectl"),
    ) else {
        return;
    };
    if let Err(e) = hipfs_sys::fs::mount(&src, &dir, &fstype, 0, None) {
        warn!("cannot mount fusectl on {DIR}: {e}");
    }
}

fn wait_finished(session: &BackgroundSession, grace: Duration) -> bool {
    let deadline = Instant::now() + grace;
    while !session.guard.is_finished() {
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    true
}

/// Unmounts `path`: plainly, lazily if it is busy (open files keep the connection alive but
/// the name is freed at once), through fusermount3 when not privileged. Not being mounted
/// (any more) is success.
pub fn unmount_path(path: &Path) -> io::Result<()> {
    let c = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "mountpoint contains NUL"))?;
    let Err(err) = hipfs_sys::fs::umount2(&c, 0) else {
        return Ok(());
    };
    match err.raw_os_error() {
        Some(libc::EINVAL) | Some(libc::ENOENT) => Ok(()),
        Some(libc::EBUSY) => hipfs_sys::fs::umount2(&c, libc::MNT_DETACH),
        Some(libc::EPERM) => {
            let status = Command::new("fusermount3")
                .arg("-u")
                .arg("-z")
                .arg(path)
                .status()?;
            if status.success() {
                Ok(())
            } else {
                Err(io::Error::new(
                    io::ErrorKind::PermissionDenied,
                    format!("fusermount3 -u {} failed: {status}", path.display()),
                ))
            }
        }
        _ => Err(err),
    }
}
