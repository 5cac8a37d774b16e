//! UserspaceFs end to end over the verbs transport: a real server listening
//! on soft-RoCE (`rxe0`), a real FUSE mount of it with `transport=verbs`,
//! and UserspaceFs handles whose reads the server RDMA-WRITEs into host
//! memory, checked against the exported file.
//!
//! Needs a real RDMA device, so these tests only run inside the soft-RoCE
//! VM (`HIPFS_VM=1`, see mount-scripts/rdma-vm/ci-remote-verbs.sh); anywhere
//! else they print "skipped: ..." and return.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use hipfs::remote::client::{ClientConfig, RemoteClient};
use hipfs::remote::mount::{mount_remote, LocalMount, MountOptions};
use hipfs::remote::server::{ServeConfig, Server};
use hipfs::{Buffer, Driver, FileHandle, FileHandleType, OpError};
use hipfs_rdma::TransportKind;

use crate::remote_common::{lcg, open_us, pattern, random_reads_match, RandomReads};

/// Why these tests cannot run here, if they cannot.
pub(crate) fn not_in_vm() -> Option<String> {
    if std::env::var("HIPFS_VM").as_deref() != Ok("1") {
        return Some(
            "needs the soft-RoCE VM (HIPFS_VM=1; run mount-scripts/rdma-vm/ci-remote-verbs.sh)"
                .into(),
        );
    }
    if !Path::new("/dev/fuse").exists() {
        return Some("/dev/fuse is missing in the VM".into());
    }
    None
}

macro_rules! require_vm {
    () => {
        if let Some(why) = not_in_vm() {
            panic!("{why}; these tests are ignored outside the VM unless HIPFS_REQUIRE_VERBS=1");
        }
    };
}

/// The rxe device's own address in the VM.
fn vm_ip() -> String {
    std::env::var("HIPFS_VM_IP").unwrap_or_else(|_| "10.99.0.1".into())
}

/// Scratch directories on the guest's tmpfs: the shared /tmp is 9p, slow
/// under TCG and not what a real export sits on.
pub(crate) fn scratch() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("hipfs-verbs-")
        .tempdir_in("/dev/shm")
        .unwrap()
}

/// Packets the rxe device has sent: proof that bytes really crossed the
/// soft-RoCE device (a TCP fallback would not move this counter).
pub(crate) fn rxe_sent_pkts() -> u64 {
    let p = "/sys/class/infiniband/rxe0/ports/1/hw_counters/sent_pkts";
    fs::read_to_string(p)
        .unwrap_or_else(|e| panic!("{p}: {e}"))
        .trim()
        .parse()
        .unwrap()
}

/// A verbs-only server on rxe0 and a `transport=verbs` mount of it.
pub(crate) struct VerbsFixture {
    export: tempfile::TempDir,
    mnt: tempfile::TempDir,
    server: Option<Server>,
    mount: Option<LocalMount>,
    addr: String,
}

impl VerbsFixture {
    pub(crate) fn new() -> VerbsFixture {
        let export = scratch();
        let mnt = scratch();
        let mut cfg = ServeConfig::new(export.path(), format!("{}:0", vm_ip()));
        cfg.transport = TransportKind::Verbs;
        // Not loopback: the server refuses to listen without a token unless
        // told to; clients here are local and authenticate with a ticket
        // from the server's local socket.
        cfg.insecure = true;
        let server = Server::start(cfg).unwrap();
        let addr = server.local_addr().to_string();
        let mut o = MountOptions::parse("transport=verbs,timeout=20").unwrap();
        o.local_socket = server.local_socket().map(|p| p.to_path_buf());
        assert_eq!(o.transport, TransportKind::Verbs);
        o.timeout = Duration::from_secs(20);
        let mount = mount_remote(&addr, mnt.path(), &o).unwrap();
        VerbsFixture {
            export,
            mnt,
            server: Some(server),
            mount: Some(mount),
            addr,
        }
    }

    pub(crate) fn m(&self, rel: &str) -> PathBuf {
        self.mnt.path().join(rel)
    }

    pub(crate) fn e(&self, rel: &str) -> PathBuf {
        self.export.path().join(rel)
    }
}

/// Where the fixture's clients get their tickets.
fn local_ticket(fx: &VerbsFixture) -> hipfs::remote::client::LocalTicket {
    let path = fx.server.as_ref().and_then(|s| s.local_socket()).unwrap();
    hipfs::remote::client::LocalTicket::At(path.to_path_buf())
}

impl Drop for VerbsFixture {
    fn drop(&mut self) {
        if let Some(m) = self.mount.take() {
            let _ = m.unmount();
        }
        if let Some(s) = self.server.take() {
            s.shutdown(Duration::from_secs(2));
        }
    }
}

#[test]
#[cfg_attr(
    not(hipfs_verbs),
    ignore = "needs an RDMA device: run in the soft-RoCE VM (mount-scripts/rdma-vm/; HIPFS_REQUIRE_VERBS=1)"
)]
fn userspace_reads_over_verbs_at_random_offsets_and_sizes_match_the_exported_file() {
    require_vm!();
    let _d = Driver::open().unwrap();
    let fx = VerbsFixture::new();
    let size = (3 << 20) + 4321;
    let data = pattern(21, size);
    fs::write(fx.e("data"), &data).unwrap();
    let fh = open_us(&fx.m("data"), libc::O_RDONLY);
    let mut mem = vec![0u8; 1 << 20];
    let mut buf = Buffer::from_slice(&mut mem, 0);
    let before = hipfs::stats::snapshot().remote;
    let pkts = rxe_sent_pkts();
    let t = Instant::now();
    // Some offsets past the end: short and empty reads.
    let reads = RandomReads {
        seed: 7,
        rounds: 40,
        big_every: 8,
        max: 256 << 10,
        past_end: 8192,
    };
    let moved = random_reads_match(&fh, &mut buf, &data, &reads);
    let secs = t.elapsed().as_secs_f64();
    let after = hipfs::stats::snapshot().remote;
    assert_eq!(
        after.read_bytes - before.read_bytes,
        moved as u64,
        "every byte counted on the remote path"
    );
    // The frames carrying `moved` bytes over rxe are at most 4 KiB each.
    let sent = rxe_sent_pkts() - pkts;
    assert!(
        sent >= (moved / 4096) as u64,
        "rxe0 sent only {sent} packets for {moved} bytes"
    );
    eprintln!(
        "verbs: {moved} bytes in 40 UserspaceFs reads, {:.1} MB/s, {sent} rxe packets",
        moved as f64 / secs / 1e6
    );
}

#[test]
#[cfg_attr(
    not(hipfs_verbs),
    ignore = "needs an RDMA device: run in the soft-RoCE VM (mount-scripts/rdma-vm/; HIPFS_REQUIRE_VERBS=1)"
)]
fn userspace_writes_over_verbs_at_random_offsets_land_in_the_exported_file() {
    require_vm!();
    let _d = Driver::open().unwrap();
    let fx = VerbsFixture::new();
    let size = 2 << 20;
    fs::write(fx.e("w"), vec![0u8; size]).unwrap();
    let mut expect = vec![0u8; size];
    let fh = open_us(&fx.m("w"), libc::O_RDWR);
    let before = hipfs::stats::snapshot().remote;
    let mut x = 5u64;
    let mut moved = 0u64;
    for i in 0..20u64 {
        let len = (lcg(&mut x) % (192 << 10)) as usize + 1;
        let off = (lcg(&mut x) % (size - len) as u64) as usize;
        let mut src = pattern(1000 + i, len);
        expect[off..off + len].copy_from_slice(&src);
        let buf = Buffer::from_slice(&mut src, 0);
        assert_eq!(fh.write(&buf, len, off as i64, 0).unwrap(), len);
        moved += len as u64;
    }
    assert_eq!(
        hipfs::stats::snapshot().remote.write_bytes - before.write_bytes,
        moved
    );
    assert!(
        fs::read(fx.e("w")).unwrap() == expect,
        "server file holds every write"
    );
    // And what the mount shows (FUSE over the same verbs server) agrees.
    assert!(
        fs::read(fx.m("w")).unwrap() == expect,
        "mount shows every write"
    );
}

#[test]
#[cfg_attr(
    not(hipfs_verbs),
    ignore = "needs an RDMA device: run in the soft-RoCE VM (mount-scripts/rdma-vm/; HIPFS_REQUIRE_VERBS=1)"
)]
fn several_threads_on_one_verbs_handle_and_own_handles_on_one_file_read_correct_bytes() {
    require_vm!();
    let _d = Driver::open().unwrap();
    let fx = VerbsFixture::new();
    let size = 2 << 20;
    let data = pattern(33, size);
    fs::write(fx.e("shared"), &data).unwrap();
    let one = open_us(&fx.m("shared"), libc::O_RDONLY);
    std::thread::scope(|s| {
        for t in 0..4u64 {
            let (one, data, fx) = (&one, &data, &fx);
            s.spawn(move || {
                let own = open_us(&fx.m("shared"), libc::O_RDONLY);
                let mut mem = vec![0u8; 256 << 10];
                let mut buf = Buffer::from_slice(&mut mem, 0);
                let mut x = t + 1;
                for i in 0..10 {
                    let h = if i % 2 == 0 { one } else { &own };
                    let len = (lcg(&mut x) % (256 << 10)) as usize + 1;
                    let off = lcg(&mut x) % size as u64;
                    let n = h.read(&mut buf, len, off as i64, 0).unwrap();
                    assert_eq!(n, (size - off as usize).min(len));
                    // SAFETY: as above.
                    let got = unsafe { std::slice::from_raw_parts(buf.ptr(), n) };
                    assert!(got == &data[off as usize..off as usize + n]);
                }
            });
        }
    });
}

#[test]
#[cfg_attr(
    not(hipfs_verbs),
    ignore = "needs an RDMA device: run in the soft-RoCE VM (mount-scripts/rdma-vm/; HIPFS_REQUIRE_VERBS=1)"
)]
fn a_verbs_only_server_does_not_answer_a_tcp_client() {
    require_vm!();
    let fx = VerbsFixture::new();
    // The counterpart of the byte checks above: the server speaks verbs
    // only, so the reads that succeeded there cannot have gone over TCP.
    let mut cc = ClientConfig::new(&fx.addr);
    cc.transport = TransportKind::Tcp;
    cc.timeout = Duration::from_secs(3);
    cc.local_ticket = local_ticket(&fx);
    let t = Instant::now();
    assert!(RemoteClient::connect(cc).is_err(), "a TCP client got in");
    assert!(t.elapsed() < Duration::from_secs(15), "{:?}", t.elapsed());
    let mut cc = ClientConfig::new(&fx.addr);
    cc.transport = TransportKind::Verbs;
    cc.local_ticket = local_ticket(&fx);
    assert!(
        RemoteClient::connect(cc).is_ok(),
        "a verbs client is served"
    );
}

#[test]
#[cfg_attr(
    not(hipfs_verbs),
    ignore = "needs an RDMA device: run in the soft-RoCE VM (mount-scripts/rdma-vm/; HIPFS_REQUIRE_VERBS=1)"
)]
fn userspace_registration_of_a_file_outside_any_hipfs_mount_is_refused_in_the_vm() {
    require_vm!();
    let _d = Driver::open().unwrap();
    // A hipfs mount exists in this process, the file is just not on it.
    let _fx = VerbsFixture::new();
    let dir = scratch();
    fs::write(dir.path().join("plain"), b"local").unwrap();
    let mut fh = FileHandle::new(
        dir.path().join("plain"),
        libc::O_RDONLY,
        0,
        FileHandleType::UserspaceFs,
    );
    let err = fh.open().unwrap_err();
    assert_eq!(err.op(), OpError::IoNotSupported, "{err}");
    assert!(err.to_string().contains("hipfs mount"), "{err}");
}
