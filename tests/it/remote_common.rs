//! Shared set-up of the remote end-to-end tests: a real server on loopback
//! and a real FUSE mount of it, in this process or as child processes.

#![allow(dead_code)]

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use hipfs::remote::mount::{mount_remote, LocalMount, MountOptions};
use hipfs::remote::server::{ServeConfig, Server};

/// Why these tests cannot run here, if they cannot.
pub fn fuse_missing() -> Option<String> {
    if !Path::new("/dev/fuse").exists() {
        return Some("/dev/fuse is missing".into());
    }
    // SAFETY: plain query.
    if unsafe { libc::geteuid() } != 0 {
        return Some("needs root (server identity switching, allow_other)".into());
    }
    None
}

/// Fails with the reason when FUSE tests cannot run here. The tests that use
/// it are ignored by the harness where the build found no FUSE
/// (`hipfs_fuse`), so reaching this without FUSE means HIPFS_REQUIRE_FUSE=1
/// asked for it. (The cli's test binary uses it; the core's, which has this
/// file too, does not.)
#[allow(unused_macros)]
macro_rules! require_fuse {
    () => {
        if let Some(why) = $crate::remote_common::fuse_missing() {
            panic!("{why}; this test is ignored without FUSE unless HIPFS_REQUIRE_FUSE=1");
        }
    };
}

/// A server exporting a fresh directory and a mount of it.
pub struct Fixture {
    pub export: tempfile::TempDir,
    pub mnt: tempfile::TempDir,
    pub server: Option<Server>,
    pub mount: Option<LocalMount>,
    pub addr: String,
}

impl Fixture {
    pub fn new() -> Fixture {
        Fixture::with(|_| {}, "")
    }

    /// Server round trips the fixture's mount made so far.
    #[allow(dead_code)]
    pub fn requests(&self) -> u64 {
        let line = self.mount.as_ref().unwrap().client.counters_line();
        let n = line.split(": ").nth(1).and_then(|r| r.split(' ').next());
        n.and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no request count in {line:?}"))
    }

    /// `tweak` adjusts the server config; `opts` are `-o` mount options.
    pub fn with(tweak: impl FnOnce(&mut ServeConfig), opts: &str) -> Fixture {
        let export = tempfile::tempdir().unwrap();
        let mnt = tempfile::tempdir().unwrap();
        let mut cfg = ServeConfig::new(export.path(), "127.0.0.1:0");
        cfg.transport = hipfs_rdma::TransportKind::Tcp;
        tweak(&mut cfg);
        let server = Server::start(cfg).unwrap();
        let addr = server.local_addr().to_string();
        let mut o = MountOptions::parse(opts).unwrap();
        o.transport = hipfs_rdma::TransportKind::Tcp;
        let mount = mount_remote(&addr, mnt.path(), &o).unwrap();
        Fixture {
            export,
            mnt,
            server: Some(server),
            mount: Some(mount),
            addr,
        }
    }

    pub fn m(&self, rel: &str) -> PathBuf {
        self.mnt.path().join(rel)
    }

    pub fn e(&self, rel: &str) -> PathBuf {
        self.export.path().join(rel)
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        if let Some(m) = self.mount.take() {
            let _ = m.unmount();
        }
        if let Some(s) = self.server.take() {
            s.shutdown(Duration::from_secs(2));
        }
    }
}

/// errno of a failed operation as a name-like string, or "ok".
pub fn outcome<T>(r: io::Result<T>) -> String {
    match r {
        Ok(_) => "ok".into(),
        Err(e) => match e.raw_os_error() {
            Some(n) => format!("errno {n} ({})", io::Error::from_raw_os_error(n)),
            None => format!("error {e}"),
        },
    }
}

pub fn cpath(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).unwrap()
}

/// `open(2)` returning the raw fd.
pub fn open_raw(p: &Path, flags: i32, mode: u32) -> io::Result<i32> {
    let c = cpath(p);
    // SAFETY: `c` is NUL-terminated.
    let fd = unsafe { libc::open(c.as_ptr(), flags | libc::O_CLOEXEC, mode) };
    if fd < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(fd)
    }
}

pub fn close(fd: i32) {
    // SAFETY: closing an fd the test owns.
    unsafe { libc::close(fd) };
}

pub use crate::common::pattern;

/// Waits until 100 ms and then a pass of `walk` ask the server nothing
/// (notices of the export's own changes and fetches ahead have settled:
/// the requests they make in the background count too); panics after 10 s.
pub fn settled(f: &Fixture, walk: impl Fn()) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let before = f.requests();
        std::thread::sleep(Duration::from_millis(100));
        walk();
        if f.requests() == before {
            return;
        }
        assert!(Instant::now() < deadline, "requests never settled");
    }
}

/// A raw protocol connection past the handshake, for sending hand-made
/// messages: it tags what it sends and checks what it receives as a real
/// client does (see `hipfs::remote::seal`).
pub struct RawConn {
    pub conn: Box<dyn hipfs_rdma::Connection>,
    pub seal: hipfs::remote::seal::Sealer,
    pub open: hipfs::remote::seal::Opener,
}

impl AsRef<RawConn> for RawConn {
    fn as_ref(&self) -> &RawConn {
        self
    }
}

impl RawConn {
    pub fn send(&self, msg: &[u8]) -> hipfs_rdma::Result<()> {
        self.seal.send(self.conn.as_ref(), msg.to_vec())
    }

    /// The next message, its tag checked.
    pub fn recv(&self, t: Duration) -> hipfs_rdma::Result<Vec<u8>> {
        let m = self.conn.recv(t)?;
        self.open
            .open(m)
            .map_err(|e| hipfs_rdma::Error::Protocol(e.to_string()))
    }
}

/// What a raw client authenticates with.
pub enum RawCred<'a> {
    /// A ticket from this local socket.
    Ticket(&'a Path),
    Token(&'a [u8]),
    FileCap([u8; 32]),
}

/// The handshake by hand: `Ok` with the connection, or the server's
/// refusal (or other failure) as text.
pub fn raw_handshake(addr: &str, cred: RawCred<'_>) -> Result<RawConn, String> {
    let lanes = hipfs::remote::server::transport_config(hipfs_rdma::TransportKind::Tcp).lanes;
    raw_handshake_lanes(addr, cred, lanes)
}

/// [`raw_handshake`] over `lanes` TCP streams. A refusal that comes before
/// the challenge (e.g. the server's connection limit) is returned too.
pub fn raw_handshake_lanes(addr: &str, cred: RawCred<'_>, lanes: usize) -> Result<RawConn, String> {
    raw_handshake_as(addr, cred, lanes, None)
}

/// [`raw_handshake_lanes`] speaking only protocol `version` (`None`: every
/// version this build speaks), as an older client would.
pub fn raw_handshake_as(
    addr: &str,
    cred: RawCred<'_>,
    lanes: usize,
    version: Option<u16>,
) -> Result<RawConn, String> {
    use hipfs::remote::auth::{secret_id, transcript, Token, CLIENT_PROOF};
    use hipfs::remote::proto::{Challenge, CredKind, Hello, Kind, Proof, Refused, Welcome};
    use hipfs::remote::seal::{Opener, Sealer};
    let mut cfg = hipfs::remote::server::transport_config(hipfs_rdma::TransportKind::Tcp);
    cfg.lanes = lanes;
    let conn = hipfs_rdma::connect(addr, &cfg).map_err(|e| e.to_string())?;
    let t = Duration::from_secs(5);
    let nonce = [7u8; 32];
    let mut hello = Hello::new(nonce);
    if let Some(v) = version {
        (hello.min_version, hello.max_version) = (v, v);
    }
    conn.send(&hello.encode()).map_err(|e| e.to_string())?;
    let first = conn.recv(t).map_err(|e| e.to_string())?;
    if Kind::of(&first) == Ok(Kind::Refused) {
        return Err(Refused::decode(&first).map_err(|e| e.to_string())?.reason);
    }
    let ch = Challenge::decode(&first).map_err(|e| e.to_string())?;
    let (kind, id, secret) = match cred {
        RawCred::Ticket(p) => {
            let s = hipfs::remote::server::fetch_ticket(p).map_err(|e| e.to_string())?;
            (CredKind::Ticket, secret_id(&s), Token::from_bytes(&s))
        }
        RawCred::Token(t) => (CredKind::Token, [0; 32], Token::from_bytes(t)),
        RawCred::FileCap(c) => (CredKind::FileCap, secret_id(&c), Token::from_bytes(&c)),
    };
    let tr = transcript(kind as u8, 0, &id, &ch.nonce, &nonce);
    conn.send(
        &Proof {
            kind,
            flags: 0,
            id,
            mac: secret.proof(CLIENT_PROOF, &tr),
        }
        .encode(),
    )
    .map_err(|e| e.to_string())?;
    let m = conn.recv(t).map_err(|e| e.to_string())?;
    if Kind::of(&m) == Ok(Kind::Refused) {
        return Err(Refused::decode(&m).map_err(|e| e.to_string())?.reason);
    }
    Welcome::decode(&m).map_err(|e| e.to_string())?;
    let (c2s, s2c) = secret.session_keys(&tr);
    Ok(RawConn {
        conn,
        seal: Sealer::new(Some(c2s)),
        open: Opener::new(Some(s2c)),
    })
}

/// The default local ticket socket of a server on `addr`.
pub fn local_socket_of(addr: &str) -> PathBuf {
    let port = hipfs::remote::auth::port_of(addr).unwrap();
    hipfs::remote::auth::default_local_socket(port)
}

/// A raw protocol connection that has passed the handshake with a local
/// ticket (as this process's user), for sending hand-made messages.
pub fn raw_connection(addr: &str) -> RawConn {
    raw_handshake(addr, RawCred::Ticket(&local_socket_of(addr))).unwrap()
}

/// Sends one raw message and decodes the reply.
pub fn raw_call(conn: &RawConn, msg: &[u8]) -> hipfs::remote::proto::Reply {
    conn.send(msg).unwrap();
    hipfs::remote::proto::Reply::decode(&conn.recv(Duration::from_secs(5)).unwrap()).unwrap()
}

/// A small deterministic generator for offsets and sizes.
pub fn lcg(x: &mut u64) -> u64 {
    *x = x
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    *x >> 17
}

/// A UserspaceFs handle on `path` (a file in a hipfs mount), opened.
pub fn open_us(path: &Path, flags: i32) -> hipfs::FileHandle {
    let mut fh = hipfs::FileHandle::new(path, flags, 0o644, hipfs::FileHandleType::UserspaceFs);
    fh.open().unwrap();
    fh
}

/// Reads up to `len` bytes at `off` through `fh` into fresh memory.
pub fn read_at(fh: &hipfs::FileHandle, len: usize, off: u64) -> Vec<u8> {
    let mut mem = vec![0u8; len];
    let mut buf = hipfs::Buffer::from_slice(&mut mem, 0);
    let n = fh.read(&mut buf, len, off as i64, 0).unwrap();
    drop(buf);
    mem.truncate(n);
    mem
}

/// How [`random_reads_match`] picks its reads.
pub struct RandomReads {
    /// Generator seed.
    pub seed: u64,
    /// Reads made.
    pub rounds: usize,
    /// Every `big_every`-th read is `big` bytes (the buffer's size)...
    pub big_every: usize,
    /// ...the others 1 to `max` bytes.
    pub max: usize,
    /// Offsets reach this far past the end (short and empty reads).
    pub past_end: u64,
}

/// Reads from `fh` into `buf` at random offsets and sizes and checks each
/// answer (count and bytes) against `data`, the file's contents; returns
/// the bytes moved.
pub fn random_reads_match(
    fh: &hipfs::FileHandle,
    buf: &mut hipfs::Buffer,
    data: &[u8],
    r: &RandomReads,
) -> usize {
    let size = data.len() as u64;
    let mut x = r.seed;
    let mut moved = 0;
    for i in 0..r.rounds {
        let len = if i % r.big_every == 0 {
            buf.len()
        } else {
            (lcg(&mut x) % r.max as u64) as usize + 1
        };
        let off = lcg(&mut x) % (size + r.past_end);
        let n = fh.read(buf, len, off as i64, 0).unwrap();
        let want = size.saturating_sub(off).min(len as u64) as usize;
        assert_eq!(n, want, "read {len} at {off}");
        // SAFETY: the buffer's memory is borrowed by `buf`, read after the call.
        let got = unsafe { std::slice::from_raw_parts(buf.ptr(), n) };
        assert!(
            got == &data[off as usize..off as usize + n],
            "bytes of read {len} at {off}"
        );
        moved += n;
    }
    moved
}

/// The mount's `hipfs stats` text (read through an attribute of its root).
pub fn mount_stats(mnt: &std::path::Path) -> String {
    let mut buf = vec![0u8; 64 * 1024];
    let n = rustix::fs::getxattr(
        mnt,
        hipfs::remote::client::backend::STATS_XATTR,
        &mut buf[..],
    )
    .unwrap_or_else(|e| panic!("stats of {}: {e}", mnt.display()));
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

/// A number the mount's `hipfs stats` text gives right before `what`.
pub fn stat_before(text: &str, what: &str) -> u64 {
    let at = text
        .find(what)
        .unwrap_or_else(|| panic!("no {what:?} in {text}"));
    text[..at]
        .split_whitespace()
        .last()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no number before {what:?} in {text}"))
}

/// A number the mount's `hipfs stats` text gives right after `what`.
pub fn stat_after(text: &str, what: &str) -> u64 {
    let at = text
        .find(what)
        .unwrap_or_else(|| panic!("no {what:?} in {text}"));
    text[at + what.len()..]
        .split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no number after {what:?} in {text}"))
}
