//! Files made through the mount hold their small writes and the owner's
//! attribute changes until they are closed (see the client's `held`
//! module): what the application sees meanwhile, what the server has after
//! the close, what other opens see, and a failure reported by the close.

use std::fs;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::time::{Duration, UNIX_EPOCH};

use crate::remote_common::*;

fn chattr(flag: &str, p: &std::path::Path) {
    let ok = std::process::Command::new("chattr")
        .arg(flag)
        .arg(p)
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "chattr {flag} {} failed", p.display());
}

#[test]
#[cfg_attr(
    not(hipfs_fuse),
    ignore = "needs FUSE: root and /dev/fuse (HIPFS_REQUIRE_FUSE=1 makes a missing one a failure)"
)]
fn a_file_made_here_reaches_the_server_whole_at_its_close_in_one_request() {
    require_fuse!();
    // Notices of the mount's own creates wait on the server, so that none
    // lands in the counted part.
    let f = Fixture::with(|c| c.notice_gather = Duration::from_secs(1), "");
    fs::create_dir(f.m("d")).unwrap();
    settled(&f, || {
        fs::metadata(f.m("d")).unwrap();
    });
    let before = f.requests();
    let mtime = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
    let mut file = fs::File::create_new(f.m("d/a")).unwrap();
    // What tar -x does to each file: write, then owner, mode and times.
    file.write_all(b"first part, ").unwrap();
    file.write_all(b"second part").unwrap();
    let md = file.metadata().unwrap();
    std::os::unix::fs::fchown(&file, Some(md.uid()), Some(md.gid())).unwrap();
    file.set_permissions(fs::Permissions::from_mode(0o640))
        .unwrap();
    file.set_modified(mtime).unwrap();
    // The application sees every change at once...
    let seen = file.metadata().unwrap();
    assert_eq!(seen.len(), 23);
    assert_eq!(seen.mode() & 0o7777, 0o640);
    assert_eq!(seen.modified().unwrap(), mtime);
    // ...and the server has none of them yet: they were held.
    let there = fs::metadata(f.e("d/a")).unwrap();
    assert_eq!(
        (there.len(), there.mode() & 0o7777 == 0o640),
        (0, false),
        "changes reached the server before the close"
    );
    drop(file);
    let asked = f.requests() - before;
    // A lookup of the new name, the create, and one request at the close
    // (the two writes and three attribute changes would be five more).
    assert!(
        asked <= 3,
        "{asked} requests to make, write and close a file"
    );
    assert_eq!(fs::read(f.e("d/a")).unwrap(), b"first part, second part");
    let there = fs::metadata(f.e("d/a")).unwrap();
    assert_eq!(there.mode() & 0o7777, 0o640);
    assert_eq!(there.modified().unwrap(), mtime);
    assert_eq!(fs::metadata(f.m("d/a")).unwrap().len(), 23);
}

#[test]
#[cfg_attr(
    not(hipfs_fuse),
    ignore = "needs FUSE: root and /dev/fuse (HIPFS_REQUIRE_FUSE=1 makes a missing one a failure)"
)]
fn another_open_of_a_file_with_held_writes_sees_them() {
    require_fuse!();
    let f = Fixture::new();
    let mut w = fs::File::create_new(f.m("b")).unwrap();
    w.write_all(b"held bytes").unwrap();
    // An open through the mount sends them first: its reads see them.
    let mut r = fs::File::open(f.m("b")).unwrap();
    let mut got = String::new();
    r.read_to_string(&mut got).unwrap();
    assert_eq!(got, "held bytes");
    assert_eq!(fs::read(f.e("b")).unwrap(), b"held bytes");
    // Writes after that are held again and still reach the server by the
    // close, after the ones sent, in order.
    w.seek(SeekFrom::Start(5)).unwrap();
    w.write_all(b"BYTES and more").unwrap();
    w.set_modified(UNIX_EPOCH + Duration::from_secs(86_400))
        .unwrap();
    drop(w);
    assert_eq!(fs::read(f.e("b")).unwrap(), b"held BYTES and more");
    assert_eq!(
        fs::metadata(f.e("b")).unwrap().modified().unwrap(),
        UNIX_EPOCH + Duration::from_secs(86_400)
    );
    // A file written past what one file may hold goes out as it is
    // written, after what it held, and is whole at the close.
    let big: Vec<u8> = (0..600_000u32).map(|i| (i * 7 % 251) as u8).collect();
    let mut w = fs::File::create_new(f.m("c")).unwrap();
    w.write_all(&big[..1000]).unwrap();
    w.write_all(&big[1000..]).unwrap();
    drop(w);
    assert_eq!(fs::read(f.e("c")).unwrap(), big);
}

#[test]
#[cfg_attr(
    not(hipfs_fuse),
    ignore = "needs FUSE: root and /dev/fuse (HIPFS_REQUIRE_FUSE=1 makes a missing one a failure)"
)]
fn held_writes_the_server_refuses_fail_the_close_and_nothing_is_claimed_written() {
    require_fuse!();
    let f = Fixture::new();
    let mut w = fs::File::create_new(f.m("locked")).unwrap();
    // The export's file becomes immutable while the mount holds writes.
    chattr("+i", &f.e("locked"));
    w.write_all(b"cannot land").unwrap();
    // close(2) is where the failure shows (std's drop ignores it).
    use std::os::fd::IntoRawFd;
    let fd = w.into_raw_fd();
    // SAFETY: fd is an open descriptor this test owns; closed once here.
    let rc = unsafe { libc::close(fd) };
    let err = std::io::Error::last_os_error().raw_os_error();
    chattr("-i", &f.e("locked"));
    assert_eq!(
        (rc, err),
        (-1, Some(libc::EPERM)),
        "close of a file whose held write failed"
    );
    assert_eq!(fs::read(f.e("locked")).unwrap(), b"");
    // Files after it are held and applied as before.
    fs::write(f.m("fine"), b"ok").unwrap();
    assert_eq!(fs::read(f.e("fine")).unwrap(), b"ok");
}

#[test]
#[cfg_attr(
    not(hipfs_fuse),
    ignore = "needs FUSE: root and /dev/fuse (HIPFS_REQUIRE_FUSE=1 makes a missing one a failure)"
)]
fn with_nohold_each_write_and_change_reaches_the_server_when_it_returns() {
    require_fuse!();
    let f = Fixture::with(|_| {}, "nohold");
    let mut file = fs::File::create_new(f.m("n")).unwrap();
    file.write_all(b"at once").unwrap();
    assert_eq!(fs::read(f.e("n")).unwrap(), b"at once");
    file.set_permissions(fs::Permissions::from_mode(0o604))
        .unwrap();
    assert_eq!(fs::metadata(f.e("n")).unwrap().mode() & 0o7777, 0o604);
}
