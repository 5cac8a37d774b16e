//! POSIX operations through a real FUSE mount of MemFs (root only; skipped otherwise).

use std::fs;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::time::{Duration, Instant};

use crate::common::{cpath, errno, last_errno, mount_memfs};
use hipfs_fusefs::MemFs;

#[test]
#[cfg_attr(
    not(hipfs_fuse),
    ignore = "needs FUSE: root and /dev/fuse (HIPFS_REQUIRE_FUSE=1 makes a missing one a failure)"
)]
fn files_written_through_the_mount_read_back_rename_and_unlink() {
    let m = mount_memfs(MemFs::new(), |_| {});
    let a = m.path("a.txt");
    fs::write(&a, b"hello world").unwrap();
    assert_eq!(fs::read(&a).unwrap(), b"hello world");

    let mut f = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&a)
        .unwrap();
    f.seek(SeekFrom::Start(6)).unwrap();
    f.write_all(b"fuse!").unwrap();
    let mut s = String::new();
    f.seek(SeekFrom::Start(0)).unwrap();
    f.read_to_string(&mut s).unwrap();
    assert_eq!(s, "hello fuse!");
    drop(f);

    let mut ap = fs::OpenOptions::new().append(true).open(&a).unwrap();
    ap.write_all(b"!!").unwrap();
    drop(ap);
    assert_eq!(fs::read(&a).unwrap(), b"hello fuse!!!");

    let b = m.path("b.txt");
    fs::rename(&a, &b).unwrap();
    assert_eq!(errno(fs::metadata(&a)), libc::ENOENT);
    assert_eq!(fs::read(&b).unwrap(), b"hello fuse!!!");
    fs::remove_file(&b).unwrap();
    assert_eq!(errno(fs::read(&b)), libc::ENOENT);
    assert_eq!(
        errno(
            fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(m.root())
        ),
        libc::EEXIST
    );
    m.unmount();
}

#[test]
#[cfg_attr(
    not(hipfs_fuse),
    ignore = "needs FUSE: root and /dev/fuse (HIPFS_REQUIRE_FUSE=1 makes a missing one a failure)"
)]
fn a_file_unlinked_while_open_stays_readable_until_closed() {
    let m = mount_memfs(MemFs::new(), |_| {});
    let p = m.path("gone");
    fs::write(&p, b"still here").unwrap();
    let mut f = fs::File::open(&p).unwrap();
    fs::remove_file(&p).unwrap();
    let mut s = String::new();
    f.read_to_string(&mut s).unwrap();
    assert_eq!(s, "still here");
    assert_eq!(f.metadata().unwrap().nlink(), 0);
}

#[test]
#[cfg_attr(
    not(hipfs_fuse),
    ignore = "needs FUSE: root and /dev/fuse (HIPFS_REQUIRE_FUSE=1 makes a missing one a failure)"
)]
fn directories_list_their_entries_and_rmdir_refuses_nonempty_ones() {
    let m = mount_memfs(MemFs::new(), |_| {});
    let d = m.path("dir");
    fs::create_dir(&d).unwrap();
    for i in 0..300 {
        fs::write(d.join(format!("f{i:03}")), format!("{i}")).unwrap();
    }
    fs::create_dir(d.join("sub")).unwrap();
    let mut names: Vec<String> = fs::read_dir(&d)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names.len(), 301);
    assert_eq!(names[0], "f000");
    assert_eq!(names[300], "sub");
    // readdirplus attributes match what stat reports.
    for e in fs::read_dir(&d).unwrap().take(5) {
        let e = e.unwrap();
        assert_eq!(
            e.metadata().unwrap().len(),
            fs::metadata(e.path()).unwrap().len()
        );
    }
    assert_eq!(fs::metadata(&d).unwrap().nlink(), 3);
    assert_eq!(errno(fs::remove_dir(&d)), libc::ENOTEMPTY);
    assert_eq!(errno(fs::remove_file(d.join("sub"))), libc::EISDIR);
    assert_eq!(errno(fs::create_dir(&d)), libc::EEXIST);
    assert_eq!(errno(fs::read_dir(d.join("f000"))), libc::ENOTDIR);
    fs::remove_dir_all(&d).unwrap();
    assert_eq!(errno(fs::metadata(&d)), libc::ENOENT);
    let long = "x".repeat(256);
    assert_eq!(errno(fs::write(m.path(&long), b"")), libc::ENAMETOOLONG);
}

#[test]
#[cfg_attr(
    not(hipfs_fuse),
    ignore = "needs FUSE: root and /dev/fuse (HIPFS_REQUIRE_FUSE=1 makes a missing one a failure)"
)]
fn inodes_are_freed_once_unlinked_and_forgotten_by_the_kernel() {
    let m = mount_memfs(MemFs::new(), |_| {});
    let d = m.path("many");
    fs::create_dir(&d).unwrap();
    for i in 0..200 {
        fs::write(d.join(format!("file-with-a-longish-name-{i}")), b"x").unwrap();
    }
    // Several listings, each overflowing the kernel's readdir buffer, so some entries the
    // backend returned were not delivered and must have been given back.
    for _ in 0..3 {
        assert_eq!(fs::read_dir(&d).unwrap().count(), 200);
    }
    fs::remove_dir_all(&d).unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while m.fs.inode_count() != 1 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(m.fs.inode_count(), 1, "only the root should remain");
}

#[test]
#[cfg_attr(
    not(hipfs_fuse),
    ignore = "needs FUSE: root and /dev/fuse (HIPFS_REQUIRE_FUSE=1 makes a missing one a failure)"
)]
fn symlinks_and_hard_links_behave_as_posix_says() {
    let m = mount_memfs(MemFs::new(), |_| {});
    let target = m.path("target");
    fs::write(&target, b"data").unwrap();
    let sl = m.path("sl");
    std::os::unix::fs::symlink("target", &sl).unwrap();
    assert_eq!(fs::read_link(&sl).unwrap().to_str(), Some("target"));
    assert!(fs::symlink_metadata(&sl).unwrap().file_type().is_symlink());
    assert_eq!(fs::read(&sl).unwrap(), b"data");

    let loop_a = m.path("loop");
    std::os::unix::fs::symlink("loop", &loop_a).unwrap();
    assert_eq!(errno(fs::read(&loop_a)), libc::ELOOP);

    let hl = m.path("hard");
    fs::hard_link(&target, &hl).unwrap();
    assert_eq!(fs::metadata(&target).unwrap().nlink(), 2);
    assert_eq!(
        fs::metadata(&hl).unwrap().ino(),
        fs::metadata(&target).unwrap().ino()
    );
    fs::remove_file(&target).unwrap();
    assert_eq!(fs::metadata(&hl).unwrap().nlink(), 1);
    assert_eq!(fs::read(&hl).unwrap(), b"data");
    assert_eq!(
        errno(fs::hard_link(m.root(), m.path("dirlink"))),
        libc::EPERM
    );
}

#[test]
#[cfg_attr(
    not(hipfs_fuse),
    ignore = "needs FUSE: root and /dev/fuse (HIPFS_REQUIRE_FUSE=1 makes a missing one a failure)"
)]
fn chmod_chown_truncate_and_utimens_change_attributes() {
    let m = mount_memfs(MemFs::new(), |_| {});
    let p = m.path("f");
    fs::write(&p, vec![7u8; 10_000]).unwrap();
    fs::set_permissions(&p, fs::Permissions::from_mode(0o640)).unwrap();
    assert_eq!(fs::metadata(&p).unwrap().mode() & 0o7777, 0o640);

    std::os::unix::fs::chown(&p, Some(1234), Some(4321)).unwrap();
    let md = fs::metadata(&p).unwrap();
    assert_eq!((md.uid(), md.gid()), (1234, 4321));

    let f = fs::OpenOptions::new().write(true).open(&p).unwrap();
    f.set_len(100).unwrap();
    assert_eq!(fs::metadata(&p).unwrap().len(), 100);
    f.set_len(1 << 20).unwrap();
    drop(f);
    let data = fs::read(&p).unwrap();
    assert_eq!(data.len(), 1 << 20);
    assert!(data[..100].iter().all(|b| *b == 7) && data[100..].iter().all(|b| *b == 0));

    // O_TRUNC through open.
    fs::write(&p, b"short").unwrap();
    assert_eq!(fs::read(&p).unwrap(), b"short");

    let when = std::time::UNIX_EPOCH + Duration::from_secs(1_000_000_000);
    let f = fs::File::options().write(true).open(&p).unwrap();
    f.set_times(fs::FileTimes::new().set_modified(when).set_accessed(when))
        .unwrap();
    drop(f);
    let md = fs::metadata(&p).unwrap();
    assert_eq!(md.mtime(), 1_000_000_000);
    assert_eq!(md.atime(), 1_000_000_000);
}

#[test]
#[cfg_attr(
    not(hipfs_fuse),
    ignore = "needs FUSE: root and /dev/fuse (HIPFS_REQUIRE_FUSE=1 makes a missing one a failure)"
)]
fn extended_attributes_round_trip_with_create_and_replace_flags() {
    let m = mount_memfs(MemFs::new(), |_| {});
    let p = m.path("x");
    fs::write(&p, b"").unwrap();
    let cp = cpath(&p);
    let set = |name: &str, val: &[u8], flags: i32| {
        let n = std::ffi::CString::new(name).unwrap();
        // SAFETY: valid C strings and a buffer of the given length.
        unsafe {
            libc::setxattr(
                cp.as_ptr(),
                n.as_ptr(),
                val.as_ptr().cast(),
                val.len(),
                flags,
            )
        }
    };
    assert_eq!(set("user.a", b"alpha", 0), 0);
    assert_eq!(set("user.b", b"beta", libc::XATTR_CREATE), 0);
    assert_eq!(set("user.b", b"x", libc::XATTR_CREATE), -1);
    assert_eq!(last_errno(), libc::EEXIST);
    assert_eq!(set("user.c", b"x", libc::XATTR_REPLACE), -1);
    assert_eq!(last_errno(), libc::ENODATA);

    let name = std::ffi::CString::new("user.a").unwrap();
    let mut buf = [0u8; 64];
    // SAFETY: valid strings; size 0 asks only for the length.
    let len = unsafe { libc::getxattr(cp.as_ptr(), name.as_ptr(), std::ptr::null_mut(), 0) };
    assert_eq!(len, 5);
    // SAFETY: buf has 64 bytes.
    let got = unsafe { libc::getxattr(cp.as_ptr(), name.as_ptr(), buf.as_mut_ptr().cast(), 64) };
    assert_eq!(&buf[..got as usize], b"alpha");
    // SAFETY: a 2-byte buffer is too small: ERANGE expected.
    let small = unsafe { libc::getxattr(cp.as_ptr(), name.as_ptr(), buf.as_mut_ptr().cast(), 2) };
    assert_eq!((small, last_errno()), (-1, libc::ERANGE));

    // SAFETY: buf has 64 bytes.
    let n = unsafe { libc::listxattr(cp.as_ptr(), buf.as_mut_ptr().cast(), 64) };
    assert_eq!(&buf[..n as usize], b"user.a\0user.b\0");

    // SAFETY: valid strings.
    assert_eq!(unsafe { libc::removexattr(cp.as_ptr(), name.as_ptr()) }, 0);
    // SAFETY: as above.
    let gone = unsafe { libc::getxattr(cp.as_ptr(), name.as_ptr(), buf.as_mut_ptr().cast(), 64) };
    assert_eq!((gone, last_errno()), (-1, libc::ENODATA));
}

#[test]
#[cfg_attr(
    not(hipfs_fuse),
    ignore = "needs FUSE: root and /dev/fuse (HIPFS_REQUIRE_FUSE=1 makes a missing one a failure)"
)]
fn statfs_reports_the_backend_numbers() {
    let m = mount_memfs(MemFs::new(), |_| {});
    let cp = cpath(m.root());
    // SAFETY: zeroed statvfs is valid plain data.
    let mut sv: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: valid path and writable struct.
    assert_eq!(unsafe { libc::statvfs(cp.as_ptr(), &mut sv) }, 0);
    assert_eq!(sv.f_bsize, 4096);
    assert_eq!(sv.f_blocks, (64u64 << 30) / 4096);
    assert_eq!(sv.f_namemax, 255);
    assert_eq!(sv.f_files, 1 << 20);
}

#[test]
#[cfg_attr(
    not(hipfs_fuse),
    ignore = "needs FUSE: root and /dev/fuse (HIPFS_REQUIRE_FUSE=1 makes a missing one a failure)"
)]
fn fifos_are_created_with_mknod() {
    let m = mount_memfs(MemFs::new(), |_| {});
    let p = cpath(&m.path("fifo"));
    // SAFETY: valid path.
    assert_eq!(unsafe { libc::mkfifo(p.as_ptr(), 0o600) }, 0);
    let md = fs::symlink_metadata(m.path("fifo")).unwrap();
    assert!(md.file_type().is_fifo());
    assert_eq!(md.mode() & 0o777, 0o600);
}

#[test]
#[cfg_attr(
    not(hipfs_fuse),
    ignore = "needs FUSE: root and /dev/fuse (HIPFS_REQUIRE_FUSE=1 makes a missing one a failure)"
)]
fn rename_flags_noreplace_and_exchange_are_honoured() {
    let m = mount_memfs(MemFs::new(), |_| {});
    let (a, b) = (m.path("a"), m.path("b"));
    fs::write(&a, b"A").unwrap();
    fs::write(&b, b"B").unwrap();
    let (ca, cb) = (cpath(&a), cpath(&b));
    let rename2 = |flags: u32| {
        // SAFETY: valid paths relative to AT_FDCWD (they are absolute).
        unsafe {
            libc::renameat2(
                libc::AT_FDCWD,
                ca.as_ptr(),
                libc::AT_FDCWD,
                cb.as_ptr(),
                flags,
            )
        }
    };
    assert_eq!(rename2(libc::RENAME_NOREPLACE), -1);
    assert_eq!(last_errno(), libc::EEXIST);
    assert_eq!(rename2(libc::RENAME_EXCHANGE), 0);
    assert_eq!(fs::read(&a).unwrap(), b"B");
    assert_eq!(fs::read(&b).unwrap(), b"A");

    // Plain rename over an existing file replaces it; a directory cannot go below itself.
    fs::rename(&a, &b).unwrap();
    assert_eq!(fs::read(&b).unwrap(), b"B");
    fs::create_dir(m.path("d")).unwrap();
    fs::create_dir(m.path("d/e")).unwrap();
    assert_eq!(
        errno(fs::rename(m.path("d"), m.path("d/e/f"))),
        libc::EINVAL
    );
    assert_eq!(errno(fs::rename(m.path("b"), m.path("d"))), libc::EISDIR);
    fs::rename(m.path("d/e"), m.path("e")).unwrap();
    assert_eq!(fs::metadata(m.path("d")).unwrap().nlink(), 2);
    assert_eq!(fs::metadata(m.root()).unwrap().nlink(), 4);
}
