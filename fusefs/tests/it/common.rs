//! Shared helpers for tests that mount MemFs for real.

#![allow(dead_code)]

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::Arc;

use hipfs_fusefs::{mount, MemFs, MountConfig, MountHandle};
use tempfile::TempDir;

/// Why real mounts cannot run here, if they cannot.
pub fn skip_reason() -> Option<String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some("not root: mounting FUSE needs root in these tests".into());
    }
    if !Path::new("/dev/fuse").exists() {
        return Some("/dev/fuse is absent".into());
    }
    None
}

/// A live MemFs mount in a fresh temporary directory.
pub struct Mounted {
    pub fs: Arc<MemFs>,
    pub handle: Option<MountHandle>,
    pub dir: TempDir,
}

impl Mounted {
    pub fn path(&self, rel: &str) -> std::path::PathBuf {
        self.dir.path().join(rel)
    }

    pub fn root(&self) -> &Path {
        self.dir.path()
    }

    pub fn unmount(mut self) {
        if let Some(h) = self.handle.take() {
            h.unmount().expect("unmount succeeds");
        }
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        // Unmount before TempDir removes the directory.
        self.handle.take();
    }
}

/// Fails with the reason when this machine cannot mount. The tests that call
/// it are ignored by the harness where the build found no FUSE
/// (`hipfs_fuse`), so reaching this without FUSE means HIPFS_REQUIRE_FUSE=1
/// asked for it.
pub fn require_fuse() {
    if let Some(why) = skip_reason() {
        panic!("{why}; this test is ignored without FUSE unless HIPFS_REQUIRE_FUSE=1");
    }
}

/// Mounts `fs` with the defaults changed by `tweak`.
pub fn mount_memfs(fs: MemFs, tweak: impl FnOnce(&mut MountConfig)) -> Mounted {
    require_fuse();
    let dir = tempfile::tempdir().expect("tempdir");
    let mut cfg = MountConfig::new(dir.path());
    cfg.fs_name = "memfs-test".into();
    tweak(&mut cfg);
    let fs = Arc::new(fs);
    let handle = mount(fs.clone(), cfg).expect("mount succeeds");
    Mounted {
        fs,
        handle: Some(handle),
        dir,
    }
}

pub fn cpath(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).expect("no NUL in test paths")
}

/// The errno of a failed io::Result, for assertions.
pub fn errno<T: std::fmt::Debug>(r: io::Result<T>) -> i32 {
    r.expect_err("operation should fail")
        .raw_os_error()
        .expect("an OS error")
}

pub fn last_errno() -> i32 {
    io::Error::last_os_error().raw_os_error().unwrap_or(0)
}
