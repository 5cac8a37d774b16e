//! POSIX behaviour through a hipfs mount, compared with the same operations
//! on a local directory of the server's filesystem: every scenario records
//! what it observes (results, errnos, modes, sizes, link counts) and the two
//! records must be equal.

use std::fs;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

use crate::remote_common::{close, cpath, open_raw, outcome, Fixture};

type Scenario = fn(&Path) -> Vec<String>;

fn meta(p: &Path) -> String {
    match fs::symlink_metadata(p) {
        Ok(m) => format!(
            "mode {:o} size {} nlink {} uid {} gid {}",
            m.mode(),
            m.size(),
            m.nlink(),
            m.uid(),
            m.gid()
        ),
        Err(e) => outcome::<()>(Err(e)),
    }
}

fn open_flags(d: &Path) -> Vec<String> {
    let f = d.join("f");
    let mut o = vec![];
    o.push(outcome(open_raw(&f, libc::O_RDONLY, 0)));
    let fd = open_raw(&f, libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY, 0o644).unwrap();
    // SAFETY: writing a literal to an fd we own.
    unsafe { libc::write(fd, b"hello world".as_ptr().cast(), 11) };
    close(fd);
    o.push(outcome(open_raw(
        &f,
        libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY,
        0o644,
    )));
    o.push(outcome(open_raw(&f, libc::O_RDONLY | libc::O_DIRECTORY, 0)));
    o.push(outcome(open_raw(d, libc::O_WRONLY, 0)));
    o.push(outcome(open_raw(&f.join("x"), libc::O_RDONLY, 0)));
    let mut a = fs::OpenOptions::new().append(true).open(&f).unwrap();
    a.write_all(b"!!").unwrap();
    drop(a);
    o.push(fs::read_to_string(&f).unwrap());
    let fd = open_raw(&f, libc::O_WRONLY | libc::O_TRUNC, 0).unwrap();
    close(fd);
    o.push(meta(&f));
    std::os::unix::fs::symlink("f", d.join("l")).unwrap();
    o.push(outcome(open_raw(
        &d.join("l"),
        libc::O_RDONLY | libc::O_NOFOLLOW,
        0,
    )));
    o.push(outcome(
        open_raw(&d.join("l"), libc::O_RDONLY, 0).map(close),
    ));
    let mut rw = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&f)
        .unwrap();
    rw.write_all(b"abcdef").unwrap();
    rw.seek(SeekFrom::Start(2)).unwrap();
    let mut s = String::new();
    rw.read_to_string(&mut s).unwrap();
    o.push(s);
    o
}

fn create_modes(d: &Path) -> Vec<String> {
    let mut o = vec![];
    for (i, mode) in [0o600, 0o644, 0o755, 0o4755, 0o2750, 0o000]
        .iter()
        .enumerate()
    {
        let p = d.join(format!("f{i}"));
        fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(*mode)
            .open(&p)
            .unwrap();
        o.push(meta(&p));
    }
    for (i, mode) in [0o700, 0o755, 0o1777, 0o2775].iter().enumerate() {
        let p = d.join(format!("d{i}"));
        fs::DirBuilder::new().mode(*mode).create(&p).unwrap();
        o.push(meta(&p));
    }
    let fifo = cpath(&d.join("fifo"));
    // SAFETY: NUL-terminated path.
    o.push(format!("mkfifo {}", unsafe {
        libc::mkfifo(fifo.as_ptr(), 0o640)
    }));
    o.push(meta(&d.join("fifo")));
    o.push(format!(
        "is fifo {}",
        std::os::unix::fs::FileTypeExt::is_fifo(
            &fs::symlink_metadata(d.join("fifo")).unwrap().file_type()
        )
    ));
    o
}

fn set_attributes(d: &Path) -> Vec<String> {
    let f = d.join("f");
    fs::write(&f, vec![7u8; 5000]).unwrap();
    let mut o = vec![];
    fs::set_permissions(&f, fs::Permissions::from_mode(0o640)).unwrap();
    o.push(meta(&f));
    o.push(outcome(std::os::unix::fs::chown(
        &f,
        Some(1234),
        Some(5678),
    )));
    o.push(meta(&f));
    let file = fs::OpenOptions::new().write(true).open(&f).unwrap();
    file.set_len(100_000).unwrap();
    o.push(meta(&f));
    file.set_len(10).unwrap();
    o.push(meta(&f));
    drop(file);
    let c = cpath(&f);
    // SAFETY: NUL-terminated path.
    o.push(format!("truncate {}", unsafe {
        libc::truncate(c.as_ptr(), 3)
    }));
    o.push(format!("{:?}", fs::read(&f).unwrap()));
    let times = [
        libc::timespec {
            tv_sec: 1_000_000_000,
            tv_nsec: 123_456_789,
        },
        libc::timespec {
            tv_sec: 1_234_567_890,
            tv_nsec: 987_654_321,
        },
    ];
    // SAFETY: NUL-terminated path, two timespecs.
    o.push(format!("utimensat {}", unsafe {
        libc::utimensat(libc::AT_FDCWD, c.as_ptr(), times.as_ptr(), 0)
    }));
    let m = fs::metadata(&f).unwrap();
    o.push(format!(
        "atime {}.{} mtime {}.{}",
        m.atime(),
        m.atime_nsec(),
        m.mtime(),
        m.mtime_nsec()
    ));
    o
}

fn link_counts(d: &Path) -> Vec<String> {
    let f = d.join("f");
    fs::write(&f, b"x").unwrap();
    let mut o = vec![meta(&f)];
    fs::hard_link(&f, d.join("g")).unwrap();
    o.push(meta(&f));
    o.push(meta(&d.join("g")));
    o.push(outcome(fs::hard_link(&f, d.join("g"))));
    fs::create_dir(d.join("sub")).unwrap();
    fs::create_dir(d.join("sub/a")).unwrap();
    fs::create_dir(d.join("sub/b")).unwrap();
    o.push(meta(&d.join("sub")));
    fs::remove_file(d.join("g")).unwrap();
    o.push(meta(&f));
    o.push(outcome(fs::hard_link(d.join("sub"), d.join("sub2"))));
    o
}

fn renameat2(from: &Path, to: &Path, flags: u32) -> std::io::Result<()> {
    let (a, b) = (cpath(from), cpath(to));
    // SAFETY: NUL-terminated paths.
    let rc = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            a.as_ptr(),
            libc::AT_FDCWD,
            b.as_ptr(),
            flags,
        )
    };
    if rc < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(())
    }
}

fn renames(d: &Path) -> Vec<String> {
    let mut o = vec![];
    fs::write(d.join("a"), b"A").unwrap();
    fs::write(d.join("b"), b"B").unwrap();
    o.push(outcome(fs::rename(d.join("a"), d.join("b"))));
    o.push(fs::read_to_string(d.join("b")).unwrap());
    o.push(meta(&d.join("a")));
    fs::create_dir(d.join("d1")).unwrap();
    fs::write(d.join("d1/inner"), b"in").unwrap();
    fs::create_dir(d.join("d2")).unwrap();
    o.push(outcome(fs::rename(d.join("d1"), d.join("d2"))));
    o.push(fs::read_to_string(d.join("d2/inner")).unwrap());
    fs::create_dir(d.join("d3")).unwrap();
    o.push(outcome(fs::rename(d.join("d3"), d.join("d2"))));
    o.push(outcome(fs::rename(d.join("b"), d.join("d3"))));
    o.push(outcome(fs::rename(d.join("d3"), d.join("b"))));
    fs::write(d.join("c"), b"C").unwrap();
    o.push(outcome(renameat2(
        &d.join("c"),
        &d.join("b"),
        libc::RENAME_NOREPLACE,
    )));
    o.push(outcome(renameat2(
        &d.join("c"),
        &d.join("b"),
        libc::RENAME_EXCHANGE,
    )));
    o.push(fs::read_to_string(d.join("b")).unwrap());
    o.push(fs::read_to_string(d.join("c")).unwrap());
    o.push(outcome(fs::rename(d.join("d2"), d.join("d2/inner2"))));
    // A renamed directory keeps its contents reachable under the new name.
    o.push(outcome(fs::rename(d.join("d2"), d.join("moved"))));
    o.push(fs::read_to_string(d.join("moved/inner")).unwrap());
    o.push(meta(&d.join("d2/inner")));
    o
}

fn unlink_while_open(d: &Path) -> Vec<String> {
    let f = d.join("f");
    fs::write(&f, b"still here").unwrap();
    let mut file = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&f)
        .unwrap();
    fs::remove_file(&f).unwrap();
    let mut o = vec![meta(&f)];
    let mut s = String::new();
    file.read_to_string(&mut s).unwrap();
    o.push(s);
    file.write_all(b" and more").unwrap();
    file.seek(SeekFrom::Start(0)).unwrap();
    let mut s = String::new();
    file.read_to_string(&mut s).unwrap();
    o.push(s);
    let m = file.metadata().unwrap();
    o.push(format!("fstat nlink {} size {}", m.nlink(), m.size()));
    o
}

fn symlinks(d: &Path) -> Vec<String> {
    let mut o = vec![];
    std::os::unix::fs::symlink("b", d.join("a")).unwrap();
    std::os::unix::fs::symlink("a", d.join("b")).unwrap();
    o.push(outcome(fs::read(d.join("a"))));
    o.push(outcome(
        fs::read_link(d.join("a")).map(|p| p.display().to_string()),
    ));
    o.push(format!("{:?}", fs::read_link(d.join("a")).unwrap()));
    std::os::unix::fs::symlink("sub/target", d.join("c")).unwrap();
    fs::create_dir(d.join("sub")).unwrap();
    fs::write(d.join("sub/target"), b"t").unwrap();
    o.push(fs::read_to_string(d.join("c")).unwrap());
    o.push(meta(&d.join("c")));
    o.push(outcome(fs::create_dir(d.join("c"))));
    o
}

fn name_errors(d: &Path) -> Vec<String> {
    let mut o = vec![];
    let long = "n".repeat(256);
    o.push(outcome(fs::write(d.join(&long), b"x")));
    o.push(outcome(fs::metadata(d.join(&long))));
    o.push(outcome(fs::create_dir(d.join(&long))));
    let ok = "n".repeat(255);
    o.push(outcome(fs::write(d.join(&ok), b"x")));
    o.push(outcome(fs::metadata(d.join("missing"))));
    o.push(outcome(fs::remove_file(d.join("missing"))));
    fs::create_dir(d.join("dir")).unwrap();
    fs::write(d.join("dir/f"), b"x").unwrap();
    o.push(outcome(fs::create_dir(d.join("dir"))));
    o.push(outcome(fs::remove_dir(d.join("dir"))));
    o.push(outcome(fs::remove_dir(d.join("dir/f"))));
    o.push(outcome(fs::remove_file(d.join("dir"))));
    o.push(outcome(fs::metadata(d.join("dir/f/x"))));
    o.push(outcome(fs::write(d.join("dir/f/x"), b"x")));
    o.push(outcome(fs::write(d.join("dir"), b"x")));
    o.push(outcome(fs::read_dir(d.join("dir/f"))));
    o
}

fn listing(d: &Path) -> Vec<String> {
    for i in 0..300 {
        fs::write(d.join(format!("file-{i:04}")), format!("{i}")).unwrap();
    }
    fs::create_dir(d.join("sub")).unwrap();
    let mut names: Vec<String> = fs::read_dir(d)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            format!(
                "{} {}",
                e.file_name().to_string_lossy(),
                e.file_type().unwrap().is_dir()
            )
        })
        .collect();
    names.sort();
    names
}

fn xattrs(d: &Path) -> Vec<String> {
    let f = d.join("f");
    fs::write(&f, b"x").unwrap();
    let c = cpath(&f);
    let mut o = vec![];
    // SAFETY: NUL-terminated strings and buffers with their lengths.
    unsafe {
        o.push(format!(
            "set {}",
            libc::setxattr(
                c.as_ptr(),
                c"user.k".as_ptr(),
                b"value".as_ptr().cast(),
                5,
                0
            )
        ));
        let mut buf = [0u8; 64];
        let n = libc::getxattr(c.as_ptr(), c"user.k".as_ptr(), buf.as_mut_ptr().cast(), 64);
        o.push(format!("get {n} {:?}", &buf[..n.max(0) as usize]));
        let n = libc::getxattr(c.as_ptr(), c"user.k".as_ptr(), std::ptr::null_mut(), 0);
        o.push(format!("size {n}"));
        let n = libc::listxattr(c.as_ptr(), buf.as_mut_ptr().cast(), 64);
        let names: Vec<&[u8]> = buf[..n.max(0) as usize]
            .split(|&b| b == 0)
            .filter(|s| s.starts_with(b"user."))
            .collect();
        o.push(format!("list {names:?}"));
        o.push(format!(
            "create-again {} {}",
            libc::setxattr(
                c.as_ptr(),
                c"user.k".as_ptr(),
                b"v".as_ptr().cast(),
                1,
                libc::XATTR_CREATE
            ),
            std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
        ));
        o.push(format!(
            "remove {}",
            libc::removexattr(c.as_ptr(), c"user.k".as_ptr())
        ));
        let n = libc::getxattr(c.as_ptr(), c"user.k".as_ptr(), buf.as_mut_ptr().cast(), 64);
        o.push(format!(
            "get-removed {n} {}",
            std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
        ));
    }
    o
}

fn compare(name: &str, fx: &Fixture, s: Scenario) {
    let reference = tempfile::tempdir().unwrap();
    let local = s(reference.path());
    let dir = fx.m(name);
    fs::create_dir(&dir).unwrap();
    let remote = s(&dir);
    assert_eq!(
        remote, local,
        "scenario {name}: mount (left) differs from local (right)"
    );
}

#[test]
#[cfg_attr(
    not(hipfs_fuse),
    ignore = "needs FUSE: root and /dev/fuse (HIPFS_REQUIRE_FUSE=1 makes a missing one a failure)"
)]
fn posix_behaviour_through_the_mount_matches_the_local_filesystem() {
    require_fuse!();
    let fx = Fixture::new();
    let scenarios: &[(&str, Scenario)] = &[
        ("open_flags", open_flags),
        ("create_modes", create_modes),
        ("set_attributes", set_attributes),
        ("link_counts", link_counts),
        ("renames", renames),
        ("unlink_while_open", unlink_while_open),
        ("symlinks", symlinks),
        ("name_errors", name_errors),
        ("listing", listing),
        ("xattrs", xattrs),
    ];
    for (name, s) in scenarios {
        compare(name, &fx, *s);
    }
}

#[test]
#[cfg_attr(
    not(hipfs_fuse),
    ignore = "needs FUSE: root and /dev/fuse (HIPFS_REQUIRE_FUSE=1 makes a missing one a failure)"
)]
fn changes_through_the_mount_land_in_the_export_and_back() {
    require_fuse!();
    let fx = Fixture::new();
    fs::write(fx.m("via-mount"), b"from client").unwrap();
    assert_eq!(fs::read(fx.e("via-mount")).unwrap(), b"from client");
    fs::write(fx.e("via-server"), b"from server").unwrap();
    assert_eq!(fs::read(fx.m("via-server")).unwrap(), b"from server");
    let em = fs::metadata(fx.e("via-mount")).unwrap();
    let mm = fs::metadata(fx.m("via-mount")).unwrap();
    assert_eq!(em.ino(), mm.ino(), "inode numbers are the server's");
    assert_eq!(fs::metadata(fx.mnt.path()).unwrap().ino(), 1);
    let st = nix_statvfs(fx.mnt.path());
    let se = nix_statvfs(fx.export.path());
    assert_eq!(st, se, "statfs reports the export's filesystem");
}

fn nix_statvfs(p: &Path) -> (u64, u64) {
    let c = cpath(p);
    // SAFETY: zeroed statvfs is valid to overwrite; NUL-terminated path.
    let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `s` is writable for its size; `c` is NUL-terminated.
    assert_eq!(unsafe { libc::statvfs(c.as_ptr(), &mut s) }, 0);
    (s.f_blocks, s.f_bsize)
}

#[test]
#[cfg_attr(
    not(hipfs_fuse),
    ignore = "needs FUSE: root and /dev/fuse (HIPFS_REQUIRE_FUSE=1 makes a missing one a failure)"
)]
fn a_mounts_counters_are_readable_through_its_root_and_count_the_bytes() {
    require_fuse!();
    let fx = Fixture::with(|_| {}, "direct_io");
    fs::write(fx.e("f"), vec![3u8; 300_000]).unwrap();
    let before = hipfs_cli::remote_cmds::mount_stats(fx.mnt.path()).unwrap();
    assert!(
        before.contains("read through the mount: 0 bytes"),
        "{before}"
    );
    assert_eq!(fs::read(fx.m("f")).unwrap().len(), 300_000);
    let after = hipfs_cli::remote_cmds::mount_stats(fx.mnt.path()).unwrap();
    assert!(
        after.contains("read through the mount: 300000 bytes"),
        "{after}"
    );
    assert!(after.contains("0 failed"), "{after}");
    let not_hipfs = tempfile::tempdir().unwrap();
    assert!(hipfs_cli::remote_cmds::mount_stats(not_hipfs.path()).is_err());
}

/// Descriptors of this process (which hosts the server) open on `target`.
fn fds_on(target: &Path) -> usize {
    fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| fs::read_link(e.ok()?.path()).ok())
        .filter(|p| p == target)
        .count()
}

#[test]
#[cfg_attr(
    not(hipfs_fuse),
    ignore = "needs FUSE: root and /dev/fuse (HIPFS_REQUIRE_FUSE=1 makes a missing one a failure)"
)]
fn closing_files_releases_the_servers_descriptors() {
    require_fuse!();
    let _d = hipfs::Driver::open().unwrap();
    let fx = Fixture::new();
    fs::write(fx.e("f"), b"data").unwrap();
    let target = fx.e("f").canonicalize().unwrap();
    for _ in 0..50 {
        assert_eq!(fs::read(fx.m("f")).unwrap(), b"data");
    }
    for _ in 0..5 {
        let mut h = hipfs::FileHandle::new(
            fx.m("f"),
            libc::O_RDONLY,
            0,
            hipfs::FileHandleType::UserspaceFs,
        );
        h.open().unwrap();
        h.close();
    }
    let t = std::time::Instant::now();
    while fds_on(&target) > 0 {
        assert!(
            t.elapsed() < std::time::Duration::from_secs(5),
            "{} server descriptors still open",
            fds_on(&target)
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}
