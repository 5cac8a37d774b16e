//! A TCP-transport connection: `lanes` streams, each with a reader thread
//! (applies or completes incoming frames, never blocks on a write) and a
//! sender thread (the only writer of its stream).

use std::collections::HashMap;
use std::net::{Shutdown, TcpStream};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crossbeam_channel::{bounded, select, unbounded, Receiver, RecvTimeoutError, Sender};

use super::frame::{FrameKind, Header, Status, HEADER_LEN};
use super::regions::{KeyTable, Range, Slot};
use super::sock;
use crate::descriptor::DescriptorTransport;
use crate::region::RegionCache;
use crate::{
    Connection, ConnectionStats, Error, LocalRegion, RemoteDescriptor, Result, TransportKind,
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
    /// A header alone (READ_REQ, WRITE_ACK).
    Header(Header),
    /// Answer a READ_REQ: validated and sent under the region's lock.
    ReadResp(Header),
}

/// A one-sided operation waiting for the peer's answer.
enum Pending {
    Write {
        done: Sender<Result<()>>,
    },
    Read {
        done: Sender<Result<()>>,
        slot: Arc<Slot>,
        local: u64,
        len: u64,
    },
}

impl Pending {
    fn done(&self) -> &Sender<Result<()>> {
        match self {
            Pending::Write { done } | Pending::Read { done, .. } => done,
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

struct Lane {
    stream: TcpStream,
    jobs: Sender<Job>,
}

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
    chunk: usize,
    op_timeout: Duration,
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
}

impl TcpConnection {
    /// Starts the lane threads over handshaken streams (lane 0 first).
    pub(crate) fn start(streams: Vec<TcpStream>, p: ConnParams) -> Result<Self> {
        let peer = streams
            .first()
            .and_then(|s| s.peer_addr().ok())
            .map(|a| a.to_string())
            .unwrap_or_else(|| "?".into());
        let (msg_tx, msg_rx) = unbounded();
        let (dead_tx, dead_rx) = bounded::<()>(0);
        let mut lanes = Vec::with_capacity(streams.len());
        let mut job_rxs = Vec::with_capacity(streams.len());
        for s in streams {
            s.set_nodelay(true)?;
            s.set_read_timeout(None)?;
            s.set_write_timeout(None)?;
            let (tx, rx) = unbounded();
            lanes.push(Lane {
                stream: s,
                jobs: tx,
            });
            job_rxs.push(rx);
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
            op_timeout: p.op_timeout,
            peer,
            rejected: AtomicU64::new(0),
            written: AtomicU64::new(0),
            read: AtomicU64::new(0),
            sent: AtomicU64::new(0),
        });
        for (i, rx) in job_rxs.into_iter().enumerate() {
            let sh = shared.clone();
            let fd = sh.lanes[i].stream.as_raw_fd();
            std::thread::Builder::new()
                .name(format!("hipfs-tcp-tx{i}"))
                .spawn(move || {
                    if let Err(e) = sh.sender_loop(fd, rx) {
                        sh.die(format!("lane {i} send failed: {e}"));
                    }
                })?;
            let sh = shared.clone();
            std::thread::Builder::new()
                .name(format!("hipfs-tcp-rx{i}"))
                .spawn(move || {
                    let e = sh.reader_loop(i, fd);
                    sh.die(format!("lane {i}: {e}"));
                })?;
        }
        Ok(TcpConnection { shared })
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
                let _ = op.done().try_send(Err(Error::Disconnected(reason.clone())));
            }
        }
        self.dead_tx
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
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
        self.lanes[lane]
            .jobs
            .send(job)
            .map_err(|_| self.disconnected())
    }

    fn sender_loop(&self, fd: RawFd, jobs: Receiver<Job>) -> Result<()> {
        loop {
            let job = select! {
                recv(jobs) -> j => match j { Ok(j) => j, Err(_) => return Ok(()) },
                recv(self.dead_rx) -> _ => return Ok(()),
            };
            match job {
                Job::Msg(m) => {
                    let mut h = Header::new(FrameKind::Msg);
                    h.len = m.len() as u64;
                    send_header(fd, &h, !m.is_empty())?;
                    // SAFETY: m is an owned buffer of m.len() bytes.
                    unsafe { sock::send_all(fd, m.as_ptr(), m.len(), false)? };
                }
                Job::Write { hdr, slot, local } => {
                    let guard = slot.lock();
                    match guard.and_then(|r| r.sub(local, hdr.len)) {
                        Some(p) => {
                            send_header(fd, &hdr, true)?;
                            // SAFETY: p..p+len lies inside a live registered
                            // region (checked under the slot lock, held now).
                            unsafe { sock::send_all(fd, p, hdr.len as usize, false)? };
                        }
                        None => {
                            if let Some(op) = self.complete(hdr.op_id) {
                                let _ = op.done().try_send(Err(Error::InvalidArgument(
                                    "local region was deregistered during the write".into(),
                                )));
                            }
                        }
                    }
                }
                Job::Header(h) => send_header(fd, &h, false)?,
                Job::ReadResp(req) => {
                    let mut h = Header::new(FrameKind::ReadResp);
                    h.op_id = req.op_id;
                    h.rkey = req.rkey;
                    h.addr = req.addr;
                    h.len = req.len;
                    let slot = self.keys.get(req.rkey);
                    let guard = slot.as_ref().map(|s| s.lock());
                    let src = match guard.as_ref().map(|g| **g) {
                        Some(Some(r)) => match r.sub(req.addr, req.len) {
                            Some(p) => Some(p),
                            None => {
                                h.status = Status::OutOfRange;
                                None
                            }
                        },
                        _ => {
                            h.status = Status::UnknownKey;
                            None
                        }
                    };
                    if h.status != Status::Ok {
                        self.refused("READ", &req, h.status);
                    }
                    send_header(fd, &h, src.is_some())?;
                    if let Some(p) = src {
                        // SAFETY: inside a live registered region, under its lock.
                        unsafe { sock::send_all(fd, p, req.len as usize, false)? };
                    }
                }
            }
        }
    }

    fn refused(&self, what: &str, h: &Header, st: Status) {
        self.rejected.fetch_add(1, Ordering::Relaxed);
        log::warn!(
            "tcp peer {}: refused remote {what} rkey={:#x} addr={:#x} len={}: {st:?}",
            self.peer,
            h.rkey,
            h.addr,
            h.len
        );
    }

    /// Runs until the stream fails; returns why.
    fn reader_loop(&self, lane: usize, fd: RawFd) -> Error {
        loop {
            if let Err(e) = self.read_frame(lane, fd) {
                return e;
            }
        }
    }

    fn read_frame(&self, lane: usize, fd: RawFd) -> Result<()> {
        let raw = sock::recv_array::<HEADER_LEN>(fd).map_err(io_to_disconnect)?;
        let h = Header::decode(&raw, self.max_message)?;
        match h.kind {
            FrameKind::Msg => {
                let mut m = vec![0u8; h.len as usize];
                // SAFETY: m has h.len writable bytes.
                unsafe { sock::recv_exact(fd, m.as_mut_ptr(), m.len()) }
                    .map_err(io_to_disconnect)?;
                let _ = self.msg_tx.send(m);
            }
            FrameKind::Write => {
                let slot = self.keys.get(h.rkey);
                let guard = slot.as_ref().map(|s| s.lock());
                let status = match guard.as_ref().map(|g| **g) {
                    Some(Some(r)) => match r.sub(h.addr, h.len) {
                        Some(p) => {
                            // SAFETY: p..p+len is inside a live region the
                            // application registered, under its lock.
                            unsafe { sock::recv_exact(fd, p, h.len as usize) }
                                .map_err(io_to_disconnect)?;
                            Status::Ok
                        }
                        None => Status::OutOfRange,
                    },
                    _ => Status::UnknownKey,
                };
                drop(guard);
                if status != Status::Ok {
                    self.refused("WRITE", &h, status);
                    sock::discard(fd, h.len).map_err(io_to_disconnect)?;
                }
                let mut ack = Header::new(FrameKind::WriteAck);
                ack.op_id = h.op_id;
                ack.rkey = h.rkey;
                ack.addr = h.addr;
                ack.status = status;
                self.enqueue(lane, Job::Header(ack))?;
            }
            FrameKind::ReadReq => self.enqueue(lane, Job::ReadResp(h))?,
            FrameKind::WriteAck => {
                if let Some(op) = self.complete(h.op_id) {
                    let _ = op
                        .done()
                        .try_send(h.status.into_result(h.rkey, h.addr, h.len));
                }
            }
            FrameKind::ReadResp => match self.complete(h.op_id) {
                Some(Pending::Read {
                    done,
                    slot,
                    local,
                    len,
                }) => {
                    let r = if h.status != Status::Ok {
                        h.status.into_result(h.rkey, h.addr, h.len)
                    } else if h.len != len {
                        return Err(Error::Protocol(format!(
                            "READ answer of {} bytes for a request of {len}",
                            h.len
                        )));
                    } else {
                        let guard = slot.lock();
                        match guard.and_then(|r| r.sub(local, len)) {
                            Some(p) => {
                                // SAFETY: inside the live local region, under its lock.
                                unsafe { sock::recv_exact(fd, p, len as usize) }
                                    .map_err(io_to_disconnect)?;
                                Ok(())
                            }
                            None => {
                                drop(guard);
                                sock::discard(fd, len).map_err(io_to_disconnect)?;
                                Err(Error::InvalidArgument(
                                    "local region was deregistered during the read".into(),
                                ))
                            }
                        }
                    };
                    let _ = done.try_send(r);
                }
                Some(Pending::Write { .. }) => {
                    return Err(Error::Protocol("READ answer for a write".into()))
                }
                // The caller gave up (timeout): drop the bytes.
                None => sock::discard(fd, h.payload_len()).map_err(io_to_disconnect)?,
            },
        }
        Ok(())
    }

    /// Shared body of write_remote / read_remote.
    fn one_sided(
        &self,
        write: bool,
        local: &LocalRegion,
        local_off: usize,
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
        local.check_range(local_off, len)?;
        let raddr = remote.checked_addr(remote_off, len as u64)?;
        let slot = self
            .keys
            .get(local.lkey())
            .filter(|s| {
                *s.lock()
                    == Some(Range {
                        start: local.ptr() as usize,
                        len: local.len(),
                    })
            })
            .ok_or_else(|| {
                Error::InvalidArgument("local region is not registered on this connection".into())
            })?;
        if len == 0 {
            return Ok(());
        }
        let laddr = local.ptr() as u64 + local_off as u64;
        let n = len.div_ceil(self.chunk);
        let (done_tx, done_rx) = bounded(n);
        let mut jobs = Vec::with_capacity(n);
        let mut ids = Vec::with_capacity(n);
        {
            let mut p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(why) = &p.dead {
                return Err(Error::Disconnected(why.clone()));
            }
            for i in 0..n {
                let off = (i * self.chunk) as u64;
                let clen = (len - i * self.chunk).min(self.chunk) as u64;
                let id = self.next_op.fetch_add(1, Ordering::Relaxed);
                let mut h = Header::new(if write {
                    FrameKind::Write
                } else {
                    FrameKind::ReadReq
                });
                h.op_id = id;
                h.rkey = remote.rkey;
                h.addr = raddr + off;
                h.len = clen;
                let (pending, job) = if write {
                    let job = Job::Write {
                        hdr: h,
                        slot: slot.clone(),
                        local: laddr + off,
                    };
                    (
                        Pending::Write {
                            done: done_tx.clone(),
                        },
                        job,
                    )
                } else {
                    let pending = Pending::Read {
                        done: done_tx.clone(),
                        slot: slot.clone(),
                        local: laddr + off,
                        len: clen,
                    };
                    (pending, Job::Header(h))
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
            let deadline = Instant::now() + self.op_timeout;
            for _ in 0..n {
                match done_rx.recv_deadline(deadline) {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => {
                        result = Err(e);
                        break;
                    }
                    Err(RecvTimeoutError::Timeout) => {
                        result = Err(Error::Timeout(self.op_timeout));
                        break;
                    }
                    Err(RecvTimeoutError::Disconnected) => {
                        result = Err(self.disconnected());
                        break;
                    }
                }
            }
        }
        if result.is_ok() {
            let c = if write { &self.written } else { &self.read };
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

fn send_header(fd: RawFd, h: &Header, more: bool) -> Result<()> {
    let b = h.encode();
    // SAFETY: b is a local array.
    unsafe { sock::send_all(fd, b.as_ptr(), b.len(), more) }.map_err(io_to_disconnect)
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
        sh.enqueue(0, Job::Msg(msg.to_vec()))?;
        sh.sent.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    fn recv(&self, timeout: Duration) -> Result<Vec<u8>> {
        let sh = &self.shared;
        if let Ok(m) = sh.msg_rx.try_recv() {
            return Ok(m);
        }
        if sh.dead.load(Ordering::SeqCst) {
            return Err(sh.disconnected());
        }
        select! {
            recv(sh.msg_rx) -> m => m.map_err(|_| sh.disconnected()),
            recv(sh.dead_rx) -> _ => sh.msg_rx.try_recv().map_err(|_| sh.disconnected()),
            default(timeout) => Err(Error::Timeout(timeout)),
        }
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
            .one_sided(true, local, local_off, len, remote, remote_off)
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
            .one_sided(false, local, local_off, len, remote, remote_off)
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
