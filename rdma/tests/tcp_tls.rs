//! The TCP transport with TLS on every lane (loopback, a CA made at test
//! time): the shared transport suite over TLS, sends from a file (staged,
//! not sendfile), refusals (wrong CA, wrong name, plaintext client, TLS
//! client of a plaintext listener) and what is on the wire.

mod suite;

use std::fs::File;
use std::io::Write;
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use hipfs_rdma::{connect, listen, Error, TlsConfig, TransportConfig, TransportKind};
use suite::pki::Pki;
use suite::relay::Relay;
use suite::*;

fn env_with(pki: &Pki) -> Env {
    Env {
        kind: TransportKind::Tcp,
        bind: "127.0.0.1:0".into(),
        big: 64 << 20,
        tls: Some(pki.both()),
    }
}

fn tls_cfg(tls: Option<TlsConfig>) -> TransportConfig {
    TransportConfig {
        kind: TransportKind::Tcp,
        op_timeout: Duration::from_secs(10),
        tls,
        ..TransportConfig::default()
    }
}

/// Whether the listener hands out no connection in the next half second
/// (it is closed afterwards).
fn accepts_nothing(l: &dyn hipfs_rdma::Listener) -> bool {
    std::thread::scope(|s| {
        s.spawn(|| {
            std::thread::sleep(Duration::from_millis(500));
            l.close();
        });
        l.accept().is_err()
    })
}

#[test]
fn control_messages_arrive_in_order_over_tls() {
    let pki = Pki::localhost("msgs");
    suite::control_messages_arrive_in_order_and_recv_times_out_when_idle(&env_with(&pki));
    suite::messages_flow_both_ways_at_once_with_the_smallest_credit_window(&env_with(&pki));
}

#[test]
fn a_64_mib_write_and_read_arrive_intact_over_tls() {
    let pki = Pki::localhost("big");
    suite::large_write_and_read_arrive_intact(&env_with(&pki));
}

#[test]
fn many_concurrent_operations_land_where_they_should_over_tls() {
    let pki = Pki::localhost("many");
    suite::many_concurrent_operations_from_many_threads_land_where_they_should(&env_with(&pki));
}

#[test]
fn bad_ranges_and_keys_are_refused_over_tls_and_the_connection_stays_up() {
    let pki = Pki::localhost("refused");
    suite::out_of_range_and_wrong_key_operations_are_refused_and_touch_nothing(&env_with(&pki));
}

#[test]
fn closing_one_side_fails_the_other_promptly_over_tls() {
    let pki = Pki::localhost("close");
    suite::closing_one_side_fails_the_other_side_promptly_and_reconnecting_works(&env_with(&pki));
}

#[test]
fn sends_from_a_file_are_staged_and_land_intact_over_tls_short_files_padded() {
    let pki = Pki::localhost("file");
    let cfg = TransportConfig {
        lanes: 4,
        chunk_size: 64 * 1024,
        ..env_with(&pki).cfg()
    };
    let p = pair_with(&env_with(&pki), &cfg);
    let mut x = 77u64;
    let bytes: Vec<u8> = (0..(3 << 20) + 333)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    let path = pki.path().join("data");
    File::create(&path).unwrap().write_all(&bytes).unwrap();
    let f = File::open(&path).unwrap();
    let mut target = Buf::new(4 << 20);
    let (_r, desc) = share(&p, &target);
    let n = p
        .client
        .write_remote_from_file(f.as_fd(), 0, bytes.len(), &desc, 5)
        .unwrap();
    assert_eq!(n, bytes.len());
    assert!(target.bytes()[5..5 + bytes.len()] == bytes[..]);

    // Past the end of the file: the rest is zeros, reported short, and
    // the stream stays in step.
    target.bytes_mut().fill(0xff);
    let n = p
        .client
        .write_remote_from_file(f.as_fd(), (3 << 20) + 300, 100_000, &desc, 0)
        .unwrap();
    assert_eq!(n, 33);
    assert!(target.bytes()[..33] == bytes[(3 << 20) + 300..]);
    assert!(target.bytes()[33..100_000].iter().all(|&b| b == 0));
    p.client.send(b"still in step").unwrap();
    assert_eq!(
        p.server.recv(Duration::from_secs(10)).unwrap(),
        b"still in step"
    );
}

#[test]
fn a_client_that_trusts_another_ca_is_refused_naming_the_certificate_problem() {
    let pki = Pki::localhost("server");
    let other = Pki::localhost("other");
    let l = listen("127.0.0.1:0", &tls_cfg(Some(pki.server()))).unwrap();
    let t = Instant::now();
    let e = connect(&l.local_addr(), &tls_cfg(Some(other.client())))
        .err()
        .expect("must be refused");
    assert!(matches!(e, Error::Tls(_)), "{e}");
    let msg = e.to_string();
    assert!(
        msg.contains("UnknownIssuer") && msg.contains("not signed by the CA"),
        "{msg}"
    );
    assert!(t.elapsed() < Duration::from_secs(5));
    // A CA of the same name with another key: the signature does not hold.
    let namesake = Pki::localhost("server");
    let e = connect(&l.local_addr(), &tls_cfg(Some(namesake.client())))
        .err()
        .expect("must be refused");
    assert!(e.to_string().contains("not signed by the CA"), "{e}");
    assert!(accepts_nothing(&*l));
}

#[test]
fn a_certificate_for_another_name_is_refused() {
    let pki = Pki::new("name", &["server.example"]);
    let l = listen("127.0.0.1:0", &tls_cfg(Some(pki.server()))).unwrap();
    let e = connect(&l.local_addr(), &tls_cfg(Some(pki.client())))
        .err()
        .expect("127.0.0.1 is not in the certificate");
    assert!(e.to_string().contains("server name"), "{e}");
    // The same certificate is fine when the name asked for is its own.
    let named = TlsConfig {
        server_name: Some("server.example".into()),
        ..pki.client()
    };
    let addr = l.local_addr();
    std::thread::scope(|s| {
        let a = s.spawn(|| l.accept().unwrap());
        let c = connect(&addr, &tls_cfg(Some(named))).unwrap();
        let srv = a.join().unwrap();
        c.send(b"hi").unwrap();
        assert_eq!(srv.recv(Duration::from_secs(10)).unwrap(), b"hi");
    });
}

#[test]
fn a_plaintext_client_of_a_tls_listener_is_refused_with_a_clear_error() {
    let pki = Pki::localhost("plain");
    let l = listen("127.0.0.1:0", &tls_cfg(Some(pki.server()))).unwrap();
    let e = connect(&l.local_addr(), &tls_cfg(None))
        .err()
        .expect("must be refused");
    assert!(matches!(e, Error::Tls(_)), "{e}");
    assert!(e.to_string().contains("requires TLS"), "{e}");
    assert!(accepts_nothing(&*l));
}

#[test]
fn a_tls_client_of_a_plaintext_listener_fails_within_the_deadline() {
    let pki = Pki::localhost("tlsclient");
    let l = listen("127.0.0.1:0", &tls_cfg(None)).unwrap();
    let t = Instant::now();
    let e = connect(&l.local_addr(), &tls_cfg(Some(pki.client())))
        .err()
        .expect("must fail");
    assert!(matches!(e, Error::Tls(_) | Error::Timeout(_)), "{e}");
    assert!(t.elapsed() < Duration::from_secs(12));
}

#[test]
fn a_listener_with_a_missing_key_file_fails_to_listen() {
    let pki = Pki::localhost("missing");
    let bad = TlsConfig::server(&pki.cert, pki.path().join("nope.pem"));
    let e = listen("127.0.0.1:0", &tls_cfg(Some(bad))).err().unwrap();
    assert!(matches!(e, Error::Tls(_)), "{e}");
    assert!(e.to_string().contains("nope.pem"), "{e}");
}

/// Sends a distinctive message and region through a recording relay and
/// reports whether the relay saw either in the clear.
fn plaintext_on_the_wire(tls: Option<TlsConfig>) -> bool {
    let cfg = TransportConfig {
        lanes: 2,
        ..tls_cfg(tls)
    };
    let l = listen("127.0.0.1:0", &cfg).unwrap();
    let relay = Relay::start(&l.local_addr());
    let msg = b"HIPFS-SECRET-MESSAGE-0123456789".to_vec();
    let mut page = Buf::new(1 << 20);
    for (i, b) in page.bytes_mut().iter_mut().enumerate() {
        *b = b"HIPFS-SECRET-REGION-"[i % 20];
    }
    std::thread::scope(|s| {
        let a = s.spawn(|| l.accept().unwrap());
        let c = connect(&relay.addr, &cfg).unwrap();
        let srv = a.join().unwrap();
        let target = Buf::new(1 << 20);
        let tr = target.register(&*srv);
        srv.send(&tr.descriptor().encode()).unwrap();
        let desc = hipfs_rdma::RemoteDescriptor::decode(&c.recv(Duration::from_secs(10)).unwrap())
            .unwrap();
        let pr = page.register(&*c);
        c.write_remote(&pr, 0, 1 << 20, &desc, 0).unwrap();
        c.read_remote(&pr, 0, 1 << 20, &desc, 0).unwrap();
        assert!(target.bytes() == page.bytes());
        c.send(&msg).unwrap();
        assert_eq!(srv.recv(Duration::from_secs(10)).unwrap(), msg);
    });
    assert!(
        relay.bytes_seen() > 2 << 20,
        "the relay carried the traffic"
    );
    relay.saw(&msg) || relay.saw(b"HIPFS-SECRET-REGION-HIPFS-SECRET-REGION-")
}

#[test]
fn with_tls_neither_messages_nor_one_sided_data_cross_the_wire_in_the_clear() {
    // The relay does see plaintext without TLS (the check can fail)...
    assert!(plaintext_on_the_wire(None));
    // ...and nothing of it with TLS.
    let pki = Pki::localhost("wire");
    assert!(!plaintext_on_the_wire(Some(pki.both())));
}

#[test]
fn both_sides_writing_large_regions_to_each_other_at_once_over_one_tls_lane_never_deadlock() {
    // One lane: each side's sender and reader share one TLS session, and
    // both directions are full at once (each side's sender waits for room
    // while its reader must keep decrypting).
    let pki = Pki::localhost("both-ways");
    let cfg = TransportConfig {
        lanes: 1,
        ..env_with(&pki).cfg()
    };
    let p = pair_with(&env_with(&pki), &cfg);
    let n = 16 << 20;
    let (mut a, mut b) = (Buf::new(n), Buf::new(n));
    a.fill(1);
    b.fill(2);
    let (ta, tb) = (Buf::new(n), Buf::new(n));
    let (_ra, da) = share(&p, &ta); // server's region, written by the client
    let rb = tb.register(&*p.client);
    p.client.send(&rb.descriptor().encode()).unwrap();
    let db = hipfs_rdma::RemoteDescriptor::decode(&p.server.recv(Duration::from_secs(10)).unwrap())
        .unwrap();
    let (sa, sb) = (a.register(&*p.client), b.register(&*p.server));
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| p.client.write_remote(&sa, 0, n, &da, 0).unwrap());
            s.spawn(|| p.server.write_remote(&sb, 0, n, &db, 0).unwrap());
        }
    });
    assert!(ta.bytes() == a.bytes());
    assert!(tb.bytes() == b.bytes());
}
