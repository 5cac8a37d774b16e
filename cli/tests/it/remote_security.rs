//! The trust model of docs/SECURITY.md, attacked from outside: a real
//! server on loopback, real mounts, and unprivileged attackers run as
//! `nobody` (this test binary re-run in a child process, its `attacker`
//! entry selected by an environment variable).

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::remote_common::{
    local_socket_of, pattern, raw_call, raw_handshake, Fixture, RawConn, RawCred,
};
use hipfs::remote::auth::Token;
use hipfs::remote::proto::{Op, Payload, Request, WireCred};
use hipfs::remote::server::{ServeConfig, Server, NOBODY};

const TOKEN: &[u8] = b"a token of the test host, 32 b!!";

fn req(id: u64, uid: u32, op: Op) -> Vec<u8> {
    Request {
        id,
        cred: WireCred {
            uid,
            gid: uid,
            groups: vec![],
        },
        op,
    }
    .encode()
}

fn outcome(r: &Result<Payload, i32>) -> String {
    match r {
        Ok(_) => "ok".into(),
        Err(e) => format!("errno{e}"),
    }
}

/// A tcp server on loopback exporting a fresh 0755 directory.
fn server(tweak: impl FnOnce(&mut ServeConfig)) -> (tempfile::TempDir, Server) {
    let export = tempfile::tempdir().unwrap();
    fs::set_permissions(export.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let mut cfg = ServeConfig::new(export.path(), "127.0.0.1:0");
    cfg.transport = hipfs_rdma::TransportKind::Tcp;
    tweak(&mut cfg);
    (export, Server::start(cfg).unwrap())
}

/// A copy of this test binary that nobody may execute: the build's own may
/// sit under a directory only root can enter (a clone in /root), and
/// nobody must run it without being given anything else of root's.
fn nobody_exe() -> std::path::PathBuf {
    static COPY: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    COPY.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("hipfs-attacker-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).unwrap();
        let exe = dir.join("it");
        fs::copy(std::env::current_exe().unwrap(), &exe).unwrap();
        fs::set_permissions(&exe, fs::Permissions::from_mode(0o755)).unwrap();
        exe
    })
    .clone()
}

/// Runs this test binary's `attacker` entry as nobody with `mode` and
/// `vars`; returns its `OUTCOME` line.
fn as_nobody(mode: &str, vars: &[(&str, &str)]) -> String {
    let exe = nobody_exe();
    let run = || {
        Command::new(&exe)
            .args([
                "--ignored",
                "--exact",
                "remote_security::attacker",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("HIPFS_SECURITY_ATTACK", mode)
            .envs(vars.iter().copied())
            .uid(NOBODY)
            .gid(NOBODY)
            .current_dir("/")
            .output()
    };
    // ETXTBSY: a process another test forked while the copy was being
    // written still held the copy's descriptor (until its own exec closed
    // it), so exec of the copy was refused for that moment. Try again.
    let mut out = run();
    for _ in 0..100 {
        match &out {
            Err(e) if e.kind() == std::io::ErrorKind::ExecutableFileBusy => {
                std::thread::sleep(std::time::Duration::from_millis(20));
                out = run();
            }
            _ => break,
        }
    }
    let out = out.unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    stdout
        .lines()
        .find_map(|l| l.split_once("OUTCOME ").map(|(_, o)| o))
        .map(str::to_string)
        .unwrap_or_else(|| {
            panic!(
                "attacker printed no outcome: {stdout}\n{}",
                String::from_utf8_lossy(&out.stderr)
            )
        })
}

fn env(k: &str) -> String {
    std::env::var(k).unwrap_or_default()
}

/// The unprivileged side of the tests, run by [`as_nobody`] in a child
/// process (so it is ignored in a normal run).
#[test]
#[ignore = "helper process of the remote_security tests (run by as_nobody)"]
fn attacker() {
    let mode = std::env::var("HIPFS_SECURITY_ATTACK")
        .expect("run by as_nobody with HIPFS_SECURITY_ATTACK set");
    let line = match mode.as_str() {
        "claim" => {
            // A raw client with the ticket nobody gets, claiming others.
            let addr = env("ADDR");
            let c = raw_handshake(&addr, RawCred::Ticket(&local_socket_of(&addr))).unwrap();
            let secret = env("SECRET").into_bytes();
            let open = |id, uid| {
                let op = Op::Open {
                    path: secret.clone(),
                    flags: libc::O_RDONLY,
                };
                outcome(&raw_call(&c, &req(id, uid, op)).result)
            };
            let create = |id, uid| {
                let op = Op::Create {
                    path: b"planted".to_vec(),
                    mode: 0o4755,
                    flags: libc::O_WRONLY,
                };
                outcome(&raw_call(&c, &req(id, uid, op)).result)
            };
            let lookup = |id, uid| {
                let op = Op::Lookup { path: vec![] };
                outcome(&raw_call(&c, &req(id, uid, op)).result)
            };
            format!(
                "open-as-root={} create-as-root={} lookup-as-1000={} open-as-self={} lookup-as-self={}",
                open(1, 0),
                create(2, 0),
                lookup(3, 1000),
                open(4, NOBODY),
                lookup(5, NOBODY)
            )
        }
        "direct" => {
            let token = match fs::read(env("TOKEN_FILE")) {
                Ok(_) => "readable".to_string(),
                Err(e) => format!("errno{}", e.raw_os_error().unwrap_or(0)),
            };
            let _d = hipfs::Driver::open().unwrap();
            let path = env("FILE");
            let len: usize = env("LEN").parse().unwrap();
            let mut fh = hipfs::FileHandle::new(
                Path::new(&path),
                libc::O_RDONLY,
                0,
                hipfs::FileHandleType::UserspaceFs,
            );
            let direct = match fh.open() {
                Err(e) => format!("open-failed:{e}"),
                Ok(()) => {
                    let mut mem = vec![0u8; len];
                    let mut buf = hipfs::Buffer::from_slice(&mut mem, 0);
                    match fh.read(&mut buf, len, 0, 0) {
                        Ok(n) => {
                            drop(buf);
                            format!("read:{n}:{:016x}", fnv(&mem[..n]))
                        }
                        Err(e) => format!("read-failed:{e}"),
                    }
                }
            };
            format!("token={token} direct={direct}")
        }
        m => format!("unknown-mode-{m}"),
    };
    println!("OUTCOME {line}");
}

fn fnv(b: &[u8]) -> u64 {
    b.iter().fold(0xcbf29ce484222325u64, |h, &x| {
        (h ^ u64::from(x)).wrapping_mul(0x100000001b3)
    })
}

#[test]
#[cfg_attr(
    not(hipfs_fuse),
    ignore = "needs FUSE: root and /dev/fuse (HIPFS_REQUIRE_FUSE=1 makes a missing one a failure)"
)]
fn a_local_user_claiming_root_or_another_uid_is_refused_and_nothing_is_read_or_created() {
    require_fuse!();
    let (export, server) = server(|_| {});
    let secret = export.path().join("secret");
    fs::write(&secret, b"root only").unwrap();
    fs::set_permissions(&secret, fs::Permissions::from_mode(0o600)).unwrap();
    let got = as_nobody(
        "claim",
        &[("ADDR", server.local_addr()), ("SECRET", "secret")],
    );
    // Claims of another identity are refused before anything is done; as
    // itself, nobody gets what nobody may: no access to a 0600 root file.
    assert_eq!(
        got,
        format!(
            "open-as-root=errno{p} create-as-root=errno{p} lookup-as-1000=errno{p} open-as-self=errno{a} lookup-as-self=ok",
            p = libc::EPERM,
            a = libc::EACCES
        )
    );
    assert!(!export.path().join("planted").exists());
    server.shutdown(Duration::from_secs(1));
}

#[test]
#[cfg_attr(
    not(hipfs_fuse),
    ignore = "needs FUSE: root and /dev/fuse (HIPFS_REQUIRE_FUSE=1 makes a missing one a failure)"
)]
fn a_client_without_a_token_or_ticket_is_refused_with_a_clear_reason() {
    require_fuse!();
    let (_export, server) = server(|_| {});
    let err = raw_handshake(server.local_addr(), RawCred::Token(TOKEN))
        .err()
        .expect("refused");
    assert!(err.contains("no token"), "{err}");
    // A made-up ticket (its id is not one the server minted).
    let err = raw_handshake(server.local_addr(), RawCred::FileCap([9; 32]))
        .err()
        .expect("refused");
    assert!(err.contains("capability"), "{err}");
    // A ticket is single-use: the library's client gets a fresh one per
    // connection, so two clients both get in.
    let mut cc = hipfs::remote::client::ClientConfig::new(server.local_addr());
    cc.transport = hipfs_rdma::TransportKind::Tcp;
    hipfs::remote::client::RemoteClient::connect(cc.clone()).unwrap();
    hipfs::remote::client::RemoteClient::connect(cc).unwrap();
    server.shutdown(Duration::from_secs(1));
}

/// Lets a squashed root (nobody) create files in the export.
fn world_writable(dir: &Path) {
    fs::set_permissions(dir, fs::Permissions::from_mode(0o777)).unwrap();
}

fn token_file(dir: &Path) -> std::path::PathBuf {
    let p = dir.join("token");
    fs::write(&p, TOKEN).unwrap();
    fs::set_permissions(&p, fs::Permissions::from_mode(0o600)).unwrap();
    p
}

#[test]
#[cfg_attr(
    not(hipfs_fuse),
    ignore = "needs FUSE: root and /dev/fuse (HIPFS_REQUIRE_FUSE=1 makes a missing one a failure)"
)]
fn root_of_a_token_host_is_squashed_by_default_and_not_with_no_root_squash() {
    require_fuse!();
    let dir = tempfile::tempdir().unwrap();
    let tf = token_file(dir.path());
    let opts = format!("token_file={}", tf.display());
    let fx = Fixture::with(
        |c| {
            c.token = Some(Token::from_bytes(TOKEN));
            world_writable(&c.dir);
        },
        &opts,
    );
    fs::write(fx.m("made-by-root"), b"x").unwrap();
    assert_eq!(fs::metadata(fx.e("made-by-root")).unwrap().uid(), NOBODY);
    drop(fx);
    let fx = Fixture::with(
        |c| {
            c.token = Some(Token::from_bytes(TOKEN));
            c.policy.no_root_squash = true;
            world_writable(&c.dir);
        },
        &opts,
    );
    fs::write(fx.m("made-by-root"), b"x").unwrap();
    assert_eq!(fs::metadata(fx.e("made-by-root")).unwrap().uid(), 0);
}

fn set_xattr(p: &Path, name: &str, value: &[u8]) -> Result<(), i32> {
    let c = crate::remote_common::cpath(p);
    let n = std::ffi::CString::new(name).unwrap();
    // SAFETY: NUL-terminated strings and a value slice that outlive the call.
    let rc = unsafe {
        libc::setxattr(
            c.as_ptr(),
            n.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(0))
    }
}

/// A file capability xattr value granting CAP_SETUID (VFS_CAP_REVISION_2).
fn setuid_capability() -> Vec<u8> {
    let mut v = Vec::new();
    v.extend_from_slice(&0x0200_0001u32.to_le_bytes()); // revision 2, effective
    v.extend_from_slice(&(1u32 << 7).to_le_bytes()); // permitted lo: CAP_SETUID (7)
    v.extend_from_slice(&0u32.to_le_bytes()); // inheritable lo
    v.extend_from_slice(&0u32.to_le_bytes()); // permitted hi
    v.extend_from_slice(&0u32.to_le_bytes()); // inheritable hi
    v
}

#[test]
#[cfg_attr(
    not(hipfs_fuse),
    ignore = "needs FUSE: root and /dev/fuse (HIPFS_REQUIRE_FUSE=1 makes a missing one a failure)"
)]
fn a_squashed_or_non_root_caller_cannot_plant_file_capabilities_or_trusted_xattrs() {
    require_fuse!();
    let dir = tempfile::tempdir().unwrap();
    let tf = token_file(dir.path());
    let fx = Fixture::with(
        |c| {
            c.token = Some(Token::from_bytes(TOKEN));
            world_writable(&c.dir);
        },
        &format!("token_file={}", tf.display()),
    );
    // root of the token host is nobody here, and owns what it creates.
    fs::write(fx.m("mine"), b"#!/bin/sh\n").unwrap();
    fs::write(fx.e("roots"), b"#!/bin/sh\n").unwrap();
    for f in ["mine", "roots"] {
        assert_eq!(
            set_xattr(&fx.m(f), "security.capability", &setuid_capability()),
            Err(libc::EPERM),
            "{f}"
        );
        assert_eq!(
            set_xattr(&fx.m(f), "trusted.x", b"1"),
            Err(libc::EPERM),
            "{f}"
        );
    }
    // A user (not squashed: a trusted local root daemon speaking for
    // uid 4242, the owner of the file) is refused too, whatever the
    // worker's capabilities.
    let (export, server) = server(|_| {});
    fs::write(export.path().join("owned"), b"x").unwrap();
    std::os::unix::fs::chown(export.path().join("owned"), Some(4242), Some(4242)).unwrap();
    let c = crate::remote_common::raw_connection(server.local_addr());
    let set = |id, name: &[u8]| {
        let op = Op::Setxattr {
            path: b"owned".to_vec(),
            name: name.to_vec(),
            value: setuid_capability(),
            flags: 0,
        };
        raw_call(&c, &req(id, 4242, op)).result
    };
    assert_eq!(set(1, b"security.capability"), Err(libc::EPERM));
    assert_eq!(set(2, b"trusted.x"), Err(libc::EPERM));
    let mut buf = [0u8; 64];
    let p = crate::remote_common::cpath(&export.path().join("owned"));
    let n = std::ffi::CString::new("security.capability").unwrap();
    // SAFETY: NUL-terminated strings and a buffer that outlive the call.
    let rc = unsafe { libc::getxattr(p.as_ptr(), n.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    assert!(rc < 0, "no capability was planted");
    server.shutdown(Duration::from_secs(1));
}

/// Sends a sealed message with its body altered after tagging, as a man in
/// the middle would: the server must drop the connection.
fn assert_connection_dropped(c: &RawConn) {
    let t = Instant::now();
    loop {
        match c.conn.recv(Duration::from_millis(200)) {
            Err(hipfs_rdma::Error::Timeout(_)) if t.elapsed() < Duration::from_secs(5) => {}
            Err(e) => {
                assert!(e.is_disconnect(), "{e}");
                return;
            }
            Ok(m) => panic!("the server answered a forged message ({} bytes)", m.len()),
        }
    }
}

#[test]
#[cfg_attr(
    not(hipfs_fuse),
    ignore = "needs FUSE: root and /dev/fuse (HIPFS_REQUIRE_FUSE=1 makes a missing one a failure)"
)]
fn requests_injected_modified_or_replayed_after_a_genuine_handshake_are_refused_and_drop_the_connection(
) {
    require_fuse!();
    // Root not squashed, so that the genuine request below is acted on.
    let (export, server) = server(|c| {
        c.token = Some(Token::from_bytes(TOKEN));
        c.policy.no_root_squash = true;
    });
    let create = |id| {
        req(
            id,
            0,
            Op::Create {
                path: b"injected".to_vec(),
                mode: 0o4755,
                flags: libc::O_WRONLY,
            },
        )
    };
    // Injected: a request without the connection's key (an untagged one).
    let c = raw_handshake(server.local_addr(), RawCred::Token(TOKEN)).unwrap();
    c.conn.send(&create(1)).unwrap();
    assert_connection_dropped(&c);
    // Modified: a genuine tagged request with one byte changed.
    let c = raw_handshake(server.local_addr(), RawCred::Token(TOKEN)).unwrap();
    let lookup = req(
        1,
        0,
        Op::Lookup {
            path: b"x".to_vec(),
        },
    );
    let mut sealed = c.seal.seal_as(0, lookup.clone());
    let at = lookup.len() - 1;
    sealed[at] ^= b'x' ^ b'y';
    c.conn.send(&sealed).unwrap();
    assert_connection_dropped(&c);
    // Replayed: the same genuine message twice.
    let c = raw_handshake(server.local_addr(), RawCred::Token(TOKEN)).unwrap();
    let sealed = c.seal.seal_as(0, create(1));
    c.conn.send(&sealed).unwrap();
    let first = c.open.open(c.conn.recv(Duration::from_secs(5)).unwrap());
    assert!(first.is_ok());
    assert!(
        export.path().join("injected").exists(),
        "the genuine one is served"
    );
    fs::remove_file(export.path().join("injected")).unwrap();
    c.conn.send(&sealed).unwrap();
    assert_connection_dropped(&c);
    // Reordered: message 1 before message 0.
    let c = raw_handshake(server.local_addr(), RawCred::Token(TOKEN)).unwrap();
    c.conn.send(&c.seal.seal_as(1, create(2))).unwrap();
    assert_connection_dropped(&c);
    // Large requests are checked on the connection thread, not the one
    // that reads them (src/remote/server/inline.rs): genuine ones keep
    // their number among small ones answered meanwhile, a modified one
    // drops the connection too.
    let write = |id| {
        req(
            id,
            0,
            Op::Write {
                fh: 999,
                offset: 0,
                data: vec![7; 200_000],
            },
        )
    };
    let c = raw_handshake(server.local_addr(), RawCred::Token(TOKEN)).unwrap();
    c.conn.send(&c.seal.seal_as(0, write(1))).unwrap();
    c.conn.send(&c.seal.seal_as(1, lookup.clone())).unwrap();
    for _ in 0..2 {
        let reply = c.open.open(c.conn.recv(Duration::from_secs(5)).unwrap());
        assert!(reply.is_ok(), "both genuine requests are answered");
    }
    let big = write(3);
    let mut sealed = c.seal.seal_as(2, big.clone());
    sealed[big.len() - 1] ^= 1;
    c.conn.send(&sealed).unwrap();
    assert_connection_dropped(&c);
    assert!(
        !export.path().join("injected").exists(),
        "nothing was created"
    );
    server.shutdown(Duration::from_secs(1));
}

#[test]
#[cfg_attr(
    not(hipfs_fuse),
    ignore = "needs FUSE: root and /dev/fuse (HIPFS_REQUIRE_FUSE=1 makes a missing one a failure)"
)]
fn the_direct_path_works_for_a_process_that_cannot_read_the_hosts_token() {
    require_fuse!();
    let dir = tempfile::tempdir().unwrap();
    let tf = token_file(dir.path());
    let fx = Fixture::with(
        |c| {
            c.token = Some(Token::from_bytes(TOKEN));
            // Before the mount, so that nobody may enter it.
            fs::set_permissions(&c.dir, fs::Permissions::from_mode(0o755)).unwrap();
        },
        &format!("token_file={},allow_other", tf.display()),
    );
    let data = pattern(31, (2 << 20) + 99);
    fs::write(fx.e("shared"), &data).unwrap();
    let got = as_nobody(
        "direct",
        &[
            ("TOKEN_FILE", tf.to_str().unwrap()),
            ("FILE", fx.m("shared").to_str().unwrap()),
            ("LEN", &data.len().to_string()),
        ],
    );
    assert_eq!(
        got,
        format!(
            "token=errno{} direct=read:{}:{:016x}",
            libc::EACCES,
            data.len(),
            fnv(&data)
        )
    );
}

/// The capability the mount hands a process for `fd`.
fn capability_of(fd: i32) -> [u8; 32] {
    let payload = hipfs_fusefs::identify_fd(fd).unwrap();
    let id = hipfs::remote::client::direct::FileIdentity::decode(&payload).unwrap();
    assert!(
        !String::from_utf8_lossy(&payload).contains("token"),
        "no token in the payload"
    );
    id.capability.expect("a capability in the identify payload")
}

#[test]
#[cfg_attr(
    not(hipfs_fuse),
    ignore = "needs FUSE: root and /dev/fuse (HIPFS_REQUIRE_FUSE=1 makes a missing one a failure)"
)]
fn a_file_capability_reaches_only_its_file_in_its_mode_and_dies_with_the_open() {
    require_fuse!();
    let fx = Fixture::new();
    fs::write(fx.e("mine"), b"granted bytes").unwrap();
    fs::write(fx.e("other"), b"other bytes").unwrap();
    let fd = crate::remote_common::open_raw(&fx.m("mine"), libc::O_RDONLY, 0).unwrap();
    let cap = capability_of(fd);
    let c = raw_handshake(&fx.addr, RawCred::FileCap(cap)).unwrap();
    let call = |id, op| raw_call(&c, &req(id, 0, op)).result;
    // Whatever path it names, an open reaches the granted file only.
    let Ok(Payload::Opened { fh }) = call(
        1,
        Op::Open {
            path: b"other".to_vec(),
            flags: libc::O_RDONLY,
        },
    ) else {
        panic!("open through the capability")
    };
    let read = call(
        2,
        Op::Read {
            fh,
            offset: 0,
            len: 64,
            dest: None,
        },
    );
    assert_eq!(
        read,
        Ok(Payload::Read {
            n: 13,
            data: b"granted bytes".to_vec()
        })
    );
    // Not for writing: it was opened read-only.
    let wr = call(
        3,
        Op::Open {
            path: b"mine".to_vec(),
            flags: libc::O_RDWR,
        },
    );
    assert_eq!(wr, Err(libc::EACCES));
    let w = call(
        4,
        Op::Write {
            fh,
            offset: 0,
            data: b"X".to_vec(),
        },
    );
    assert_eq!(w, Err(libc::EBADF));
    // No other operation at all.
    for (i, op) in [
        Op::Lookup {
            path: b"other".to_vec(),
        },
        Op::Readdir {
            path: vec![],
            cookie: 0,
            max: 10,
        },
        Op::Unlink {
            path: b"other".to_vec(),
        },
        Op::GrantFile { fh, write: true },
    ]
    .into_iter()
    .enumerate()
    {
        assert_eq!(call(10 + i as u64, op.clone()), Err(libc::EPERM), "{op:?}");
    }
    assert_eq!(fs::read(fx.e("mine")).unwrap(), b"granted bytes");
    // Closing the file through the mount (the FUSE release) revokes it.
    crate::remote_common::close(fd);
    let t = Instant::now();
    let err = loop {
        match raw_handshake(&fx.addr, RawCred::FileCap(cap)) {
            Err(e) => break e,
            Ok(_) => {
                assert!(t.elapsed() < Duration::from_secs(5), "never revoked");
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    };
    assert!(err.contains("revoked"), "{err}");
    let after = call(
        30,
        Op::Read {
            fh,
            offset: 0,
            len: 64,
            dest: None,
        },
    );
    assert_eq!(after, Err(libc::EBADF), "the live connection loses it too");
}
