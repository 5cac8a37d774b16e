//! Multi-server mounts (`hipfs mount s1,s2,s3:/ MNT`): real `hipfs serve`
//! processes over one shared directory, a real FUSE mount of them all;
//! reads spread over every server, servers killed, frozen and restarted
//! under reads, servers of another namespace refused.

use std::fs;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::remote_common::{open_us, pattern, read_at};
use crate::serve::{spawn_server, ServerProcess};
use hipfs::remote::mount::{mount_remote, LocalMount, MountOptions};

const TCP: &[&str] = &["--transport", "tcp"];

fn opts(s: &str) -> MountOptions {
    let mut o = MountOptions::parse(s).unwrap();
    o.transport = hipfs_rdma::TransportKind::Tcp;
    o
}

fn signal(server: &ServerProcess, sig: i32) {
    // SAFETY: signalling our own child process by its pid.
    unsafe { libc::kill(server.id() as i32, sig) };
}

fn kill9(server: &mut ServerProcess) {
    signal(server, libc::SIGKILL);
    let _ = server.wait();
}

fn servers(dir: &Path, n: usize, extra: &[&str]) -> Vec<ServerProcess> {
    let args: Vec<&str> = TCP.iter().chain(extra).copied().collect();
    (0..n).map(|_| spawn_server(dir, 0, &args)).collect()
}

fn source(servers: &[ServerProcess]) -> String {
    servers
        .iter()
        .map(|s| format!("127.0.0.1:{}", s.port))
        .collect::<Vec<_>>()
        .join(",")
}

/// The mount's counters (`hipfs stats MNT`).
fn stats(mnt: &Path) -> String {
    hipfs_cli::remote_cmds::mount_stats(mnt).unwrap()
}

/// Bytes the spread line of `port` says that server delivered.
fn delivered(stats: &str, port: u16) -> u64 {
    let line = stats
        .lines()
        .find(|l| l.contains(&format!("server 127.0.0.1:{port}: ")) && l.contains("extents"))
        .unwrap_or_else(|| panic!("no spread line for port {port} in {stats}"));
    let at = line.find(" bytes in ").unwrap();
    line[..at]
        .rsplit(' ')
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no byte count in {line}"))
}

/// Reads all of `path` in 1 MiB `pread`s, calling `tick` with the bytes so far.
fn read_all(path: &Path, len: usize, tick: impl Fn(usize)) -> std::io::Result<Vec<u8>> {
    let f = fs::File::open(path)?;
    let mut out = vec![0u8; len];
    let mut done = 0;
    while done < len {
        let end = (done + (1 << 20)).min(len);
        let n = f.read_at(&mut out[done..end], done as u64)?;
        if n == 0 {
            break;
        }
        done += n;
        tick(done);
    }
    out.truncate(done);
    Ok(out)
}

fn mount(servers: &[ServerProcess], mnt: &Path, o: &str) -> LocalMount {
    mount_remote(&source(servers), mnt, &opts(o)).unwrap()
}

#[test]
#[cfg_attr(
    not(hipfs_fuse),
    ignore = "needs FUSE: root and /dev/fuse (HIPFS_REQUIRE_FUSE=1 makes a missing one a failure)"
)]
fn large_reads_through_fuse_and_userspace_fs_are_spread_over_every_server() {
    require_fuse!();
    let _d = hipfs::Driver::open().unwrap();
    let export = tempfile::tempdir().unwrap();
    let mnt = tempfile::tempdir().unwrap();
    let data = pattern(19, (48 << 20) + 4321);
    fs::write(export.path().join("big"), &data).unwrap();
    let s = servers(export.path(), 3, &[]);
    let m = mount(&s, mnt.path(), "soft,timeout=10");
    let got = read_all(&mnt.path().join("big"), data.len(), |_| {}).unwrap();
    assert!(got == data, "bytes read through the mount differ");
    let text = stats(mnt.path());
    for srv in &s {
        assert!(
            delivered(&text, srv.port) > 0,
            "server {} delivered nothing:\n{text}",
            srv.port
        );
    }
    // The direct path of a read-only open spreads too, and reads right.
    let fh = open_us(&mnt.path().join("big"), libc::O_RDONLY);
    for (off, len) in [
        (0usize, 32 << 20),
        (5 << 20, 17 << 20),
        (data.len() - 100, 4096),
    ] {
        let got = read_at(&fh, len, off as u64);
        let end = (off + len).min(data.len());
        assert!(got[..] == data[off..end], "direct read at {off}");
    }
    // So do OPAQUE_FD handles (what PyTorch and KvikIO loaders register).
    let mut op = hipfs::FileHandle::new(
        mnt.path().join("big"),
        libc::O_RDONLY,
        0,
        hipfs::FileHandleType::OpaqueFd,
    );
    op.open().unwrap();
    let got = read_at(&op, 24 << 20, 3 << 20);
    assert!(got[..] == data[3 << 20..27 << 20], "OPAQUE_FD read");
    drop(op);
    // A file unlinked while open reads through the mount's own handle.
    fs::write(export.path().join("gone"), &data[..1 << 20]).unwrap();
    let gone = fs::File::open(mnt.path().join("gone")).unwrap();
    fs::remove_file(mnt.path().join("gone")).unwrap();
    let mut back = vec![0u8; 1 << 20];
    gone.read_exact_at(&mut back, 0).unwrap();
    assert!(back[..] == data[..1 << 20], "unlinked open file");
    drop(gone);
    // Writes go through one server; a reopen sees them (close-to-open).
    fs::write(mnt.path().join("small"), b"written once").unwrap();
    assert_eq!(fs::read(mnt.path().join("small")).unwrap(), b"written once");
    drop(fh);
    m.unmount().unwrap();
}

#[test]
fn servers_that_say_different_export_ids_are_refused_and_the_odd_one_named() {
    let export = tempfile::tempdir().unwrap();
    let mnt = tempfile::tempdir().unwrap();
    let mut s = servers(export.path(), 2, &["--export-id", "datasets"]);
    let odd = spawn_server(
        export.path(),
        0,
        &["--transport", "tcp", "--export-id", "scratch"],
    );
    let odd_port = odd.port;
    s.insert(1, odd);
    let err = mount_remote(&source(&s), mnt.path(), &opts("soft,timeout=5"))
        .err()
        .expect("a mount over servers of two namespaces must not start");
    let msg = err.to_string();
    assert!(
        msg.contains(&format!("server 127.0.0.1:{odd_port} exports id scratch")),
        "{msg}"
    );
    assert!(msg.contains("datasets"), "{msg}");
    assert!(!hipfs_fusefs::is_mounted(mnt.path()).unwrap_or(false));
}

#[test]
#[cfg_attr(
    not(hipfs_fuse),
    ignore = "needs FUSE: root and /dev/fuse (HIPFS_REQUIRE_FUSE=1 makes a missing one a failure)"
)]
fn a_server_killed_or_frozen_mid_read_gives_the_right_bytes_and_rejoins_when_back() {
    require_fuse!();
    let export = tempfile::tempdir().unwrap();
    let mnt = tempfile::tempdir().unwrap();
    let data = Arc::new(pattern(23, 96 << 20));
    fs::write(export.path().join("big"), &*data).unwrap();
    let mut s = servers(export.path(), 3, &[]);
    // direct_io: every read goes to the servers, none to the page cache.
    let m = mount(&s, mnt.path(), "soft,direct_io,timeout=6");
    let path = mnt.path().join("big");
    let progress = Arc::new(AtomicU64::new(0));
    let reader = {
        let (path, progress, len) = (path.clone(), progress.clone(), data.len());
        std::thread::spawn(move || {
            read_all(&path, len, |n| progress.store(n as u64, Ordering::SeqCst))
        })
    };
    let wait_for = |n: u64| {
        let t = Instant::now();
        while progress.load(Ordering::SeqCst) < n && !reader.is_finished() {
            assert!(t.elapsed() < Duration::from_secs(60), "the read stalled");
            std::thread::sleep(Duration::from_millis(1));
        }
    };
    wait_for(8 << 20);
    let killed_port = s[1].port;
    kill9(&mut s[1]);
    wait_for(24 << 20);
    signal(&s[2], libc::SIGSTOP);
    wait_for(48 << 20);
    signal(&s[2], libc::SIGCONT);
    let got = reader
        .join()
        .unwrap()
        .expect("the read survives one server killed, one frozen");
    assert!(got == *data, "bytes differ after the faults");
    let text = stats(mnt.path());
    assert!(text.contains("retried elsewhere"), "{text}");
    // The killed server comes back on its port and takes reads again.
    s[1] = spawn_server(export.path(), killed_port, TCP);
    let before = delivered(&stats(mnt.path()), killed_port);
    let t = Instant::now();
    loop {
        let got = read_all(&path, 16 << 20, |_| {}).unwrap();
        assert!(got[..] == data[..16 << 20]);
        if delivered(&stats(mnt.path()), killed_port) > before {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "the restarted server never rejoined:\n{}",
            stats(mnt.path())
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    m.unmount().unwrap();
}

#[test]
#[cfg_attr(
    not(hipfs_fuse),
    ignore = "needs FUSE: root and /dev/fuse (HIPFS_REQUIRE_FUSE=1 makes a missing one a failure)"
)]
fn with_every_server_down_a_read_fails_with_eio_within_the_timeout() {
    require_fuse!();
    let export = tempfile::tempdir().unwrap();
    let mnt = tempfile::tempdir().unwrap();
    let data = pattern(29, 8 << 20);
    fs::write(export.path().join("f"), &data).unwrap();
    let mut s = servers(export.path(), 3, &[]);
    let m = mount(&s, mnt.path(), "soft,direct_io,timeout=3");
    let f = fs::File::open(mnt.path().join("f")).unwrap();
    let mut buf = vec![0u8; 1 << 20];
    assert_eq!(f.read_at(&mut buf, 0).unwrap(), 1 << 20);
    signal(&s[0], libc::SIGSTOP);
    kill9(&mut s[1]);
    kill9(&mut s[2]);
    let t = Instant::now();
    let e = f.read_at(&mut buf, 2 << 20).unwrap_err();
    let took = t.elapsed();
    assert_eq!(e.raw_os_error(), Some(libc::EIO), "{e:?}");
    // Bounded by the mount's timeout (3 s), with room for a slow machine.
    assert!(took < Duration::from_secs(8), "EIO took {took:?}");
    signal(&s[0], libc::SIGCONT);
    // One server back: the same fd reads again.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match f.read_at(&mut buf, 3 << 20) {
            Ok(n) => {
                assert!(buf[..n] == data[3 << 20..(3 << 20) + n]);
                break;
            }
            Err(e) if Instant::now() < deadline => {
                assert_eq!(e.raw_os_error(), Some(libc::EIO), "{e:?}");
                std::thread::sleep(Duration::from_millis(200));
            }
            Err(e) => panic!("no server back after SIGCONT: {e:?}"),
        }
    }
    drop(f);
    m.unmount().unwrap();
}

#[test]
#[cfg_attr(
    not(hipfs_fuse),
    ignore = "needs FUSE: root and /dev/fuse (HIPFS_REQUIRE_FUSE=1 makes a missing one a failure)"
)]
fn metadata_and_writes_move_to_the_next_server_when_theirs_dies() {
    require_fuse!();
    let export = tempfile::tempdir().unwrap();
    let mnt = tempfile::tempdir().unwrap();
    let mut s = servers(export.path(), 3, &[]);
    let m = mount(&s, mnt.path(), "soft,timeout=3");
    fs::write(mnt.path().join("before"), b"one").unwrap();
    let kept = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(mnt.path().join("before"))
        .unwrap();
    let mut dirty = fs::File::create(mnt.path().join("dirty")).unwrap();
    dirty.write_all(b"taken by the first server").unwrap();
    let first = s[0].port;
    assert!(stats(mnt.path()).contains(&format!("(via 127.0.0.1:{first})")));
    kill9(&mut s[0]);
    // Its writes went to the server that died: the next one cannot sync
    // them, so the sync does not claim it did.
    let e = dirty.sync_all().unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EIO), "{e:?}");
    drop(dirty);
    // The next requests find the connection gone and go to the next server.
    fs::write(mnt.path().join("after"), b"two").unwrap();
    assert_eq!(fs::read(export.path().join("after")).unwrap(), b"two");
    let text = stats(mnt.path());
    assert!(
        text.contains(&format!("(via 127.0.0.1:{})", s[1].port)),
        "{text}"
    );
    // A file open before is reopened there by path, and written through it.
    kept.write_all_at(b"ONE", 0).unwrap();
    kept.sync_all().unwrap();
    drop(kept);
    assert_eq!(fs::read(export.path().join("before")).unwrap(), b"ONE");
    assert_eq!(fs::read(mnt.path().join("before")).unwrap(), b"ONE");
    fs::create_dir(mnt.path().join("dir")).unwrap();
    assert!(export.path().join("dir").is_dir());
    m.unmount().unwrap();
}

/// The welcome a client speaking only `version` gets, and whether the
/// server's proof in it verifies over what that version says it covers.
fn welcome_for_version(addr: &str, version: u16) -> (hipfs::remote::proto::Welcome, bool) {
    use hipfs::remote::auth::{secret_id, transcript, Token, CLIENT_PROOF, SERVER_PROOF};
    use hipfs::remote::proto::{export_id_transcript, Challenge, CredKind, Hello, Proof, Welcome};
    let cfg = hipfs::remote::server::transport_config(hipfs_rdma::TransportKind::Tcp);
    let conn = hipfs_rdma::connect(addr, &cfg).unwrap();
    let t = Duration::from_secs(5);
    let nonce = [9u8; 32];
    let hello = Hello {
        min_version: version,
        max_version: version,
        nonce,
    };
    conn.send(&hello.encode()).unwrap();
    let ch = Challenge::decode(&conn.recv(t).unwrap()).unwrap();
    assert_eq!(ch.version, version);
    let socket = crate::remote_common::local_socket_of(addr);
    let s = hipfs::remote::server::fetch_ticket(&socket).unwrap();
    let (id, secret) = (secret_id(&s), Token::from_bytes(&s));
    let tr = transcript(CredKind::Ticket as u8, 0, &id, &ch.nonce, &nonce);
    let proof = Proof {
        kind: CredKind::Ticket,
        flags: 0,
        id,
        mac: secret.proof(CLIENT_PROOF, &tr),
    };
    conn.send(&proof.encode()).unwrap();
    let w = Welcome::decode(&conn.recv(t).unwrap()).unwrap();
    let covered = match &w.export_id {
        Some(x) => export_id_transcript(&tr, x),
        None => tr.clone(),
    };
    let ok = secret.verify(SERVER_PROOF, &covered, &w.mac);
    conn.close();
    (w, ok)
}

#[test]
fn a_version_2_client_gets_the_version_2_welcome_and_a_version_3_one_the_export_id() {
    let export = tempfile::tempdir().unwrap();
    let s = servers(export.path(), 1, &["--export-id", "ds-7"]);
    let addr = format!("127.0.0.1:{}", s[0].port);
    let (w2, ok2) = welcome_for_version(&addr, 2);
    assert_eq!(w2.export_id, None);
    assert!(ok2, "the version 2 proof does not verify");
    let (w3, ok3) = welcome_for_version(&addr, 3);
    assert_eq!(w3.export_id.as_deref(), Some("ds-7"));
    assert!(ok3, "the version 3 proof does not cover the export id");
}
