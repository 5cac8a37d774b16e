//! The verbs transport on a real RDMA device (soft-RoCE in a VM: run
//! `mount-scripts/rdma-vm/ci-verbs-tests.sh`, which builds with
//! `--features verbs-tests`). Elsewhere the harness reports every test here
//! as ignored (unless the build found an RDMA device); a test that runs
//! without a device fails.
#![cfg(feature = "verbs")]

mod suite;

use std::time::{Duration, Instant};

use hipfs_rdma::{
    connect, devices, listen, Error, RemoteDescriptor, TransportConfig, TransportKind,
};
use suite::*;

/// The verbs environment; a host without a device fails the test (these
/// tests are ignored where the build saw none).
fn env() -> Env {
    let devs = devices().expect("devices() must not fail");
    assert!(
        !devs.is_empty(),
        "no RDMA device on this host (run mount-scripts/rdma-vm/ci-verbs-tests.sh)"
    );
    // The IP of the interface the RDMA device sits on (the VM harness sets it).
    let ip = std::env::var("HIPFS_VM_IP")
        .or_else(|_| std::env::var("HIPFS_RDMA_TEST_IP"))
        .unwrap_or_else(|_| "127.0.0.1".into());
    Env {
        kind: TransportKind::Verbs,
        bind: format!("{ip}:0"),
        // Soft-RoCE under TCG moves ~35 MB/s: keep it small.
        big: 4 << 20,
        tls: None,
    }
}

macro_rules! verbs_test {
    ($name:ident, $suite:ident) => {
        #[test]
        #[cfg_attr(
            not(any(hipfs_verbs, feature = "verbs-tests")),
            ignore = "needs an RDMA device: run mount-scripts/rdma-vm/ci-verbs-tests.sh (soft-RoCE VM)"
        )]
        fn $name() {
            suite::$suite(&env());
        }
    };
}

verbs_test!(
    control_messages_arrive_in_order_and_recv_times_out_when_idle,
    control_messages_arrive_in_order_and_recv_times_out_when_idle
);
/// RNR NAKs sent or received by all devices (rxe exposes both counters).
fn rnr_naks() -> Option<u64> {
    let mut total = None;
    for dev in std::fs::read_dir("/sys/class/infiniband").ok()? {
        let dir = dev.ok()?.path().join("ports/1/hw_counters");
        for name in ["send_rnr_err", "rcvd_rnr_err"] {
            if let Ok(v) = std::fs::read_to_string(dir.join(name)) {
                *total.get_or_insert(0) += v.trim().parse::<u64>().ok()?;
            }
        }
    }
    total
}

#[test]
#[cfg_attr(
    not(any(hipfs_verbs, feature = "verbs-tests")),
    ignore = "needs an RDMA device: run mount-scripts/rdma-vm/ci-verbs-tests.sh (soft-RoCE VM)"
)]
fn messages_flow_both_ways_at_once_with_the_smallest_credit_window_and_no_rnr() {
    let e = env();
    let before = rnr_naks();
    suite::messages_flow_both_ways_at_once_with_the_smallest_credit_window(&e);
    suite::control_messages_arrive_in_order_and_recv_times_out_when_idle(&e);
    match (before, rnr_naks()) {
        // Credits mean a RECV is always posted: the adapter never NAKs.
        (Some(b), Some(a)) => assert_eq!(a, b, "receiver-not-ready NAKs happened"),
        _ => eprintln!("note: this device has no RNR counters; ordering checked only"),
    }
}
verbs_test!(
    a_4_mib_rdma_write_and_read_arrive_intact,
    large_write_and_read_arrive_intact
);
verbs_test!(
    many_concurrent_operations_over_several_qps_land_where_they_should,
    many_concurrent_operations_from_many_threads_land_where_they_should
);
verbs_test!(
    out_of_range_operations_are_refused_and_a_forged_range_breaks_the_connection_on_both_sides,
    out_of_range_and_wrong_key_operations_are_refused_and_touch_nothing
);
verbs_test!(
    a_stale_rkey_is_refused_after_the_peer_deregisters,
    a_stale_key_is_refused_after_the_peer_deregisters
);
verbs_test!(
    registering_the_same_range_twice_gives_the_same_memory_region,
    registering_the_same_range_twice_gives_the_same_region
);
verbs_test!(
    a_region_of_another_connection_is_not_a_valid_local_side,
    a_region_of_another_connection_is_not_a_valid_local_side
);
verbs_test!(
    closing_one_side_fails_the_other_side_promptly_and_reconnecting_works,
    closing_one_side_fails_the_other_side_promptly_and_reconnecting_works
);
verbs_test!(
    a_peer_closing_mid_transfer_fails_every_pending_operation_within_the_deadline,
    a_peer_dying_mid_transfer_fails_every_pending_operation_within_the_deadline
);

#[test]
#[cfg_attr(
    not(any(hipfs_verbs, feature = "verbs-tests")),
    ignore = "needs an RDMA device: run mount-scripts/rdma-vm/ci-verbs-tests.sh (soft-RoCE VM)"
)]
fn a_wrong_rkey_fails_the_operation_and_the_connection_on_both_sides() {
    let e = env();
    let p = pair(&e);
    let target = Buf::new(64 * 1024);
    let (_tr, desc) = share(&p, &target);
    let src = Buf::new(4096);
    let sr = src.register(&*p.client);
    let wrong = RemoteDescriptor {
        rkey: desc.rkey.wrapping_add(0x100),
        ..desc
    };
    let err = p.client.write_remote(&sr, 0, 4096, &wrong, 0).unwrap_err();
    assert!(
        matches!(err, Error::Completion(_) | Error::Disconnected(_)),
        "{err}"
    );
    let t = Instant::now();
    assert!(matches!(
        p.server.recv(Duration::from_secs(10)),
        Err(Error::Disconnected(_))
    ));
    assert!(t.elapsed() < Duration::from_secs(10));
    assert!(target.bytes().iter().all(|&b| b == 0));
}

#[test]
#[cfg_attr(
    not(any(hipfs_verbs, feature = "verbs-tests")),
    ignore = "needs an RDMA device: run mount-scripts/rdma-vm/ci-verbs-tests.sh (soft-RoCE VM)"
)]
fn a_tcp_descriptor_is_refused_on_a_verbs_connection() {
    let e = env();
    let p = pair(&e);
    let src = Buf::new(4096);
    let sr = src.register(&*p.client);
    let d = RemoteDescriptor {
        transport: hipfs_rdma::DescriptorTransport::Tcp,
        ..sr.descriptor()
    };
    assert!(matches!(
        p.client.write_remote(&sr, 0, 10, &d, 0),
        Err(Error::InvalidArgument(_))
    ));
}

#[test]
#[cfg_attr(
    not(any(hipfs_verbs, feature = "verbs-tests")),
    ignore = "needs an RDMA device: run mount-scripts/rdma-vm/ci-verbs-tests.sh (soft-RoCE VM)"
)]
fn auto_uses_verbs_when_a_device_exists() {
    let e = env();
    let cfg = TransportConfig {
        kind: TransportKind::Auto,
        ..e.cfg()
    };
    let p = pair_with(&e, &cfg);
    assert_eq!(p.client.kind(), TransportKind::Verbs);
    assert_eq!(p.server.kind(), TransportKind::Verbs);
}

#[test]
#[cfg_attr(
    not(any(hipfs_verbs, feature = "verbs-tests")),
    ignore = "needs an RDMA device: run mount-scripts/rdma-vm/ci-verbs-tests.sh (soft-RoCE VM)"
)]
fn dmabuf_registration_of_a_non_dmabuf_fd_is_an_error_not_a_crash() {
    let e = env();
    let p = pair(&e);
    let f = std::fs::File::open("/dev/null").unwrap();
    use std::os::fd::AsRawFd;
    // SAFETY: a registration attempt on /dev/null, which must fail; no
    // memory is touched.
    let r = unsafe { p.client.register_dmabuf(f.as_raw_fd(), 0, 4096, 0x1000) };
    assert!(r.is_err());
}

/// Not a test on its own: the peer process for the kill test.
#[test]
#[ignore]
fn helper_peer_process() {
    suite::peer_process_main(TransportKind::Verbs);
}

#[test]
#[cfg_attr(
    not(any(hipfs_verbs, feature = "verbs-tests")),
    ignore = "needs an RDMA device: run mount-scripts/rdma-vm/ci-verbs-tests.sh (soft-RoCE VM)"
)]
fn a_peer_process_killed_mid_transfer_fails_every_pending_operation_within_the_deadline() {
    let e = env();
    let ip = e.bind.rsplit_once(':').map(|x| x.0.to_string()).unwrap();
    let deadline = Duration::from_secs(10);
    for (err, after) in run_against_dying_peer(TransportKind::Verbs, &ip, libc::SIGKILL, deadline) {
        assert!(
            matches!(
                err,
                Error::Disconnected(_) | Error::Completion(_) | Error::Timeout(_)
            ),
            "{err}"
        );
        assert!(after < deadline + Duration::from_secs(2), "took {after:?}");
        eprintln!("writer failed {after:?} after the kill: {err}");
    }
}

const CROSS_PORT: u16 = 7471;

/// Two-VM mode, peer side (started by ci-verbs-tests.sh in the peer VM):
/// serves one connection, checks what the other host wrote.
#[test]
#[ignore]
fn verbs_cross_host_peer_server() {
    let ip = std::env::var("HIPFS_VM_IP").expect("run in the two-VM harness");
    let cfg = TransportConfig {
        kind: TransportKind::Verbs,
        ..TransportConfig::default()
    };
    let l = listen(&format!("{ip}:{CROSS_PORT}"), &cfg).unwrap();
    eprintln!("peer: listening on {}", l.local_addr());
    let c = l.accept().unwrap();
    let target = Buf::new(4 << 20);
    let r = target.register(&*c);
    c.send(&r.descriptor().encode()).unwrap();
    let m = c.recv(Duration::from_secs(120)).unwrap();
    let want = u64::from_le_bytes(m[..8].try_into().unwrap());
    let got = checksum(target.bytes());
    c.send(&got.to_le_bytes()).unwrap();
    assert_eq!(got, want, "bytes written by the other host differ");
    // Stay until the client hangs up.
    assert!(matches!(
        c.recv(Duration::from_secs(120)),
        Err(Error::Disconnected(_))
    ));
    eprintln!("peer: ok, checksum {got:#x}");
}

/// Two-VM mode, main side: a real cross-host RC connection.
#[test]
#[ignore]
fn verbs_cross_host_client() {
    let peer = std::env::var("HIPFS_VM_PEER_IP").expect("run in the two-VM harness");
    let cfg = TransportConfig {
        kind: TransportKind::Verbs,
        ..TransportConfig::default()
    };
    let start = Instant::now();
    let c = loop {
        match connect(&format!("{peer}:{CROSS_PORT}"), &cfg) {
            Ok(c) => break c,
            Err(e) if start.elapsed() < Duration::from_secs(90) => {
                eprintln!("waiting for the peer: {e}");
                std::thread::sleep(Duration::from_millis(500));
            }
            Err(e) => panic!("peer never came up: {e}"),
        }
    };
    let desc = RemoteDescriptor::decode(&c.recv(Duration::from_secs(60)).unwrap()).unwrap();
    let mut src = Buf::new(desc.len as usize);
    src.fill(99);
    let sr = src.register(&*c);
    let t = Instant::now();
    c.write_remote(&sr, 0, src.bytes().len(), &desc, 0).unwrap();
    let secs = t.elapsed().as_secs_f64();
    c.send(&checksum(src.bytes()).to_le_bytes()).unwrap();
    let theirs = c.recv(Duration::from_secs(60)).unwrap();
    assert_eq!(
        u64::from_le_bytes(theirs[..8].try_into().unwrap()),
        checksum(src.bytes())
    );
    let back = Buf::new(desc.len as usize);
    let br = back.register(&*c);
    c.read_remote(&br, 0, back.bytes().len(), &desc, 0).unwrap();
    assert!(back.bytes() == src.bytes());
    eprintln!(
        "cross-host: wrote {} bytes in {secs:.2}s ({:.1} MB/s), read back intact",
        desc.len,
        desc.len as f64 / secs / 1e6
    );
    c.close();
}
