//! `write_remote_from_file` on the TCP transport (loopback): the bytes of
//! the file land exactly where asked, a file shorter than asked is padded
//! and reported short without breaking the stream, bad ranges and keys are
//! refused like `write_remote`.

mod suite;

use std::fs::File;
use std::io::Write;
use std::os::fd::AsFd;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use hipfs_rdma::{Error, TransportConfig};
use suite::*;

fn env() -> Env {
    Env::tcp()
}

/// Four lanes and 64 KiB chunks, so a few hundred KiB already spread
/// over every lane.
fn striped() -> TransportConfig {
    TransportConfig {
        lanes: 4,
        chunk_size: 64 * 1024,
        ..env().cfg()
    }
}

/// A file of `len` pseudo-random bytes, removed on drop.
struct TempFile {
    path: PathBuf,
    file: File,
    bytes: Vec<u8>,
}

impl TempFile {
    fn new(name: &str, len: usize, seed: u64) -> TempFile {
        let mut x = seed | 1;
        let bytes: Vec<u8> = (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        let path =
            std::env::temp_dir().join(format!("hipfs-rdma-sendfile-{}-{name}", std::process::id()));
        File::create(&path).unwrap().write_all(&bytes).unwrap();
        let file = File::open(&path).unwrap();
        TempFile { path, file, bytes }
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

#[test]
fn bytes_sent_from_a_file_land_exactly_at_odd_offsets_and_lengths_across_lanes() {
    let p = pair_with(&env(), &striped());
    let f = TempFile::new("odd", 3 * (1 << 20) + 777, 11);
    let mut target = Buf::new(4 << 20);
    let (_r, desc) = share(&p, &target);
    // (file offset, length, remote offset): single bytes, sub-page, one
    // chunk exactly, many chunks with ragged ends, the whole file.
    let cases = [
        (0u64, 1usize, 0u64),
        (13, 4095, 7),
        (65_536, 65_536, 65_536),
        (4097, (1 << 20) + 3, 12_345),
        (1, 3 * (1 << 20) + 776, 99),
        (0, f.bytes.len(), 0),
    ];
    for (foff, len, roff) in cases {
        target.bytes_mut().fill(0xa5);
        let n = p
            .client
            .write_remote_from_file(f.file.as_fd(), foff, len, &desc, roff)
            .unwrap();
        assert_eq!(n, len, "case {foff}/{len}/{roff}");
        let t = target.bytes();
        let (a, b) = (roff as usize, roff as usize + len);
        assert_eq!(
            checksum(&t[a..b]),
            checksum(&f.bytes[foff as usize..foff as usize + len]),
            "case {foff}/{len}/{roff}"
        );
        assert!(t[..a].iter().all(|&x| x == 0xa5), "nothing before");
        assert!(t[b..].iter().all(|&x| x == 0xa5), "nothing after");
    }
    let total: usize = cases.iter().map(|c| c.1).sum();
    assert_eq!(p.client.stats().bytes_written, total as u64);
}

#[test]
fn many_threads_sending_from_one_file_at_once_all_land_intact() {
    let p = pair_with(&env(), &striped());
    let f = TempFile::new("threads", 8 << 20, 5);
    let target = Buf::new(8 << 20);
    let (_r, desc) = share(&p, &target);
    std::thread::scope(|s| {
        for i in 0..8u64 {
            let (p, f) = (&p, &f);
            s.spawn(move || {
                let at = i << 20;
                let n = p
                    .client
                    .write_remote_from_file(f.file.as_fd(), at, 1 << 20, &desc, at)
                    .unwrap();
                assert_eq!(n, 1 << 20);
            });
        }
    });
    assert_eq!(checksum(target.bytes()), checksum(&f.bytes));
}

#[test]
fn a_file_shorter_than_asked_is_padded_with_zeros_reported_short_and_the_stream_stays_usable() {
    let p = pair_with(&env(), &striped());
    let f = TempFile::new("short", 100_000, 7);
    let mut target = Buf::new(1 << 20);
    let (_r, desc) = share(&p, &target);

    // Ends inside the second of four chunks.
    target.bytes_mut().fill(0xff);
    let n = p
        .client
        .write_remote_from_file(f.file.as_fd(), 50_000, 200_000, &desc, 3)
        .unwrap();
    assert_eq!(n, 50_000, "only the bytes the file has count");
    let t = target.bytes();
    assert!(t[3..50_003] == f.bytes[50_000..]);
    assert!(t[50_003..200_003].iter().all(|&b| b == 0), "rest is zeros");
    assert!(t[200_003..].iter().all(|&b| b == 0xff), "nothing past len");

    // Starting past the end: nothing from the file, all zeros.
    target.bytes_mut().fill(0xff);
    let n = p
        .client
        .write_remote_from_file(f.file.as_fd(), 1 << 30, 70_000, &desc, 0)
        .unwrap();
    assert_eq!(n, 0);
    assert!(target.bytes()[..70_000].iter().all(|&b| b == 0));

    // Every lane still in step: control messages, region writes and more
    // sends from the file all work and land.
    p.client.send(b"after").unwrap();
    assert_eq!(p.server.recv(Duration::from_secs(10)).unwrap(), b"after");
    let mut src = Buf::new(300_000);
    src.fill(9);
    let sr = src.register(&*p.client);
    p.client.write_remote(&sr, 0, 300_000, &desc, 1).unwrap();
    assert!(target.bytes()[1..300_001] == src.bytes()[..]);
    let n = p
        .client
        .write_remote_from_file(f.file.as_fd(), 0, 100_000, &desc, 500_000)
        .unwrap();
    assert_eq!(n, 100_000);
    assert!(target.bytes()[500_000..600_000] == f.bytes[..]);
}

#[test]
fn sends_from_a_file_with_a_bad_range_or_key_are_refused_like_write_remote() {
    let p = pair_with(&env(), &striped());
    let f = TempFile::new("refused", 256 * 1024, 3);
    let target = Buf::new(64 * 1024);
    let (_r, desc) = share(&p, &target);

    // Past the end of the remote region: refused before anything is sent.
    let e = p
        .client
        .write_remote_from_file(f.file.as_fd(), 0, 4096, &desc, 64 * 1024 - 100)
        .unwrap_err();
    assert!(matches!(e, Error::OutOfRange { .. }), "{e}");
    let e = p
        .client
        .write_remote_from_file(f.file.as_fd(), u64::MAX - 10, 4096, &desc, 0)
        .unwrap_err();
    assert!(matches!(e, Error::InvalidArgument(_)), "{e}");

    // A forged length and a wrong key: the peer refuses and counts them.
    let forged = hipfs_rdma::RemoteDescriptor {
        len: desc.len * 4,
        ..desc
    };
    let e = p
        .client
        .write_remote_from_file(f.file.as_fd(), 0, 128 * 1024, &forged, 0)
        .unwrap_err();
    assert!(matches!(e, Error::RemoteRejected(_)), "{e}");
    let wrong = hipfs_rdma::RemoteDescriptor {
        rkey: desc.rkey ^ 0x5a5a,
        ..desc
    };
    let e = p
        .client
        .write_remote_from_file(f.file.as_fd(), 0, 4096, &wrong, 0)
        .unwrap_err();
    assert!(matches!(e, Error::RemoteRejected(_)), "{e}");
    // 128 KiB in 64 KiB chunks: the second chunk is outside the region,
    // the first inside; one refusal for it, one for the wrong key.
    assert_eq!(p.server.stats().remote_ops_rejected, 2);
    assert!(target.bytes()[..64 * 1024] == f.bytes[..64 * 1024]);

    // The connection is still good after refusals.
    let n = p
        .client
        .write_remote_from_file(f.file.as_fd(), 4096, 8192, &desc, 0)
        .unwrap();
    assert_eq!(n, 8192);
    assert!(target.bytes()[..8192] == f.bytes[4096..12_288]);
}

#[test]
fn the_caller_may_close_its_fd_as_soon_as_the_call_returns() {
    let p = pair_with(&env(), &striped());
    let f = TempFile::new("close", 300_000, 13);
    let target = Buf::new(300_000);
    let (_r, desc) = share(&p, &target);
    let own = File::open(&f.path).unwrap();
    let n = p
        .client
        .write_remote_from_file(own.as_fd(), 0, 300_000, &desc, 0)
        .unwrap();
    drop(own);
    assert_eq!(n, 300_000);
    assert!(target.bytes() == &f.bytes[..]);
}

/// Not a check: compares staging + write_remote with sending from the
/// file. `cargo test --release -p hipfs-rdma --test tcp_sendfile -- --ignored --nocapture`
#[test]
#[ignore]
fn throughput_of_sending_from_a_file_against_staging_and_write_remote() {
    let p = pair_with(&env(), &env().cfg());
    let size = 256usize << 20;
    let f = TempFile::new("speed", size, 1);
    let target = Buf::new(size);
    let (_r, desc) = share(&p, &target);
    // HIPFS_SF_PIECE=bytes: the request size (default 1 MiB, the client's).
    let piece: usize = std::env::var("HIPFS_SF_PIECE")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1 << 20);
    for round in 0..3 {
        for from_file in [false, true] {
            let t = Instant::now();
            std::thread::scope(|s| {
                for w in 0..4usize {
                    let (p, f) = (&p, &f);
                    s.spawn(move || {
                        let staging = Buf::new(piece);
                        let sr = staging.register(&*p.client);
                        let mut off = w * piece;
                        while off < size {
                            if from_file {
                                p.client
                                    .write_remote_from_file(
                                        f.file.as_fd(),
                                        off as u64,
                                        piece,
                                        &desc,
                                        off as u64,
                                    )
                                    .unwrap();
                            } else {
                                // SAFETY: staging holds at least `piece` writable bytes.
                                let n = unsafe {
                                    libc::pread(
                                        std::os::fd::AsRawFd::as_raw_fd(&f.file),
                                        staging.ptr().cast(),
                                        piece,
                                        off as i64,
                                    )
                                };
                                assert_eq!(n as usize, piece);
                                p.client
                                    .write_remote(&sr, 0, piece, &desc, off as u64)
                                    .unwrap();
                            }
                            off += 4 * piece;
                        }
                    });
                }
            });
            let gib = size as f64 / t.elapsed().as_secs_f64() / (1u64 << 30) as f64;
            println!("round {round} from_file={from_file}: {gib:.2} GiB/s");
        }
    }
    assert_eq!(checksum(target.bytes()), checksum(&f.bytes));
}
