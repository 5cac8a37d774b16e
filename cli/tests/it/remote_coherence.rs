//! Caches that stay correct: two mounts of one export (long cache lifetimes,
//! change notices from the server) see each other's changes and changes
//! made directly on the export, each time after having cached the state
//! before it (a negative entry, a listing, attributes, pages).

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use hipfs::remote::mount::{mount_remote, LocalMount, MountOptions, NOTIFIED_TTL};

use crate::remote_common::{
    local_socket_of, raw_call, raw_handshake_as, settled, Fixture, RawCred,
};

/// A second mount of the fixture's export.
struct Second {
    mnt: tempfile::TempDir,
    mount: Option<LocalMount>,
}

impl Second {
    fn of(f: &Fixture, opts: &str) -> Second {
        let mnt = tempfile::tempdir().unwrap();
        let mut o = MountOptions::parse(opts).unwrap();
        o.transport = hipfs_rdma::TransportKind::Tcp;
        let mount = mount_remote(&f.addr, mnt.path(), &o).unwrap();
        Second {
            mnt,
            mount: Some(mount),
        }
    }

    fn m(&self, rel: &str) -> PathBuf {
        self.mnt.path().join(rel)
    }
}

impl Drop for Second {
    fn drop(&mut self) {
        if let Some(m) = self.mount.take() {
            let _ = m.unmount();
        }
    }
}

/// Waits (at most 5 s: notices arrive in milliseconds, the slack is for a
/// loaded machine) until `ok` holds; panics with `what` otherwise.
fn eventually(what: &str, ok: impl Fn() -> bool) {
    let t = Instant::now();
    while !ok() {
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "{what}: still stale after 5 s (cache lifetime {NOTIFIED_TTL:?})"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

fn exists(p: &Path) -> bool {
    fs::symlink_metadata(p).is_ok()
}

/// Runs every kind of change through `change` (a root directory where it
/// makes them: the other mount, or the export itself) and checks that
/// `seen` (the observing mount) sees each at once.
fn changes_reach(change: &Path, seen: &Path) {
    let c = |r: &str| change.join(r);
    let s = |r: &str| seen.join(r);
    // Create: a cached negative entry and a cached listing go.
    assert!(!exists(&s("new")));
    let before = names(seen);
    fs::write(c("new"), b"one").unwrap();
    eventually("create seen by name", || exists(&s("new")));
    eventually("create seen in the listing", || {
        names(seen).len() == before.len() + 1
    });
    assert_eq!(fs::read(s("new")).unwrap(), b"one");
    // Write after close: cached pages and size go.
    fs::write(c("new"), b"two, longer").unwrap();
    eventually("write seen", || {
        fs::read(s("new")).unwrap() == b"two, longer"
    });
    assert_eq!(fs::metadata(s("new")).unwrap().len(), 11);
    // Attributes.
    fs::set_permissions(c("new"), fs::Permissions::from_mode(0o640)).unwrap();
    eventually("chmod seen", || {
        fs::metadata(s("new")).is_ok_and(|m| m.mode() & 0o7777 == 0o640)
    });
    // Rename: the old name goes, the new one comes.
    fs::rename(c("new"), c("renamed")).unwrap();
    eventually("rename seen", || {
        !exists(&s("new")) && exists(&s("renamed"))
    });
    assert_eq!(fs::read(s("renamed")).unwrap(), b"two, longer");
    // A name replaced by another file.
    fs::write(c("other"), b"other file").unwrap();
    eventually("other seen", || exists(&s("other")));
    fs::rename(c("other"), c("renamed")).unwrap();
    eventually("replacement seen", || {
        // Until the rename's notice comes, the cached name may still lead
        // to the replaced file, which the server no longer has (ENOENT).
        fs::read(s("renamed")).is_ok_and(|b| b == b"other file")
    });
    // Directories: a new one, a file made in it at once, then the
    // directory renamed and a file made in it under its new name.
    fs::create_dir(c("d")).unwrap();
    fs::write(c("d/inner"), b"in").unwrap();
    eventually("file in a new directory seen", || exists(&s("d/inner")));
    assert_eq!(names(&s("d")), ["inner"]);
    fs::rename(c("d"), c("e")).unwrap();
    fs::write(c("e/later"), b"later").unwrap();
    eventually("directory rename seen", || {
        !exists(&s("d")) && exists(&s("e/later"))
    });
    // "later" was never looked up, so finding it proves only the rename's
    // notice; the listing cached under "d" goes with the create's own.
    eventually(
        "create in the renamed directory seen in its listing",
        || names(&s("e")) == ["inner", "later"],
    );
    // Delete.
    fs::remove_file(c("renamed")).unwrap();
    eventually("delete seen", || !exists(&s("renamed")));
    fs::remove_file(c("e/inner")).unwrap();
    fs::remove_file(c("e/later")).unwrap();
    fs::remove_dir(c("e")).unwrap();
    eventually("rmdir seen", || !exists(&s("e")));
    // The name and the parent's cached listing are dropped by separate
    // calls into the kernel: the listing may lag the lookup by moments.
    eventually("deletes seen in the listing", || names(seen) == before);
}

#[test]
#[cfg_attr(
    not(hipfs_fuse),
    ignore = "needs FUSE: root and /dev/fuse (HIPFS_REQUIRE_FUSE=1 makes a missing one a failure)"
)]
fn two_mounts_see_each_others_changes_at_once() {
    require_fuse!();
    let f = Fixture::new();
    let second = Second::of(&f, "");
    fs::write(f.m("warm"), b"x").unwrap();
    changes_reach(f.mnt.path(), second.mnt.path());
    changes_reach(second.mnt.path(), f.mnt.path());
    assert!(exists(&second.m("warm")));
}

#[test]
#[cfg_attr(
    not(hipfs_fuse),
    ignore = "needs FUSE: root and /dev/fuse (HIPFS_REQUIRE_FUSE=1 makes a missing one a failure)"
)]
fn changes_made_directly_on_the_export_are_seen_at_once() {
    require_fuse!();
    let f = Fixture::new();
    changes_reach(f.export.path(), f.mnt.path());
}

#[test]
#[cfg_attr(
    not(hipfs_fuse),
    ignore = "needs FUSE: root and /dev/fuse (HIPFS_REQUIRE_FUSE=1 makes a missing one a failure)"
)]
fn repeated_listings_stats_and_missing_names_are_answered_from_the_kernels_cache() {
    require_fuse!();
    let f = Fixture::new();
    for i in 0..50 {
        fs::write(f.e(&format!("f{i}")), b"x").unwrap();
    }
    let first = names(f.mnt.path());
    for i in 0..50 {
        fs::metadata(f.m(&format!("f{i}"))).unwrap();
    }
    assert!(!exists(&f.m("missing")));
    let before = f.requests();
    for _ in 0..5 {
        assert_eq!(names(f.mnt.path()), first);
        for i in 0..50 {
            fs::metadata(f.m(&format!("f{i}"))).unwrap();
        }
        assert!(!exists(&f.m("missing")));
    }
    let after = f.requests();
    // Opening the directory is the only request a cached listing costs.
    assert!(
        after - before <= 10,
        "{} requests for 5 cached listings, 250 stats and 5 missing names",
        after - before
    );
}

#[test]
#[cfg_attr(
    not(hipfs_fuse),
    ignore = "needs FUSE: root and /dev/fuse (HIPFS_REQUIRE_FUSE=1 makes a missing one a failure)"
)]
fn without_notices_a_long_lifetime_would_serve_stale_names() {
    // The control: what the notices prevent. With `nowatch` and a long
    // lifetime asked for, the mount keeps a cached answer.
    require_fuse!();
    let f = Fixture::with(|_| {}, "nowatch,attr_timeout=60,entry_timeout=60");
    fs::write(f.e("f"), b"old").unwrap();
    // Only stat: a read would mark the atime stale and refetch everything.
    assert_eq!(fs::metadata(f.m("f")).unwrap().len(), 3);
    fs::set_permissions(f.e("f"), fs::Permissions::from_mode(0o600)).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    assert_ne!(fs::metadata(f.m("f")).unwrap().mode() & 0o7777, 0o600);
    assert!(!exists(&f.m("g")));
    fs::write(f.e("g"), b"").unwrap();
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        names(f.mnt.path()),
        ["f", "g"],
        "listings are not cached without notices"
    );
}

#[test]
#[cfg_attr(
    not(hipfs_fuse),
    ignore = "needs FUSE: root and /dev/fuse (HIPFS_REQUIRE_FUSE=1 makes a missing one a failure)"
)]
fn a_working_directory_in_the_mount_survives_the_notices_of_changes_to_it() {
    // A notice about a directory that keeps its inode drops its attributes,
    // never its name: an unhashed name would make getcwd fail for every
    // process working inside (it did: prove's File::Find in pjdfstest).
    require_fuse!();
    let f = Fixture::new();
    let script = format!(
        "mkdir {m}/w && cd {m}/w && touch a && mkdir sub && chmod 750 . && \
         sleep 0.5 && /bin/pwd && ls",
        m = f.mnt.path().display()
    );
    let child = std::process::Command::new("sh")
        .arg("-c")
        .arg(&script)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Changes by someone else while it sits there.
    eventually("w made", || f.e("w").exists());
    std::thread::sleep(Duration::from_millis(100));
    fs::set_permissions(f.e("w"), fs::Permissions::from_mode(0o755)).unwrap();
    fs::write(f.e("w/b"), b"").unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let pwd = f.mnt.path().canonicalize().unwrap().join("w");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("{}\na\nb\nsub\n", pwd.display())
    );
}

#[test]
#[cfg_attr(
    not(hipfs_fuse),
    ignore = "needs FUSE: root and /dev/fuse (HIPFS_REQUIRE_FUSE=1 makes a missing one a failure)"
)]
fn a_change_to_files_alone_leaves_their_directory_cached() {
    // chmod, a write, new times: the files change, their directory's
    // entries and attributes do not, so its cached attributes and listing
    // stay (such notices used to drop them: the next look at the directory
    // asked the server again after every write in it).
    require_fuse!();
    // The server gathers a second of changes into one notice: the setup's
    // land before the caching below (a late one, on a loaded machine, made
    // the count 3), and the changes under test land together.
    const GATHER: Duration = Duration::from_secs(1);
    let f = Fixture::with(|c| c.notice_gather = GATHER, "");
    fs::create_dir(f.e("d")).unwrap();
    for i in 0..20 {
        fs::write(f.e(&format!("d/f{i}")), b"old").unwrap();
    }
    fs::create_dir(f.e("w")).unwrap();
    fs::write(f.e("w/marker"), b"").unwrap();
    std::thread::sleep(GATHER + Duration::from_millis(500));
    // Cached: the directory's attributes, its listing, the files', the
    // marker's. Until a pass asks only to open the directory.
    let look = || {
        let dir = fs::metadata(f.m("d")).unwrap();
        let listing = names(&f.m("d"));
        for i in 0..20 {
            fs::metadata(f.m(&format!("d/f{i}"))).unwrap();
        }
        fs::metadata(f.m("w/marker")).unwrap();
        (dir, listing)
    };
    let t = Instant::now();
    let (dir, listing) = loop {
        let before = f.requests();
        let seen = look();
        if f.requests() - before <= 1 {
            break seen;
        }
        assert!(t.elapsed() < Duration::from_secs(5), "never cached");
    };
    assert_eq!(listing.len(), 20);
    fs::set_permissions(f.e("d/f3"), fs::Permissions::from_mode(0o600)).unwrap();
    fs::write(f.e("d/f4"), b"new, longer").unwrap();
    fs::File::open(f.e("d/f5"))
        .unwrap()
        .set_modified(std::time::UNIX_EPOCH + Duration::from_secs(1_000_000))
        .unwrap();
    // The marker changes last, within the same gathered notice (applied in
    // one pass): once the mount sees it, it has had those of the files.
    // Waiting on the files themselves would walk through the directory
    // before the count.
    fs::set_permissions(f.e("w/marker"), fs::Permissions::from_mode(0o600)).unwrap();
    eventually("the marker's chmod seen", || {
        fs::metadata(f.m("w/marker")).unwrap().mode() & 0o7777 == 0o600
    });
    // (Listing a directory makes the kernel ask for its atime again: the
    // look at it comes first.)
    let before = f.requests();
    let again = fs::metadata(f.m("d")).unwrap();
    assert_eq!(names(&f.m("d")), listing);
    let asked = f.requests() - before;
    assert_eq!(
        (
            again.ino(),
            again.mtime(),
            again.mtime_nsec(),
            again.nlink()
        ),
        (dir.ino(), dir.mtime(), dir.mtime_nsec(), dir.nlink())
    );
    // Opening the directory is all a cached listing costs (the directory's
    // attributes asked again would be one more).
    assert!(
        asked <= 1,
        "{asked} requests for a look at and a listing of a directory none of whose entries changed"
    );
    // The files' own changes are seen.
    assert_eq!(fs::metadata(f.m("d/f3")).unwrap().mode() & 0o7777, 0o600);
    assert_eq!(fs::read(f.m("d/f4")).unwrap(), b"new, longer");
    assert_eq!(fs::metadata(f.m("d/f5")).unwrap().mtime(), 1_000_000);
    // A change to its entries still reaches the listing at once.
    fs::write(f.e("d/new"), b"").unwrap();
    eventually("create seen in the listing", || {
        names(&f.m("d")).len() == 21
    });
    fs::remove_file(f.e("d/f3")).unwrap();
    eventually("delete seen in the listing", || {
        !names(&f.m("d")).contains(&"f3".to_string())
    });
}

#[test]
fn notices_and_create_replies_take_the_form_of_the_protocol_version_each_client_speaks() {
    // No FUSE: two raw clients of one server, one speaking only version 4
    // (notices without kinds), one version 5 (which names changed only as
    // inodes, and is told when a new file has no extended attributes).
    use hipfs::remote::proto::{Op, Payload, Reply, Request, WireCred, NOTICE_ID};
    use hipfs::remote::server::{ServeConfig, Server};
    let export = tempfile::tempdir().unwrap();
    fs::write(export.path().join("a"), b"x").unwrap();
    let mut cfg = ServeConfig::new(export.path(), "127.0.0.1:0");
    cfg.transport = hipfs_rdma::TransportKind::Tcp;
    let server = Server::start(cfg).unwrap();
    let addr = server.local_addr().to_string();
    let lanes = hipfs::remote::server::transport_config(hipfs_rdma::TransportKind::Tcp).lanes;
    let watching = |version| {
        let ticket = local_socket_of(&addr);
        let c = raw_handshake_as(&addr, RawCred::Ticket(&ticket), lanes, Some(version)).unwrap();
        let op = Request {
            id: 1,
            cred: WireCred::default(),
            op: Op::Watch,
        };
        let r = raw_call(&c, &op.encode());
        assert_eq!(r.result, Ok(Payload::Empty), "watch as version {version}");
        c
    };
    let (v4, v5) = (watching(4), watching(5));
    fs::set_permissions(export.path().join("a"), fs::Permissions::from_mode(0o600)).unwrap();
    fs::write(export.path().join("b"), b"").unwrap();
    // Each client's notices until both names were in them: the payloads,
    // and each name's last `inode_only`.
    let notices = |c: &crate::remote_common::RawConn| {
        let t = Instant::now();
        let mut payloads = Vec::new();
        let mut kinds = std::collections::HashMap::new();
        while kinds.len() < 2 {
            let left = Duration::from_secs(5).saturating_sub(t.elapsed());
            assert!(
                !left.is_zero(),
                "notices of a and b not all seen: {kinds:?}"
            );
            let reply = Reply::decode(&c.recv(left).unwrap()).unwrap();
            assert_eq!(reply.id, NOTICE_ID);
            let p = reply.result.unwrap();
            let (names, _) = p.clone().into_changes().expect("a change notice");
            for n in names.into_iter().filter(|n| n.dir.is_empty()) {
                kinds.insert(String::from_utf8(n.name).unwrap(), n.inode_only);
            }
            payloads.push(p);
        }
        (payloads, kinds)
    };
    let (p4, k4) = notices(&v4);
    assert!(
        p4.iter().all(|p| matches!(p, Payload::Changed { .. })),
        "version 4 got {p4:?}"
    );
    assert!(!k4["a"]);
    assert!(!k4["b"]);
    let (p5, k5) = notices(&v5);
    assert!(
        p5.iter().all(|p| matches!(p, Payload::ChangedKinds { .. })),
        "version 5 got {p5:?}"
    );
    assert!(k5["a"], "a chmod changes only the inode");
    assert!(!k5["b"], "a create changes the directory's entries");
    // A create's reply says the new file has no extended attributes to
    // version 5 only.
    let create = |c: &crate::remote_common::RawConn, name: &str| {
        let op = Request {
            id: 2,
            cred: WireCred::default(),
            op: Op::Create {
                path: name.as_bytes().to_vec(),
                mode: 0o644,
                flags: libc::O_WRONLY | libc::O_EXCL,
            },
        };
        // Both clients watch: a notice of the other's create may come
        // before this reply.
        c.send(&op.encode()).unwrap();
        let reply = loop {
            let r = Reply::decode(&c.recv(Duration::from_secs(5)).unwrap()).unwrap();
            if r.id != NOTICE_ID {
                break r;
            }
        };
        assert_eq!(reply.id, 2, "the create's reply");
        match reply.result.unwrap().split_parent().0 {
            Payload::Created { no_xattrs, .. } => no_xattrs,
            p => panic!("a create answered {p:?}"),
        }
    };
    assert!(!create(&v4, "c4"), "told a version 4 client");
    assert!(create(&v5, "c5"), "a new file without attributes");
}

#[test]
#[cfg_attr(
    not(hipfs_fuse),
    ignore = "needs FUSE: root and /dev/fuse (HIPFS_REQUIRE_FUSE=1 makes a missing one a failure)"
)]
fn a_hard_link_made_elsewhere_updates_the_link_count_seen_under_the_known_name() {
    // inotify reports a new link only in the directory that got it; the
    // notice says which inode that name means, and the mount knows that
    // inode under its first name.
    require_fuse!();
    let f = Fixture::new();
    fs::create_dir(f.e("d1")).unwrap();
    fs::create_dir(f.e("d2")).unwrap();
    fs::write(f.e("d1/a"), b"x").unwrap();
    eventually("the file seen", || exists(&f.m("d1/a")));
    // Cached, once the notices of the write have landed (a late one would
    // make the mount ask again anyway): a look that asks nothing.
    settled(&f, || {
        assert_eq!(fs::metadata(f.m("d1/a")).unwrap().nlink(), 1);
    });
    fs::hard_link(f.e("d1/a"), f.e("d2/b")).unwrap();
    eventually("the new link count seen", || {
        fs::metadata(f.m("d1/a")).unwrap().nlink() == 2
    });
    // And through the new name, the same inode.
    assert_eq!(
        fs::metadata(f.m("d2/b")).unwrap().ino(),
        fs::metadata(f.m("d1/a")).unwrap().ino()
    );
    fs::remove_file(f.e("d2/b")).unwrap();
    eventually("the link count after the removal seen", || {
        fs::metadata(f.m("d1/a")).unwrap().nlink() == 1
    });
}
