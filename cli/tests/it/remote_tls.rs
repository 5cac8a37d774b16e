//! `hipfs serve --tls-cert/--tls-key` and `mount -o tls,ca=FILE` end to
//! end: files written and read through the mount and through UserspaceFs
//! handles, plaintext clients and clients trusting another CA refused with
//! errors that say why, and nothing of a file crossing the wire in the
//! clear (a relaying proxy records every byte).

use std::fs;
use std::path::Path;
use std::time::Duration;

use hipfs::remote::client::RemoteClient;
use hipfs::remote::mount::{mount_remote, MountOptions};
use hipfs::Driver;
use hipfs_cli::bench::tls::ThrowawayPki;

use crate::remote_common::{open_us, pattern, read_at};
use crate::serve::{spawn_server, ServerProcess};

#[path = "../../../rdma/tests/suite/relay.rs"]
mod relay;
use relay::Relay;

/// `hipfs serve DIR` over TCP with TLS (or plaintext without `pki`).
fn serve(dir: &Path, pki: Option<&ThrowawayPki>) -> ServerProcess {
    let mut args = vec!["--transport".to_string(), "tcp".to_string()];
    if let Some(p) = pki {
        args.push("--tls-cert".into());
        args.push(p.cert.display().to_string());
        args.push("--tls-key".into());
        args.push(p.key.display().to_string());
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    spawn_server(dir, 0, &args)
}

fn tls_opts(pki: &ThrowawayPki) -> MountOptions {
    MountOptions::parse(&format!("transport=tcp,tls,ca={}", pki.ca.display())).unwrap()
}

/// Reads `len` bytes at `off` of a file in a mount through a UserspaceFs handle.
fn userspace_read(path: &Path, off: u64, len: usize) -> Vec<u8> {
    read_at(&open_us(path, libc::O_RDONLY), len, off)
}

#[test]
#[cfg_attr(
    not(hipfs_fuse),
    ignore = "needs FUSE: root and /dev/fuse (HIPFS_REQUIRE_FUSE=1 makes a missing one a failure)"
)]
fn files_written_and_read_through_a_tls_mount_and_userspacefs_match_the_export() {
    require_fuse!();
    let _d = Driver::open().unwrap();
    let pki = ThrowawayPki::localhost().unwrap();
    let export = tempfile::tempdir().unwrap();
    let mnt = tempfile::tempdir().unwrap();
    let server = serve(export.path(), Some(&pki));
    let addr = format!("127.0.0.1:{}", server.port);
    let m = mount_remote(&addr, mnt.path(), &tls_opts(&pki)).unwrap();

    // Written through the mount, it is in the export and reads back.
    let data = pattern(5, (6 << 20) + 321);
    fs::write(mnt.path().join("written"), &data).unwrap();
    assert!(fs::read(export.path().join("written")).unwrap() == data);
    assert!(fs::read(mnt.path().join("written")).unwrap() == data);
    // Written on the server, it reads through the mount.
    let other = pattern(9, 1 << 20);
    fs::write(export.path().join("served"), &other).unwrap();
    assert!(fs::read(mnt.path().join("served")).unwrap() == other);
    fs::create_dir(mnt.path().join("dir")).unwrap();
    fs::rename(mnt.path().join("served"), mnt.path().join("dir/moved")).unwrap();
    assert!(export.path().join("dir/moved").exists());

    // UserspaceFs: the process's own connection uses the mount's CA.
    let got = userspace_read(&mnt.path().join("written"), 12_345, 3 << 20);
    assert!(got == data[12_345..12_345 + (3 << 20)]);
    let got = userspace_read(&mnt.path().join("written"), (6 << 20) - 100, 4096);
    assert!(
        got == data[(6 << 20) - 100..],
        "short at the end of the file"
    );
    m.unmount().unwrap();
}

#[test]
fn a_plaintext_client_and_a_client_trusting_another_ca_are_refused_with_clear_errors() {
    let pki = ThrowawayPki::localhost().unwrap();
    let export = tempfile::tempdir().unwrap();
    let server = serve(export.path(), Some(&pki));
    let addr = format!("127.0.0.1:{}", server.port);

    let plain = MountOptions::parse("transport=tcp,timeout=5")
        .unwrap()
        .client_config(&addr)
        .unwrap();
    let Err(e) = RemoteClient::connect(plain) else {
        panic!("a plaintext client was accepted")
    };
    assert!(e.to_string().contains("requires TLS"), "{e}");
    assert!(e.to_string().contains("tls,ca=FILE"), "{e}");

    let stranger = ThrowawayPki::localhost().unwrap();
    let wrong = MountOptions::parse(&format!(
        "transport=tcp,timeout=5,tls,ca={}",
        stranger.ca.display()
    ))
    .unwrap()
    .client_config(&addr)
    .unwrap();
    let Err(e) = RemoteClient::connect(wrong) else {
        panic!("a client trusting another CA was accepted")
    };
    assert!(e.to_string().contains("not signed by the CA"), "{e}");

    // The right CA is accepted by the same server.
    let right = tls_opts(&pki).client_config(&addr).unwrap();
    let c = RemoteClient::connect(right).unwrap();
    assert!(!c.read_only());
    std::thread::sleep(Duration::from_millis(100));
    assert!(
        server.log().contains("requires TLS") || server.log().contains("plaintext"),
        "the server says why it refused: {}",
        server.log()
    );
}

/// Writes and reads a file with distinctive contents and name through a
/// mount whose connections pass a recording relay; whether the relay saw
/// either in the clear.
fn plaintext_on_the_wire(pki: Option<&ThrowawayPki>) -> bool {
    let _d = Driver::open().unwrap();
    let export = tempfile::tempdir().unwrap();
    let mnt = tempfile::tempdir().unwrap();
    let server = serve(export.path(), pki);
    let relay = Relay::start(&format!("127.0.0.1:{}", server.port));
    let mut opts = match pki {
        Some(p) => tls_opts(p),
        None => MountOptions::parse("transport=tcp").unwrap(),
    };
    // The relay's port is not the server's: name the server's ticket socket.
    opts.local_socket = Some(crate::remote_common::local_socket_of(&format!(
        "127.0.0.1:{}",
        server.port
    )));
    let m = mount_remote(&relay.addr, mnt.path(), &opts).unwrap();
    let canary: Vec<u8> = b"HIPFS-TLS-WIRE-CANARY-".repeat(48 * 1024);
    let name = "secret-canary-file-name";
    fs::write(mnt.path().join(name), &canary).unwrap();
    assert!(fs::read(export.path().join(name)).unwrap() == canary);
    let got = userspace_read(&mnt.path().join(name), 0, canary.len());
    assert!(got == canary);
    m.unmount().unwrap();
    assert!(
        relay.bytes_seen() > 2 * canary.len(),
        "the relay carried it"
    );
    relay.saw(b"HIPFS-TLS-WIRE-CANARY-HIPFS-TLS-WIRE") || relay.saw(name.as_bytes())
}

#[test]
#[cfg_attr(
    not(hipfs_fuse),
    ignore = "needs FUSE: root and /dev/fuse (HIPFS_REQUIRE_FUSE=1 makes a missing one a failure)"
)]
fn with_tls_neither_file_contents_nor_names_cross_the_wire_in_the_clear() {
    require_fuse!();
    // Without TLS the relay does see them (the check can fail)...
    assert!(plaintext_on_the_wire(None));
    // ...and with TLS it sees nothing of them.
    let pki = ThrowawayPki::localhost().unwrap();
    assert!(!plaintext_on_the_wire(Some(&pki)));
}

#[test]
#[cfg_attr(
    not(hipfs_fuse),
    ignore = "needs FUSE: root and /dev/fuse (HIPFS_REQUIRE_FUSE=1 makes a missing one a failure)"
)]
fn the_hipfs_mount_command_mounts_a_tls_server_with_its_ca_and_a_plaintext_mount_says_why_it_failed(
) {
    require_fuse!();
    use std::process::Command;
    let pki = ThrowawayPki::localhost().unwrap();
    let export = tempfile::tempdir().unwrap();
    let mnt = tempfile::tempdir().unwrap();
    fs::write(export.path().join("hello"), b"over tls").unwrap();
    let server = serve(export.path(), Some(&pki));
    let addr = format!("127.0.0.1:{}", server.port);
    let bin = crate::serve::hipfs_bin();

    let out = Command::new(&bin)
        .args(["mount", &addr])
        .arg(mnt.path())
        .args(["-o", "transport=tcp,timeout=5"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("requires TLS"), "{err}");
    assert!(!hipfs_fusefs::is_mounted(mnt.path()).unwrap());

    let out = Command::new(&bin)
        .args(["mount", &addr])
        .arg(mnt.path())
        .args(["-o", &format!("transport=tcp,tls,ca={}", pki.ca.display())])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(fs::read(mnt.path().join("hello")).unwrap(), b"over tls");
    fs::write(mnt.path().join("back"), b"written over tls").unwrap();
    assert_eq!(
        fs::read(export.path().join("back")).unwrap(),
        b"written over tls"
    );
    let out = Command::new(&bin)
        .arg("umount")
        .arg(mnt.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let t = std::time::Instant::now();
    while hipfs_fusefs::is_mounted(mnt.path()).unwrap() {
        assert!(t.elapsed() < Duration::from_secs(10), "still mounted");
        std::thread::sleep(Duration::from_millis(50));
    }
}
