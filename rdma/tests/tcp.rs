//! The TCP transport on loopback: the shared transport suite, plus tests
//! that need a real second process (killed, stopped) and the `auto` choice.

mod suite;

use std::time::{Duration, Instant};

use hipfs_rdma::{connect, devices, Error, TransportConfig, TransportKind};
use suite::*;

fn env() -> Env {
    Env::tcp()
}

#[test]
fn control_messages_arrive_in_order_and_recv_times_out_when_idle() {
    suite::control_messages_arrive_in_order_and_recv_times_out_when_idle(&env());
}

#[test]
fn messages_flow_both_ways_at_once_with_the_smallest_credit_window() {
    suite::messages_flow_both_ways_at_once_with_the_smallest_credit_window(&env());
}

#[test]
fn a_64_mib_write_and_read_arrive_intact() {
    suite::large_write_and_read_arrive_intact(&env());
}

#[test]
fn many_concurrent_operations_from_many_threads_land_where_they_should() {
    suite::many_concurrent_operations_from_many_threads_land_where_they_should(&env());
}

#[test]
fn out_of_range_and_wrong_key_operations_are_refused_on_both_sides_and_touch_nothing() {
    suite::out_of_range_and_wrong_key_operations_are_refused_and_touch_nothing(&env());
}

#[test]
fn a_stale_key_is_refused_after_the_peer_deregisters() {
    suite::a_stale_key_is_refused_after_the_peer_deregisters(&env());
}

#[test]
fn registering_the_same_range_twice_gives_the_same_region() {
    suite::registering_the_same_range_twice_gives_the_same_region(&env());
}

#[test]
fn a_region_of_another_connection_is_not_a_valid_local_side() {
    suite::a_region_of_another_connection_is_not_a_valid_local_side(&env());
}

#[test]
fn closing_one_side_fails_the_other_side_promptly_and_reconnecting_works() {
    suite::closing_one_side_fails_the_other_side_promptly_and_reconnecting_works(&env());
}

#[test]
fn a_peer_closing_mid_transfer_fails_every_pending_operation_within_the_deadline() {
    suite::a_peer_dying_mid_transfer_fails_every_pending_operation_within_the_deadline(&env());
}

#[test]
fn dmabuf_registration_over_tcp_is_unsupported() {
    let p = pair(&env());
    // SAFETY: refused by TCP before the fd is used.
    let e = unsafe { p.client.register_dmabuf(0, 0, 4096, 0) }.unwrap_err();
    assert!(matches!(e, Error::Unsupported(_)));
}

#[test]
#[cfg_attr(hipfs_verbs, ignore = "this host has RDMA devices")]
fn auto_picks_tcp_on_a_host_without_rdma_devices() {
    assert!(
        devices().unwrap().is_empty(),
        "this host has RDMA devices; the test is for one without"
    );
    let e = Env {
        kind: TransportKind::Auto,
        ..env()
    };
    let p = pair(&e);
    assert_eq!(p.client.kind(), TransportKind::Tcp);
    assert_eq!(p.server.kind(), TransportKind::Tcp);
    let v = TransportConfig {
        kind: TransportKind::Verbs,
        ..TransportConfig::default()
    };
    assert!(matches!(connect("127.0.0.1:1", &v), Err(Error::NoDevice)));
}

#[test]
fn connecting_to_a_port_nobody_listens_on_is_an_error_not_a_hang() {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap().to_string();
    drop(l);
    let cfg = TransportConfig {
        kind: TransportKind::Tcp,
        op_timeout: Duration::from_secs(5),
        ..TransportConfig::default()
    };
    let t = Instant::now();
    assert!(connect(&addr, &cfg).is_err());
    assert!(connect("not an address", &cfg).is_err());
    assert!(t.elapsed() < Duration::from_secs(5));
}

#[test]
fn a_listener_that_is_not_hipfs_fails_the_handshake_within_the_deadline() {
    // A plain TCP server that accepts and says nothing.
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap().to_string();
    let _h = std::thread::spawn(move || {
        let mut keep = Vec::new();
        while let Ok((s, _)) = l.accept() {
            keep.push(s);
        }
    });
    let cfg = TransportConfig {
        kind: TransportKind::Tcp,
        lanes: 2,
        op_timeout: Duration::from_secs(2),
        ..TransportConfig::default()
    };
    let t = Instant::now();
    let e = connect(&addr, &cfg).err().expect("must fail");
    assert!(matches!(e, Error::Timeout(_)), "{e}");
    assert!(t.elapsed() < Duration::from_secs(5));
}

/// Not a test on its own: the peer process for the kill/stop tests.
#[test]
#[ignore]
fn helper_peer_process() {
    suite::peer_process_main(TransportKind::Tcp);
}

#[test]
fn a_peer_process_killed_mid_transfer_fails_every_pending_operation_promptly() {
    for (e, after) in run_against_dying_peer(
        TransportKind::Tcp,
        "127.0.0.1",
        libc::SIGKILL,
        Duration::from_secs(10),
    ) {
        assert!(matches!(e, Error::Disconnected(_)), "{e}");
        assert!(after < Duration::from_secs(5), "took {after:?}");
    }
}

#[test]
fn a_frozen_peer_process_makes_pending_operations_time_out_at_the_deadline() {
    let deadline = Duration::from_secs(2);
    for (e, after) in
        run_against_dying_peer(TransportKind::Tcp, "127.0.0.1", libc::SIGSTOP, deadline)
    {
        assert!(matches!(e, Error::Timeout(_)), "{e}");
        assert!(after < deadline + Duration::from_secs(2), "took {after:?}");
    }
}

#[test]
fn garbage_from_a_stranger_does_not_stop_the_listener() {
    use std::io::Write as _;
    let cfg = TransportConfig {
        kind: TransportKind::Tcp,
        op_timeout: Duration::from_secs(3),
        ..TransportConfig::default()
    };
    let l = hipfs_rdma::listen("127.0.0.1:0", &cfg).unwrap();
    let addr = l.local_addr();
    // Not a hello, a hello cut short, and a silent stranger.
    let mut junk = std::net::TcpStream::connect(&addr).unwrap();
    junk.write_all(&[0xffu8; 64]).unwrap();
    let mut short = std::net::TcpStream::connect(&addr).unwrap();
    short.write_all(b"HIPFSTCP").unwrap();
    let _silent = std::net::TcpStream::connect(&addr).unwrap();
    std::thread::scope(|s| {
        let a = s.spawn(|| l.accept().unwrap());
        let c = connect(&addr, &cfg).unwrap();
        let srv = a.join().unwrap();
        c.send(b"still fine").unwrap();
        assert_eq!(srv.recv(Duration::from_secs(5)).unwrap(), b"still fine");
    });
}

/// Small messages may skip the sender thread (written by the caller when
/// nothing is queued); large ones are queued. Neither may overtake a
/// message sent before it, from the same thread or, in each thread's own
/// order, from several.
#[test]
fn small_and_large_messages_from_several_threads_keep_each_threads_order() {
    let cfg = TransportConfig {
        max_message: 2 << 20,
        ..env().cfg()
    };
    let p = pair_with(&env(), &cfg);
    // Above what a caller writes itself: these go through the sender.
    let big = 1 << 20;
    let per_thread = 150u32;
    std::thread::scope(|s| {
        for t in 0..3u8 {
            let c = &p.client;
            s.spawn(move || {
                for i in 0..per_thread {
                    let mut m = vec![t];
                    m.extend_from_slice(&i.to_le_bytes());
                    if i.is_multiple_of(3) {
                        m.resize(big, 0xee);
                    }
                    c.send(&m).unwrap();
                }
            });
        }
        let mut next = [0u32; 3];
        for _ in 0..3 * per_thread {
            let m = p.server.recv(Duration::from_secs(20)).unwrap();
            let t = m[0] as usize;
            let i = u32::from_le_bytes([m[1], m[2], m[3], m[4]]);
            assert_eq!(i, next[t], "thread {t}: message {i} arrived out of order");
            assert_eq!(m.len(), if i.is_multiple_of(3) { big } else { 5 });
            next[t] += 1;
        }
    });
}

/// A message hook sees the messages queued before it was set, then each
/// new one, in order, on the receiving side's own thread; what it leaves
/// reaches `recv` in order too; it is dropped when the connection goes.
#[test]
fn a_message_hook_takes_messages_in_order_and_leaves_the_rest_to_recv() {
    use std::sync::mpsc::channel;
    let p = pair(&env());
    // Queued before the hook exists.
    for i in 0..3u8 {
        p.client.send(&[i]).unwrap();
    }
    // Most likely in the receive queue by now (the test holds either way).
    std::thread::sleep(Duration::from_millis(50));
    let deadline = Instant::now() + Duration::from_secs(5);
    let (seen_tx, seen_rx) = channel::<u8>();
    let dropped = std::sync::Arc::new(());
    let held = dropped.clone();
    p.server
        .set_message_hook(Box::new(move |m| {
            let _ = &held;
            seen_tx.send(m[0]).unwrap();
            // Odd ones are left to recv, changed on the way.
            (m[0] % 2 == 1).then(|| vec![m[0], 0xaa])
        }))
        .unwrap();
    assert!(matches!(
        p.server.set_message_hook(Box::new(|_| None)),
        Err(Error::InvalidArgument(_))
    ));
    for i in 3..10u8 {
        p.client.send(&[i]).unwrap();
    }
    for i in 0..10u8 {
        let left = deadline.saturating_duration_since(Instant::now());
        assert_eq!(seen_rx.recv_timeout(left).unwrap(), i);
    }
    for i in (1..10u8).step_by(2) {
        assert_eq!(p.server.recv(Duration::from_secs(5)).unwrap(), [i, 0xaa]);
    }
    assert!(matches!(
        p.server.recv(Duration::from_millis(50)),
        Err(Error::Timeout(_))
    ));
    p.client.close();
    while std::sync::Arc::strong_count(&dropped) > 1 {
        assert!(
            Instant::now() < deadline,
            "the hook outlived its connection"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A control message does not wait behind the bulk frames queued on its
/// lane: sent while a 256 MiB WRITE is going out on a one-lane connection,
/// it reaches the peer before the WRITE's last stripe (a reply or an
/// acknowledgment queued behind every stripe of a busy lane waited for all
/// of them). The WRITE still lands intact.
#[test]
fn a_control_message_overtakes_the_bulk_frames_queued_on_its_lane() {
    use std::sync::mpsc::channel;
    let cfg = TransportConfig {
        lanes: 1,
        ..env().cfg()
    };
    let p = pair_with(&env(), &cfg);
    let n = 256 << 20;
    let mut src = Buf::new(n);
    src.fill(11);
    src.bytes_mut()[n - 1] = 0x5a;
    let dst = Buf::new(n);
    let local = src.register(&*p.client);
    let registered = dst.register(&*p.server);
    let remote = registered.descriptor();
    let last = dst.ptr() as usize + n - 1;
    let (seen_tx, seen_rx) = channel::<bool>();
    p.server
        .set_message_hook(Box::new(move |_| {
            // The hook runs on the lane's reader, the thread that writes
            // the WRITE's bytes into `dst`: no other writer meanwhile.
            // SAFETY: `last` is the last byte of `dst`, alive until the
            // end of the test, after the connection is dropped.
            let landed = unsafe { std::ptr::read_volatile(last as *const u8) } != 0;
            seen_tx.send(landed).unwrap();
            None
        }))
        .unwrap();
    std::thread::scope(|s| {
        let c = &p.client;
        let local = &local;
        let remote = &remote;
        let write = s.spawn(move || c.write_remote(local, 0, n, remote, 0));
        // Long enough for every stripe to be queued, far too short for
        // 256 MiB to cross loopback.
        std::thread::sleep(Duration::from_millis(5));
        p.client.send(b"status?").unwrap();
        let landed = seen_rx.recv_timeout(Duration::from_secs(20)).unwrap();
        assert!(
            !landed,
            "the message arrived after the last stripe of the WRITE queued before it"
        );
        write.join().unwrap().unwrap();
    });
    assert_eq!(checksum(dst.bytes()), checksum(src.bytes()));
}
