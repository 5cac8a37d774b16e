//! UserspaceFs handles on a hipfs mount: reads and writes go from the
//! library to the server directly (no FUSE on the data path), checked
//! against the exported file.

use std::fs;
use std::os::unix::fs::FileExt;
use std::sync::Arc;
use std::time::Duration;

use crate::remote_common::{lcg, open_us, pattern, random_reads_match, Fixture, RandomReads};
use crate::serve::spawn_server;
use hipfs::remote::mount::{mount_remote, MountOptions};
use hipfs::{Buffer, Driver, FileHandle, FileHandleType, OpError};

#[test]
#[cfg_attr(
    not(hipfs_fuse),
    ignore = "needs FUSE: root and /dev/fuse (HIPFS_REQUIRE_FUSE=1 makes a missing one a failure)"
)]
fn userspace_reads_at_random_offsets_and_sizes_match_the_exported_file() {
    require_fuse!();
    let _d = Driver::open().unwrap();
    random_reads_match_the_exported_file(&Fixture::new());
}

#[test]
#[cfg_attr(
    not(hipfs_fuse),
    ignore = "needs FUSE: root and /dev/fuse (HIPFS_REQUIRE_FUSE=1 makes a missing one a failure)"
)]
fn userspace_reads_sent_from_the_file_by_the_server_match_the_exported_file() {
    require_fuse!();
    let _d = Driver::open().unwrap();
    // The server sends placed reads with sendfile instead of staging them,
    // including the reads that end past the end of the file.
    random_reads_match_the_exported_file(&Fixture::with(|c| c.send_from_file = true, ""));
}

fn random_reads_match_the_exported_file(fx: &Fixture) {
    let size = (24 << 20) + 12345;
    let data = pattern(21, size);
    fs::write(fx.e("data"), &data).unwrap();
    let fh = open_us(&fx.m("data"), libc::O_RDONLY);
    let mut mem = vec![0u8; 8 << 20];
    let mut buf = Buffer::from_slice(&mut mem, 0);
    let reads = RandomReads {
        seed: 99,
        rounds: 200,
        big_every: 10,
        max: 3 << 20,
        past_end: 4096,
    };
    random_reads_match(&fh, &mut buf, &data, &reads);
}

#[test]
#[cfg_attr(
    not(hipfs_fuse),
    ignore = "needs FUSE: root and /dev/fuse (HIPFS_REQUIRE_FUSE=1 makes a missing one a failure)"
)]
fn many_threads_on_one_handle_and_many_handles_on_one_file_read_correct_bytes() {
    require_fuse!();
    let _d = Driver::open().unwrap();
    let fx = Fixture::new();
    let size = 16 << 20;
    let data = Arc::new(pattern(33, size));
    fs::write(fx.e("shared"), &*data).unwrap();
    let one = open_us(&fx.m("shared"), libc::O_RDONLY);
    std::thread::scope(|s| {
        for t in 0..8u64 {
            let (one, data, fx) = (&one, data.clone(), &fx);
            s.spawn(move || {
                let own = open_us(&fx.m("shared"), libc::O_RDONLY);
                let mut mem = vec![0u8; 2 << 20];
                let mut buf = Buffer::from_slice(&mut mem, 0);
                let mut x = t + 1;
                for i in 0..40 {
                    let h = if i % 2 == 0 { one } else { &own };
                    let len = (lcg(&mut x) % (2 << 20)) as usize + 1;
                    let off = lcg(&mut x) % size as u64;
                    let n = h.read(&mut buf, len, off as i64, 0).unwrap();
                    let want = (size - off as usize).min(len);
                    assert_eq!(n, want);
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
    not(hipfs_fuse),
    ignore = "needs FUSE: root and /dev/fuse (HIPFS_REQUIRE_FUSE=1 makes a missing one a failure)"
)]
fn userspace_writes_at_random_offsets_land_in_the_exported_file() {
    require_fuse!();
    let _d = Driver::open().unwrap();
    let fx = Fixture::new();
    let size = 6 << 20;
    fs::write(fx.e("w"), vec![0u8; size]).unwrap();
    let mut expect = vec![0u8; size];
    let fh = open_us(&fx.m("w"), libc::O_RDWR);
    let mut x = 5u64;
    for i in 0..40u64 {
        let len = (lcg(&mut x) % (2 << 20)) as usize + 1;
        let off = (lcg(&mut x) % (size - len) as u64) as usize;
        let mut src = pattern(1000 + i, len);
        expect[off..off + len].copy_from_slice(&src);
        let buf = Buffer::from_slice(&mut src, 0);
        assert_eq!(fh.write(&buf, len, off as i64, 0).unwrap(), len);
    }
    assert!(
        fs::read(fx.e("w")).unwrap() == expect,
        "server file holds every write"
    );
    // Writes through the mount and through the library see each other.
    let f = fs::OpenOptions::new().write(true).open(fx.m("w")).unwrap();
    f.write_all_at(b"via mount", 100).unwrap();
    drop(f);
    let mut mem = vec![0u8; 9];
    let mut buf = Buffer::from_slice(&mut mem, 0);
    fh.read(&mut buf, 9, 100, 0).unwrap();
    // SAFETY: as above.
    assert_eq!(
        // SAFETY: the buffer holds at least 9 bytes, just filled by the read.
        unsafe { std::slice::from_raw_parts(buf.ptr(), 9) },
        b"via mount"
    );
}

#[test]
fn userspace_registration_of_a_file_outside_any_hipfs_mount_is_refused_with_io_not_supported() {
    let _d = Driver::open().unwrap();
    let dir = tempfile::tempdir().unwrap();
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

#[test]
#[cfg_attr(
    not(hipfs_fuse),
    ignore = "needs FUSE: root and /dev/fuse (HIPFS_REQUIRE_FUSE=1 makes a missing one a failure)"
)]
fn userspace_reads_fail_while_the_server_is_down_and_recover_after_a_restart() {
    require_fuse!();
    let _d = Driver::open().unwrap();
    let export = tempfile::tempdir().unwrap();
    let mnt = tempfile::tempdir().unwrap();
    let data = pattern(77, 4 << 20);
    fs::write(export.path().join("f"), &data).unwrap();
    let mut server = spawn_server(export.path(), 0, &[]);
    let port = server.port;
    let mut o = MountOptions::parse("soft,timeout=2").unwrap();
    o.transport = hipfs_rdma::TransportKind::Tcp;
    let addr = format!("127.0.0.1:{port}");
    let m = mount_remote(&addr, mnt.path(), &o).unwrap();
    // The process-wide client UserspaceFs handles bind to (same server,
    // transport and lanes), made first with a short deadline (the default is
    // 30 s) and kept alive so the handle shares it.
    let mut cc = hipfs::remote::client::ClientConfig::new(&addr);
    cc.timeout = Duration::from_secs(2);
    cc.transport = hipfs_rdma::TransportKind::Tcp;
    cc.lanes = hipfs::remote::client::userspace_lanes();
    let _client = hipfs::remote::client::shared_client(cc).unwrap();
    let fh = open_us(&mnt.path().join("f"), libc::O_RDONLY);
    let mut mem = vec![0u8; 1 << 20];
    let mut buf = Buffer::from_slice(&mut mem, 0);
    assert_eq!(fh.read(&mut buf, 1 << 20, 0, 0).unwrap(), 1 << 20);
    // SAFETY: signalling our own child.
    unsafe { libc::kill(server.id() as i32, libc::SIGKILL) };
    let _ = server.wait();
    // The failure must come after the deadline, not a hang.
    let t = std::time::Instant::now();
    assert!(fh.read(&mut buf, 1 << 20, 0, 0).is_err());
    assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
    let mut server = spawn_server(export.path(), port, &[]);
    let n = fh.read(&mut buf, 1 << 20, 2 << 20, 0).unwrap();
    assert_eq!(n, 1 << 20);
    // SAFETY: as above.
    assert!(unsafe { std::slice::from_raw_parts(buf.ptr(), n) } == &data[2 << 20..3 << 20]);
    drop(fh);
    m.unmount().unwrap();
    // SAFETY: signalling our own child.
    unsafe { libc::kill(server.id() as i32, libc::SIGKILL) };
    let _ = server.wait();
}

#[test]
#[cfg_attr(
    not(hipfs_fuse),
    ignore = "needs FUSE: root and /dev/fuse (HIPFS_REQUIRE_FUSE=1 makes a missing one a failure)"
)]
fn a_buffer_registered_for_rdma_after_binding_carries_the_connections_descriptor_and_reads_land_in_it(
) {
    require_fuse!();
    let _d = Driver::open().unwrap();
    let fx = Fixture::new();
    let size = (3 << 20) + 777;
    let data = pattern(55, size);
    fs::write(fx.e("desc"), &data).unwrap();
    let fh = open_us(&fx.m("desc"), libc::O_RDONLY);
    let mut mem = vec![0u8; 4 << 20];
    let base = mem.as_mut_ptr() as usize;
    let len = mem.len();
    let mut buf = Buffer::from_slice(&mut mem, hipfs::buffer::RDMA_REGISTER);
    buf.register().unwrap();
    let reg = hipfs::buffer::lookup(base).unwrap();
    let desc = reg
        .rdma_desc
        .get()
        .expect("a connected hipfs client gives the buffer a descriptor at registration");
    let d = hipfs_rdma::RemoteDescriptor::parse(desc).unwrap();
    assert_eq!((d.addr, d.len), (base as u64, len as u64), "{desc}");
    // Fixture mounts and serves with transport=tcp.
    assert_eq!(d.transport, hipfs_rdma::DescriptorTransport::Tcp, "{desc}");
    assert!(
        !reg.rdma_keepalive.lock().unwrap().is_empty(),
        "the transport registration is kept with the buffer"
    );
    drop(reg);
    // Reads at offsets inside the buffer use that registration.
    let mut x = 3u64;
    for i in 0..30 {
        let n_want = (lcg(&mut x) % (2 << 20)) as usize + 1;
        let boff = (lcg(&mut x) as usize) % (len - n_want);
        let off = if i == 0 {
            size as u64 - 100
        } else {
            lcg(&mut x) % size as u64
        };
        let n = fh.read(&mut buf, n_want, off as i64, boff as i64).unwrap();
        let want = (size as u64 - off).min(n_want as u64) as usize;
        assert_eq!(n, want, "read {n_want} at {off} into +{boff}");
        // SAFETY: the buffer's memory is `mem`, borrowed by `buf`, read after the call.
        let got = unsafe { std::slice::from_raw_parts(buf.ptr().add(boff), n) };
        assert!(
            got == &data[off as usize..off as usize + n],
            "bytes of read {i}"
        );
    }
}

#[test]
#[cfg_attr(
    not(hipfs_fuse),
    ignore = "needs FUSE: root and /dev/fuse (HIPFS_REQUIRE_FUSE=1 makes a missing one a failure)"
)]
fn a_buffer_registered_for_rdma_before_any_client_is_registered_on_first_read() {
    require_fuse!();
    let _d = Driver::open().unwrap();
    let fx = Fixture::new();
    let data = pattern(56, 1 << 20);
    fs::write(fx.e("lazy"), &data).unwrap();
    // Registered before this test's client exists (another test's client
    // may give it a descriptor; the unit tests in direct.rs check that the
    // first read registers it on the new connection).
    let mut mem = vec![0u8; 1 << 20];
    let base = mem.as_mut_ptr() as usize;
    let mut buf = Buffer::from_slice(&mut mem, hipfs::buffer::RDMA_REGISTER);
    buf.register().unwrap();
    let fh = open_us(&fx.m("lazy"), libc::O_RDONLY);
    assert_eq!(fh.read(&mut buf, 1 << 20, 0, 0).unwrap(), 1 << 20);
    // SAFETY: as above.
    assert!(unsafe { std::slice::from_raw_parts(buf.ptr(), 1 << 20) } == &data[..]);
    let reg = hipfs::buffer::lookup(base).unwrap();
    let d = hipfs_rdma::RemoteDescriptor::parse(reg.rdma_desc.get().unwrap()).unwrap();
    assert_eq!((d.addr, d.len), (base as u64, 1 << 20));
}

#[test]
#[cfg_attr(
    not(hipfs_fuse),
    ignore = "needs FUSE: root and /dev/fuse (HIPFS_REQUIRE_FUSE=1 makes a missing one a failure)"
)]
fn userspace_handles_on_a_tcp_mount_bind_a_client_with_the_mounts_transport() {
    require_fuse!();
    let _d = Driver::open().unwrap();
    let fx = Fixture::new();
    fs::write(fx.e("t"), b"transport").unwrap();
    let fh = open_us(&fx.m("t"), libc::O_RDONLY);
    // Each direct-path file has its own client (its capability is the
    // connection's credential); this one's is the newest.
    let clients = hipfs::remote::client::direct_clients();
    let client = clients
        .iter()
        .rev()
        .find(|c| c.server() == fx.addr)
        .expect("the handle's client");
    assert_eq!(client.transport(), hipfs_rdma::TransportKind::Tcp);
    let mut mem = vec![0u8; 9];
    let mut buf = Buffer::from_slice(&mut mem, 0);
    assert_eq!(fh.read(&mut buf, 9, 0, 0).unwrap(), 9);
    // SAFETY: as above.
    assert_eq!(
        // SAFETY: as above.
        unsafe { std::slice::from_raw_parts(buf.ptr(), 9) },
        b"transport"
    );
}

#[test]
#[cfg_attr(
    not(hipfs_fuse),
    ignore = "needs FUSE: root and /dev/fuse (HIPFS_REQUIRE_FUSE=1 makes a missing one a failure)"
)]
fn rdma_registered_host_buffers_get_the_transports_descriptor_while_a_hipfs_client_is_connected() {
    // What hipFileBufRegister (hipfile-capi, a crate over this one) builds
    // on: its process-local fallback descriptor only fills an empty slot.
    require_fuse!();
    let _d = Driver::open().unwrap();
    let fx = Fixture::new();
    fs::write(fx.e("c"), b"c abi").unwrap();
    let _fh = open_us(&fx.m("c"), libc::O_RDONLY);
    let mut mem = vec![0u8; 12288];
    let base = mem.as_mut_ptr() as usize;
    hipfs::buffer::buf_register(base, mem.len(), hipfs::buffer::RDMA_REGISTER).unwrap();
    let desc = hipfs::buffer::lookup(base)
        .unwrap()
        .rdma_desc
        .get()
        .unwrap()
        .clone();
    // Not the process-local `hipfs-rdma:v1:host:` fallback: what `desc_str`
    // hands a hipFileFSOps_t filesystem is the connection's own descriptor.
    assert!(desc.starts_with("hipfs-rdma:v1:tcp:"), "{desc}");
    let d = hipfs_rdma::RemoteDescriptor::parse(&desc).unwrap();
    assert_eq!((d.addr, d.len), (base as u64, 12288));
    hipfs::buffer::buf_deregister(base).unwrap();
}
