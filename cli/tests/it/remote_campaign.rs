//! The short fault campaign of multi-server mounts (CI): clients write and
//! read checksummed files through two multi-server mounts and the direct
//! path while servers are killed and restarted or frozen (SIGSTOP). It
//! asserts that no acknowledged write (fsync returned 0) is lost or wrong,
//! no read returns a wrong byte, and every error is a clean errno; it
//! prints what it did and checked. `scripts/fault-campaign.sh` is the long
//! one (cut and slowed links, a full disk).

use std::collections::BTreeMap;
use std::fs;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::remote_common::{lcg, pattern};
use crate::serve::{spawn_server, ServerProcess};
use hipfs::remote::mount::{mount_remote, MountOptions};

/// How long faults are injected.
const CHAOS: Duration = Duration::from_secs(15);
/// The mounts' timeout=: no operation may wait on a server much longer.
const TIMEOUT_S: u64 = 3;

/// Errnos a client may see while servers fail: the server could not be
/// reached or did not answer (EIO, ENOTCONN, ETIMEDOUT), a server's
/// handle was gone after its restart (ESTALE), the caller was interrupted.
const CLEAN: &[i32] = &[
    libc::EIO,
    libc::ENOTCONN,
    libc::ETIMEDOUT,
    libc::ESTALE,
    libc::EINTR,
];

/// An acknowledged file: name, pattern seed, length.
type Acked = (String, u64, usize);

#[derive(Default)]
struct Tally {
    faults: BTreeMap<&'static str, u64>,
    writes_acked: u64,
    bytes_acked: u64,
    write_errors: BTreeMap<i32, u64>,
    reads_checked: u64,
    bytes_checked: u64,
    read_errors: BTreeMap<i32, u64>,
    wrong: Vec<String>,
    unclean: Vec<String>,
    slowest: Duration,
    /// What was done to which server, in order.
    log: Vec<String>,
}

impl Tally {
    fn error(&mut self, write: bool, what: &str, e: &std::io::Error) {
        let errno = e.raw_os_error().unwrap_or(-1);
        let m = if write {
            &mut self.write_errors
        } else {
            &mut self.read_errors
        };
        *m.entry(errno).or_default() += 1;
        if !CLEAN.contains(&errno) {
            self.unclean.push(format!("{what}: {e}"));
        }
    }
}

fn signal(pid: u32, sig: i32) {
    // SAFETY: signalling our own child process by its pid.
    unsafe { libc::kill(pid as i32, sig) };
}

/// Writes `data` as `path`, acknowledged when fsync returns 0.
fn write_file(path: &Path, data: &[u8]) -> std::io::Result<()> {
    let mut f = fs::File::create(path)?;
    for chunk in data.chunks(256 << 10) {
        f.write_all(chunk)?;
    }
    f.sync_all()
}

fn read_file(path: &Path) -> std::io::Result<Vec<u8>> {
    let mut v = Vec::new();
    fs::File::open(path)?.read_to_end(&mut v)?;
    Ok(v)
}

/// Reads all of `path` through a UserspaceFs handle (the direct path).
fn read_direct(path: &Path, len: usize) -> std::io::Result<Vec<u8>> {
    let to_io = |e: hipfs::Error| std::io::Error::from_raw_os_error(e.errno().unwrap_or(libc::EIO));
    let mut fh =
        hipfs::FileHandle::new(path, libc::O_RDONLY, 0, hipfs::FileHandleType::UserspaceFs);
    fh.open().map_err(to_io)?;
    let mut mem = vec![0u8; len];
    let mut buf = hipfs::Buffer::from_slice(&mut mem, 0);
    let n = fh.read(&mut buf, len, 0, 0).map_err(to_io)?;
    drop(buf);
    mem.truncate(n);
    Ok(mem)
}

#[test]
#[cfg_attr(
    not(hipfs_fuse),
    ignore = "needs FUSE: root and /dev/fuse (HIPFS_REQUIRE_FUSE=1 makes a missing one a failure)"
)]
fn a_short_fault_campaign_over_three_servers_loses_no_acknowledged_write_and_reads_no_wrong_byte() {
    require_fuse!();
    let _d = hipfs::Driver::open().unwrap();
    let export = tempfile::tempdir().unwrap();
    let tcp = ["--transport", "tcp"];
    let servers: Arc<Mutex<Vec<ServerProcess>>> = Arc::new(Mutex::new(
        (0..3)
            .map(|_| spawn_server(export.path(), 0, &tcp))
            .collect(),
    ));
    let ports: Vec<u16> = servers.lock().unwrap().iter().map(|s| s.port).collect();
    let source = ports
        .iter()
        .map(|p| format!("127.0.0.1:{p}"))
        .collect::<Vec<_>>()
        .join(",");
    let mut o = MountOptions::parse(&format!("soft,timeout={TIMEOUT_S}")).unwrap();
    o.transport = hipfs_rdma::TransportKind::Tcp;
    let mnts: Vec<tempfile::TempDir> = (0..2).map(|_| tempfile::tempdir().unwrap()).collect();
    let mounts: Vec<_> = mnts
        .iter()
        .map(|m| mount_remote(&source, m.path(), &o).unwrap())
        .collect();
    let roots: Vec<PathBuf> = mnts.iter().map(|m| m.path().to_path_buf()).collect();

    let stop = Arc::new(AtomicBool::new(false));
    let tally = Arc::new(Mutex::new(Tally::default()));
    let acked: Arc<Mutex<Vec<Acked>>> = Arc::new(Mutex::new(Vec::new()));
    let serial = Arc::new(AtomicU64::new(0));
    let timed = |t: &Mutex<Tally>, took: Duration| {
        let mut t = t.lock().unwrap();
        t.slowest = t.slowest.max(took);
    };

    std::thread::scope(|s| {
        // Writers: one per mount.
        for (k, root) in roots.iter().enumerate() {
            let (stop, tally, acked, serial) = (&stop, &tally, &acked, &serial);
            s.spawn(move || {
                let mut x = 0x5eed + k as u64;
                while !stop.load(Ordering::SeqCst) {
                    let n = serial.fetch_add(1, Ordering::SeqCst);
                    let name = format!("w{k}-{n}");
                    let len = (lcg(&mut x) % (1 << 20)) as usize + 1;
                    let data = pattern(n + 1000, len);
                    let t = Instant::now();
                    let r = write_file(&root.join(&name), &data);
                    timed(tally, t.elapsed());
                    match r {
                        Ok(()) => {
                            acked.lock().unwrap().push((name, n + 1000, len));
                            let mut t = tally.lock().unwrap();
                            t.writes_acked += 1;
                            t.bytes_acked += len as u64;
                        }
                        Err(e) => tally.lock().unwrap().error(true, &name, &e),
                    }
                }
            });
        }
        // Readers: one per mount, one through the direct path; each reads
        // files the other mount's writer acknowledged too.
        for r in 0..3usize {
            let root = roots[r % 2].clone();
            let (stop, tally, acked) = (&stop, &tally, &acked);
            s.spawn(move || {
                let mut x = 0xbeef + r as u64;
                while !stop.load(Ordering::SeqCst) {
                    let pick = {
                        let a = acked.lock().unwrap();
                        (!a.is_empty()).then(|| a[(lcg(&mut x) as usize) % a.len()].clone())
                    };
                    let Some((name, seed, len)) = pick else {
                        std::thread::sleep(Duration::from_millis(20));
                        continue;
                    };
                    let t = Instant::now();
                    let got = if r == 2 {
                        read_direct(&root.join(&name), len)
                    } else {
                        read_file(&root.join(&name))
                    };
                    timed(tally, t.elapsed());
                    let mut t = tally.lock().unwrap();
                    match got {
                        Ok(d) if d == pattern(seed, len) => {
                            t.reads_checked += 1;
                            t.bytes_checked += len as u64;
                        }
                        Ok(d) => t.wrong.push(format!(
                            "reader {r}: {name}: {} bytes, want {len}, first difference at {:?}",
                            d.len(),
                            d.iter().zip(pattern(seed, len)).position(|(a, b)| *a != b)
                        )),
                        Err(e) => t.error(false, &name, &e),
                    }
                }
            });
        }
        // Faults: one at a time, each on a random server.
        let (stop, tally, servers) = (&stop, &tally, &servers);
        let export = export.path();
        s.spawn(move || {
            let start = Instant::now();
            let mut x = 0xfa17u64;
            while start.elapsed() < CHAOS {
                std::thread::sleep(Duration::from_millis(400 + lcg(&mut x) % 600));
                let i = (lcg(&mut x) % 3) as usize;
                let kind = if lcg(&mut x).is_multiple_of(2) {
                    "kill -9, restart 1 s later"
                } else {
                    "SIGSTOP 2 s, SIGCONT"
                };
                let pid = servers.lock().unwrap()[i].id();
                if kind.starts_with("kill") {
                    signal(pid, libc::SIGKILL);
                    let _ = servers.lock().unwrap()[i].wait();
                    std::thread::sleep(Duration::from_secs(1));
                    let fresh = spawn_server(export, ports[i], &tcp);
                    servers.lock().unwrap()[i] = fresh;
                } else {
                    signal(pid, libc::SIGSTOP);
                    std::thread::sleep(Duration::from_secs(2));
                    signal(pid, libc::SIGCONT);
                }
                let mut t = tally.lock().unwrap();
                *t.faults.entry(kind).or_default() += 1;
                t.log.push(format!(
                    "{:.1}s server {i}: {kind}",
                    start.elapsed().as_secs_f64()
                ));
            }
            stop.store(true, Ordering::SeqCst);
        });
    });

    // Every server up again: each acknowledged file is whole in the export,
    // and a quarter of them through a fresh open on each mount.
    let acked = acked.lock().unwrap().clone();
    let mut t = tally.lock().unwrap();
    for (name, seed, len) in &acked {
        let want = pattern(*seed, *len);
        let direct = fs::read(export.path().join(name));
        if direct.as_ref().ok() != Some(&want) {
            t.wrong
                .push(format!("acknowledged {name} lost or wrong in the export"));
        }
        // Through the mounts too, for a sample (the export is the truth).
        if !seed.is_multiple_of(4) {
            continue;
        }
        for root in &roots {
            match read_file(&root.join(name)) {
                Ok(d) if d == want => t.bytes_checked += *len as u64,
                Ok(_) => t
                    .wrong
                    .push(format!("{name} wrong through {}", root.display())),
                Err(e) => t.wrong.push(format!("{name} unreadable at the end: {e}")),
            }
        }
    }
    println!(
        "fault campaign ({CHAOS:?}, 3 servers, 2 mounts, 2 writers, 2 mount readers, 1 direct reader):\n  faults: {:?}\n  writes acknowledged: {} ({} bytes), failed: {:?} (errno: count)\n  reads checked: {}, failed: {:?}\n  bytes checked in all (with the final pass over {} files): {}\n  wrong or lost: {}, unclean errors: {}, slowest operation: {:?}",
        t.faults,
        t.writes_acked,
        t.bytes_acked,
        t.write_errors,
        t.reads_checked,
        t.read_errors,
        acked.len(),
        t.bytes_checked,
        t.wrong.len(),
        t.unclean.len(),
        t.slowest,
    );
    println!("  fault log: {:?}", t.log);
    for root in &roots {
        if let Ok(text) = hipfs_cli::remote_cmds::mount_stats(root) {
            println!("{text}");
        }
    }
    assert!(t.wrong.is_empty(), "wrong or lost: {:#?}", t.wrong);
    assert!(t.unclean.is_empty(), "unclean errors: {:#?}", t.unclean);
    assert!(
        t.faults.values().sum::<u64>() >= 5,
        "too few faults: {:?}",
        t.faults
    );
    assert!(
        t.writes_acked > 0 && t.reads_checked > 0,
        "nothing got through"
    );
    // No operation waited on a failed server much past the timeout.
    assert!(
        t.slowest < Duration::from_secs(6 * TIMEOUT_S),
        "an operation took {:?}",
        t.slowest
    );
    drop(t);
    for m in mounts {
        m.unmount().unwrap();
    }
}
