//! A verbs connection: `lanes` RC queue pairs sharing one protection
//! domain and one completion queue, polled by one thread per connection.
//!
//! Control messages travel as SEND/RECV on lane 0 with explicit credits:
//! the receiver has `credits` RECVs posted; a sender spends one credit per
//! SEND and the receiver hands credits back (piggybacked on its own
//! messages, or in a credit-only message once half are owed). One credit
//! is kept back for credit-only messages, so a RECV is always posted for
//! every SEND and RNR never happens. One-sided operations are RDMA WRITE /
//! READ striped over all lanes, each chunk signalled.

mod completions;

use std::collections::HashMap;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{bounded, select, unbounded, Receiver, RecvTimeoutError, Sender};
use rdma_sys::*;

use super::cm;
use super::resources::*;
use super::safe::{
    CmId, CompChannel, CompletionQueue, EventChannel, MemoryRegion, ProtectionDomain, ACCESS_ALL,
};
use crate::descriptor::DescriptorTransport;
use crate::region::{next_owner_id, RegionCache};
use crate::{
    Connection, ConnectionStats, Error, LocalRegion, RemoteDescriptor, Result, TransportKind,
};

pub(super) struct Lane {
    pub id: CmId,
    sq: Gate,
}

#[derive(Default)]
struct PendingTable {
    dead: Option<String>,
    ops: HashMap<u64, Sender<Result<()>>>,
}

/// Field order is drop order: QPs, then the CQ, its channel, the rings,
/// the PD (also held by registered regions), the CM channel.
struct Inner {
    lanes: Vec<Lane>,
    cq: CompletionQueue,
    cc: CompChannel,
    recv: Slots,
    send: Slots,
    pd: Arc<ProtectionDomain>,
    ec: Arc<EventChannel>,
    cache: RegionCache<(usize, usize)>,
    dmabuf_cache: RegionCache<(RawFd, u64, usize, u64)>,
    owner: u64,
    pending: Mutex<PendingTable>,
    next_op: AtomicU64,
    next_lane: AtomicUsize,
    msg_tx: Sender<Vec<u8>>,
    msg_rx: Receiver<Vec<u8>>,
    dead_tx: Mutex<Option<Sender<()>>>,
    dead_rx: Receiver<()>,
    dead: AtomicBool,
    /// Credits to SEND (RECVs the peer has posted for us).
    credits: Gate,
    /// RECVs re-posted here and not yet reported to the peer.
    owed: AtomicU32,
    own_credits: u32,
    free_slots: Mutex<Vec<usize>>,
    slot_cv: Condvar,
    send_limit: usize,
    own_max: usize,
    op_timeout: Duration,
    chunk: usize,
    peer: String,
    written: AtomicU64,
    read: AtomicU64,
    sent: AtomicU64,
}

/// A connection of the verbs transport.
pub struct VerbsConnection {
    inner: Arc<Inner>,
    poller: Mutex<Option<JoinHandle<()>>>,
}

pub(super) struct Established {
    pub setup: Setup,
    pub ids: Vec<CmId>,
    pub ec: Arc<EventChannel>,
    pub peer: cm::LaneHello,
    pub peer_addr: String,
    pub op_timeout: Duration,
    pub chunk: usize,
}

impl VerbsConnection {
    pub(super) fn start(e: Established) -> Result<Self> {
        e.ec.set_nonblocking()?;
        let Setup {
            pd,
            cc,
            cq,
            recv,
            send,
            credits,
            max_message,
            ..
        } = e.setup;
        let sq_depth = ONE_SIDED_DEPTH + credits + 2;
        let (msg_tx, msg_rx) = unbounded();
        let (dead_tx, dead_rx) = bounded(0);
        let nslots = send.count;
        let inner = Arc::new(Inner {
            lanes: e
                .ids
                .into_iter()
                .map(|id| Lane {
                    id,
                    sq: Gate::new(sq_depth),
                })
                .collect(),
            cq,
            cc,
            recv,
            send,
            pd,
            ec: e.ec,
            cache: RegionCache::new(),
            dmabuf_cache: RegionCache::new(),
            owner: next_owner_id(),
            pending: Mutex::new(PendingTable::default()),
            next_op: AtomicU64::new(1),
            next_lane: AtomicUsize::new(0),
            msg_tx,
            msg_rx,
            dead_tx: Mutex::new(Some(dead_tx)),
            dead_rx,
            dead: AtomicBool::new(false),
            credits: Gate::new(e.peer.credits),
            owed: AtomicU32::new(0),
            own_credits: credits,
            free_slots: Mutex::new((0..nslots).collect()),
            slot_cv: Condvar::new(),
            send_limit: max_message.min(e.peer.max_message as usize),
            own_max: max_message,
            op_timeout: e.op_timeout,
            chunk: e.chunk,
            peer: e.peer_addr,
            written: AtomicU64::new(0),
            read: AtomicU64::new(0),
            sent: AtomicU64::new(0),
        });
        let i2 = inner.clone();
        let poller = std::thread::Builder::new()
            .name("hipfs-verbs-poll".into())
            .spawn(move || i2.poll_loop())?;
        Ok(VerbsConnection {
            inner,
            poller: Mutex::new(Some(poller)),
        })
    }
}

impl Drop for VerbsConnection {
    fn drop(&mut self) {
        self.inner.die("connection closed locally".into());
        if let Some(h) = self.poller.lock().unwrap_or_else(|e| e.into_inner()).take() {
            let _ = h.join();
        }
    }
}

impl Inner {
    fn die(&self, reason: String) {
        if self.dead.swap(true, Ordering::SeqCst) {
            return;
        }
        log::debug!("verbs connection to {} down: {reason}", self.peer);
        {
            let mut p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
            p.dead = Some(reason.clone());
            for (_, done) in p.ops.drain() {
                let _ = done.try_send(Err(Error::Disconnected(reason.clone())));
            }
        }
        self.dead_tx
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        for l in &self.lanes {
            l.sq.cv.notify_all();
            // Moves the QP to error: in-flight work is flushed, the peer
            // gets a DISCONNECTED event.
            l.id.disconnect();
        }
        self.credits.cv.notify_all();
        self.slot_cv.notify_all();
    }

    fn disconnected(&self) -> Error {
        let p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        Error::Disconnected(p.dead.clone().unwrap_or_else(|| "connection closed".into()))
    }

    fn take_slot(&self, deadline: Instant) -> Result<usize> {
        let mut free = self.free_slots.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if self.dead.load(Ordering::SeqCst) {
                return Err(self.disconnected());
            }
            if let Some(s) = free.pop() {
                return Ok(s);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(Error::Timeout(self.op_timeout));
            }
            free = self
                .slot_cv
                .wait_timeout(free, left.min(Duration::from_millis(100)))
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    fn send(&self, msg: &[u8]) -> Result<()> {
        if msg.len() > self.send_limit {
            return Err(Error::MessageTooLarge {
                len: msg.len(),
                max: self.send_limit,
            });
        }
        let deadline = Instant::now() + self.op_timeout;
        let fix = |e: Error| match e {
            Error::Timeout(_) => Error::Timeout(self.op_timeout),
            Error::Disconnected(_) => self.disconnected(),
            e => e,
        };
        // Data keeps one credit in reserve for credit-only messages.
        self.credits.acquire(2, deadline, &self.dead).map_err(fix)?;
        let slot = match self.take_slot(deadline) {
            Ok(s) => s,
            Err(e) => {
                self.credits.release(1);
                return Err(e);
            }
        };
        if let Err(e) = self.lanes[0].sq.acquire(1, deadline, &self.dead) {
            self.free_slots
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(slot);
            self.credits.release(1);
            return Err(fix(e));
        }
        let owed = self.owed.swap(0, Ordering::SeqCst);
        if let Err(e) = self.post_message(slot, MSG_DATA, owed, msg) {
            self.die(format!("send failed: {e}"));
            return Err(self.disconnected());
        }
        self.sent.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

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
        if remote.transport != DescriptorTransport::Verbs {
            return Err(Error::InvalidArgument(
                "remote descriptor was issued by the tcp transport, this is a verbs connection"
                    .into(),
            ));
        }
        if local.owner() != self.owner {
            return Err(Error::InvalidArgument(
                "local region is not registered on this connection".into(),
            ));
        }
        local.check_range(local_off, len)?;
        let raddr = remote.checked_addr(remote_off, len as u64)?;
        if len == 0 {
            return Ok(());
        }
        let n = len.div_ceil(self.chunk);
        let (tx, rx) = bounded(n);
        let deadline = Instant::now() + self.op_timeout;
        let mut ids = Vec::with_capacity(n);
        let mut result = Ok(());
        let opcode = if write {
            ibv_wr_opcode::IBV_WR_RDMA_WRITE
        } else {
            ibv_wr_opcode::IBV_WR_RDMA_READ
        };
        for i in 0..n {
            let off = i * self.chunk;
            let clen = (len - off).min(self.chunk);
            let lane = self.next_lane.fetch_add(1, Ordering::Relaxed) % self.lanes.len();
            if let Err(e) = self.lanes[lane].sq.acquire(1, deadline, &self.dead) {
                result = Err(match e {
                    Error::Timeout(_) => Error::Timeout(self.op_timeout),
                    _ => self.disconnected(),
                });
                break;
            }
            let op = self.next_op.fetch_add(1, Ordering::Relaxed) & OP_MASK;
            {
                let mut p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
                if let Some(why) = &p.dead {
                    result = Err(Error::Disconnected(why.clone()));
                    drop(p);
                    self.lanes[lane].sq.release(1);
                    break;
                }
                p.ops.insert(op, tx.clone());
            }
            ids.push(op);
            let sge = ibv_sge {
                addr: local.addr() + (local_off + off) as u64,
                length: clen as u32,
                lkey: local.lkey(),
            };
            let wr_id = ((lane as u64) << OP_BITS) | op;
            if let Err(e) = post_send(
                self.lanes[lane].id.qp(),
                wr_id,
                opcode,
                sge,
                Some((raddr + off as u64, remote.rkey)),
            ) {
                self.pending
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .ops
                    .remove(&op);
                ids.pop();
                self.lanes[lane].sq.release(1);
                result = Err(e);
                break;
            }
        }
        for _ in 0..ids.len() {
            if result.is_err() {
                break;
            }
            match rx.recv_deadline(deadline) {
                Ok(Ok(())) => {}
                Ok(Err(e)) => result = Err(e),
                Err(RecvTimeoutError::Timeout) => result = Err(Error::Timeout(self.op_timeout)),
                Err(RecvTimeoutError::Disconnected) => result = Err(self.disconnected()),
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

impl Connection for VerbsConnection {
    fn kind(&self) -> TransportKind {
        TransportKind::Verbs
    }

    fn peer_addr(&self) -> String {
        self.inner.peer.clone()
    }

    fn send(&self, msg: &[u8]) -> Result<()> {
        if self.inner.dead.load(Ordering::SeqCst) {
            return Err(self.inner.disconnected());
        }
        self.inner.send(msg)
    }

    fn recv(&self, timeout: Duration) -> Result<Vec<u8>> {
        let sh = &self.inner;
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
        if ptr.is_null() || len == 0 || (ptr as usize).checked_add(len).is_none() {
            return Err(Error::InvalidArgument(format!(
                "cannot register {len} bytes at {ptr:?}"
            )));
        }
        let inner = &self.inner;
        inner.cache.get_or_register((ptr as usize, len), || {
            // SAFETY: forwarded from the caller's promise.
            let mr = unsafe { MemoryRegion::register(&inner.pd, ptr, len, ACCESS_ALL)? };
            Ok(LocalRegion::new(
                ptr,
                len,
                ptr as u64,
                mr.lkey(),
                mr.rkey(),
                DescriptorTransport::Verbs,
                inner.owner,
                Box::new(mr),
            ))
        })
    }

    unsafe fn register_dmabuf(
        &self,
        fd: RawFd,
        offset: u64,
        len: usize,
        iova: u64,
    ) -> Result<Arc<LocalRegion>> {
        if fd < 0 || len == 0 || iova.checked_add(len as u64).is_none() {
            return Err(Error::InvalidArgument(format!(
                "bad dmabuf registration fd={fd} len={len} iova={iova:#x}"
            )));
        }
        let inner = &self.inner;
        inner
            .dmabuf_cache
            .get_or_register((fd, offset, len, iova), || {
                // SAFETY: forwarded from the caller's promise.
                let mr =
                    unsafe { MemoryRegion::register_dmabuf(&inner.pd, fd, offset, len, iova)? };
                Ok(LocalRegion::new(
                    std::ptr::null_mut(),
                    len,
                    iova,
                    mr.lkey(),
                    mr.rkey(),
                    DescriptorTransport::Verbs,
                    inner.owner,
                    Box::new(mr),
                ))
            })
    }

    fn write_remote(
        &self,
        local: &LocalRegion,
        local_off: usize,
        len: usize,
        remote: &RemoteDescriptor,
        remote_off: u64,
    ) -> Result<()> {
        self.inner
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
        self.inner
            .one_sided(false, local, local_off, len, remote, remote_off)
    }

    fn stats(&self) -> ConnectionStats {
        let i = &self.inner;
        ConnectionStats {
            bytes_written: i.written.load(Ordering::Relaxed),
            bytes_read: i.read.load(Ordering::Relaxed),
            messages_sent: i.sent.load(Ordering::Relaxed),
            remote_ops_rejected: 0,
        }
    }

    fn close(&self) {
        self.inner.die("connection closed locally".into());
    }
}
