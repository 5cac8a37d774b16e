//! OPAQUE_FD handles on a hipfs mount (what PyTorch, KvikIO and safetensors
//! loaders register) take the direct path to the server, stay coherent with
//! the mount both ways, and go through FUSE when the switch is off.

use std::fs;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::process::Command;

use crate::remote_common::{
    mount_stats, pattern, random_reads_match, read_at, stat_after, stat_before, Fixture,
    RandomReads,
};
use hipfs::{Buffer, Driver, FileHandle, FileHandleType};

fn open_opaque(path: &Path, flags: i32) -> FileHandle {
    let mut fh = FileHandle::new(path, flags, 0o644, FileHandleType::OpaqueFd);
    fh.open().unwrap();
    fh
}

fn stats(fx: &Fixture) -> String {
    mount_stats(fx.mnt.path())
}

#[test]
#[cfg_attr(
    not(hipfs_fuse),
    ignore = "needs FUSE: root and /dev/fuse (HIPFS_REQUIRE_FUSE=1 makes a missing one a failure)"
)]
fn opaque_fd_reads_at_random_offsets_go_to_the_server_and_match_the_export() {
    require_fuse!();
    let _d = Driver::open().unwrap();
    let fx = Fixture::new();
    let size = (12 << 20) + 777;
    let data = pattern(61, size);
    fs::write(fx.e("data"), &data).unwrap();
    let before = stats(&fx);
    // O_DIRECT, as GdsFile and KvikIO open their files.
    let fh = open_opaque(&fx.m("data"), libc::O_RDONLY | libc::O_DIRECT);
    let mut mem = vec![0u8; 4 << 20];
    let mut buf = Buffer::from_slice(&mut mem, 0);
    let reads = RandomReads {
        seed: 7,
        rounds: 120,
        big_every: 10,
        max: 2 << 20,
        past_end: 8192,
    };
    let moved = random_reads_match(&fh, &mut buf, &data, &reads);
    assert!(moved > 40 << 20, "the reads moved {moved} bytes");
    let after = stats(&fx);
    // The mount handed the file to the direct path once, and not one of
    // those bytes went through FUSE.
    assert_eq!(
        stat_before(&after, "opaque_fd handles") - stat_before(&before, "opaque_fd handles"),
        1,
        "{after}"
    );
    assert_eq!(
        stat_after(&after, "read through the mount:"),
        stat_after(&before, "read through the mount:"),
        "{after}"
    );
}

#[test]
#[cfg_attr(
    not(hipfs_fuse),
    ignore = "needs FUSE: root and /dev/fuse (HIPFS_REQUIRE_FUSE=1 makes a missing one a failure)"
)]
fn a_handle_opened_after_a_write_closed_through_the_mount_reads_the_new_bytes() {
    require_fuse!();
    let _d = Driver::open().unwrap();
    let fx = Fixture::new();
    fs::write(fx.e("f"), pattern(1, 1 << 20)).unwrap();
    let fresh = pattern(2, (1 << 20) + 5000);
    fs::write(fx.m("f"), &fresh).unwrap();
    let fh = open_opaque(&fx.m("f"), libc::O_RDONLY);
    assert!(read_at(&fh, 2 << 20, 0) == fresh);
}

#[test]
#[cfg_attr(
    not(hipfs_fuse),
    ignore = "needs FUSE: root and /dev/fuse (HIPFS_REQUIRE_FUSE=1 makes a missing one a failure)"
)]
fn a_direct_write_is_seen_at_once_by_readers_through_the_mount_with_its_new_size() {
    require_fuse!();
    let _d = Driver::open().unwrap();
    let fx = Fixture::new();
    let old = pattern(3, 256 << 10);
    fs::write(fx.e("w"), &old).unwrap();
    // Readers through the mount cache the old pages and size first.
    let reader = fs::File::open(fx.m("w")).unwrap();
    let mut seen = vec![0u8; old.len()];
    reader.read_exact_at(&mut seen, 0).unwrap();
    assert!(seen == old);
    assert_eq!(fs::metadata(fx.m("w")).unwrap().len(), old.len() as u64);

    let fh = open_opaque(&fx.m("w"), libc::O_RDWR);
    let mut new = pattern(4, 64 << 10);
    let buf = Buffer::from_slice(&mut new, 0);
    // Overwrites the middle and, with a second write, extends the file.
    assert_eq!(fh.write(&buf, 64 << 10, 100_000, 0).unwrap(), 64 << 10);
    assert_eq!(fh.write(&buf, 64 << 10, 300_000, 0).unwrap(), 64 << 10);
    drop(buf);
    let mut expect = old.clone();
    expect[100_000..100_000 + (64 << 10)].copy_from_slice(&new);
    expect.resize(300_000, 0);
    expect.extend_from_slice(&new);
    assert!(fs::read(fx.e("w")).unwrap() == expect, "the server file");
    assert_eq!(
        fs::metadata(fx.m("w")).unwrap().len(),
        expect.len() as u64,
        "the mount's size"
    );
    let mut again = vec![0u8; expect.len()];
    reader.read_exact_at(&mut again, 0).unwrap();
    assert!(
        again == expect,
        "an open reader's next read through the mount"
    );
    assert!(fs::read(fx.m("w")).unwrap() == expect, "a new reader");
    assert!(stat_before(&stats(&fx), "direct writes invalidated") >= 2);
}

/// Runs `child` (an ignored test below) in a fresh process with `env`:
/// the switch is process-wide and read when the driver opens. Returns its
/// output (stdout and stderr).
fn run_child(child: &str, file: &Path, env: &[(&str, &str)]) -> String {
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            child,
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("HIPFS_CHILD_FILE", file)
        .envs(env.iter().copied())
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{child}: {text}");
    assert!(text.contains("1 passed"), "{child} did not run: {text}");
    text
}

#[test]
#[cfg_attr(
    not(hipfs_fuse),
    ignore = "needs FUSE: root and /dev/fuse (HIPFS_REQUIRE_FUSE=1 makes a missing one a failure)"
)]
fn the_environment_variable_and_the_parameter_send_opaque_fd_handles_through_fuse() {
    require_fuse!();
    let fx = Fixture::new();
    let data = pattern(9, 3 << 20);
    // A file per round: the second must not find the first's cached pages.
    for (round, (env, param)) in [(Some("0"), "0"), (None, "1")].into_iter().enumerate() {
        let name = format!("off{round}");
        fs::write(fx.e(&name), &data).unwrap();
        let before = stats(&fx);
        let mut vars = vec![("HIPFS_CHILD_SET_PARAM", param)];
        if let Some(v) = env {
            vars.push(("HIPFS_OPAQUE_FD_DIRECT", v));
        }
        run_child(
            "remote_opaque_fd::child_reads_the_file_through_an_opaque_fd_handle",
            &fx.m(&name),
            &vars,
        );
        let after = stats(&fx);
        assert_eq!(
            stat_before(&after, "opaque_fd handles"),
            stat_before(&before, "opaque_fd handles"),
            "no direct binding: {after}"
        );
        assert!(
            stat_after(&after, "read through the mount:")
                >= stat_after(&before, "read through the mount:") + data.len() as u64,
            "the bytes went through FUSE: {after}"
        );
    }
}

#[test]
#[ignore = "run by the_environment_variable_and_the_parameter_send_opaque_fd_handles_through_fuse in its own process"]
fn child_reads_the_file_through_an_opaque_fd_handle() {
    let file = std::env::var_os("HIPFS_CHILD_FILE").expect("HIPFS_CHILD_FILE");
    if std::env::var("HIPFS_CHILD_SET_PARAM").as_deref() == Ok("1") {
        hipfs::set_parameter_bool(hipfs::BoolParam::HipfsOpaqueFdDirect, false).unwrap();
    }
    let _d = Driver::open().unwrap();
    let fh = open_opaque(Path::new(&file), libc::O_RDONLY);
    let got = read_at(&fh, 4 << 20, 0);
    assert!(got == pattern(9, 3 << 20));
    let remote = hipfs::stats::snapshot().remote;
    assert_eq!(remote.read_bytes, 0, "no byte came from the direct path");
}

#[test]
#[cfg_attr(
    not(hipfs_fuse),
    ignore = "needs FUSE: root and /dev/fuse (HIPFS_REQUIRE_FUSE=1 makes a missing one a failure)"
)]
fn closing_a_direct_handle_is_not_logged_as_a_lost_connection() {
    require_fuse!();
    let fx = Fixture::new();
    let data = pattern(9, 3 << 20);
    fs::write(fx.e("closing"), &data).unwrap();
    let text = run_child(
        "remote_opaque_fd::child_reads_directly_then_closes_the_handle",
        &fx.m("closing"),
        &[(
            "RUST_LOG",
            "hipfs::handle=info,hipfs::remote::client::link=debug",
        )],
    );
    assert!(
        text.contains("direct path to the server"),
        "the child's log: {text}"
    );
    // The reply reader saw its connection end (debug), and did not call it
    // lost (info): the handle's own close is not a failure.
    assert!(text.contains("closed by this client"), "{text}");
    assert!(
        !text
            .lines()
            .any(|l| l.contains("INFO") && l.contains("client::link]")),
        "{text}"
    );
}

#[test]
#[ignore = "run by closing_a_direct_handle_is_not_logged_as_a_lost_connection in its own process"]
fn child_reads_directly_then_closes_the_handle() {
    let _ = env_logger::try_init();
    let file = std::env::var_os("HIPFS_CHILD_FILE").expect("HIPFS_CHILD_FILE");
    let _d = Driver::open().unwrap();
    let fh = open_opaque(Path::new(&file), libc::O_RDONLY);
    assert!(read_at(&fh, 4 << 20, 0) == pattern(9, 3 << 20));
    assert!(hipfs::stats::snapshot().remote.read_bytes > 0);
    drop(fh);
    // The reply reader logs from its own thread once the close reaches it
    // (within microseconds; the margin is for a loaded machine).
    std::thread::sleep(std::time::Duration::from_secs(2));
}
