//! The command line and the mount-scripts: `hipfs mount` daemonizing (also
//! `--local`), `hipfs umount`, `mount -t fuse.hipfs` through the helper, an
//! fstab line, and the systemd units.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::serve::hipfs_bin;
use hipfs::remote::server::{ServeConfig, Server};

fn repo() -> PathBuf {
    // This package is cli/ of the repository.
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn mounted(p: &Path) -> bool {
    hipfs_fusefs::is_mounted(p).unwrap()
}

fn wait_unmounted(p: &Path) {
    let t = Instant::now();
    while mounted(p) {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "{} still mounted",
            p.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn ok(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{cmd:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `umount PATH`, run again while it finds the mount busy: a child that
/// another test has forked but not yet exec'd holds copies of this
/// process's descriptors, possibly of a file this test just closed on the
/// mount (seen on a 2-vCPU host under load: "target is busy" right after
/// the last read).
fn umount(p: &Path) {
    let t = Instant::now();
    loop {
        let out = Command::new("umount").arg(p).output().unwrap();
        if out.status.success() {
            return;
        }
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("busy") && t.elapsed() < Duration::from_secs(10),
            "umount {}: {err}",
            p.display()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A mount point that is unmounted (lazily) when dropped, should the test
/// fail before it unmounts: a mount left behind by a failed test, with its
/// servers gone, hangs anything that later stats the entries of /tmp
/// (`getcwd`'s fallback beyond PATH_MAX does, in remote_conformance).
struct MountDir(tempfile::TempDir);

impl MountDir {
    fn new() -> MountDir {
        MountDir(tempfile::tempdir().unwrap())
    }

    fn path(&self) -> &Path {
        self.0.path()
    }
}

impl Drop for MountDir {
    fn drop(&mut self) {
        if mounted(self.path()) {
            let _ = hipfs_fusefs::unmount_path(self.path());
        }
    }
}

fn start_server(dir: &Path) -> Server {
    let mut cfg = ServeConfig::new(dir, "127.0.0.1:0");
    cfg.transport = hipfs_rdma::TransportKind::Tcp;
    Server::start(cfg).unwrap()
}

#[test]
#[cfg_attr(
    not(hipfs_fuse),
    ignore = "needs FUSE: root and /dev/fuse (HIPFS_REQUIRE_FUSE=1 makes a missing one a failure)"
)]
fn hipfs_mount_daemonizes_once_mounted_and_hipfs_umount_removes_it() {
    require_fuse!();
    let export = tempfile::tempdir().unwrap();
    let mnt = MountDir::new();
    fs::write(export.path().join("hello"), b"hi there").unwrap();
    let server = start_server(export.path());
    ok(Command::new(hipfs_bin())
        .args(["mount", server.local_addr()])
        .arg(mnt.path())
        .args(["-o", "transport=tcp,attr_timeout=0.5"]));
    assert!(mounted(mnt.path()), "mounted when the command returns");
    assert_eq!(fs::read(mnt.path().join("hello")).unwrap(), b"hi there");
    let out = Command::new(hipfs_bin())
        .args(["mount", server.local_addr()])
        .arg(mnt.path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("already a mount point"));
    ok(Command::new(hipfs_bin()).arg("umount").arg(mnt.path()));
    wait_unmounted(mnt.path());
    server.shutdown(Duration::from_secs(1));
}

#[test]
#[cfg_attr(
    not(hipfs_fuse),
    ignore = "needs FUSE: root and /dev/fuse (HIPFS_REQUIRE_FUSE=1 makes a missing one a failure)"
)]
fn hipfs_mount_reports_an_unreachable_server_and_a_bad_option_and_exits_nonzero() {
    require_fuse!();
    let mnt = MountDir::new();
    // Nothing listens on port 1.
    let port = 1;
    let out = Command::new(hipfs_bin())
        .args(["mount", &format!("127.0.0.1:{port}")])
        .arg(mnt.path())
        .args(["-o", "transport=tcp"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("mount failed"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!mounted(mnt.path()));
    let out = Command::new(hipfs_bin())
        .args(["mount", "127.0.0.1:1"])
        .arg(mnt.path())
        .args(["-o", "bogus_option"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown mount option"));
}

#[test]
#[cfg_attr(
    not(hipfs_fuse),
    ignore = "needs FUSE: root and /dev/fuse (HIPFS_REQUIRE_FUSE=1 makes a missing one a failure)"
)]
fn hipfs_mount_local_serves_a_directory_in_process() {
    require_fuse!();
    let dir = tempfile::tempdir().unwrap();
    let mnt = MountDir::new();
    fs::create_dir(dir.path().join("sub")).unwrap();
    fs::write(dir.path().join("sub/f"), b"local data").unwrap();
    ok(Command::new(hipfs_bin())
        .args(["mount", "--local"])
        .arg(dir.path())
        .arg(mnt.path()));
    let ls = ok(Command::new("ls").arg("-l").arg(mnt.path().join("sub")));
    assert!(ls.contains(" f"), "{ls}");
    assert_eq!(fs::read(mnt.path().join("sub/f")).unwrap(), b"local data");
    fs::write(mnt.path().join("new"), b"written").unwrap();
    assert_eq!(fs::read(dir.path().join("new")).unwrap(), b"written");
    umount(mnt.path());
    wait_unmounted(mnt.path());
}

/// A machine without fuse3's fusermount3 (a minimal image, the GPU machine):
/// as root the mount goes straight to mount(2) instead of failing with
/// ENOENT for a helper that `auto_unmount` would need.
#[test]
#[cfg_attr(
    not(hipfs_fuse),
    ignore = "needs FUSE: root and /dev/fuse (HIPFS_REQUIRE_FUSE=1 makes a missing one a failure)"
)]
fn hipfs_mount_works_as_root_without_any_fusermount_helper() {
    // FUSE tests run as root (hipfs_fuse), which mount(2) without a helper needs.
    require_fuse!();
    let dir = tempfile::tempdir().unwrap();
    let mnt = MountDir::new();
    fs::write(dir.path().join("f"), b"no helper").unwrap();
    let out = Command::new(hipfs_bin())
        .args(["mount", "--local"])
        .arg(dir.path())
        .arg(mnt.path())
        // The helper fuser would run is missing (as on a machine without fuse3).
        .env("FUSERMOUNT_PATH", "/nonexistent/fusermount3")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(mounted(mnt.path()));
    assert_eq!(fs::read(mnt.path().join("f")).unwrap(), b"no helper");
    ok(Command::new(hipfs_bin()).arg("umount").arg(mnt.path()));
    wait_unmounted(mnt.path());
}

/// The helper installed where mount(8) looks for it (the test fails when
/// another program sits there), and a fresh export and mount point.
fn helper_installed_and_dirs() -> (tempfile::TempDir, MountDir) {
    assert!(
        install_helper(),
        "/sbin/mount.fuse.hipfs exists and is not a hipfs checkout's helper; move it away to run this test"
    );
    (tempfile::tempdir().unwrap(), MountDir::new())
}

/// Puts the helper where mount(8) looks for it; false when another program
/// already sits there.
fn install_helper() -> bool {
    let target = repo().join("mount-scripts/mount.fuse.hipfs");
    let at = Path::new("/sbin/mount.fuse.hipfs");
    match fs::read_link(at) {
        Ok(p) if p == target => return true,
        // Another checkout's copy of the same helper: point it at this one.
        Ok(p) if p.ends_with("mount-scripts/mount.fuse.hipfs") => {
            let _ = fs::remove_file(at);
        }
        Ok(_) => return false,
        Err(_) if at.exists() => return false,
        Err(_) => {}
    }
    std::os::unix::fs::symlink(&target, at).is_ok()
}

#[test]
#[cfg_attr(
    not(hipfs_fuse),
    ignore = "needs FUSE: root and /dev/fuse (HIPFS_REQUIRE_FUSE=1 makes a missing one a failure)"
)]
fn mount_t_fuse_hipfs_and_an_fstab_line_mount_through_the_helper() {
    require_fuse!();
    let (export, mnt) = helper_installed_and_dirs();
    fs::write(export.path().join("data"), b"via mount(8)").unwrap();
    let server = start_server(export.path());
    let source = format!("{}:/", server.local_addr());
    ok(Command::new("mount")
        .env("HIPFS_BIN", hipfs_bin())
        .args(["-t", "fuse.hipfs", &source])
        .arg(mnt.path())
        .args(["-o", "ro,transport=tcp"]));
    assert!(mounted(mnt.path()));
    assert_eq!(fs::read(mnt.path().join("data")).unwrap(), b"via mount(8)");
    let e = fs::write(mnt.path().join("x"), b"x").unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EROFS));
    let table = fs::read_to_string("/proc/self/mounts").unwrap();
    assert!(
        table
            .lines()
            .any(|l| l.contains(&mnt.path().display().to_string()) && l.contains("fuse.hipfs")),
        "{table}"
    );
    umount(mnt.path());
    wait_unmounted(mnt.path());
    // The same through an fstab file.
    let fstab = tempfile::NamedTempFile::new().unwrap();
    fs::write(
        fstab.path(),
        format!(
            "# hipfs test\n{source}  {}  fuse.hipfs  rw,noauto,_netdev,transport=tcp,attr_timeout=1  0  0\n",
            mnt.path().display()
        ),
    )
    .unwrap();
    ok(Command::new("mount")
        .env("HIPFS_BIN", hipfs_bin())
        .arg("-T")
        .arg(fstab.path())
        .arg(mnt.path()));
    assert!(mounted(mnt.path()));
    fs::write(mnt.path().join("from-fstab"), b"rw").unwrap();
    assert_eq!(fs::read(export.path().join("from-fstab")).unwrap(), b"rw");
    umount(mnt.path());
    wait_unmounted(mnt.path());
    server.shutdown(Duration::from_secs(1));
}

#[test]
#[cfg_attr(
    not(hipfs_fuse),
    ignore = "needs FUSE: root and /dev/fuse (HIPFS_REQUIRE_FUSE=1 makes a missing one a failure)"
)]
fn mount_t_fuse_hipfs_takes_a_multi_server_source_and_spreads_reads() {
    require_fuse!();
    let (export, mnt) = helper_installed_and_dirs();
    let data = crate::common::pattern(3, 8 << 20);
    fs::write(export.path().join("data"), &data).unwrap();
    let servers: Vec<Server> = (0..3).map(|_| start_server(export.path())).collect();
    let list: Vec<&str> = servers.iter().map(Server::local_addr).collect();
    let source = format!("{}:/", list.join(","));
    ok(Command::new("mount")
        .env("HIPFS_BIN", hipfs_bin())
        .args(["-t", "fuse.hipfs", &source])
        .arg(mnt.path())
        .args(["-o", "ro,transport=tcp,direct_io"]));
    assert!(mounted(mnt.path()));
    assert!(fs::read(mnt.path().join("data")).unwrap() == data);
    let stats = hipfs_cli::remote_cmds::mount_stats(mnt.path()).unwrap();
    assert!(stats.contains("spread reads over 3 servers"), "{stats}");
    umount(mnt.path());
    wait_unmounted(mnt.path());
    for s in servers {
        s.shutdown(Duration::from_secs(1));
    }
}

#[test]
#[cfg_attr(
    not(hipfs_systemd_analyze),
    ignore = "needs systemd-analyze (package systemd), absent when this test was built"
)]
fn the_systemd_units_pass_systemd_analyze_verify() {
    let dir = tempfile::tempdir().unwrap();
    let env = dir.path().join("serve.env");
    fs::write(
        &env,
        "HIPFS_EXPORT=/srv\nHIPFS_LISTEN=127.0.0.1:7471\nHIPFS_ARGS=--read-only\n",
    )
    .unwrap();
    for unit in ["hipfs-serve.service", "mnt-data.mount"] {
        let text = fs::read_to_string(repo().join("mount-scripts/systemd").join(unit)).unwrap();
        // Point the unit at this build and a local settings file.
        let text = text
            .replace("/usr/local/bin/hipfs", &hipfs_bin().display().to_string())
            .replace("/etc/hipfs/serve.env", &env.display().to_string());
        fs::write(dir.path().join(unit), text).unwrap();
        let out = Command::new("systemd-analyze")
            .args(["verify", "--man=no"])
            .arg(dir.path().join(unit))
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        // Only complaints about our units count (the host's own units may
        // have unrelated issues in a container).
        let ours: Vec<&str> = err.lines().filter(|l| l.contains(unit)).collect();
        assert!(out.status.success() && ours.is_empty(), "{unit}: {err}");
    }
}

#[test]
#[cfg_attr(
    not(hipfs_fuse),
    ignore = "needs FUSE: root and /dev/fuse (HIPFS_REQUIRE_FUSE=1 makes a missing one a failure)"
)]
fn hipfs_umount_refuses_a_tmpfs_and_leaves_it_mounted() {
    require_fuse!();
    let dir = tempfile::tempdir().unwrap();
    ok(Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=1m", "hipfs-test-tmpfs"])
        .arg(dir.path()));
    fs::write(dir.path().join("keep"), b"still here").unwrap();
    let out = Command::new(hipfs_bin())
        .arg("umount")
        .arg(dir.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let still_mounted = mounted(dir.path());
    // Clean up before asserting, so a failure leaves no mount behind.
    if still_mounted {
        umount(dir.path());
    }
    assert!(!out.status.success(), "hipfs umount of a tmpfs succeeded");
    assert!(stderr.contains("not a hipfs mount"), "{stderr}");
    assert!(still_mounted, "the tmpfs was unmounted");
}

#[test]
fn hipfs_serve_on_port_zero_prints_the_bound_address_and_accepts_connections() {
    let export = tempfile::tempdir().unwrap();
    let mut server = crate::serve::spawn_server(export.path(), 0, &[]);
    assert_ne!(server.port, 0);
    std::net::TcpStream::connect(("127.0.0.1", server.port)).unwrap();
    server.kill().unwrap();
    let _ = server.wait();
}
