//! A TCP-transport connection: `lanes` streams, each with a reader thread
//! (applies or completes incoming frames, never blocks on a write) and a
//! sender thread (the only writer of its stream).

use std::collections::HashMap;
use std::net::{Shutdown, TcpStream};
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crossbeam_channel::{bounded, select, unbounded, Receiver, RecvTimeoutError, Sender};

mod lanes;

use super::frame::{FrameKind, Header, HEADER_LEN};
use super::gate::{cost, ByteGate, GateRefusal};
use super::regions::{KeyTable, Range, Slot};
use super::stream::{self, TxStream};
use crate::descriptor::DescriptorTransport;
use crate::region::RegionCache;
use crate::{
    Connection, ConnectionStats, Error, LocalRegion, MessageHook, RemoteDescriptor, Result,
    TransportKind,
};

/// Work for a lane's sender thread.
enum Job {
    Msg(Vec<u8>),
    /// WRITE frame; the payload comes from the local slot at `local`.
    Write {
        hdr: Header,
        slot: Arc<Slot>,
        local: u64,
    },
    /// WRITE frame; the payload is `hdr.len` bytes of `src`'s file at
    /// `off` past the operation's start (sent with sendfile).
    WriteFile {
        hdr: Header,
        src: Arc<FileSource>,
        off: u64,
    },
    /// A header alone (READ_REQ, WRITE_ACK).
    Header(Header),
    /// Answer a READ_REQ: validated and sent under the region's lock.
    ReadResp(Header),
}

/// The file a `write_remote_from_file` sends from, shared by its chunks.
struct FileSource {
    /// A dup of the caller's fd: if the caller gives up (timeout) and
    /// closes its own, chunks still queued read this file, never whatever
    /// file reuses the number.
    fd: OwnedFd,
    /// File offset of the operation's first byte.
    start: u64,
    /// Length of the prefix of the operation that holds file data: the
    /// whole length unless some chunk ran short (then padded with zeros).
    valid: AtomicU64,
}

/// The local side of a one-sided operation.
enum Local<'a> {
    /// write_remote: from this region at this offset.
    Write(&'a LocalRegion, usize),
    /// read_remote: into this region at this offset.
    Read(&'a LocalRegion, usize),
    /// write_remote_from_file.
    File(Arc<FileSource>),
}

/// [`Local`] once checked: regions resolved to their slot and address.
enum Side {
    Write(Arc<Slot>, u64),
    Read(Arc<Slot>, u64),
    File(Arc<FileSource>),
}

/// A piece of a one-sided operation waiting for the peer's answer.
enum Pending {
    Write {
        done: Arc<OpDone>,
    },
    Read {
        done: Arc<OpDone>,
        slot: Arc<Slot>,
        local: u64,
        len: u64,
    },
}

impl Pending {
    fn done(&self) -> &OpDone {
        match self {
            Pending::Write { done } | Pending::Read { done, .. } => done,
        }
    }
}

/// Where the pieces of one operation report: the caller is woken once,
/// when every piece has its outcome (acknowledged, refused, or failed with
/// the connection), with the first failure or success. Not at the first
/// failure: a piece on another lane may still be landing then (in the
/// caller's memory, for a READ), and the caller may reuse that memory as
/// soon as it is woken.
struct OpDone {
    /// Pieces without an outcome yet.
    left: AtomicUsize,
    /// The first failure among the pieces.
    failed: Mutex<Option<Error>>,
    /// Holds the one outcome the caller reads.
    tx: Sender<Result<()>>,
}

impl OpDone {
    fn new(pieces: usize, tx: Sender<Result<()>>) -> OpDone {
        OpDone {
            left: AtomicUsize::new(pieces),
            failed: Mutex::new(None),
            tx,
        }
    }

    fn report(&self, r: Result<()>) {
        if let Err(e) = r {
            let mut f = self.failed.lock().unwrap_or_else(|p| p.into_inner());
            f.get_or_insert(e);
        }
        if self.left.fetch_sub(1, Ordering::AcqRel) == 1 {
            let failed = self.failed.lock().unwrap_or_else(|p| p.into_inner()).take();
            let _ = self.tx.try_send(failed.map_or(Ok(()), Err));
        }
    }
}

#[derive(Default)]
struct PendingTable {
    /// Why the connection died; set once, under the same lock as `ops`,
    /// so no operation can be added after the failure sweep.
    dead: Option<String>,
    ops: HashMap<u64, Pending>,
}

/// A lane after its hello: the socket, and the TLS session on it when the
/// connection uses TLS.
pub(crate) struct LaneSock {
    pub stream: TcpStream,
    pub tls: Option<rustls::Connection>,
}

struct Lane {
    stream: TcpStream,
    /// Bulk frames (WRITE and READ answers, with their payload).
    jobs: Sender<Job>,
    /// Control messages and bare headers (READ_REQ, WRITE_ACK): the sender
    /// takes these before any bulk frame queued, so a reply or an
    /// acknowledgment waits for at most the one frame on the wire, not
    /// for every stripe queued on the lane. Safe because no control
    /// message depends on a bulk frame still queued: a one-sided
    /// operation returns only once the peer answered every frame of it.
    urgent: Sender<Job>,
    /// The stream's writing half: the sender thread's, except that `send`
    /// writes a small message itself when nothing urgent is queued (see
    /// [`DIRECT_SEND_MAX`]).
    tx: Mutex<TxStream>,
    /// Urgent jobs queued for the sender and not yet written: a message may
    /// skip the queue only when this is zero, so it never overtakes one
    /// queued before it (by the same thread or any other).
    queued: AtomicUsize,
}

impl Job {
    /// Whether the job goes before bulk frames (see [`Lane::urgent`]).
    fn is_urgent(&self) -> bool {
        matches!(self, Job::Msg(_) | Job::Header(_))
    }
}

/// Largest control message `send` writes on the caller's thread when lane
/// 0 has nothing urgent queued. Handing it to the sender thread instead costs a
/// thread wake-up on each side of every request and reply, which on a
/// small or virtual machine is a large part of a metadata round trip.
/// Larger messages (and everything while the queue is not empty) still go
/// through the sender, so a caller never writes more than this while
/// another waits.
const DIRECT_SEND_MAX: usize = 64 * 1024;
/// Messages up to this size go out with their header in one send.
const JOINED_SEND_MAX: usize = 16 * 1024;

pub(crate) struct Shared {
    lanes: Vec<Lane>,
    keys: Arc<KeyTable>,
    cache: RegionCache<(usize, usize)>,
    pending: Mutex<PendingTable>,
    next_op: AtomicU64,
    next_lane: AtomicUsize,
    msg_tx: Sender<Vec<u8>>,
    msg_rx: Receiver<Vec<u8>>,
    dead_tx: Mutex<Option<Sender<()>>>,
    dead_rx: Receiver<()>,
    dead: AtomicBool,
    max_message: usize,
    /// The stripe unit: the smallest piece a one-sided operation is split
    /// into (see [`piece_len`]).
    chunk: usize,
    /// One-sided operations of this side in flight (for [`piece_len`]).
    active: AtomicUsize,
    op_timeout: Duration,
    /// Control messages queued for lane 0's sender: `send` waits (up to
    /// `op_timeout`) while full, so a peer that stops reading cannot make
    /// this side queue replies without end.
    out_gate: ByteGate,
    /// Control messages received and not yet taken by `recv`: lane 0's
    /// reader stops reading its stream while full, so a peer flooding
    /// requests meets TCP backpressure instead of growing this queue.
    in_gate: ByteGate,
    /// Takes control messages on lane 0's reader before they are queued
    /// (see [`Connection::set_message_hook`]); cleared when that reader
    /// ends, so a hook holding this connection does not keep it alive.
    hook: Mutex<Option<MessageHook>>,
    peer: String,
    rejected: AtomicU64,
    written: AtomicU64,
    read: AtomicU64,
    sent: AtomicU64,
}

/// A connection of the TCP transport.
pub struct TcpConnection {
    shared: Arc<Shared>,
}

pub(crate) struct ConnParams {
    pub max_message: usize,
    pub chunk: usize,
    pub op_timeout: Duration,
    pub key_seed: u32,
    /// Names the lane threads `{prefix}-tx{i}` and `{prefix}-rx{i}`: the
    /// accepting side's `hipfs-srv`, the connecting side's `hipfs-tcp`, so
    /// CPU profiles of a process holding both tell them apart.
    pub thread_prefix: &'static str,
}

impl TcpConnection {
    /// Starts the lane threads over handshaken streams (lane 0 first).
    pub(crate) fn start(streams: Vec<LaneSock>, p: ConnParams) -> Result<Self> {
        let peer = streams
            .first()
            .and_then(|s| s.stream.peer_addr().ok())
            .map(|a| a.to_string())
            .unwrap_or_else(|| "?".into());
        let (msg_tx, msg_rx) = unbounded();
        let (dead_tx, dead_rx) = bounded::<()>(0);
        let mut lanes = Vec::with_capacity(streams.len());
        let mut job_rxs = Vec::with_capacity(streams.len());
        let mut urgent_rxs = Vec::with_capacity(streams.len());
        let mut rx_halves = Vec::with_capacity(streams.len());
        for LaneSock { stream: s, tls } in streams {
            let (tx_half, rx_half) = stream::halves(s.as_raw_fd(), tls);
            rx_halves.push(rx_half);
            s.set_nodelay(true)?;
            s.set_read_timeout(None)?;
            s.set_write_timeout(None)?;
            let (tx, rx) = unbounded();
            let (urgent_tx, urgent_rx) = unbounded();
            lanes.push(Lane {
                stream: s,
                jobs: tx,
                urgent: urgent_tx,
                tx: Mutex::new(tx_half),
                queued: AtomicUsize::new(0),
            });
            job_rxs.push(rx);
            urgent_rxs.push(urgent_rx);
        }
        let shared = Arc::new(Shared {
            lanes,
            keys: Arc::new(KeyTable::new(p.key_seed)),
            cache: RegionCache::new(),
            pending: Mutex::new(PendingTable::default()),
            next_op: AtomicU64::new(1),
            next_lane: AtomicUsize::new(0),
            msg_tx,
            msg_rx,
            dead_tx: Mutex::new(Some(dead_tx)),
            dead_rx,
            dead: AtomicBool::new(false),
            max_message: p.max_message,
            chunk: p.chunk,
            active: AtomicUsize::new(0),
            op_timeout: p.op_timeout,
            out_gate: ByteGate::new(queue_limit(p.max_message)),
            in_gate: ByteGate::new(queue_limit(p.max_message)),
            hook: Mutex::new(None),
            peer,
            rejected: AtomicU64::new(0),
            written: AtomicU64::new(0),
            read: AtomicU64::new(0),
            sent: AtomicU64::new(0),
        });
        let queues = job_rxs.into_iter().zip(urgent_rxs);
        for (i, ((rx, urgent), rx_half)) in queues.zip(rx_halves).enumerate() {
            let sh = shared.clone();
            std::thread::Builder::new()
                .name(format!("{}-tx{i}", p.thread_prefix))
                .spawn(move || {
                    if let Err(e) = sh.sender_loop(i, rx, urgent) {
                        sh.die(format!("lane {i} send failed: {e}"));
                    }
                })?;
            let sh = shared.clone();
            std::thread::Builder::new()
                .name(format!("{}-rx{i}", p.thread_prefix))
                .spawn(move || {
                    let e = sh.reader_loop(i, rx_half);
                    sh.die(format!("lane {i}: {e}"));
                    if i == 0 {
                        // Dropped here, not in `die`: the hook may close
                        // the connection from inside (lane 0's reader).
                        let hook = sh.hook.lock().unwrap_or_else(|p| p.into_inner()).take();
                        drop(hook);
                    }
                })?;
        }
        Ok(TcpConnection { shared })
    }
}

/// Bytes of control messages queued in each direction: enough for a
/// window of full-size messages (replies of 1 MiB reads keep a 10 Gb/s
/// stream busy for ~13 ms), few enough that many stalled connections do
/// not exhaust the host.
pub(crate) const MSG_QUEUE_BYTES: usize = 16 << 20;

fn queue_limit(max_message: usize) -> usize {
    MSG_QUEUE_BYTES.max(2 * max_message)
}

/// The largest piece, in stripe units, an operation is cut into when
/// other operations keep the lanes busy.
const MAX_PIECE_UNITS: usize = 4;

/// Bytes per piece of a one-sided operation of `len` bytes on a
/// connection of `lanes` lanes with `busy` other operations in flight.
///
/// Why: every piece is a frame, and every frame costs its acknowledgment
/// and a wake-up of a sender, a reader and the waiting caller on each
/// side. An operation alone is spread over the lanes in stripe units
/// (`unit`), so it moves at the speed of all of them; but when other
/// operations already keep the lanes busy (16 readahead fetches of 4 MiB
/// on 16 lanes), cutting each into 1 MiB stripes only multiplies the
/// frames (on a 16-vCPU GPU machine 4 MiB stripes used a tenth less CPU
/// for the same bytes in one run; this rule's own A/B there moved the rate
/// by less than the noise: README, "Where the time goes"). So an
/// operation takes at most as many pieces as there are lanes the others
/// leave, never pieces under one unit, and never over [`MAX_PIECE_UNITS`]
/// units (a 64 MiB read still goes over 16 lanes).
fn piece_len(len: usize, unit: usize, lanes: usize, busy: usize) -> usize {
    let unit = unit.max(1);
    let idle = lanes.saturating_sub(busy).max(1);
    let most = len.div_ceil(unit);
    let fewest = len.div_ceil(unit.saturating_mul(MAX_PIECE_UNITS));
    let n = most.min(idle).max(fewest).max(1);
    // Whole units, so pieces stay as aligned as the operation.
    len.div_ceil(n).div_ceil(unit).saturating_mul(unit).max(1)
}

/// Counts a one-sided operation in flight until dropped.
struct ActiveOp<'a>(&'a AtomicUsize);

impl Drop for ActiveOp<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Drop for TcpConnection {
    fn drop(&mut self) {
        self.shared.die("connection closed locally".into());
    }
}

impl Shared {
    fn die(&self, reason: String) {
        if self.dead.swap(true, Ordering::SeqCst) {
            return;
        }
        log::debug!("tcp connection to {} down: {reason}", self.peer);
        {
            let mut p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
            p.dead = Some(reason.clone());
            for (_, op) in p.ops.drain() {
                op.done().report(Err(Error::Disconnected(reason.clone())));
            }
        }
        self.dead_tx
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        self.out_gate.close();
        self.in_gate.close();
        for l in &self.lanes {
            let _ = l.stream.shutdown(Shutdown::Both);
        }
    }

    fn disconnected(&self) -> Error {
        let p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        Error::Disconnected(p.dead.clone().unwrap_or_else(|| "connection closed".into()))
    }

    fn complete(&self, op_id: u64) -> Option<Pending> {
        self.pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .ops
            .remove(&op_id)
    }

    fn enqueue(&self, lane: usize, job: Job) -> Result<()> {
        let l = &self.lanes[lane];
        if !job.is_urgent() {
            return l.jobs.send(job).map_err(|_| self.disconnected());
        }
        // Counted before the sender can see it, so its decrement never
        // comes first.
        l.queued.fetch_add(1, Ordering::SeqCst);
        l.urgent.send(job).map_err(|_| {
            l.queued.fetch_sub(1, Ordering::SeqCst);
            self.disconnected()
        })
    }

    /// Writes message `m` on lane 0 from this thread if nothing urgent is
    /// queued there and no one is writing; `Ok(false)` when it must be
    /// queued.
    fn send_direct(&self, m: &[u8]) -> Result<bool> {
        let lane = &self.lanes[0];
        if m.len() > DIRECT_SEND_MAX || lane.queued.load(Ordering::SeqCst) != 0 {
            return Ok(false);
        }
        let Ok(mut tx) = lane.tx.try_lock() else {
            return Ok(false);
        };
        // Checked again under the lock: a job queued meanwhile goes first.
        if lane.queued.load(Ordering::SeqCst) != 0 {
            return Ok(false);
        }
        let mut h = Header::new(FrameKind::Msg);
        h.len = m.len() as u64;
        let sent = if m.len() <= JOINED_SEND_MAX {
            // One send for header and message: a small message costs one
            // system call, not two (copying it is cheaper than the second).
            let mut frame = Vec::with_capacity(HEADER_LEN + m.len());
            frame.extend_from_slice(&h.encode());
            frame.extend_from_slice(m);
            tx.send_bytes(&frame, false).map_err(io_to_disconnect)
        } else {
            send_header(&mut tx, &h, true)
                .and_then(|()| tx.send_bytes(m, false).map_err(io_to_disconnect))
        };
        drop(tx);
        if let Err(e) = sent {
            self.die(format!("lane 0 send failed: {e}"));
            return Err(self.disconnected());
        }
        Ok(true)
    }

    /// Shared body of write_remote / read_remote.
    fn one_sided(
        &self,
        local: Local<'_>,
        len: usize,
        remote: &RemoteDescriptor,
        remote_off: u64,
    ) -> Result<()> {
        if self.dead.load(Ordering::SeqCst) {
            return Err(self.disconnected());
        }
        if remote.transport != DescriptorTransport::Tcp {
            return Err(Error::InvalidArgument(
                "remote descriptor was issued by the verbs transport, this is a tcp connection"
                    .into(),
            ));
        }
        let raddr = remote.checked_addr(remote_off, len as u64)?;
        // A region side becomes its key-table slot and the address of the
        // first byte in it.
        let side = match local {
            Local::Write(r, off) | Local::Read(r, off) => {
                r.check_range(off, len)?;
                let at = (self.slot_of(r)?, r.ptr() as u64 + off as u64);
                match local {
                    Local::Read(..) => Side::Read(at.0, at.1),
                    _ => Side::Write(at.0, at.1),
                }
            }
            Local::File(src) => Side::File(src),
        };
        if len == 0 {
            return Ok(());
        }
        let busy = self.active.fetch_add(1, Ordering::Relaxed);
        let _active = ActiveOp(&self.active);
        let piece = piece_len(len, self.chunk, self.lanes.len(), busy);
        let n = len.div_ceil(piece);
        let (done_tx, done_rx) = bounded(1);
        let done = Arc::new(OpDone::new(n, done_tx));
        let mut jobs = Vec::with_capacity(n);
        let mut ids = Vec::with_capacity(n);
        {
            let mut p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(why) = &p.dead {
                return Err(Error::Disconnected(why.clone()));
            }
            for i in 0..n {
                let off = (i * piece) as u64;
                let clen = (len - i * piece).min(piece) as u64;
                let id = self.next_op.fetch_add(1, Ordering::Relaxed);
                let mut h = Header::new(if matches!(side, Side::Read(..)) {
                    FrameKind::ReadReq
                } else {
                    FrameKind::Write
                });
                h.op_id = id;
                h.rkey = remote.rkey;
                h.addr = raddr + off;
                h.len = clen;
                let write_done = || Pending::Write { done: done.clone() };
                let (pending, job) = match &side {
                    Side::Write(slot, laddr) => (
                        write_done(),
                        Job::Write {
                            hdr: h,
                            slot: slot.clone(),
                            local: laddr + off,
                        },
                    ),
                    Side::Read(slot, laddr) => (
                        Pending::Read {
                            done: done.clone(),
                            slot: slot.clone(),
                            local: laddr + off,
                            len: clen,
                        },
                        Job::Header(h),
                    ),
                    Side::File(src) => (
                        write_done(),
                        Job::WriteFile {
                            hdr: h,
                            src: src.clone(),
                            off,
                        },
                    ),
                };
                p.ops.insert(id, pending);
                ids.push(id);
                jobs.push(job);
            }
        }
        let first = self.next_lane.fetch_add(n, Ordering::Relaxed);
        let mut result = Ok(());
        for (i, job) in jobs.into_iter().enumerate() {
            if let Err(e) = self.enqueue((first + i) % self.lanes.len(), job) {
                result = Err(e);
                break;
            }
        }
        if result.is_ok() {
            // One outcome, once every piece has one: success or the first failure.
            result = match done_rx.recv_timeout(self.op_timeout) {
                Ok(r) => r,
                Err(RecvTimeoutError::Timeout) => Err(Error::Timeout(self.op_timeout)),
                Err(RecvTimeoutError::Disconnected) => Err(self.disconnected()),
            };
        }
        if result.is_ok() {
            let c = match side {
                Side::Read(..) => &self.read,
                Side::Write(..) | Side::File(_) => &self.written,
            };
            c.fetch_add(len as u64, Ordering::Relaxed);
        } else {
            let mut p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
            for id in ids {
                p.ops.remove(&id);
            }
        }
        result
    }
}

impl Shared {
    /// The key-table slot of a region registered on this connection.
    fn slot_of(&self, local: &LocalRegion) -> Result<Arc<Slot>> {
        self.keys
            .get(local.lkey())
            // Host regions only: device regions are targets of the peer's
            // WRITEs and nothing else.
            .filter(|s| {
                s.lock().host()
                    == Some(Range {
                        start: local.ptr() as usize,
                        len: local.len(),
                    })
            })
            .ok_or_else(|| {
                Error::InvalidArgument("local region is not registered on this connection".into())
            })
    }
}

fn send_header(tx: &mut TxStream, h: &Header, more: bool) -> Result<()> {
    let b = h.encode();
    tx.send_bytes(&b, more).map_err(io_to_disconnect)
}

fn io_to_disconnect(e: std::io::Error) -> Error {
    Error::Disconnected(e.to_string())
}

impl Connection for TcpConnection {
    fn kind(&self) -> TransportKind {
        TransportKind::Tcp
    }

    fn peer_addr(&self) -> String {
        self.shared.peer.clone()
    }

    fn send(&self, msg: &[u8]) -> Result<()> {
        let sh = &self.shared;
        if msg.len() > sh.max_message {
            return Err(Error::MessageTooLarge {
                len: msg.len(),
                max: sh.max_message,
            });
        }
        if sh.dead.load(Ordering::SeqCst) {
            return Err(sh.disconnected());
        }
        // Control messages all use lane 0: one queue, one stream, so they
        // arrive in the order they were sent.
        if sh.send_direct(msg)? {
            sh.sent.fetch_add(1, Ordering::Relaxed);
            return Ok(());
        }
        let deadline = Instant::now() + sh.op_timeout;
        match sh.out_gate.acquire(cost(msg.len()), Some(deadline)) {
            Ok(()) => {}
            Err(GateRefusal::Full) => return Err(Error::Timeout(sh.op_timeout)),
            Err(GateRefusal::Closed) => return Err(sh.disconnected()),
        }
        sh.enqueue(0, Job::Msg(msg.to_vec()))?;
        sh.sent.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    fn recv(&self, timeout: Duration) -> Result<Vec<u8>> {
        let sh = &self.shared;
        let taken = |m: Vec<u8>| {
            sh.in_gate.release(cost(m.len()));
            m
        };
        if let Ok(m) = sh.msg_rx.try_recv() {
            return Ok(taken(m));
        }
        if sh.dead.load(Ordering::SeqCst) {
            return Err(sh.disconnected());
        }
        select! {
            recv(sh.msg_rx) -> m => m.map(taken).map_err(|_| sh.disconnected()),
            recv(sh.dead_rx) -> _ => sh.msg_rx.try_recv().map(taken).map_err(|_| sh.disconnected()),
            default(timeout) => Err(Error::Timeout(timeout)),
        }
    }

    fn set_message_hook(&self, mut hook: MessageHook) -> Result<()> {
        let sh = &self.shared;
        // Lane 0's reader queues a message only under this lock, so none
        // can slip between the ones taken here and the hook.
        let mut slot = sh.hook.lock().unwrap_or_else(|p| p.into_inner());
        if slot.is_some() {
            return Err(Error::InvalidArgument(
                "this connection already has a message hook".into(),
            ));
        }
        let mut kept = Vec::new();
        while let Ok(m) = sh.msg_rx.try_recv() {
            sh.in_gate.release(cost(m.len()));
            kept.extend(hook(m));
        }
        for m in kept {
            sh.in_gate.admit(cost(m.len()));
            let _ = sh.msg_tx.send(m);
        }
        *slot = Some(hook);
        // A reader that ended before the hook was in place cannot drop it.
        if sh.dead.load(Ordering::SeqCst) {
            let hook = slot.take();
            drop(slot);
            drop(hook);
            return Err(sh.disconnected());
        }
        Ok(())
    }

    unsafe fn register(&self, ptr: *mut u8, len: usize) -> Result<Arc<LocalRegion>> {
        if ptr.is_null() || len == 0 {
            return Err(Error::InvalidArgument(format!(
                "cannot register {len} bytes at {ptr:?}"
            )));
        }
        if (ptr as usize).checked_add(len).is_none() {
            return Err(Error::InvalidArgument("range wraps around".into()));
        }
        let keys = &self.shared.keys;
        self.shared.cache.get_or_register((ptr as usize, len), || {
            let (key, handle) = keys.insert(Range {
                start: ptr as usize,
                len,
            });
            Ok(LocalRegion::new(
                ptr,
                len,
                ptr as u64,
                key,
                key,
                DescriptorTransport::Tcp,
                0,
                handle,
            ))
        })
    }

    unsafe fn register_device(
        &self,
        addr: u64,
        len: usize,
        sink: Arc<dyn crate::DeviceSink>,
    ) -> Result<Arc<LocalRegion>> {
        let start = usize::try_from(addr)
            .ok()
            .filter(|a| *a != 0 && len != 0 && a.checked_add(len).is_some())
            .ok_or_else(|| {
                Error::InvalidArgument(format!("cannot register {len} bytes at {addr:#x}"))
            })?;
        // Not through the region cache: that one hands out host regions
        // by range, and a device region must never be taken for one.
        let (key, handle) = self.shared.keys.insert_device(Range { start, len }, sink);
        Ok(Arc::new(LocalRegion::new(
            start as *mut u8,
            len,
            addr,
            key,
            key,
            DescriptorTransport::Tcp,
            0,
            handle,
        )))
    }

    unsafe fn register_dmabuf(
        &self,
        _fd: RawFd,
        _offset: u64,
        _len: usize,
        _iova: u64,
    ) -> Result<Arc<LocalRegion>> {
        Err(Error::Unsupported(
            "dmabuf registration needs the verbs transport; over tcp register a host bounce buffer"
                .into(),
        ))
    }

    fn write_remote(
        &self,
        local: &LocalRegion,
        local_off: usize,
        len: usize,
        remote: &RemoteDescriptor,
        remote_off: u64,
    ) -> Result<()> {
        self.shared
            .one_sided(Local::Write(local, local_off), len, remote, remote_off)
    }

    fn write_remote_from_file(
        &self,
        file: BorrowedFd<'_>,
        file_offset: u64,
        len: usize,
        remote: &RemoteDescriptor,
        remote_off: u64,
    ) -> Result<usize> {
        if file_offset.checked_add(len as u64).is_none() {
            return Err(Error::InvalidArgument(format!(
                "file range {file_offset}+{len} wraps around"
            )));
        }
        let src = Arc::new(FileSource {
            fd: file.try_clone_to_owned()?,
            start: file_offset,
            valid: AtomicU64::new(len as u64),
        });
        self.shared
            .one_sided(Local::File(src.clone()), len, remote, remote_off)?;
        Ok(src.valid.load(Ordering::Acquire) as usize)
    }

    fn read_remote(
        &self,
        local: &LocalRegion,
        local_off: usize,
        len: usize,
        remote: &RemoteDescriptor,
        remote_off: u64,
    ) -> Result<()> {
        self.shared
            .one_sided(Local::Read(local, local_off), len, remote, remote_off)
    }

    fn stats(&self) -> ConnectionStats {
        let sh = &self.shared;
        ConnectionStats {
            bytes_written: sh.written.load(Ordering::Relaxed),
            bytes_read: sh.read.load(Ordering::Relaxed),
            messages_sent: sh.sent.load(Ordering::Relaxed),
            remote_ops_rejected: sh.rejected.load(Ordering::Relaxed),
        }
    }

    fn close(&self) {
        self.shared.die("connection closed locally".into());
    }
}

#[cfg(test)]
mod tests {
    use super::{piece_len, OpDone};
    use crate::Error;
    use crossbeam_channel::bounded;

    #[test]
    fn an_operation_answers_once_every_piece_has_an_outcome() {
        // A refusal first: the caller still waits for the pieces on the
        // other lanes, then hears of the refusal, not of their success.
        let (tx, rx) = bounded(1);
        let done = OpDone::new(3, tx);
        done.report(Err(Error::RemoteRejected("piece 2".into())));
        assert!(rx.try_recv().is_err(), "woken while pieces are in flight");
        done.report(Ok(()));
        assert!(rx.try_recv().is_err(), "woken while a piece is in flight");
        done.report(Err(Error::RemoteRejected("piece 3".into())));
        match rx.try_recv() {
            Ok(Err(Error::RemoteRejected(m))) => assert_eq!(m, "piece 2"),
            other => panic!("expected the first refusal, got {other:?}"),
        }
        // All well: one success, after the last piece.
        let (tx, rx) = bounded(1);
        let done = OpDone::new(2, tx);
        done.report(Ok(()));
        assert!(rx.try_recv().is_err());
        done.report(Ok(()));
        assert!(matches!(rx.try_recv(), Ok(Ok(()))));
    }

    const M: usize = 1 << 20;

    #[test]
    fn an_operation_alone_is_striped_over_the_lanes_in_units() {
        // 4 MiB alone on 16 lanes: four 1 MiB stripes.
        assert_eq!(piece_len(4 * M, M, 16, 0), M);
        // Less than a unit: one piece of the whole.
        assert_eq!(piece_len(100, M, 16, 0), M);
        // 64 MiB alone: one piece per lane, 4 MiB each, not 64 stripes.
        assert_eq!(piece_len(64 * M, M, 16, 0), 4 * M);
        assert_eq!((64 * M).div_ceil(piece_len(64 * M, M, 16, 0)), 16);
    }

    #[test]
    fn with_the_lanes_busy_an_operation_takes_fewer_larger_pieces() {
        // 15 others in flight on 16 lanes: a 4 MiB fetch goes whole.
        assert_eq!(piece_len(4 * M, M, 16, 15), 4 * M);
        // 14 others: two lanes left, two pieces.
        assert_eq!(piece_len(4 * M, M, 16, 14), 2 * M);
        // More operations than lanes: still one piece, never zero lanes.
        assert_eq!(piece_len(4 * M, M, 16, 40), 4 * M);
        // Never more than four units a piece: 64 MiB under load is 16
        // pieces of 4 MiB, not one frame of 64 MiB on one lane.
        assert_eq!(piece_len(64 * M, M, 16, 40), 4 * M);
        // Pieces are whole units (3 MiB over 2 idle lanes: 2 MiB + 1 MiB).
        assert_eq!(piece_len(3 * M, M, 16, 14), 2 * M);
    }

    #[test]
    fn every_byte_is_in_some_piece() {
        for len in [1, 4095, M - 1, M, M + 1, 7 * M + 3, 200 * M] {
            for busy in [0, 1, 7, 15, 16, 100] {
                for lanes in [1, 4, 16] {
                    let p = piece_len(len, M, lanes, busy);
                    let n = len.div_ceil(p);
                    assert!(p >= 1 && n >= 1 && n * p >= len && (n - 1) * p < len);
                    assert!(p <= 4 * M, "{len} bytes in pieces of {p}");
                }
            }
        }
    }
}
