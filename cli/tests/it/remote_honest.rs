//! Honest errors and timeouts (issue 15, item 4): a request that times out
//! never becomes a short read or write, `timeout=S` bounds a system call
//! as the user sees it on a `soft` mount, and `hard` mounts (the default)
//! wait for a stopped server and still let a killed reader go at once.
//!
//! Every test stops a `hipfs serve` child with SIGSTOP; the guard below
//! resumes and kills it whatever happens, so a failing test never leaves a
//! mount waiting on a stopped server.

use std::fs;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use crate::remote_common::{open_us, pattern};
use crate::serve::{spawn_server, ServerProcess};
use hipfs::remote::mount::{mount_remote, LocalMount, MountOptions};
use hipfs::{Buffer, Driver};

/// A server child that can be stopped; resumed and killed on drop.
struct Stoppable(ServerProcess);

impl Stoppable {
    fn signal(&self, sig: i32) {
        // SAFETY: signalling our own child process by its pid.
        unsafe { libc::kill(self.0.id() as i32, sig) };
    }
    /// Stops the server and waits until every thread of it has stopped:
    /// SIGSTOP takes effect asynchronously, and a thread still running
    /// could answer the request a test means to leave unanswered.
    fn stop(&self) {
        self.signal(libc::SIGSTOP);
        let tasks = format!("/proc/{}/task", self.0.id());
        let t = Instant::now();
        while !all_stopped(&tasks) {
            assert!(
                t.elapsed() < Duration::from_secs(5),
                "the server did not stop within 5 s"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    fn resume(&self) {
        self.signal(libc::SIGCONT);
    }
}

/// Whether every thread under `/proc/PID/task` is stopped (state `T`).
fn all_stopped(tasks: &str) -> bool {
    let Ok(dir) = fs::read_dir(tasks) else {
        return false;
    };
    dir.filter_map(Result::ok).all(|t| {
        fs::read_to_string(t.path().join("stat"))
            .ok()
            .and_then(|s| {
                s.rsplit_once(')')
                    .and_then(|(_, rest)| rest.trim_start().chars().next())
            })
            .is_some_and(|c| c == 'T' || c == 't')
    })
}

impl Drop for Stoppable {
    fn drop(&mut self) {
        self.resume();
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

const MIB: usize = 1 << 20;

/// A mount of a stoppable server. Dropping it resumes the server first, so
/// the mount's pending requests are answered and the unmount cannot wait
/// on a stopped server; then the server is killed.
struct Rig {
    mount: Option<LocalMount>,
    server: Stoppable,
    mnt: tempfile::TempDir,
    export: tempfile::TempDir,
}

impl Drop for Rig {
    fn drop(&mut self) {
        self.server.resume();
        if let Some(m) = self.mount.take() {
            let _ = m.unmount();
        }
    }
}

/// A server on an export holding `name` = `data`, and a mount of it with `opts`.
fn setup(name: &str, data: &[u8], opts: &str) -> Rig {
    let export = tempfile::tempdir().unwrap();
    let mnt = tempfile::tempdir().unwrap();
    // Written beside the mount: nothing of it is in the mount's page cache.
    fs::write(export.path().join(name), data).unwrap();
    let server = Stoppable(spawn_server(export.path(), 0, &["--transport", "tcp"]));
    let mut o = MountOptions::parse(opts).unwrap();
    o.transport = hipfs_rdma::TransportKind::Tcp;
    let m = mount_remote(&format!("127.0.0.1:{}", server.0.port), mnt.path(), &o).unwrap();
    Rig {
        mount: Some(m),
        server,
        mnt,
        export,
    }
}

/// What one read system call returned: its offset and its count or errno.
type ReadLog = Vec<(u64, Result<usize, i32>)>;

/// Reads `path` from the start in `chunk`-byte pread calls until end of
/// file or the first error (in a thread), stopping the server `stop_after`
/// into the reading for `stopped`. Returns every call's outcome and the
/// bytes read; panics if the reader is not done within `limit`.
fn read_across_a_stop(
    path: &std::path::Path,
    chunk: usize,
    server: &Stoppable,
    stop_after: Duration,
    stopped: Duration,
    limit: Duration,
) -> (ReadLog, Vec<u8>) {
    let f = fs::File::open(path).unwrap();
    let started = Arc::new(AtomicBool::new(false));
    let (tx, rx) = mpsc::channel();
    {
        let started = started.clone();
        std::thread::spawn(move || {
            let mut log = Vec::new();
            let mut all = Vec::new();
            let mut buf = vec![0u8; chunk];
            let mut off = 0u64;
            started.store(true, Ordering::SeqCst);
            loop {
                match f.read_at(&mut buf, off) {
                    Ok(0) => break,
                    Ok(n) => {
                        log.push((off, Ok(n)));
                        all.extend_from_slice(&buf[..n]);
                        off += n as u64;
                    }
                    Err(e) => {
                        log.push((off, Err(e.raw_os_error().unwrap_or(0))));
                        break;
                    }
                }
            }
            let _ = tx.send((log, all));
        });
    }
    while !started.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(1));
    }
    std::thread::sleep(stop_after);
    server.stop();
    std::thread::sleep(stopped);
    server.resume();
    match rx.recv_timeout(limit) {
        Ok(r) => r,
        Err(_) => panic!("the reader was not done {limit:?} after the server resumed"),
    }
}

#[test]
#[cfg_attr(
    not(hipfs_fuse),
    ignore = "needs FUSE: root and /dev/fuse (HIPFS_REQUIRE_FUSE=1 makes a missing one a failure)"
)]
fn a_direct_io_read_across_a_server_stop_on_a_hard_mount_returns_every_byte() {
    require_fuse!();
    let data = pattern(31, 96 * MIB);
    let rig = setup("big", &data, "direct_io,timeout=1");
    // The stop (2x the timeout) lands in the middle of the file.
    let (log, got) = read_across_a_stop(
        &rig.mnt.path().join("big"),
        8 * MIB,
        &rig.server,
        Duration::from_millis(150),
        Duration::from_secs(2),
        Duration::from_secs(60),
    );
    for (off, r) in &log {
        assert_eq!(*r, Ok(8 * MIB), "read at {off}: {log:?}");
    }
    assert!(got == data, "the bytes read differ from the file");
}

#[test]
#[cfg_attr(
    not(hipfs_fuse),
    ignore = "needs FUSE: root and /dev/fuse (HIPFS_REQUIRE_FUSE=1 makes a missing one a failure)"
)]
fn a_direct_io_read_across_a_server_stop_on_a_soft_mount_fails_or_completes_but_is_never_short() {
    require_fuse!();
    let data = pattern(37, 48 * MIB);
    let rig = setup("big", &data, "soft,direct_io,timeout=1");
    let mut failed = 0;
    // The issue saw 5 short reads in 12 trials; the stop lands at another
    // point of the reading each time.
    for trial in 0..12u64 {
        let (log, got) = read_across_a_stop(
            &rig.mnt.path().join("big"),
            8 * MIB,
            &rig.server,
            Duration::from_millis(20 + 15 * trial),
            Duration::from_secs(2),
            Duration::from_secs(30),
        );
        for (off, r) in &log {
            match r {
                Ok(n) => assert_eq!(*n, 8 * MIB, "trial {trial}: short read at {off}: {log:?}"),
                Err(e) => {
                    assert!(
                        [libc::EIO, libc::ETIMEDOUT].contains(e),
                        "trial {trial}: errno {e} at {off}"
                    );
                    failed += 1;
                }
            }
        }
        assert!(
            got[..] == data[..got.len()],
            "trial {trial}: wrong bytes read"
        );
    }
    eprintln!("{failed} of 12 trials failed with an error, none short");
    // A read that starts while the server is stopped (after a pause, so it
    // continues nothing) fails whole, within the timeout.
    rig.server.stop();
    std::thread::sleep(Duration::from_millis(300));
    let f = fs::File::open(rig.mnt.path().join("big"));
    let t = Instant::now();
    let r = f.and_then(|f| {
        let mut buf = vec![0u8; 8 * MIB];
        f.read_at(&mut buf, 8 * MIB as u64)
    });
    let took = t.elapsed();
    rig.server.resume();
    match r {
        Ok(n) => panic!("a read of a stopped server returned {n} bytes"),
        Err(e) => assert!(
            matches!(e.raw_os_error(), Some(libc::EIO | libc::ETIMEDOUT)),
            "{e:?}"
        ),
    }
    assert!(took < Duration::from_millis(1500), "took {took:?}");
}

#[test]
#[cfg_attr(
    not(hipfs_fuse),
    ignore = "needs FUSE: root and /dev/fuse (HIPFS_REQUIRE_FUSE=1 makes a missing one a failure)"
)]
fn a_page_cache_read_across_a_server_stop_on_a_soft_mount_fails_or_completes_but_is_never_short() {
    require_fuse!();
    let data = pattern(43, 48 * MIB);
    let rig = setup("big0", &data, "soft,timeout=1");
    // A file per trial: none of it is in the page cache yet. (Before the
    // fix, the kernel's page-cache read returned the folios read before a
    // failed one as a short count: 3 MiB of a 4 MiB read mid-file.)
    for trial in 1..6 {
        fs::write(rig.export.path().join(format!("big{trial}")), &data).unwrap();
    }
    for trial in 0..6u64 {
        let (log, got) = read_across_a_stop(
            &rig.mnt.path().join(format!("big{trial}")),
            4 * MIB,
            &rig.server,
            Duration::from_millis(20 + 25 * trial),
            Duration::from_secs(2),
            Duration::from_secs(30),
        );
        for (off, r) in &log {
            match r {
                Ok(n) => assert_eq!(*n, 4 * MIB, "trial {trial}: short read at {off}: {log:?}"),
                Err(e) => assert!(
                    [libc::EIO, libc::ETIMEDOUT].contains(e),
                    "trial {trial}: errno {e} at {off}"
                ),
            }
        }
        assert!(
            got[..] == data[..got.len()],
            "trial {trial}: wrong bytes read"
        );
    }
}

#[test]
#[cfg_attr(
    not(hipfs_fuse),
    ignore = "needs FUSE: root and /dev/fuse (HIPFS_REQUIRE_FUSE=1 makes a missing one a failure)"
)]
fn direct_io_writes_across_a_server_stop_on_a_soft_mount_fail_or_complete_but_are_never_short() {
    require_fuse!();
    let rig = setup("w", b"", "soft,direct_io,timeout=1");
    let chunk = 8 * MIB;
    let data = Arc::new(pattern(47, 48 * MIB));
    for trial in 0..6u64 {
        let f = fs::OpenOptions::new()
            .write(true)
            .open(rig.mnt.path().join("w"))
            .unwrap();
        let started = Arc::new(AtomicBool::new(false));
        let (tx, rx) = mpsc::channel();
        {
            let (started, data) = (started.clone(), data.clone());
            std::thread::spawn(move || {
                let mut log = Vec::new();
                started.store(true, Ordering::SeqCst);
                for (i, piece) in data.chunks(chunk).enumerate() {
                    let off = (i * chunk) as u64;
                    match f.write_at(piece, off) {
                        Ok(n) => log.push((off, Ok(n))),
                        Err(e) => {
                            log.push((off, Err(e.raw_os_error().unwrap_or(0))));
                            break;
                        }
                    }
                }
                let _ = tx.send(log);
            });
        }
        while !started.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(1));
        }
        std::thread::sleep(Duration::from_millis(20 + 25 * trial));
        rig.server.stop();
        std::thread::sleep(Duration::from_secs(2));
        rig.server.resume();
        let log = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("the writer was not done 30 s after the server resumed");
        let mut acked = 0;
        for (off, r) in &log {
            match r {
                Ok(n) => {
                    assert_eq!(*n, chunk, "trial {trial}: short write at {off}: {log:?}");
                    acked = off + *n as u64;
                }
                Err(e) => assert!(
                    [libc::EIO, libc::ETIMEDOUT].contains(e),
                    "trial {trial}: errno {e} at {off}"
                ),
            }
        }
        let on_server = fs::read(rig.export.path().join("w")).unwrap();
        let acked = acked as usize;
        assert!(
            on_server.len() >= acked && on_server[..acked] == data[..acked],
            "trial {trial}: acknowledged bytes missing or wrong on the server"
        );
    }
}

#[test]
#[cfg_attr(
    not(hipfs_fuse),
    ignore = "needs FUSE: root and /dev/fuse (HIPFS_REQUIRE_FUSE=1 makes a missing one a failure)"
)]
fn a_write_to_a_stopped_server_on_a_soft_mount_fails_within_the_timeout_not_twice_it() {
    require_fuse!();
    let rig = setup("f", b"", "soft,timeout=1,attr_timeout=0.3");
    let f = fs::OpenOptions::new()
        .write(true)
        .open(rig.mnt.path().join("f"))
        .unwrap();
    f.write_at(b"before", 0).unwrap();
    // Past the attribute timeout: the kernel asks the server for the
    // file's capability attribute again before the next write.
    std::thread::sleep(Duration::from_millis(600));
    rig.server.stop();
    let (tx, rx) = mpsc::channel();
    let t = Instant::now();
    std::thread::spawn(move || {
        let _ = tx.send(f.write_at(&[7u8; 4096], 0).map_err(|e| e.raw_os_error()));
    });
    let r = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("the write did not come back within 10 s");
    let took = t.elapsed();
    eprintln!("write to the stopped server: {r:?} after {took:?}");
    assert!(
        matches!(r, Err(Some(libc::ETIMEDOUT | libc::EIO))),
        "got {r:?}"
    );
    assert!(took < Duration::from_millis(1500), "took {took:?}");
    rig.server.resume();
}

#[test]
#[cfg_attr(
    not(hipfs_fuse),
    ignore = "needs FUSE: root and /dev/fuse (HIPFS_REQUIRE_FUSE=1 makes a missing one a failure)"
)]
fn a_large_userspace_read_from_a_stopped_server_fails_within_the_timeout_not_per_piece() {
    require_fuse!();
    let _d = Driver::open().unwrap();
    let len = 32 * MIB;
    let data = pattern(41, len);
    let rig = setup("f", &data, "soft,timeout=1");
    // The process-wide client UserspaceFs handles bind to (same server,
    // transport and lanes), made first so the handle gets its 1 s timeout.
    let addr = format!("127.0.0.1:{}", rig.server.0.port);
    let mut cc = hipfs::remote::client::ClientConfig::new(&addr);
    cc.timeout = Duration::from_secs(1);
    cc.transport = hipfs_rdma::TransportKind::Tcp;
    cc.lanes = hipfs::remote::client::userspace_lanes();
    let _client = hipfs::remote::client::shared_client(cc).unwrap();
    let fh = open_us(&rig.mnt.path().join("f"), libc::O_RDONLY);
    let mut mem = vec![0u8; len];
    let mut buf = Buffer::from_slice(&mut mem, 0);
    assert_eq!(fh.read(&mut buf, len, 0, 0).unwrap(), len);
    rig.server.stop();
    // Bounds the test if the read regresses to waiting for ever: the
    // server is resumed after 10 s (and the time check below fails).
    let done = Arc::new(AtomicBool::new(false));
    let spid = rig.server.0.id() as i32;
    {
        let done = done.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_secs(10));
            if !done.load(Ordering::SeqCst) {
                // SAFETY: signalling the test's own (still running) child.
                unsafe { libc::kill(spid, libc::SIGCONT) };
            }
        });
    }
    // More pieces (32 of 1 MiB) than lanes: queued pieces must not each
    // get a timeout of their own.
    let t = Instant::now();
    let r = fh.read(&mut buf, len, 0, 0);
    let took = t.elapsed();
    done.store(true, Ordering::SeqCst);
    eprintln!("userspace read from the stopped server: {r:?} after {took:?}");
    assert!(r.is_err(), "read {r:?} from a stopped server");
    assert!(took < Duration::from_millis(1500), "took {took:?}");
    rig.server.resume();
    drop(fh);
}

/// The state letter of process `pid` (`R`, `S`, `D`, ...) from /proc/PID/stat.
fn proc_state(pid: u32) -> Option<char> {
    let s = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    s.rsplit_once(')')?.1.trim_start().chars().next()
}

/// Runs `script` (`sh -c`, `$1` is the mount's file `f`: it may open it
/// first, then must wait for a line on stdin before the request that will
/// wait on the server), stops the server, lets the script go, checks it
/// still waits past the timeout (a hard mount retrying), kills it and
/// returns how long it took to leave.
fn killed_while_waiting_on_a_hard_mount(script: &str) -> Duration {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let rig = setup("f", &vec![5u8; 4 * MIB], "direct_io,timeout=1");
    fs::create_dir(rig.export.path().join("d")).unwrap();
    fs::write(rig.export.path().join("d/x"), b"x").unwrap();
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(script)
        .arg("sh")
        .arg(rig.mnt.path().join("f"))
        .current_dir(rig.mnt.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id();
    std::thread::sleep(Duration::from_millis(300));
    rig.server.stop();
    child.stdin.take().unwrap().write_all(b"go\n").unwrap();
    // Past the timeout: a hard mount is in its retry loop now.
    std::thread::sleep(Duration::from_millis(2500));
    assert!(
        child.try_wait().unwrap().is_none(),
        "{script}: a hard mount gave up on a stopped server"
    );
    assert!(
        matches!(proc_state(pid), Some('S' | 'D')),
        "{script}: not waiting ({:?})",
        proc_state(pid)
    );
    let killed = Instant::now();
    child.kill().unwrap();
    loop {
        if child.try_wait().unwrap().is_some() {
            break killed.elapsed();
        }
        assert!(
            killed.elapsed() < Duration::from_secs(5),
            "{script}: the killed process stayed in state {:?} for 5 s",
            proc_state(pid)
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
#[cfg_attr(
    not(hipfs_fuse),
    ignore = "needs FUSE: root and /dev/fuse (HIPFS_REQUIRE_FUSE=1 makes a missing one a failure)"
)]
fn a_sigkilled_reader_of_a_stopped_server_on_a_hard_mount_leaves_promptly() {
    require_fuse!();
    let gone =
        killed_while_waiting_on_a_hard_mount("exec 3< \"$1\"; read go; exec cat <&3 >/dev/null");
    eprintln!("killed reader gone after {gone:?}");
    assert!(gone < Duration::from_secs(1), "{gone:?}");
}

#[test]
#[cfg_attr(
    not(hipfs_fuse),
    ignore = "needs FUSE: root and /dev/fuse (HIPFS_REQUIRE_FUSE=1 makes a missing one a failure)"
)]
fn a_sigkilled_writer_lookup_and_readdir_of_a_stopped_server_on_a_hard_mount_leave_promptly() {
    require_fuse!();
    for script in [
        // A write (and the capability lookup the kernel sends before it).
        "exec 3<> \"$1\"; read go; exec dd if=/dev/zero bs=4k count=1 conv=notrunc >&3 2>/dev/null",
        // A lookup of a name the kernel has not seen.
        "read go; exec stat d/x",
        // A directory listing.
        "read go; exec ls -l d",
    ] {
        let gone = killed_while_waiting_on_a_hard_mount(script);
        eprintln!("{script}: killed, gone after {gone:?}");
        assert!(gone < Duration::from_secs(1), "{script}: {gone:?}");
    }
}

#[test]
#[cfg_attr(
    not(hipfs_fuse),
    ignore = "needs FUSE: root and /dev/fuse (HIPFS_REQUIRE_FUSE=1 makes a missing one a failure)"
)]
fn a_hard_mount_of_a_stopped_server_unmounts_while_a_reader_waits_on_it() {
    require_fuse!();
    let mut rig = setup("f", &vec![6u8; 4 * MIB], "direct_io,timeout=1");
    let f = fs::File::open(rig.mnt.path().join("f")).unwrap();
    rig.server.stop();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut buf = vec![0u8; MIB];
        let r = f.read_at(&mut buf, 0).map_err(|e| e.raw_os_error());
        drop(f);
        let _ = tx.send(r);
    });
    // Past the timeout: the request is in the hard mount's retry loop.
    std::thread::sleep(Duration::from_millis(1500));
    let m = rig.mount.take().unwrap();
    let t = Instant::now();
    let (done_tx, done_rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = done_tx.send(m.unmount().map_err(|e| e.to_string()));
    });
    let unmounted = done_rx
        .recv_timeout(Duration::from_secs(30))
        .expect("unmount did not return within 30 s");
    let took = t.elapsed();
    eprintln!("unmount with a reader waiting: {unmounted:?} after {took:?}");
    assert!(unmounted.is_ok(), "{unmounted:?}");
    // Without the teardown flag the retry loop held it until the
    // connection was aborted (5 s grace); with it, it returns at once
    // (milliseconds; the bound leaves room for a loaded 2-CPU machine).
    assert!(took < Duration::from_secs(4), "took {took:?}");
    let r = rx
        .recv_timeout(Duration::from_secs(5))
        .expect("the reader never came back");
    assert!(r.is_err(), "a read of a stopped server succeeded: {r:?}");
}
