//! POSIX conformance cases pjdfstest found through a real mount on loopback:
//! device nodes, paths deeper than PATH_MAX below the export root, a
//! non-owner's write to a setuid file, other users on a root mount, and the
//! mount process's lifetime.

use std::fs;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::remote_common::{cpath, Fixture};
use crate::serve::hipfs_bin;

fn mknod(p: &Path, mode: u32, dev: libc::dev_t) -> std::io::Result<()> {
    let c = cpath(p);
    // SAFETY: a NUL-terminated path, plain integers.
    if unsafe { libc::mknod(c.as_ptr(), mode, dev) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// `sh -c script` as `uid` (nobody's group; std drops root's supplementary groups).
fn sh_as(uid: u32, dir: &Path, script: &str) -> std::process::Output {
    let mut c = Command::new("sh");
    c.arg("-c").arg(script).current_dir(dir);
    if uid != 0 {
        c.uid(uid).gid(65534);
    }
    c.output().unwrap()
}

/// The super options (last field) of the mount at `p`.
fn mount_options(p: &Path) -> String {
    let p = p.canonicalize().unwrap();
    let table = fs::read_to_string("/proc/self/mountinfo").unwrap();
    table
        .lines()
        .rfind(|l| l.split(' ').nth(4) == Some(p.to_str().unwrap()))
        .and_then(|l| l.rsplit(' ').next().map(str::to_string))
        .unwrap_or_else(|| panic!("{} not in the mount table", p.display()))
}

#[test]
#[cfg_attr(
    not(hipfs_fuse),
    ignore = "needs FUSE: root and /dev/fuse (HIPFS_REQUIRE_FUSE=1 makes a missing one a failure)"
)]
fn root_makes_device_nodes_unless_the_export_says_no_devices() {
    require_fuse!();
    let f = Fixture::new();
    let dev = libc::makedev(1, 3);
    mknod(&f.m("chr"), libc::S_IFCHR | 0o644, dev).unwrap();
    mknod(&f.m("blk"), libc::S_IFBLK | 0o600, libc::makedev(7, 200)).unwrap();
    for (p, q) in [(f.m("chr"), f.e("chr")), (f.m("blk"), f.e("blk"))] {
        let (a, b) = (
            fs::symlink_metadata(&p).unwrap(),
            fs::symlink_metadata(&q).unwrap(),
        );
        assert_eq!(
            (a.mode(), a.rdev()),
            (b.mode(), b.rdev()),
            "{}",
            p.display()
        );
    }
    assert!(fs::symlink_metadata(f.e("chr"))
        .unwrap()
        .file_type()
        .is_char_device());
    assert_eq!(fs::symlink_metadata(f.e("chr")).unwrap().rdev(), dev);
    // Only root: anyone else is refused by the server's kernel, as locally.
    fs::set_permissions(f.m(""), fs::Permissions::from_mode(0o777)).unwrap();
    let out = sh_as(65534, &f.m(""), "mknod c2 c 1 3");
    assert!(!out.status.success());
    assert!(!f.e("c2").exists());
    drop(f);

    let f = Fixture::with(|c| c.allow_devices = false, "");
    assert_eq!(
        mknod(&f.m("chr"), libc::S_IFCHR | 0o644, dev)
            .unwrap_err()
            .raw_os_error(),
        Some(libc::EPERM)
    );
    // FIFOs stay allowed.
    mknod(&f.m("fifo"), libc::S_IFIFO | 0o644, 0).unwrap();
    assert!(fs::symlink_metadata(f.e("fifo"))
        .unwrap()
        .file_type()
        .is_fifo());
}

#[test]
#[cfg_attr(
    not(hipfs_fuse),
    ignore = "needs FUSE: root and /dev/fuse (HIPFS_REQUIRE_FUSE=1 makes a missing one a failure)"
)]
fn paths_deeper_than_path_max_below_the_export_root_work_from_a_working_directory() {
    require_fuse!();
    let f = Fixture::new();
    // 30 levels of 200-byte names: 6 KiB below the root, each step relative
    // to the shell's working directory (as the kernel limits it).
    let script =
        "n=$(printf '%0200d' 0); for i in $(seq 30); do mkdir $n && cd -P $n || exit 1; done; \
                  echo deep > f && ln -s f l && mv f g && cat g && ls";
    let out = sh_as(0, &f.m(""), script);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(text, "deep\ng\nl\n");
    // The export holds the same tree.
    let check = "n=$(printf '%0200d' 0); for i in $(seq 30); do cd -P $n || exit 1; done; cat g";
    let out = sh_as(0, &f.e(""), check);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "deep\n");
    // A relative path of nearly PATH_MAX from deep inside still resolves:
    // 19 more levels of 200 bytes plus a name, 3,8xx bytes at once.
    let script = "n=$(printf '%0200d' 0); for i in $(seq 30); do cd -P $n || exit 1; done; \
                  p=.; for i in $(seq 19); do p=$p/$n; done; mkdir -p $p && echo x > $p/z && cat $p/z";
    let out = sh_as(0, &f.m(""), script);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "x\n",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
#[cfg_attr(
    not(hipfs_fuse),
    ignore = "needs FUSE: root and /dev/fuse (HIPFS_REQUIRE_FUSE=1 makes a missing one a failure)"
)]
fn a_non_owners_write_to_a_setuid_file_is_written_and_clears_the_bits() {
    require_fuse!();
    let f = Fixture::new();
    fs::set_permissions(f.m(""), fs::Permissions::from_mode(0o777)).unwrap();
    for (name, mode) in [("u", 0o4777), ("g", 0o2777), ("ug", 0o6777)] {
        fs::write(f.m(name), b"old").unwrap();
        fs::set_permissions(f.m(name), fs::Permissions::from_mode(mode)).unwrap();
        assert_eq!(fs::metadata(f.e(name)).unwrap().mode() & 0o7777, mode);
        let out = sh_as(65534, &f.m(""), &format!("printf new >> {name}"));
        assert!(
            out.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(fs::read(f.e(name)).unwrap(), b"oldnew", "{name}");
        assert_eq!(
            fs::metadata(f.e(name)).unwrap().mode() & 0o7777,
            0o777,
            "{name} on the export"
        );
        assert_eq!(
            fs::metadata(f.m(name)).unwrap().mode() & 0o7777,
            0o777,
            "{name} through the mount"
        );
    }
    // Root keeps them, as locally (CAP_FSETID).
    fs::write(f.m("r"), b"").unwrap();
    fs::set_permissions(f.m("r"), fs::Permissions::from_mode(0o4755)).unwrap();
    fs::write(f.m("r"), b"root").unwrap();
    assert_eq!(fs::metadata(f.e("r")).unwrap().mode() & 0o7777, 0o4755);
}

#[test]
#[cfg_attr(
    not(hipfs_fuse),
    ignore = "needs FUSE: root and /dev/fuse (HIPFS_REQUIRE_FUSE=1 makes a missing one a failure)"
)]
fn a_root_mount_lets_other_users_in_like_nfs_and_private_keeps_them_out() {
    require_fuse!();
    let f = Fixture::new();
    fs::write(f.m("open"), b"for all").unwrap();
    fs::write(f.m("closed"), b"root only").unwrap();
    fs::set_permissions(f.m("closed"), fs::Permissions::from_mode(0o600)).unwrap();
    assert!(mount_options(f.mnt.path()).contains("allow_other"));
    let out = sh_as(65534, f.mnt.path(), "cat open; cat closed");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "for all");
    assert!(String::from_utf8_lossy(&out.stderr).contains("Permission denied"));
    drop(f);

    let f = Fixture::with(|_| {}, "private");
    fs::write(f.m("open"), b"for all").unwrap();
    let opts = mount_options(f.mnt.path());
    assert!(!opts.contains("allow_other"), "{opts}");
    let out = sh_as(
        65534,
        Path::new("/"),
        &format!("cat {}", f.m("open").display()),
    );
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("Permission denied"));
}

fn mount_process(dir: &Path, mnt: &Path) -> Child {
    let child = Command::new(hipfs_bin())
        .args(["mount", "--local", "-f"])
        .arg(dir)
        .arg(mnt)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let t = Instant::now();
    while !hipfs_fusefs::is_mounted(mnt).unwrap() {
        assert!(t.elapsed() < Duration::from_secs(10), "mount never came up");
        std::thread::sleep(Duration::from_millis(20));
    }
    child
}

fn exits_within(child: &mut Child, d: Duration) -> bool {
    let t = Instant::now();
    while t.elapsed() < d {
        if child.try_wait().unwrap().is_some() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

fn umount(p: &Path, flags: i32) {
    let c = cpath(p);
    // SAFETY: a NUL-terminated path.
    assert_eq!(
        unsafe { libc::umount2(c.as_ptr(), flags) },
        0,
        "umount {}",
        p.display()
    );
}

#[test]
#[cfg_attr(
    not(hipfs_fuse),
    ignore = "needs FUSE: root and /dev/fuse (HIPFS_REQUIRE_FUSE=1 makes a missing one a failure)"
)]
fn the_mount_process_ends_with_its_own_session_and_leaves_a_new_mount_alone() {
    require_fuse!();
    let a = tempfile::tempdir().unwrap();
    let b = tempfile::tempdir().unwrap();
    fs::write(a.path().join("which"), b"a").unwrap();
    fs::write(b.path().join("which"), b"b").unwrap();
    let top = tempfile::tempdir().unwrap();
    let mnt = top.path().join("m");
    fs::create_dir(&mnt).unwrap();

    // Unmounted and at once mounted again at the same place: the first
    // process ends, and its end does not take the second mount with it.
    let mut first = mount_process(a.path(), &mnt);
    umount(&mnt, 0);
    let mut second = mount_process(b.path(), &mnt);
    assert!(
        exits_within(&mut first, Duration::from_secs(5)),
        "the first mount process outlived its session"
    );
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(fs::read(mnt.join("which")).unwrap(), b"b");
    assert!(second.try_wait().unwrap().is_none());

    // Unmounted lazily and the mount point's parent removed: it still ends.
    umount(&mnt, libc::MNT_DETACH);
    fs::remove_dir_all(top.path()).unwrap();
    assert!(
        exits_within(&mut second, Duration::from_secs(5)),
        "the mount process outlived its session after its mount point went away"
    );
}
