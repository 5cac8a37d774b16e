//! Data through a hipfs mount: concurrent writers, a sparse file beyond
//! 4 GiB, many small files, cp -a / tar / fio round trips, every byte
//! compared.

use std::fs;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::Path;
use std::process::Command;

use crate::remote_common::{pattern, Fixture};

fn run(cmd: &mut Command) {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
#[cfg_attr(
    not(hipfs_fuse),
    ignore = "needs FUSE: root and /dev/fuse (HIPFS_REQUIRE_FUSE=1 makes a missing one a failure)"
)]
fn concurrent_writers_to_different_files_and_to_one_file_all_land_intact() {
    require_fuse!();
    let fx = Fixture::new();
    let shared = fs::File::create(fx.m("shared")).unwrap();
    std::thread::scope(|s| {
        for t in 0..8u64 {
            let fx = &fx;
            let shared = &shared;
            s.spawn(move || {
                let data = pattern(t, 3 << 20);
                let mut f = fs::File::create(fx.m(&format!("own-{t}"))).unwrap();
                // Uneven pieces so requests of many sizes cross the wire.
                let mut off = 0;
                let mut step = 4096 + 777 * t as usize;
                while off < data.len() {
                    let end = (off + step).min(data.len());
                    f.write_all(&data[off..end]).unwrap();
                    off = end;
                    step = (step * 3) % (1 << 20) + 1;
                }
                let region = pattern(100 + t, 1 << 20);
                shared.write_all_at(&region, t << 20).unwrap();
            });
        }
    });
    drop(shared);
    for t in 0..8u64 {
        assert_eq!(
            fs::read(fx.e(&format!("own-{t}"))).unwrap(),
            pattern(t, 3 << 20),
            "file {t} on the server"
        );
        assert_eq!(
            fs::read(fx.m(&format!("own-{t}"))).unwrap(),
            pattern(t, 3 << 20),
            "file {t} through the mount"
        );
    }
    let all = fs::read(fx.e("shared")).unwrap();
    assert_eq!(all.len(), 8 << 20);
    for t in 0..8u64 {
        let at = (t << 20) as usize;
        assert_eq!(
            &all[at..at + (1 << 20)],
            &pattern(100 + t, 1 << 20)[..],
            "region {t}"
        );
    }
}

#[test]
#[cfg_attr(
    not(hipfs_fuse),
    ignore = "needs FUSE: root and /dev/fuse (HIPFS_REQUIRE_FUSE=1 makes a missing one a failure)"
)]
fn sparse_file_beyond_4_gib_reads_back_holes_as_zeros_and_data_intact() {
    require_fuse!();
    let fx = Fixture::new();
    let off: u64 = (5 << 30) - 123;
    let data = pattern(7, (1 << 20) + 5);
    {
        let f = fs::File::create(fx.m("sparse")).unwrap();
        f.write_all_at(&data, off).unwrap();
        f.write_all_at(b"head", 0).unwrap();
    }
    let m = fs::metadata(fx.e("sparse")).unwrap();
    assert_eq!(m.len(), off + data.len() as u64);
    assert!(
        m.blocks() * 512 < 64 << 20,
        "the file stayed sparse on the server"
    );
    assert_eq!(fs::metadata(fx.m("sparse")).unwrap().len(), m.len());
    let mut f = fs::File::open(fx.m("sparse")).unwrap();
    let mut back = vec![0u8; data.len()];
    f.read_exact_at(&mut back, off).unwrap();
    assert!(back == data, "data above 4 GiB through the mount");
    let mut hole = vec![1u8; 1 << 20];
    f.read_exact_at(&mut hole, 4 << 30).unwrap();
    assert!(hole.iter().all(|&b| b == 0), "hole reads as zeros");
    let mut head = [0u8; 4];
    f.seek(SeekFrom::Start(0)).unwrap();
    f.read_exact(&mut head).unwrap();
    assert_eq!(&head, b"head");
    let mut tail = Vec::new();
    f.seek(SeekFrom::Start(m.len() - 10)).unwrap();
    f.read_to_end(&mut tail).unwrap();
    assert_eq!(tail, &data[data.len() - 10..]);
}

#[test]
#[cfg_attr(
    not(hipfs_fuse),
    ignore = "needs FUSE: root and /dev/fuse (HIPFS_REQUIRE_FUSE=1 makes a missing one a failure)"
)]
fn ten_thousand_small_files_are_all_created_listed_and_read_back() {
    require_fuse!();
    let fx = Fixture::new();
    let n = 10_000usize;
    fs::create_dir(fx.m("many")).unwrap();
    std::thread::scope(|s| {
        for t in 0..4 {
            let fx = &fx;
            s.spawn(move || {
                for i in (t..n).step_by(4) {
                    fs::write(fx.m(&format!("many/f{i:05}")), format!("content {i}\n")).unwrap();
                }
            });
        }
    });
    let mut names: Vec<String> = fs::read_dir(fx.m("many"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names.len(), n, "listing through the mount");
    assert_eq!(
        fs::read_dir(fx.e("many")).unwrap().count(),
        n,
        "files on the server"
    );
    for (i, name) in names.iter().enumerate() {
        assert_eq!(name, &format!("f{i:05}"));
    }
    for i in (0..n).step_by(7) {
        assert_eq!(
            fs::read_to_string(fx.m(&format!("many/f{i:05}"))).unwrap(),
            format!("content {i}\n")
        );
    }
}

fn make_tree(root: &Path) {
    fs::create_dir_all(root.join("a/b/c")).unwrap();
    fs::write(root.join("a/small"), b"small file").unwrap();
    fs::write(root.join("a/b/big"), pattern(3, 5 << 20)).unwrap();
    fs::write(root.join("a/b/c/empty"), b"").unwrap();
    std::os::unix::fs::symlink("../small", root.join("a/b/link")).unwrap();
    fs::hard_link(root.join("a/small"), root.join("a/b/c/hard")).unwrap();
    run(Command::new("chmod").arg("0640").arg(root.join("a/small")));
    run(Command::new("chmod").arg("0700").arg(root.join("a/b/c")));
    run(Command::new("chown")
        .arg("1234:4321")
        .arg(root.join("a/b/big")));
    run(Command::new("touch")
        .args(["-h", "-d", "2001-02-03 04:05:06"])
        .arg(root.join("a/b/link")));
    run(Command::new("touch")
        .args(["-d", "1999-12-31 23:59:59"])
        .arg(root.join("a/b/big")));
}

/// Names, types, modes, owners, sizes, mtimes and link targets of a tree.
fn listing(root: &Path) -> String {
    listing_with(root, "%T@")
}

/// The same with whole-second mtimes (what tar archives keep).
fn listing_secs(root: &Path) -> String {
    listing_with(root, "%Ts")
}

fn listing_with(root: &Path, time: &str) -> String {
    let out = Command::new("find")
        .arg(".")
        .arg("-printf")
        .arg(format!("%p %y %m %U %G %s {time} %l\n"))
        .current_dir(root)
        .output()
        .unwrap();
    assert!(out.status.success());
    let mut lines: Vec<String> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        // Directory sizes and times differ between filesystems and change as
        // entries are added; everything else must match.
        .map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            if f[1] == "d" {
                format!("{} {} {} {} {}", f[0], f[1], f[2], f[3], f[4])
            } else {
                l.to_string()
            }
        })
        .collect();
    lines.sort();
    lines.join("\n")
}

#[test]
#[cfg_attr(
    not(hipfs_fuse),
    ignore = "needs FUSE: root and /dev/fuse (HIPFS_REQUIRE_FUSE=1 makes a missing one a failure)"
)]
fn cp_archive_round_trip_through_the_mount_preserves_everything() {
    require_fuse!();
    let fx = Fixture::new();
    let src = tempfile::tempdir().unwrap();
    make_tree(src.path());
    run(Command::new("cp")
        .arg("-a")
        .arg(src.path().join("a"))
        .arg(fx.m("")));
    let back = tempfile::tempdir().unwrap();
    run(Command::new("cp").arg("-a").arg(fx.m("a")).arg(back.path()));
    run(Command::new("diff")
        .arg("-r")
        .arg(src.path())
        .arg(back.path()));
    assert_eq!(listing(&src.path().join("a")), listing(&fx.m("a")));
    assert_eq!(
        listing(&src.path().join("a")),
        listing(&back.path().join("a"))
    );
    assert_eq!(listing(&src.path().join("a")), listing(&fx.e("a")));
}

#[test]
#[cfg_attr(
    not(hipfs_fuse),
    ignore = "needs FUSE: root and /dev/fuse (HIPFS_REQUIRE_FUSE=1 makes a missing one a failure)"
)]
fn tar_round_trip_through_the_mount_is_byte_identical() {
    require_fuse!();
    let fx = Fixture::new();
    let src = tempfile::tempdir().unwrap();
    make_tree(src.path());
    run(Command::new("tar")
        .arg("-C")
        .arg(src.path())
        .arg("-cf")
        .arg(fx.m("t.tar"))
        .arg("a"));
    fs::create_dir(fx.m("x")).unwrap();
    run(Command::new("tar")
        .arg("-C")
        .arg(fx.m("x"))
        .arg("-xpf")
        .arg(fx.m("t.tar")));
    let out = tempfile::tempdir().unwrap();
    run(Command::new("sh").arg("-c").arg(format!(
        "tar -C {} -cf - a | tar -C {} -xpf -",
        fx.m("x").display(),
        out.path().display()
    )));
    run(Command::new("diff")
        .arg("-r")
        .arg(src.path())
        .arg(out.path()));
    assert_eq!(
        listing_secs(&src.path().join("a")),
        listing_secs(&fx.m("x/a"))
    );
    assert_eq!(listing(&fx.m("x/a")), listing(&out.path().join("a")));
}

#[test]
#[cfg_attr(
    not(hipfs_fuse),
    ignore = "needs FUSE: root and /dev/fuse (HIPFS_REQUIRE_FUSE=1 makes a missing one a failure)"
)]
fn fio_with_crc32c_verification_passes_through_the_mount() {
    require_fuse!();
    assert!(
        Command::new("fio").arg("--version").output().is_ok(),
        "fio is not installed (bash scripts/setup.sh test installs it)"
    );
    let fx = Fixture::new();
    for rw in ["write", "randwrite"] {
        run(Command::new("fio")
            .arg(format!("--name=v-{rw}"))
            .arg(format!("--directory={}", fx.mnt.path().display()))
            .arg(format!("--rw={rw}"))
            .args([
                "--size=24m",
                "--bs=64k",
                "--numjobs=2",
                "--verify=crc32c",
                "--do_verify=1",
                "--verify_fatal=1",
                "--ioengine=psync",
                "--verify_state_save=0",
            ]));
    }
}

/// Small writes run on the server's receiving thread, the large reads on
/// its workers (see `src/remote/server/inline.rs`).
#[test]
fn many_clients_at_once_each_see_their_own_and_each_others_files() {
    many_clients_at_once(true);
}

/// The same with every request on the workers (`hipfs serve --no-inline`).
#[test]
fn many_clients_at_once_see_their_files_with_every_request_on_the_workers() {
    many_clients_at_once(false);
}

fn many_clients_at_once(inline_requests: bool) {
    use hipfs::remote::client::{ClientConfig, RemoteClient};
    use hipfs::remote::proto::{Op, Payload, WireCred};
    use hipfs::remote::server::{ServeConfig, Server};
    let export = tempfile::tempdir().unwrap();
    let mut cfg = ServeConfig::new(export.path(), "127.0.0.1:0");
    cfg.transport = hipfs_rdma::TransportKind::Tcp;
    cfg.inline_requests = inline_requests;
    let server = Server::start(cfg).unwrap();
    let cred = WireCred::default();
    std::thread::scope(|s| {
        for c in 0..12u64 {
            let (addr, cred) = (server.local_addr().to_string(), cred.clone());
            s.spawn(move || {
                let mut cc = ClientConfig::new(&addr);
                cc.transport = hipfs_rdma::TransportKind::Tcp;
                let client = RemoteClient::connect(cc).unwrap();
                let path = format!("client-{c}").into_bytes();
                let Ok(Payload::Created { fh, .. }) = client.call(
                    &cred,
                    Op::Create {
                        path: path.clone(),
                        mode: 0o644,
                        flags: libc::O_RDWR,
                    },
                ) else {
                    panic!("create failed")
                };
                let data = pattern(c, 200_000);
                for (i, piece) in data.chunks(50_000).enumerate() {
                    let r = client.call(
                        &cred,
                        Op::Write {
                            fh,
                            offset: (i * 50_000) as u64,
                            data: piece.to_vec(),
                        },
                    );
                    assert_eq!(r, Ok(Payload::Written(piece.len() as u32)));
                }
                let Ok(Payload::Read { n, data: back }) = client.call(
                    &cred,
                    Op::Read {
                        fh,
                        offset: 0,
                        len: 200_000,
                        dest: None,
                    },
                ) else {
                    panic!("read failed")
                };
                assert_eq!(n, 200_000);
                assert!(back == data);
                client.call(&cred, Op::Release { fh }).unwrap();
            });
        }
    });
    for c in 0..12u64 {
        assert!(
            fs::read(export.path().join(format!("client-{c}"))).unwrap() == pattern(c, 200_000)
        );
    }
    server.shutdown(std::time::Duration::from_secs(1));
}
