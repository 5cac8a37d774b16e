//! Transport behaviour tests shared by the TCP tests (loopback, natively)
//! and the verbs tests (soft-RoCE in a VM): each function takes an [`Env`]
//! naming the transport and the address to listen on.
#![allow(dead_code)]

pub mod pki;
pub mod relay;

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use hipfs_rdma::{
    connect, listen, Connection, Error, Listener, LocalRegion, RemoteDescriptor, TlsConfig,
    TransportConfig, TransportKind,
};

pub struct Env {
    pub kind: TransportKind,
    /// `ip:port` to listen on (port 0 = any).
    pub bind: String,
    /// Size of the "large" transfer.
    pub big: usize,
    /// TLS for both sides (TCP only).
    pub tls: Option<TlsConfig>,
}

impl Env {
    /// Plain TCP on loopback.
    pub fn tcp() -> Env {
        Env {
            kind: TransportKind::Tcp,
            bind: "127.0.0.1:0".into(),
            big: 64 << 20,
            tls: None,
        }
    }

    pub fn cfg(&self) -> TransportConfig {
        TransportConfig {
            kind: self.kind,
            op_timeout: Duration::from_secs(20),
            tls: self.tls.clone(),
            ..TransportConfig::default()
        }
    }
}

pub struct Pair {
    pub listener: Box<dyn Listener>,
    pub server: Box<dyn Connection>,
    pub client: Box<dyn Connection>,
}

pub fn pair_with(env: &Env, cfg: &TransportConfig) -> Pair {
    let listener = listen(&env.bind, cfg).expect("listen");
    let addr = listener.local_addr();
    let (server, client) = thread::scope(|s| {
        let a = s.spawn(|| listener.accept().expect("accept"));
        let client = connect(&addr, cfg).expect("connect");
        (a.join().unwrap(), client)
    });
    Pair {
        listener,
        server,
        client,
    }
}

pub fn pair(env: &Env) -> Pair {
    pair_with(env, &env.cfg())
}

/// Page-aligned heap buffer (RDMA registration likes whole pages).
pub struct Buf {
    ptr: *mut u8,
    len: usize,
}
// SAFETY: Buf owns its allocation; moving it moves that ownership.
unsafe impl Send for Buf {}
// SAFETY: shared access only reads through bytes(), writes need &mut.
unsafe impl Sync for Buf {}
impl Buf {
    pub fn new(len: usize) -> Buf {
        let layout = std::alloc::Layout::from_size_align(len.max(1), 4096).unwrap();
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        assert!(!ptr.is_null());
        Buf { ptr, len }
    }
    pub fn ptr(&self) -> *mut u8 {
        self.ptr
    }
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: ptr..ptr+len is our live allocation.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as above, borrowed mutably.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
    pub fn fill(&mut self, seed: u64) {
        let mut x = seed | 1;
        for chunk in self.bytes_mut().chunks_mut(8) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let b = x.to_le_bytes();
            chunk.copy_from_slice(&b[..chunk.len()]);
        }
    }
    pub fn register(&self, c: &dyn Connection) -> Arc<LocalRegion> {
        // SAFETY: the buffer outlives every region the tests make of it.
        unsafe { c.register(self.ptr, self.len) }.expect("register")
    }
}
impl Drop for Buf {
    fn drop(&mut self) {
        let layout = std::alloc::Layout::from_size_align(self.len.max(1), 4096).unwrap();
        // SAFETY: allocated in new() with this layout.
        unsafe { std::alloc::dealloc(self.ptr, layout) };
    }
}

pub fn checksum(b: &[u8]) -> u64 {
    // FNV-1a over 8-byte words: cheap and order sensitive.
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for c in b.chunks(8) {
        let mut w = [0u8; 8];
        w[..c.len()].copy_from_slice(c);
        h ^= u64::from_le_bytes(w);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// The server registers `len` bytes and sends their descriptor.
pub fn share(p: &Pair, buf: &Buf) -> (Arc<LocalRegion>, RemoteDescriptor) {
    let r = buf.register(&*p.server);
    p.server.send(&r.descriptor().encode()).unwrap();
    let d = RemoteDescriptor::decode(&p.client.recv(Duration::from_secs(10)).unwrap()).unwrap();
    assert_eq!(d, r.descriptor());
    (r, d)
}

pub fn control_messages_arrive_in_order_and_recv_times_out_when_idle(env: &Env) {
    let p = pair(env);
    for i in 0..200u32 {
        p.client.send(&i.to_le_bytes()).unwrap();
    }
    for i in 0..200u32 {
        assert_eq!(
            p.server.recv(Duration::from_secs(10)).unwrap(),
            i.to_le_bytes()
        );
    }
    p.server.send(b"").unwrap();
    assert_eq!(p.client.recv(Duration::from_secs(10)).unwrap(), b"");
    let t = Instant::now();
    assert!(matches!(
        p.client.recv(Duration::from_millis(200)),
        Err(Error::Timeout(_))
    ));
    assert!(t.elapsed() < Duration::from_secs(3));
    let too_big = vec![0u8; env.cfg().max_message + 1];
    assert!(matches!(
        p.client.send(&too_big),
        Err(Error::MessageTooLarge { .. })
    ));
    let biggest = vec![7u8; env.cfg().max_message];
    p.client.send(&biggest).unwrap();
    assert_eq!(p.server.recv(Duration::from_secs(10)).unwrap(), biggest);
}

pub fn large_write_and_read_arrive_intact(env: &Env) {
    let p = pair(env);
    let n = env.big;
    let target = Buf::new(n);
    let (_tr, desc) = share(&p, &target);
    let mut src = Buf::new(n);
    src.fill(42);
    let sr = src.register(&*p.client);
    p.client.write_remote(&sr, 0, n, &desc, 0).unwrap();
    p.client.send(b"written").unwrap();
    assert_eq!(p.server.recv(Duration::from_secs(10)).unwrap(), b"written");
    // The ordering promise: the bytes are there when the message is.
    assert_eq!(checksum(target.bytes()), checksum(src.bytes()));

    let back = Buf::new(n);
    let br = back.register(&*p.client);
    p.client.read_remote(&br, 0, n, &desc, 0).unwrap();
    assert_eq!(checksum(back.bytes()), checksum(src.bytes()));
    assert!(back.bytes() == src.bytes());
}

pub fn many_concurrent_operations_from_many_threads_land_where_they_should(env: &Env) {
    let p = pair(env);
    let threads = 8;
    let per = 24;
    let slot = 64 * 1024 + 123; // odd size: pieces straddle chunk boundaries
    let n = threads * per * slot;
    let target = Buf::new(n);
    let (_tr, desc) = share(&p, &target);
    let mut src = Buf::new(n);
    src.fill(7);
    let sr = src.register(&*p.client);
    let back = Buf::new(n);
    let br = back.register(&*p.client);
    thread::scope(|s| {
        for t in 0..threads {
            let (c, sr, br, desc) = (&p.client, &sr, &br, &desc);
            s.spawn(move || {
                for i in 0..per {
                    let off = (t * per + i) * slot;
                    c.write_remote(sr, off, slot, desc, off as u64).unwrap();
                    c.read_remote(br, off, slot, desc, off as u64).unwrap();
                }
            });
        }
    });
    assert!(target.bytes() == src.bytes());
    assert!(back.bytes() == src.bytes());
}

pub fn out_of_range_and_wrong_key_operations_are_refused_and_touch_nothing(env: &Env) {
    let p = pair(env);
    let target = Buf::new(64 * 1024);
    let (_tr, desc) = share(&p, &target);
    let mut src = Buf::new(128 * 1024);
    src.fill(3);
    let sr = src.register(&*p.client);

    // Past the end of the remote region: refused before anything is sent.
    let e = p
        .client
        .write_remote(&sr, 0, 4096, &desc, 64 * 1024 - 100)
        .unwrap_err();
    assert!(matches!(e, Error::OutOfRange { .. }), "{e}");
    let e = p
        .client
        .read_remote(&sr, 0, 4096, &desc, u64::MAX - 10)
        .unwrap_err();
    assert!(matches!(e, Error::OutOfRange { .. }), "{e}");
    // Past the end of the local region.
    let e = p
        .client
        .write_remote(&sr, 128 * 1024 - 10, 4096, &desc, 0)
        .unwrap_err();
    assert!(matches!(e, Error::OutOfRange { .. }), "{e}");

    // A forged descriptor claiming more than was registered, and one with a
    // wrong key: the applying side refuses, the issuing side gets an error.
    let forged = RemoteDescriptor {
        len: desc.len * 2,
        ..desc
    };
    let e = p
        .client
        .write_remote(&sr, 0, 8192, &forged, desc.len)
        .unwrap_err();
    assert!(
        !matches!(e, Error::OutOfRange { .. }),
        "must be refused by the peer: {e}"
    );
    if env.kind == TransportKind::Tcp {
        let wrong = RemoteDescriptor {
            rkey: desc.rkey ^ 0x5a5a,
            ..desc
        };
        let e = p.client.write_remote(&sr, 0, 4096, &wrong, 0).unwrap_err();
        assert!(matches!(e, Error::RemoteRejected(_)), "{e}");
        let e = p.client.read_remote(&sr, 0, 4096, &wrong, 0).unwrap_err();
        assert!(matches!(e, Error::RemoteRejected(_)), "{e}");
        assert_eq!(p.server.stats().remote_ops_rejected, 3);
        // The connection is still good after refusals.
        p.client.write_remote(&sr, 0, 4096, &desc, 0).unwrap();
        assert!(target.bytes()[..4096] == src.bytes()[..4096]);
        assert!(target.bytes()[4096..].iter().all(|&b| b == 0));
    } else {
        // verbs: the HCA NAKs the access and both queue pairs break.
        assert!(target.bytes().iter().all(|&b| b == 0));
        let t = Instant::now();
        let e = p.server.recv(Duration::from_secs(10)).unwrap_err();
        assert!(
            matches!(e, Error::Disconnected(_)),
            "server side sees the failure: {e}"
        );
        assert!(t.elapsed() < Duration::from_secs(10));
    }
}

pub fn a_stale_key_is_refused_after_the_peer_deregisters(env: &Env) {
    let p = pair(env);
    let target = Buf::new(64 * 1024);
    let (tr, desc) = share(&p, &target);
    drop(tr);
    let src = Buf::new(4096);
    let sr = src.register(&*p.client);
    assert!(p.client.write_remote(&sr, 0, 4096, &desc, 0).is_err());
    assert!(target.bytes().iter().all(|&b| b == 0));
}

pub fn registering_the_same_range_twice_gives_the_same_region(env: &Env) {
    let p = pair(env);
    let b = Buf::new(1 << 20);
    let r1 = b.register(&*p.client);
    let r2 = b.register(&*p.client);
    assert!(Arc::ptr_eq(&r1, &r2));
    // SAFETY: `b` outlives the region (both dropped at the end of the test).
    let r3 = unsafe { p.client.register(b.ptr(), 4096) }.unwrap();
    assert!(!Arc::ptr_eq(&r1, &r3));
    // SAFETY: registration of NULL is refused before any memory is touched.
    assert!(unsafe { p.client.register(std::ptr::null_mut(), 10) }.is_err());
    // SAFETY: a zero-length registration is refused before any memory is touched.
    assert!(unsafe { p.client.register(b.ptr(), 0) }.is_err());
}

pub fn a_region_of_another_connection_is_not_a_valid_local_side(env: &Env) {
    let p1 = pair(env);
    let p2 = pair(env);
    let target = Buf::new(8192);
    let (_tr, desc) = share(&p1, &target);
    let other = Buf::new(8192);
    let foreign = other.register(&*p2.client);
    assert!(p1.client.write_remote(&foreign, 0, 4096, &desc, 0).is_err());
}

pub fn closing_one_side_fails_the_other_side_promptly_and_reconnecting_works(env: &Env) {
    let cfg = env.cfg();
    let listener = listen(&env.bind, &cfg).unwrap();
    let addr = listener.local_addr();
    for round in 0..3u8 {
        let (server, client) = thread::scope(|s| {
            let a = s.spawn(|| listener.accept().unwrap());
            let c = connect(&addr, &cfg).unwrap();
            (a.join().unwrap(), c)
        });
        client.send(&[round]).unwrap();
        assert_eq!(server.recv(Duration::from_secs(10)).unwrap(), [round]);
        let t = Instant::now();
        client.close();
        let e = server.recv(Duration::from_secs(15)).unwrap_err();
        assert!(matches!(e, Error::Disconnected(_)), "{e}");
        assert!(t.elapsed() < Duration::from_secs(10));
        assert!(matches!(client.send(b"x"), Err(Error::Disconnected(_))));
        let b = Buf::new(4096);
        // Registration may still work locally; one-sided ops must not.
        // SAFETY: `b` outlives the region.
        if let Ok(r) = unsafe { client.register(b.ptr(), 4096) } {
            let d = r.descriptor();
            assert!(matches!(
                client.write_remote(&r, 0, 10, &d, 0),
                Err(Error::Disconnected(_))
            ));
        }
    }
    listener.close();
    assert!(listener.accept().is_err());
}

pub fn a_peer_dying_mid_transfer_fails_every_pending_operation_within_the_deadline(env: &Env) {
    let mut cfg = env.cfg();
    cfg.op_timeout = Duration::from_secs(8);
    let p = pair_with(env, &cfg);
    let n = env.big;
    let target = Buf::new(n);
    let (_tr, desc) = share(&p, &target);
    let src = Buf::new(n);
    let sr = src.register(&*p.client);
    let start = Instant::now();
    thread::scope(|s| {
        let mut hs = Vec::new();
        for _ in 0..4 {
            hs.push(s.spawn(|| loop {
                if let Err(e) = p.client.write_remote(&sr, 0, n, &desc, 0) {
                    return (e, Instant::now());
                }
                assert!(start.elapsed() < Duration::from_secs(60), "never failed");
            }));
        }
        thread::sleep(Duration::from_millis(300));
        let killed = Instant::now();
        p.server.close();
        for h in hs {
            let (e, at) = h.join().unwrap();
            assert!(
                matches!(e, Error::Disconnected(_) | Error::Timeout(_)),
                "{e}"
            );
            assert!(at.duration_since(killed) <= cfg.op_timeout + Duration::from_secs(2));
        }
    });
}

const PEER_ENV: &str = "HIPFS_RDMA_TEST_PEER";

/// Body of the helper "test" each binary has: when started by
/// [`run_against_dying_peer`] it listens on the address in the env var,
/// prints it, accepts one connection, shares a 4 MiB region and serves
/// until it is killed. Started any other way it does nothing.
pub fn peer_process_main(kind: TransportKind) {
    let Ok(ip) = std::env::var(PEER_ENV) else {
        return;
    };
    let cfg = TransportConfig {
        kind,
        ..TransportConfig::default()
    };
    let l = listen(&format!("{ip}:0"), &cfg).unwrap();
    println!("ADDR {}", l.local_addr());
    std::io::stdout().flush().unwrap();
    let c = l.accept().unwrap();
    let b = Buf::new(4 << 20);
    let r = b.register(&*c);
    c.send(&r.descriptor().encode()).unwrap();
    loop {
        let _ = c.recv(Duration::from_secs(3600));
    }
}

fn spawn_peer(ip: &str) -> (std::process::Child, String) {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--ignored",
            "--exact",
            "helper_peer_process",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(PEER_ENV, ip)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let out = child.stdout.take().unwrap();
    let mut lines = BufReader::new(out).lines();
    let addr = loop {
        let l = lines.next().expect("peer exited").unwrap();
        // libtest prints "test helper_peer_process ... " before our line.
        if let Some((_, a)) = l.split_once("ADDR ") {
            break a.trim().to_string();
        }
    };
    thread::spawn(move || for _ in lines {});
    (child, addr)
}

/// Starts a peer process, keeps 4 threads writing to it, sends it
/// `signal` and returns how each writer failed and how long after the signal.
pub fn run_against_dying_peer(
    kind: TransportKind,
    ip: &str,
    signal: i32,
    op_timeout: Duration,
) -> Vec<(Error, Duration)> {
    let (mut child, addr) = spawn_peer(ip);
    let cfg = TransportConfig {
        kind,
        op_timeout,
        ..TransportConfig::default()
    };
    let c = connect(&addr, &cfg).unwrap();
    let desc = RemoteDescriptor::decode(&c.recv(Duration::from_secs(30)).unwrap()).unwrap();
    let src = Buf::new(desc.len as usize);
    let sr = src.register(&*c);
    let n = desc.len as usize;
    let results = thread::scope(|s| {
        let hs: Vec<_> = (0..4)
            .map(|_| {
                s.spawn(|| loop {
                    if let Err(e) = c.write_remote(&sr, 0, n, &desc, 0) {
                        return (e, Instant::now());
                    }
                })
            })
            .collect();
        thread::sleep(Duration::from_millis(500));
        let at = Instant::now();
        // SAFETY: a plain signal to our own child process.
        unsafe { libc::kill(child.id() as i32, signal) };
        hs.into_iter()
            .map(|h| {
                let (e, t) = h.join().unwrap();
                (e, t.duration_since(at))
            })
            .collect()
    });
    // SAFETY: as above.
    unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
    let _ = child.wait();
    results
}

pub fn messages_flow_both_ways_at_once_with_the_smallest_credit_window(env: &Env) {
    let cfg = TransportConfig {
        recv_credits: 2,
        ..env.cfg()
    };
    let p = pair_with(env, &cfg);
    let n = 300u32;
    thread::scope(|s| {
        for (a, b) in [(&p.client, &p.server), (&p.server, &p.client)] {
            s.spawn(move || {
                for i in 0..n {
                    a.send(&i.to_le_bytes()).unwrap();
                }
            });
            s.spawn(move || {
                for i in 0..n {
                    assert_eq!(b.recv(Duration::from_secs(20)).unwrap(), i.to_le_bytes());
                }
            });
        }
    });
}
