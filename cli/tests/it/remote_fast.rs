//! What makes POSIX tools fast on a mount without making them wrong:
//! ACLs kept by the kernel (and dropped when a change names the file),
//! security-module labels not carried, each tested against a real server.

use std::fs;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::remote_common::{settled, Fixture};

const ACL_ACCESS: &str = "system.posix_acl_access";

/// An access ACL in the kernel's xattr format: owner rw, user `uid` with
/// `perm`, group r, mask r(w), other r.
fn acl_for(uid: u32, perm: u16) -> Vec<u8> {
    let mut v = 2u32.to_le_bytes().to_vec();
    for (tag, perm, id) in [
        (0x01u16, 6u16, u32::MAX),
        (0x02, perm, uid),
        (0x04, 4, u32::MAX),
        (0x10, perm | 4, u32::MAX),
        (0x20, 4, u32::MAX),
    ] {
        v.extend_from_slice(&tag.to_le_bytes());
        v.extend_from_slice(&perm.to_le_bytes());
        v.extend_from_slice(&id.to_le_bytes());
    }
    v
}

fn get_xattr(p: &Path, name: &str) -> Result<Vec<u8>, i32> {
    let mut buf = vec![0u8; 4096];
    let n = rustix::fs::getxattr(p, name, &mut buf[..]).map_err(|e| e.raw_os_error())?;
    buf.truncate(n);
    Ok(buf)
}

fn set_xattr(p: &Path, name: &str, value: &[u8]) -> Result<(), i32> {
    rustix::fs::setxattr(p, name, value, rustix::fs::XattrFlags::empty())
        .map_err(|e| e.raw_os_error())
}

fn list_xattrs(p: &Path) -> Vec<String> {
    let mut buf = vec![0u8; 4096];
    let n = rustix::fs::listxattr(p, &mut buf[..]).unwrap_or_else(|e| panic!("listxattr: {e}"));
    buf[..n]
        .split(|&b| b == 0)
        .filter(|s| !s.is_empty())
        .map(|s| String::from_utf8_lossy(s).into_owned())
        .collect()
}

#[test]
#[cfg_attr(
    not(hipfs_fuse),
    ignore = "needs FUSE: root and /dev/fuse (HIPFS_REQUIRE_FUSE=1 makes a missing one a failure)"
)]
fn acls_are_read_once_then_kept_by_the_kernel_until_a_change_names_the_file() {
    require_fuse!();
    let f = Fixture::new();
    fs::write(f.e("f"), b"x").unwrap();
    set_xattr(&f.e("f"), ACL_ACCESS, &acl_for(65534, 4)).unwrap();
    let first = get_xattr(&f.m("f"), ACL_ACCESS).unwrap();
    assert_eq!(first, acl_for(65534, 4));
    // The notices of the export's own write and setxattr land in their own
    // time and drop the copy: read until one read asks the server nothing.
    let settle = Instant::now() + Duration::from_secs(10);
    loop {
        std::thread::sleep(Duration::from_millis(50));
        let before = f.requests();
        assert_eq!(get_xattr(&f.m("f"), ACL_ACCESS).unwrap(), first);
        if f.requests() == before {
            break;
        }
        assert!(Instant::now() < settle, "the ACL was never kept");
    }
    let before = f.requests();
    for _ in 0..20 {
        assert_eq!(get_xattr(&f.m("f"), ACL_ACCESS).unwrap(), first);
    }
    // Without the kernel's cache each of the 20 reads is a request.
    let asked = f.requests() - before;
    assert!(asked <= 2, "{asked} requests for 20 reads of a cached ACL");

    // Changed on the export: the notice drops the kernel's copy.
    set_xattr(&f.e("f"), ACL_ACCESS, &acl_for(65534, 6)).unwrap();
    let t = Instant::now();
    while get_xattr(&f.m("f"), ACL_ACCESS).unwrap() != acl_for(65534, 6) {
        assert!(t.elapsed() < Duration::from_secs(5), "stale ACL after 5 s");
        std::thread::sleep(Duration::from_millis(10));
    }

    // Set through the mount: on the export at once, and seen at once.
    set_xattr(&f.m("f"), ACL_ACCESS, &acl_for(4242, 4)).unwrap();
    assert_eq!(get_xattr(&f.e("f"), ACL_ACCESS).unwrap(), acl_for(4242, 4));
    assert_eq!(get_xattr(&f.m("f"), ACL_ACCESS).unwrap(), acl_for(4242, 4));

    // A file without one: "no such attribute", also kept.
    fs::write(f.e("plain"), b"x").unwrap();
    assert_eq!(get_xattr(&f.m("plain"), ACL_ACCESS), Err(libc::ENODATA));
}

#[test]
#[cfg_attr(
    not(hipfs_fuse),
    ignore = "needs FUSE: root and /dev/fuse (HIPFS_REQUIRE_FUSE=1 makes a missing one a failure)"
)]
fn security_module_labels_are_not_carried_and_other_attributes_are() {
    require_fuse!();
    let f = Fixture::new();
    fs::write(f.e("f"), b"x").unwrap();
    set_xattr(&f.e("f"), "security.selinux", b"system_u:object_r:etc_t:s0").unwrap();
    set_xattr(&f.e("f"), "user.k", b"v").unwrap();
    assert_eq!(
        get_xattr(&f.m("f"), "security.selinux"),
        Err(libc::EOPNOTSUPP)
    );
    assert_eq!(
        set_xattr(&f.m("f"), "security.selinux", b"x"),
        Err(libc::EOPNOTSUPP)
    );
    let names = list_xattrs(&f.m("f"));
    assert!(names.contains(&"user.k".to_string()), "{names:?}");
    assert!(!names.iter().any(|n| n == "security.selinux"), "{names:?}");
    assert_eq!(get_xattr(&f.m("f"), "user.k").unwrap(), b"v");
    // The export's label is untouched.
    assert_eq!(
        get_xattr(&f.e("f"), "security.selinux").unwrap(),
        b"system_u:object_r:etc_t:s0"
    );
}

#[test]
#[cfg_attr(
    not(hipfs_fuse),
    ignore = "needs FUSE: root and /dev/fuse (HIPFS_REQUIRE_FUSE=1 makes a missing one a failure)"
)]
fn small_files_come_with_their_open_and_reads_after_a_change_see_it() {
    require_fuse!();
    let f = Fixture::new();
    for i in 0..20 {
        fs::write(f.e(&format!("s{i}")), format!("small {i}\n")).unwrap();
    }
    let big = vec![7u8; 200 * 1024];
    fs::write(f.e("big"), &big).unwrap();
    // Names and attributes first, so that only opens and reads are counted:
    // until a pass over them asks the server nothing (the notices of the
    // writes above arrive in their own time and drop cached entries).
    let settle = Instant::now() + Duration::from_secs(10);
    loop {
        let before = f.requests();
        for i in 0..20 {
            fs::metadata(f.m(&format!("s{i}"))).unwrap();
        }
        if f.requests() == before {
            break;
        }
        assert!(Instant::now() < settle, "the names never stayed cached");
        std::thread::sleep(Duration::from_millis(50));
    }
    let before = f.requests();
    for i in 0..20 {
        assert_eq!(
            fs::read(f.m(&format!("s{i}"))).unwrap(),
            format!("small {i}\n").as_bytes()
        );
    }
    // One open each (releases are posted, not counted); a read of its own
    // would make two.
    let asked = f.requests() - before;
    assert!(asked <= 25, "{asked} requests to read 20 small files");
    assert_eq!(
        fs::read(f.m("big")).unwrap(),
        big,
        "large files read as before"
    );

    // A handle opened before a change reads the change: written through
    // the mount by another descriptor...
    use std::io::{Read, Seek, SeekFrom, Write};
    fs::write(f.e("w"), b"before").unwrap();
    let mut r = fs::File::open(f.m("w")).unwrap();
    let mut w = fs::OpenOptions::new().write(true).open(f.m("w")).unwrap();
    w.write_all(b"AFTER!").unwrap();
    let mut got = String::new();
    r.read_to_string(&mut got).unwrap();
    assert_eq!(got, "AFTER!");
    // ...or on the export itself (seen once the notice is in).
    fs::write(f.e("x"), b"old").unwrap();
    let mut r = fs::File::open(f.m("x")).unwrap();
    fs::write(f.e("x"), b"new contents").unwrap();
    let t = Instant::now();
    loop {
        let mut got = String::new();
        r.seek(SeekFrom::Start(0)).unwrap();
        r.read_to_string(&mut got).unwrap();
        if got == "new contents" {
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(5), "stale: {got:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
#[cfg_attr(
    not(hipfs_fuse),
    ignore = "needs FUSE: root and /dev/fuse (HIPFS_REQUIRE_FUSE=1 makes a missing one a failure)"
)]
fn missing_names_in_a_directory_made_here_cost_no_round_trip_and_others_names_appear() {
    require_fuse!();
    let f = Fixture::new();
    fs::create_dir(f.m("new")).unwrap();
    // The notice of the mkdir itself may arrive during a pass (its moment
    // is the server's; seen later than 200 ms on a loaded host) and make
    // the mount ask again: a pass after it asks at most twice. Each pass
    // looks up names of its own (the kernel remembers the missing ones).
    let mut asked = Vec::new();
    for pass in 0..5 {
        std::thread::sleep(Duration::from_millis(200));
        let before = f.requests();
        for i in 0..20 {
            assert!(!f.m(&format!("new/m{pass}-{i}")).exists());
        }
        asked.push(f.requests() - before);
        if asked[pass] <= 2 {
            break;
        }
    }
    assert!(
        asked.last().is_some_and(|&n| n <= 2),
        "requests for 20 missing names, pass by pass: {asked:?}"
    );

    // Made here: found (and its contents read back).
    fs::write(f.m("new/mine"), b"1").unwrap();
    assert_eq!(fs::read(f.m("new/mine")).unwrap(), b"1");
    // Made on the export: the notice makes the mount ask again.
    fs::write(f.e("new/theirs"), b"2").unwrap();
    let t = Instant::now();
    while !f.m("new/theirs").exists() {
        assert!(t.elapsed() < Duration::from_secs(5), "never appeared");
        std::thread::sleep(Duration::from_millis(10));
    }
    // A directory replaced on the export behind the mount's back is not
    // taken for the one made here.
    fs::create_dir(f.m("gone")).unwrap();
    std::thread::sleep(Duration::from_millis(100));
    fs::remove_dir(f.e("gone")).unwrap();
    fs::create_dir(f.e("gone")).unwrap();
    fs::write(f.e("gone/inside"), b"3").unwrap();
    let t = Instant::now();
    while fs::read(f.m("gone/inside")).ok().as_deref() != Some(&b"3"[..]) {
        assert!(t.elapsed() < Duration::from_secs(5), "new directory unseen");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Names and inode numbers of `dir` as `readdir` gives them (no dots).
fn listing(dir: &Path) -> std::collections::BTreeMap<String, u64> {
    use std::os::unix::fs::DirEntryExt;
    fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (e.file_name().to_string_lossy().into_owned(), e.ino())
        })
        .collect()
}

#[test]
#[cfg_attr(
    not(hipfs_fuse),
    ignore = "needs FUSE: root and /dev/fuse (HIPFS_REQUIRE_FUSE=1 makes a missing one a failure)"
)]
fn a_directory_of_several_server_batches_lists_every_name_once_even_while_names_go() {
    use std::os::unix::fs::MetadataExt;
    require_fuse!();
    let f = Fixture::new();
    // More than one server batch (1,024 names), each statted by two threads.
    let n = 2_600;
    fs::create_dir(f.e("big")).unwrap();
    for i in 0..n {
        fs::write(f.e(&format!("big/f{i:05}")), b"").unwrap();
    }
    let seen = listing(&f.m("big"));
    assert_eq!(seen, listing(&f.e("big")), "mount and export list alike");
    for (name, ino) in seen.iter().step_by(97) {
        assert_eq!(
            fs::symlink_metadata(f.m(&format!("big/{name}")))
                .unwrap()
                .ino(),
            *ino
        );
    }
    // Names removed on the export while the mount lists: every name the
    // listing gives was there at some point, none twice, and every name
    // that was never removed is there (a short batch must not end it).
    let remover = {
        let dir = f.e("big");
        std::thread::spawn(move || {
            for i in (0..n).step_by(3) {
                let _ = fs::remove_file(dir.join(format!("f{i:05}")));
            }
        })
    };
    let mut names = Vec::new();
    for e in fs::read_dir(f.m("big")).unwrap() {
        names.push(e.unwrap().file_name().to_string_lossy().into_owned());
    }
    remover.join().unwrap();
    let unique: std::collections::BTreeSet<_> = names.iter().cloned().collect();
    assert_eq!(unique.len(), names.len(), "a name listed twice");
    for i in (0..n).filter(|i| i % 3 != 0) {
        assert!(unique.contains(&format!("f{i:05}")), "f{i:05} missing");
    }
}

#[test]
#[cfg_attr(
    not(hipfs_fuse),
    ignore = "needs FUSE: root and /dev/fuse (HIPFS_REQUIRE_FUSE=1 makes a missing one a failure)"
)]
fn a_walk_down_the_tree_finds_listings_fetched_ahead_and_never_one_older_than_a_notice() {
    require_fuse!();
    let f = Fixture::new();
    fs::create_dir(f.e("top")).unwrap();
    for d in 0..8 {
        fs::create_dir(f.e(&format!("top/s{d}"))).unwrap();
        for i in 0..20 {
            fs::write(f.e(&format!("top/s{d}/f{i}")), b"").unwrap();
        }
    }
    // A listing nobody goes down from fetches nothing ahead.
    settled(&f, || {
        listing(&f.m("top"));
    });
    let before = f.requests();
    assert_eq!(listing(&f.m("top/s5")).len(), 20);
    assert!(
        f.requests() > before,
        "s5 was fetched with no walk under way"
    );
    // Going down into s5 was a walk: the other subdirectories come ahead.
    settled(&f, || {});
    let before = f.requests();
    for d in (0..8).filter(|d| *d != 5) {
        assert_eq!(listing(&f.m(&format!("top/s{d}"))).len(), 20, "s{d}");
    }
    assert_eq!(f.requests(), before, "the walk's listings were not ready");
    // Fetched ahead again (changes drop the kernel's copies of the top's
    // and s0's listings), then the export changes: once the mount has the
    // notice, the listing fetched before it must not be served.
    fs::write(f.e("top/x"), b"").unwrap();
    fs::write(f.e("top/s0/y"), b"").unwrap();
    settled(&f, || {
        listing(&f.m("top"));
        listing(&f.m("top/s0"));
    });
    fs::write(f.e("top/s3/new"), b"").unwrap();
    std::thread::sleep(Duration::from_secs(1));
    assert!(
        listing(&f.m("top/s3")).contains_key("new"),
        "a listing fetched before a change was served after its notice"
    );
}

#[test]
#[cfg_attr(
    not(hipfs_fuse),
    ignore = "needs FUSE: root and /dev/fuse (HIPFS_REQUIRE_FUSE=1 makes a missing one a failure)"
)]
fn a_directory_of_small_files_read_one_after_another_is_fetched_ahead_and_stays_coherent() {
    require_fuse!();
    let f = Fixture::new();
    fs::create_dir(f.e("small")).unwrap();
    let n = 200;
    let body = |i: usize, v: &str| format!("file {i} {v}\n").repeat(1 + i % 7);
    for i in 0..n {
        fs::write(f.e(&format!("small/s{i:03}")), body(i, "one")).unwrap();
    }
    settled(&f, || {
        listing(&f.m("small"));
    });
    // The first few opens go to the server; then the rest are fetched
    // ahead and opened without it.
    let before = f.requests();
    for i in 0..n {
        let got = fs::read_to_string(f.m(&format!("small/s{i:03}"))).unwrap();
        assert_eq!(got, body(i, "one"), "s{i:03}");
    }
    let used = f.requests() - before;
    assert!(
        used < n as u64 / 4,
        "{used} server requests to read {n} small files"
    );
    // Another directory: four reads start the fetch, then a file changes
    // on the export; once the mount has the notice, the copy fetched
    // before it must not be read.
    fs::create_dir(f.e("other")).unwrap();
    for i in 0..50 {
        fs::write(f.e(&format!("other/s{i:03}")), body(i, "one")).unwrap();
    }
    settled(&f, || {
        listing(&f.m("other"));
    });
    for i in 0..4 {
        fs::read_to_string(f.m(&format!("other/s{i:03}"))).unwrap();
    }
    settled(&f, || {});
    fs::write(f.e("other/s040"), body(40, "two")).unwrap();
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(
        fs::read_to_string(f.m("other/s040")).unwrap(),
        body(40, "two"),
        "a copy fetched before a change was read after its notice"
    );
    assert_eq!(
        fs::read_to_string(f.m("other/s041")).unwrap(),
        body(41, "one")
    );
    // A file opened from a copy still has everything a handle has.
    let file = fs::File::open(f.m("small/s151")).unwrap();
    assert_eq!(
        file.metadata().unwrap().len(),
        body(151, "one").len() as u64
    );
    drop(file);
}

/// (mtime, ctime, nlink, size) of a directory: what the kernel's look at it
/// after a create must get right.
fn dir_state(p: &Path) -> (i64, i64, u64, u64) {
    use std::os::unix::fs::MetadataExt;
    let m = fs::metadata(p).unwrap();
    (
        m.mtime() * 1_000_000_000 + m.mtime_nsec(),
        m.ctime() * 1_000_000_000 + m.ctime_nsec(),
        m.nlink(),
        m.size(),
    )
}

#[test]
#[cfg_attr(
    not(hipfs_fuse),
    ignore = "needs FUSE: root and /dev/fuse (HIPFS_REQUIRE_FUSE=1 makes a missing one a failure)"
)]
fn a_directory_looked_at_after_each_create_costs_no_round_trip_and_stays_true() {
    require_fuse!();
    // The notices of the mount's own creates (which drop what is kept, as
    // any notice naming the directory does) wait a second on the server,
    // so that the count below does not depend on how fast this machine is.
    const GATHER: Duration = Duration::from_secs(1);
    let f = Fixture::with(|c| c.notice_gather = GATHER, "");
    let settle = || std::thread::sleep(GATHER + Duration::from_millis(300));
    fs::create_dir(f.m("made")).unwrap();
    settle();
    // Files and directories made through the mount, the directory looked at
    // after each (as the kernel does before the next lookup in it): its
    // attributes come with the create's reply, not from another request.
    const N: u64 = 40;
    let before = f.requests();
    for i in 0..N {
        if i % 4 == 0 {
            fs::create_dir(f.m(&format!("made/d{i}"))).unwrap();
        } else {
            drop(
                fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .open(f.m(&format!("made/f{i}")))
                    .unwrap(),
            );
        }
        assert_eq!(
            dir_state(&f.m("made")),
            dir_state(&f.e("made")),
            "after entry {i}"
        );
    }
    let asked = f.requests() - before;
    // A create or mkdir each (releases go unanswered, uncounted); asking
    // for the directory's attributes too would be N more (86 in all when
    // checked without).
    assert!(
        asked <= N + 2,
        "{asked} requests for {N} entries each followed by a look at the directory"
    );
    // Removals and renames through the mount: still the export's truth.
    fs::remove_file(f.m("made/f1")).unwrap();
    assert_eq!(dir_state(&f.m("made")), dir_state(&f.e("made")));
    fs::remove_dir(f.m("made/d0")).unwrap();
    assert_eq!(dir_state(&f.m("made")), dir_state(&f.e("made")));
    fs::create_dir(f.m("other")).unwrap();
    fs::rename(f.m("made/d4"), f.m("other/d4")).unwrap();
    assert_eq!(dir_state(&f.m("made")), dir_state(&f.e("made")));
    assert_eq!(dir_state(&f.m("other")), dir_state(&f.e("other")));
    assert_eq!(dir_state(&f.m("other/d4")), dir_state(&f.e("other/d4")));
    // The directory's own attributes changed through the mount.
    fs::set_permissions(
        f.m("made"),
        std::os::unix::fs::PermissionsExt::from_mode(0o750),
    )
    .unwrap();
    assert_eq!(dir_state(&f.m("made")), dir_state(&f.e("made")));
    // Kept again with the next create, then changed on the export behind
    // the mount's back: the notice makes the mount ask again.
    fs::write(f.m("made/before"), b"x").unwrap();
    assert_eq!(dir_state(&f.m("made")), dir_state(&f.e("made")));
    let old = std::time::SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
    fs::File::open(f.e("made"))
        .unwrap()
        .set_modified(old)
        .unwrap();
    fs::create_dir(f.e("made/theirs")).unwrap();
    let t = Instant::now();
    while dir_state(&f.m("made")) != dir_state(&f.e("made")) {
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "stale directory attributes: {:?} against {:?}",
            dir_state(&f.m("made")),
            dir_state(&f.e("made"))
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    // And the mount's next create is seen with the export's truth again.
    fs::write(f.m("made/after"), b"x").unwrap();
    assert_eq!(dir_state(&f.m("made")), dir_state(&f.e("made")));
}

#[test]
#[cfg_attr(
    not(hipfs_fuse),
    ignore = "needs FUSE: root and /dev/fuse (HIPFS_REQUIRE_FUSE=1 makes a missing one a failure)"
)]
fn a_file_made_without_o_excl_costs_no_xattr_question_unless_it_inherited_some() {
    require_fuse!();
    // The notices of the mount's own creates wait a second on the server,
    // so that none lands in the counted loop (the count would then depend
    // on how fast this machine is).
    let f = Fixture::with(|c| c.notice_gather = Duration::from_secs(1), "");
    fs::create_dir(f.e("plain")).unwrap();
    fs::create_dir(f.e("acl")).unwrap();
    set_xattr(&f.e("acl"), "system.posix_acl_default", &acl_for(65534, 4)).unwrap();
    settled(&f, || {
        fs::metadata(f.m("plain")).unwrap();
        fs::metadata(f.m("acl")).unwrap();
    });
    // As a shell's `>` or Python's open(path, "w") make files: O_CREAT and
    // O_TRUNC, no O_EXCL (so the file may have been there, with a file
    // capability the kernel checks before the first write).
    const N: u64 = 20;
    let before = f.requests();
    for i in 0..N {
        fs::write(f.m(&format!("plain/f{i}")), b"data").unwrap();
    }
    let asked = f.requests() - before;
    // A lookup (of a name not there yet), a create and a write each;
    // asking the server for the capability would be N more.
    assert!(
        asked <= 3 * N + 2,
        "{asked} requests for {N} files made and written"
    );
    for i in 0..N {
        assert_eq!(fs::read(f.e(&format!("plain/f{i}"))).unwrap(), b"data");
    }
    // A file that inherits the directory's default ACL has attributes: the
    // mount asks for them and sees the inherited ACL.
    fs::write(f.m("acl/g"), b"x").unwrap();
    let inherited = get_xattr(&f.e("acl/g"), ACL_ACCESS);
    assert!(
        inherited.is_ok(),
        "the export's file has no ACL: {inherited:?}"
    );
    assert_eq!(get_xattr(&f.m("acl/g"), ACL_ACCESS), inherited);
}

#[test]
#[cfg_attr(
    not(hipfs_fuse),
    ignore = "needs FUSE: root and /dev/fuse (HIPFS_REQUIRE_FUSE=1 makes a missing one a failure)"
)]
fn with_noacl_acls_read_as_not_supported_and_other_attributes_still_work() {
    require_fuse!();
    let f = Fixture::with(|_| {}, "noacl");
    fs::write(f.e("a"), b"x").unwrap();
    set_xattr(&f.e("a"), ACL_ACCESS, &acl_for(65534, 4)).unwrap();
    set_xattr(&f.e("a"), "user.kept", b"v").unwrap();
    let acl = get_xattr(&f.e("a"), ACL_ACCESS).unwrap();
    // The export's ACL reads as not supported (which `ls -l` remembers for
    // the whole filesystem) and cannot be set through the mount.
    assert_eq!(get_xattr(&f.m("a"), ACL_ACCESS), Err(libc::EOPNOTSUPP));
    assert_eq!(
        set_xattr(&f.m("a"), ACL_ACCESS, &acl_for(65534, 6)),
        Err(libc::EOPNOTSUPP)
    );
    assert_eq!(
        get_xattr(&f.m("."), "system.posix_acl_default"),
        Err(libc::EOPNOTSUPP)
    );
    assert_eq!(get_xattr(&f.e("a"), ACL_ACCESS), Ok(acl));
    // Other attributes: listed, read and set as ever.
    let names = list_xattrs(&f.m("a"));
    assert!(names.contains(&"user.kept".to_string()), "{names:?}");
    assert!(
        !names.iter().any(|n| n.starts_with("system.posix_acl")),
        "{names:?}"
    );
    assert_eq!(get_xattr(&f.m("a"), "user.kept"), Ok(b"v".to_vec()));
    set_xattr(&f.m("a"), "user.new", b"w").unwrap();
    assert_eq!(get_xattr(&f.e("a"), "user.new"), Ok(b"w".to_vec()));
    // `ls -l` works, showing the file.
    let out = std::process::Command::new("ls")
        .arg("-l")
        .arg(f.mnt.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stdout).contains(" a\n"));
}
