//! A misbehaving backend cannot break the mount: panics become EIO, errnos pass through
//! unchanged, over-long replies are refused. Root only; skipped with a printed reason
//! otherwise.

use std::ffi::{OsStr, OsString};
use std::fs;
use std::path::Path;
use std::sync::Arc;

use crate::common;
use crate::common::{errno, require_fuse};
use hipfs_fusefs::{
    mount, Attr, Backend, Credentials, DirEntryPlus, Entry, Errno, Ino, MemFs, MountConfig, Result,
    SetAttr, StatFs,
};

/// MemFs, except: looking up `panic` panics, reading xattr `user.timeout` fails with
/// ETIMEDOUT (as a network client would after its deadline), and reads of a file named
/// `overlong` return one byte more than asked.
struct Faulty {
    inner: MemFs,
}

type C = Credentials;

impl Backend for Faulty {
    fn lookup(&self, parent: Ino, name: &OsStr, c: &C) -> Result<Entry> {
        if name == "panic" {
            panic!("backend bug while looking up {name:?}");
        }
        self.inner.lookup(parent, name, c)
    }
    fn forget(&self, ino: Ino, n: u64) {
        self.inner.forget(ino, n)
    }
    fn getattr(&self, ino: Ino, fh: Option<u64>, c: &C) -> Result<Attr> {
        self.inner.getattr(ino, fh, c)
    }
    fn setattr(&self, ino: Ino, ch: &SetAttr, c: &C) -> Result<Attr> {
        self.inner.setattr(ino, ch, c)
    }
    fn readdir(&self, ino: Ino, fh: u64, off: u64, c: &C) -> Result<Vec<DirEntryPlus>> {
        self.inner.readdir(ino, fh, off, c)
    }
    fn open(&self, ino: Ino, flags: i32, c: &C) -> Result<u64> {
        self.inner.open(ino, flags, c)
    }
    fn create(
        &self,
        p: Ino,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        c: &C,
    ) -> Result<(Entry, u64)> {
        self.inner.create(p, name, mode, umask, flags, c)
    }
    fn read(&self, ino: Ino, fh: u64, off: u64, size: u32, c: &C) -> Result<Vec<u8>> {
        let mut data = self.inner.read(ino, fh, off, size, c)?;
        if self
            .inner
            .identify(ino, fh, hipfs_fusefs::IdentifyPurpose::UserspaceFs)
            .is_some()
            && self
                .inner
                .getxattr(ino, "user.overlong".as_ref(), c)
                .is_ok()
        {
            data.resize(size as usize + 1, b'!');
        }
        Ok(data)
    }
    fn write(&self, ino: Ino, fh: u64, off: u64, data: &[u8], c: &C) -> Result<usize> {
        self.inner.write(ino, fh, off, data, c)
    }
    fn fsync(&self, ino: Ino, fh: u64, datasync: bool, c: &C) -> Result<()> {
        self.inner.fsync(ino, fh, datasync, c)
    }
    fn release(&self, ino: Ino, fh: u64, flags: i32, c: &C) -> Result<()> {
        self.inner.release(ino, fh, flags, c)
    }
    fn mkdir(&self, p: Ino, name: &OsStr, mode: u32, umask: u32, c: &C) -> Result<Entry> {
        self.inner.mkdir(p, name, mode, umask, c)
    }
    fn rmdir(&self, p: Ino, name: &OsStr, c: &C) -> Result<()> {
        self.inner.rmdir(p, name, c)
    }
    fn unlink(&self, p: Ino, name: &OsStr, c: &C) -> Result<()> {
        self.inner.unlink(p, name, c)
    }
    fn rename(&self, p: Ino, n: &OsStr, np: Ino, nn: &OsStr, flags: u32, c: &C) -> Result<()> {
        self.inner.rename(p, n, np, nn, flags, c)
    }
    fn symlink(&self, p: Ino, name: &OsStr, target: &Path, c: &C) -> Result<Entry> {
        self.inner.symlink(p, name, target, c)
    }
    fn readlink(&self, ino: Ino, c: &C) -> Result<OsString> {
        self.inner.readlink(ino, c)
    }
    fn link(&self, ino: Ino, np: Ino, nn: &OsStr, c: &C) -> Result<Entry> {
        self.inner.link(ino, np, nn, c)
    }
    fn mknod(&self, p: Ino, n: &OsStr, mode: u32, umask: u32, rdev: u32, c: &C) -> Result<Entry> {
        self.inner.mknod(p, n, mode, umask, rdev, c)
    }
    fn statfs(&self, ino: Ino, c: &C) -> Result<StatFs> {
        self.inner.statfs(ino, c)
    }
    fn getxattr(&self, ino: Ino, name: &OsStr, c: &C) -> Result<Vec<u8>> {
        if name == "user.timeout" {
            return Err(Errno::ETIMEDOUT);
        }
        self.inner.getxattr(ino, name, c)
    }
    fn listxattr(&self, ino: Ino, c: &C) -> Result<Vec<OsString>> {
        self.inner.listxattr(ino, c)
    }
    fn setxattr(&self, ino: Ino, name: &OsStr, v: &[u8], flags: i32, c: &C) -> Result<()> {
        self.inner.setxattr(ino, name, v, flags, c)
    }
    fn removexattr(&self, ino: Ino, name: &OsStr, c: &C) -> Result<()> {
        self.inner.removexattr(ino, name, c)
    }
}

#[test]
#[cfg_attr(
    not(hipfs_fuse),
    ignore = "needs FUSE: root and /dev/fuse (HIPFS_REQUIRE_FUSE=1 makes a missing one a failure)"
)]
fn backend_panics_become_eio_and_the_mount_keeps_serving() {
    require_fuse();
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = MountConfig::new(dir.path());
    // One thread: if the panic had killed it, nothing below could be answered.
    cfg.threads = 1;
    let h = mount(
        Arc::new(Faulty {
            inner: MemFs::new(),
        }),
        cfg,
    )
    .unwrap();
    for _ in 0..3 {
        assert_eq!(errno(fs::metadata(dir.path().join("panic"))), libc::EIO);
    }
    fs::write(dir.path().join("fine"), b"ok").unwrap();
    assert_eq!(fs::read(dir.path().join("fine")).unwrap(), b"ok");
    h.unmount().unwrap();
}

#[test]
#[cfg_attr(
    not(hipfs_fuse),
    ignore = "needs FUSE: root and /dev/fuse (HIPFS_REQUIRE_FUSE=1 makes a missing one a failure)"
)]
fn backend_errnos_reach_the_caller_unchanged_and_overlong_reads_are_refused() {
    require_fuse();
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = MountConfig::new(dir.path());
    cfg.direct_io = true;
    let h = mount(
        Arc::new(Faulty {
            inner: MemFs::new(),
        }),
        cfg,
    )
    .unwrap();
    let p = dir.path().join("f");
    fs::write(&p, b"0123456789").unwrap();
    let cp = common::cpath(&p);
    let name = std::ffi::CString::new("user.timeout").unwrap();
    let mut buf = [0u8; 16];
    // SAFETY: valid strings and a 16-byte buffer.
    let rc = unsafe { libc::getxattr(cp.as_ptr(), name.as_ptr(), buf.as_mut_ptr().cast(), 16) };
    assert_eq!((rc, common::last_errno()), (-1, libc::ETIMEDOUT));

    let flag = std::ffi::CString::new("user.overlong").unwrap();
    // SAFETY: valid strings, empty value.
    let rc = unsafe { libc::setxattr(cp.as_ptr(), flag.as_ptr(), buf.as_ptr().cast(), 0, 0) };
    assert_eq!(rc, 0);
    assert_eq!(errno(fs::read(&p)), libc::EIO);
    h.unmount().unwrap();
}
