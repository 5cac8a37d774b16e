//! Kernel caching as configured: attribute, entry and negative timeouts, readdirplus.
//! Changes are made behind the kernel's back through the Backend API, as another client of
//! the same server would. Root only; skipped with a printed reason otherwise.

use std::fs;
use std::os::fd::AsRawFd;
use std::time::Duration;

use crate::common::{errno, mount_memfs};
use hipfs_fusefs::{is_hipfs_fd, Backend, Credentials, MemFs, SetAttr, HIPFS_FS_TYPE, ROOT_INO};

/// Resizes root-level file `name` without going through the mount.
fn resize_behind_the_kernel(fs: &MemFs, name: &str, size: u64) {
    let cred = Credentials::root();
    let e = fs.lookup(ROOT_INO, name.as_ref(), &cred).unwrap();
    let changes = SetAttr {
        size: Some(size),
        ..SetAttr::default()
    };
    fs.setattr(e.attr.ino, &changes, &cred).unwrap();
    fs.forget(e.attr.ino, 1);
}

fn create_behind_the_kernel(fs: &MemFs, name: &str) {
    let cred = Credentials::root();
    let (e, fh) = fs
        .create(ROOT_INO, name.as_ref(), 0o644, 0, libc::O_WRONLY, &cred)
        .unwrap();
    fs.release(e.attr.ino, fh, 0, &cred).unwrap();
    fs.forget(e.attr.ino, 1);
}

#[test]
#[cfg_attr(
    not(hipfs_fuse),
    ignore = "needs FUSE: root and /dev/fuse (HIPFS_REQUIRE_FUSE=1 makes a missing one a failure)"
)]
fn attributes_stay_cached_for_attr_timeout_and_are_refetched_when_it_is_zero() {
    let m = mount_memfs(MemFs::new(), |c| {
        c.attr_timeout = Duration::from_secs(60);
        c.entry_timeout = Duration::from_secs(60);
    });
    fs::write(m.path("f"), b"12345").unwrap();
    assert_eq!(fs::metadata(m.path("f")).unwrap().len(), 5);
    resize_behind_the_kernel(&m.fs, "f", 50);
    assert_eq!(fs::metadata(m.path("f")).unwrap().len(), 5, "cached size");
    drop(m);

    let m = mount_memfs(MemFs::new(), |c| {
        c.attr_timeout = Duration::ZERO;
        c.entry_timeout = Duration::ZERO;
    });
    fs::write(m.path("f"), b"12345").unwrap();
    assert_eq!(fs::metadata(m.path("f")).unwrap().len(), 5);
    resize_behind_the_kernel(&m.fs, "f", 50);
    assert_eq!(fs::metadata(m.path("f")).unwrap().len(), 50, "fresh size");
}

#[test]
#[cfg_attr(
    not(hipfs_fuse),
    ignore = "needs FUSE: root and /dev/fuse (HIPFS_REQUIRE_FUSE=1 makes a missing one a failure)"
)]
fn missing_names_are_cached_only_when_a_negative_timeout_is_set() {
    let m = mount_memfs(MemFs::new(), |c| {
        c.negative_timeout = Duration::from_secs(60)
    });
    assert_eq!(errno(fs::metadata(m.path("late"))), libc::ENOENT);
    create_behind_the_kernel(&m.fs, "late");
    assert_eq!(
        errno(fs::metadata(m.path("late"))),
        libc::ENOENT,
        "cached absence"
    );
    // Creating through the mount replaces the negative entry.
    fs::write(m.path("other"), b"").unwrap();
    assert!(fs::metadata(m.path("other")).is_ok());
    drop(m);

    let m = mount_memfs(MemFs::new(), |_| {});
    assert_eq!(errno(fs::metadata(m.path("late"))), libc::ENOENT);
    create_behind_the_kernel(&m.fs, "late");
    assert!(
        fs::metadata(m.path("late")).is_ok(),
        "absence was not cached"
    );
}

#[test]
#[cfg_attr(
    not(hipfs_fuse),
    ignore = "needs FUSE: root and /dev/fuse (HIPFS_REQUIRE_FUSE=1 makes a missing one a failure)"
)]
fn listing_returns_attributes_so_stat_of_each_entry_needs_no_lookup() {
    let m = mount_memfs(MemFs::new(), |c| {
        c.attr_timeout = Duration::from_secs(60);
        c.entry_timeout = Duration::from_secs(60);
    });
    for i in 0..50 {
        create_behind_the_kernel(&m.fs, &format!("n{i}"));
    }
    let before = m.fs.lookup_calls();
    let mut seen = 0;
    for e in fs::read_dir(m.root()).unwrap() {
        let e = e.unwrap();
        assert!(e.metadata().unwrap().is_file());
        seen += 1;
    }
    assert_eq!(seen, 50);
    assert_eq!(
        m.fs.lookup_calls(),
        before,
        "readdirplus should have supplied every entry"
    );
}

#[test]
#[cfg_attr(
    not(hipfs_fuse),
    ignore = "needs FUSE: root and /dev/fuse (HIPFS_REQUIRE_FUSE=1 makes a missing one a failure)"
)]
fn a_mount_without_auto_unmount_is_still_recognised_as_hipfs() {
    let m = mount_memfs(MemFs::new(), |c| c.auto_unmount = false);
    fs::write(m.path("f"), b"x").unwrap();
    let f = fs::File::open(m.path("f")).unwrap();
    let info = fs::read_to_string("/proc/self/mountinfo").unwrap();
    let root = m.root().canonicalize().unwrap();
    let line = info
        .lines()
        .find(|l| l.contains(&format!(" {} ", root.display())))
        .expect("mount listed");
    // Root mounting directly gets plain "fuse": the ioctl probe is what recognises it.
    assert!(line.contains(" - fuse ") || line.contains(&format!(" - {HIPFS_FS_TYPE} ")));
    assert!(is_hipfs_fd(f.as_raw_fd()).unwrap());
    drop(f);
    m.unmount();
}

#[test]
#[cfg_attr(
    not(hipfs_fuse),
    ignore = "needs FUSE: root and /dev/fuse (HIPFS_REQUIRE_FUSE=1 makes a missing one a failure)"
)]
fn closes_reach_the_backend_only_when_it_needs_flushes() {
    let close_ten = |m: &crate::common::Mounted| {
        for i in 0..10 {
            fs::write(m.path(&format!("w{i}")), b"data").unwrap();
            assert_eq!(fs::read(m.path(&format!("w{i}"))).unwrap(), b"data");
        }
    };
    let m = mount_memfs(MemFs::new(), |_| {});
    close_ten(&m);
    assert!(m.fs.flush_calls() >= 20, "{} flushes", m.fs.flush_calls());
    drop(m);

    let m = mount_memfs(MemFs::new().without_flush(), |_| {});
    close_ten(&m);
    assert_eq!(m.fs.flush_calls(), 0, "opens said FOPEN_NOFLUSH");
}
