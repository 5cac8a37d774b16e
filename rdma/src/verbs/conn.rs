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

use std::collections::HashMap;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{bounded, select, unbounded, Receiver, RecvTimeoutError, Sender};
use rdma_sys::*;

use super::cm;
use super::result::check_errno;
use super::safe::{
    CmId, CompChannel, CompletionQueue, EventChannel, MemoryRegion, ProtectionDomain, ACCESS_ALL,
};
use crate::descriptor::DescriptorTransport;
use crate::mem::PageBuffer;
use crate::region::{next_owner_id, RegionCache};
use crate::{
    Connection, ConnectionStats, Error, LocalRegion, RemoteDescriptor, Result, TransportKind,
};

const TAG_SHIFT: u32 = 62;
const TAG_RECV: u64 = 1;
const TAG_SEND: u64 = 2;
const OP_BITS: u32 = 48;
const OP_MASK: u64 = (1 << OP_BITS) - 1;
/// Message header: kind u32, credits returned u32.
const MSG_HDR: usize = 8;
const MSG_DATA: u32 = 1;
const MSG_CREDIT: u32 = 2;
/// One-sided work requests in flight per lane.
pub(super) const ONE_SIDED_DEPTH: u32 = 64;

/// Registered memory cut into equal slots (the RECV ring, the SEND slots).
pub(super) struct Slots {
    pub mr: MemoryRegion,
    pub mem: PageBuffer,
    pub slot: usize,
    pub count: usize,
}

impl Slots {
    pub fn new(pd: &Arc<ProtectionDomain>, slot: usize, count: usize) -> Result<Self> {
        let mem = PageBuffer::new(slot * count)?;
        // SAFETY: mem lives in the same struct and is dropped after mr
        // (field order: mr first).
        let mr = unsafe { MemoryRegion::register(pd, mem.ptr(), mem.len(), ACCESS_ALL)? };
        Ok(Slots {
            mr,
            mem,
            slot,
            count,
        })
    }
    fn addr(&self, i: usize) -> *mut u8 {
        // SAFETY: i < count, so the offset is inside the buffer.
        unsafe { self.mem.ptr().add(i * self.slot) }
    }
}

/// Resources of one connection, created with its first lane.
pub(super) struct Setup {
    pub pd: Arc<ProtectionDomain>,
    pub cc: CompChannel,
    pub cq: CompletionQueue,
    pub recv: Slots,
    pub send: Slots,
    pub rd_atomic: u8,
    pub credits: u32,
    pub max_message: usize,
}

impl Setup {
    pub fn new(
        ctx: *mut ibv_context,
        lanes: usize,
        max_message: usize,
        credits: u32,
    ) -> Result<Self> {
        let pd = ProtectionDomain::new(ctx)?;
        let cc = CompChannel::new(ctx)?;
        let cqe = lanes as u32 * (ONE_SIDED_DEPTH + credits + 8) + credits + 16;
        let cq = CompletionQueue::new(ctx, cqe as i32, &cc)?;
        let slot = (max_message + MSG_HDR).next_multiple_of(64);
        let recv = Slots::new(&pd, slot, credits as usize)?;
        let send = Slots::new(&pd, slot, credits as usize + 2)?;
        Ok(Setup {
            pd,
            cc,
            cq,
            recv,
            send,
            rd_atomic: cm::rd_atomic_depth(ctx),
            credits,
            max_message,
        })
    }

    pub fn pd_context(&self) -> *mut ibv_context {
        // SAFETY: pd is live.
        unsafe { (*self.pd.0).context }
    }

    /// Send queue depth of every QP.
    pub fn sq_depth(&self) -> u32 {
        ONE_SIDED_DEPTH + self.credits + 4
    }

    /// Creates lane `lane`'s QP on `id`; lane 0 gets the RECV ring posted.
    pub fn attach(&self, id: &CmId, lane: usize) -> Result<()> {
        let recv_depth = if lane == 0 { self.credits } else { 1 };
        id.create_qp(&self.pd, &self.cq, self.sq_depth(), recv_depth)?;
        if lane == 0 {
            for i in 0..self.recv.count {
                post_recv(id.qp(), &self.recv, i)?;
            }
        }
        Ok(())
    }
}

fn post_recv(qp: *mut ibv_qp, ring: &Slots, i: usize) -> Result<()> {
    let mut sge = ibv_sge {
        addr: ring.addr(i) as u64,
        length: ring.slot as u32,
        lkey: ring.mr.lkey(),
    };
    let mut wr = ibv_recv_wr {
        wr_id: (TAG_RECV << TAG_SHIFT) | i as u64,
        next: std::ptr::null_mut(),
        sg_list: &mut sge,
        num_sge: 1,
    };
    let mut bad = std::ptr::null_mut();
    // SAFETY: qp live; sge points into a registered ring slot that lives
    // as long as the connection.
    check_errno("ibv_post_recv", unsafe {
        ibv_post_recv(qp, &mut wr, &mut bad)
    })
}

/// Posts one signalled work request with a single SGE.
fn post_send(
    qp: *mut ibv_qp,
    wr_id: u64,
    opcode: ibv_wr_opcode::Type,
    sge: ibv_sge,
    remote: Option<(u64, u32)>,
) -> Result<()> {
    let mut sge = sge;
    // SAFETY: all-zero ibv_send_wr is a valid empty request.
    let mut wr: ibv_send_wr = unsafe { std::mem::zeroed() };
    wr.wr_id = wr_id;
    wr.sg_list = &mut sge;
    wr.num_sge = 1;
    wr.opcode = opcode;
    wr.send_flags = ibv_send_flags::IBV_SEND_SIGNALED.0;
    if let Some((addr, rkey)) = remote {
        wr.wr.rdma = rdma_t {
            remote_addr: addr,
            rkey,
        };
    }
    let mut bad = std::ptr::null_mut();
    // SAFETY: qp live; the SGE names registered memory that outlives the
    // request (the caller waits for its completion or the connection dies).
    check_errno("ibv_post_send", unsafe {
        ibv_post_send(qp, &mut wr, &mut bad)
    })
}

/// Counting semaphore with deadlines that gives up when the connection dies.
struct Gate {
    free: Mutex<u32>,
    cv: Condvar,
}

impl Gate {
    fn new(n: u32) -> Self {
        Gate {
            free: Mutex::new(n),
            cv: Condvar::new(),
        }
    }
    fn acquire(&self, min: u32, deadline: Instant, dead: &AtomicBool) -> Result<()> {
        let mut f = self.free.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if dead.load(Ordering::SeqCst) {
                return Err(Error::Disconnected("connection lost".into()));
            }
            if *f >= min {
                *f -= 1;
                return Ok(());
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(Error::Timeout(Duration::ZERO));
            }
            f = self
                .cv
                .wait_timeout(f, left.min(Duration::from_millis(100)))
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }
    fn try_acquire(&self, min: u32) -> bool {
        let mut f = self.free.lock().unwrap_or_else(|e| e.into_inner());
        if *f >= min {
            *f -= 1;
            true
        } else {
            false
        }
    }
    fn release(&self, n: u32) {
        *self.free.lock().unwrap_or_else(|e| e.into_inner()) += n;
        self.cv.notify_all();
    }
}

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

    fn poll_loop(self: Arc<Self>) {
        // SAFETY: all-zero ibv_wc is valid output storage.
        let mut wcs: [ibv_wc; 32] = unsafe { std::mem::zeroed() };
        let mut idle = 0u32;
        let mut rounds = 0u32;
        while !self.dead.load(Ordering::SeqCst) {
            // SAFETY: cq live (Inner holds it); wcs has room for 32.
            let n = unsafe { ibv_poll_cq(self.cq.0, 32, wcs.as_mut_ptr()) };
            if n < 0 {
                self.die("ibv_poll_cq failed".into());
                return;
            }
            for wc in &wcs[..n as usize] {
                self.handle(wc);
            }
            rounds = rounds.wrapping_add(1);
            if n > 0 {
                idle = 0;
                if rounds.is_multiple_of(256) {
                    self.cm_events(Duration::ZERO);
                }
                continue;
            }
            idle += 1;
            if idle < 64 {
                std::thread::yield_now();
                continue;
            }
            // Idle: arm the completion channel and sleep on it and on the
            // CM channel (a peer's disconnect arrives there).
            // SAFETY: cq live.
            unsafe { ibv_req_notify_cq(self.cq.0, 0) };
            // SAFETY: as above; re-poll closes the arm/arrive race.
            let n = unsafe { ibv_poll_cq(self.cq.0, 32, wcs.as_mut_ptr()) };
            if n > 0 {
                for wc in &wcs[..n as usize] {
                    self.handle(wc);
                }
                idle = 0;
                continue;
            }
            let mut fds = [
                libc::pollfd {
                    fd: self.cc.fd(),
                    events: libc::POLLIN,
                    revents: 0,
                },
                libc::pollfd {
                    fd: self.ec.fd(),
                    events: libc::POLLIN,
                    revents: 0,
                },
            ];
            // SAFETY: fds valid for the call.
            unsafe { libc::poll(fds.as_mut_ptr(), 2, 100) };
            if fds[0].revents != 0 {
                let mut cq = std::ptr::null_mut();
                let mut ctx = std::ptr::null_mut();
                // SAFETY: non-blocking channel; on success the event is acked once.
                if unsafe { ibv_get_cq_event(self.cc.0, &mut cq, &mut ctx) } == 0 {
                    // SAFETY: cq is ours, one event received.
                    unsafe { ibv_ack_cq_events(cq, 1) };
                }
            }
            if fds[1].revents != 0 {
                self.cm_events(Duration::ZERO);
            }
            self.return_credits_if_owed();
            idle = 0;
        }
    }

    fn cm_events(&self, wait: Duration) {
        while let Ok(Some(ev)) = cm::next_event(&self.ec, wait) {
            match ev.kind {
                rdma_cm_event_type::RDMA_CM_EVENT_DISCONNECTED
                | rdma_cm_event_type::RDMA_CM_EVENT_DEVICE_REMOVAL
                | rdma_cm_event_type::RDMA_CM_EVENT_TIMEWAIT_EXIT => {
                    self.die(format!("peer {}: {}", self.peer, cm::event_name(ev.kind)));
                }
                _ => log::debug!("verbs: ignoring {}", cm::event_name(ev.kind)),
            }
        }
    }

    fn handle(&self, wc: &ibv_wc) {
        let ok = wc.status == ibv_wc_status::IBV_WC_SUCCESS;
        let status_str = || {
            // SAFETY: static string for any status.
            let p = unsafe { ibv_wc_status_str(wc.status) };
            if p.is_null() {
                format!("status {}", wc.status)
            } else {
                // SAFETY: NUL-terminated static string.
                unsafe { std::ffi::CStr::from_ptr(p) }
                    .to_string_lossy()
                    .into_owned()
            }
        };
        match wc.wr_id >> TAG_SHIFT {
            TAG_RECV => {
                if !ok {
                    self.die(format!("receive failed: {}", status_str()));
                    return;
                }
                let i = (wc.wr_id & OP_MASK) as usize;
                if let Err(e) = self.on_recv(i, wc.byte_len as usize) {
                    self.die(format!("bad message from peer: {e}"));
                }
            }
            TAG_SEND => {
                let i = (wc.wr_id & OP_MASK) as usize;
                self.free_slots
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(i);
                self.slot_cv.notify_one();
                self.lanes[0].sq.release(1);
                if !ok {
                    self.die(format!("send failed: {}", status_str()));
                    return;
                }
                // A credit-only message that found no free slot earlier
                // goes now: the peer may be waiting for those credits.
                self.return_credits_if_owed();
            }
            _ => {
                let lane = ((wc.wr_id >> OP_BITS) & 0x3fff) as usize;
                if let Some(l) = self.lanes.get(lane) {
                    l.sq.release(1);
                }
                let op = wc.wr_id & OP_MASK;
                let done = self
                    .pending
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .ops
                    .remove(&op);
                let r = if ok {
                    Ok(())
                } else {
                    Err(Error::Completion(format!(
                        "RDMA {} on lane {lane}: {} (the peer refused the key or range, or is gone)",
                        if wc.opcode == ibv_wc_opcode::IBV_WC_RDMA_READ { "READ" } else { "WRITE" },
                        status_str()
                    )))
                };
                if let Some(d) = done {
                    let _ = d.try_send(r);
                }
                if !ok {
                    self.die(format!("one-sided operation failed: {}", status_str()));
                }
            }
        }
    }

    fn on_recv(&self, i: usize, len: usize) -> Result<()> {
        if !(MSG_HDR..=self.own_max + MSG_HDR).contains(&len) {
            return Err(Error::Protocol(format!("message of {len} bytes")));
        }
        let p = self.recv.addr(i);
        let mut h = [0u8; MSG_HDR];
        // SAFETY: the slot holds len >= MSG_HDR received bytes and the NIC is
        // done with it (its completion is being handled).
        unsafe { std::ptr::copy_nonoverlapping(p, h.as_mut_ptr(), MSG_HDR) };
        let kind = u32::from_le_bytes([h[0], h[1], h[2], h[3]]);
        let back = u32::from_le_bytes([h[4], h[5], h[6], h[7]]);
        if back > 0 {
            self.credits.release(back);
        }
        match kind {
            MSG_DATA => {
                let mut m = vec![0u8; len - MSG_HDR];
                // SAFETY: as above, len - MSG_HDR payload bytes follow the header.
                unsafe { std::ptr::copy_nonoverlapping(p.add(MSG_HDR), m.as_mut_ptr(), m.len()) };
                let _ = self.msg_tx.send(m);
            }
            MSG_CREDIT => {}
            k => return Err(Error::Protocol(format!("unknown message kind {k}"))),
        }
        post_recv(self.lanes[0].id.qp(), &self.recv, i)?;
        let owed = self.owed.fetch_add(1, Ordering::SeqCst) + 1;
        if kind == MSG_DATA && owed >= self.own_credits / 2 {
            self.send_credit_only();
        }
        Ok(())
    }

    fn return_credits_if_owed(&self) {
        if self.owed.load(Ordering::SeqCst) >= self.own_credits / 2 {
            self.send_credit_only();
        }
    }

    /// Returns owed credits without waiting for anything; uses the credit
    /// that data messages never take.
    fn send_credit_only(&self) {
        if !self.credits.try_acquire(1) {
            return;
        }
        let Some(slot) = self
            .free_slots
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .pop()
        else {
            self.credits.release(1);
            return;
        };
        if !self.lanes[0].sq.try_acquire(1) {
            self.free_slots
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(slot);
            self.credits.release(1);
            return;
        }
        let owed = self.owed.swap(0, Ordering::SeqCst);
        if let Err(e) = self.post_message(slot, MSG_CREDIT, owed, &[]) {
            self.die(format!("credit message failed: {e}"));
        }
    }

    fn post_message(&self, slot: usize, kind: u32, credits: u32, payload: &[u8]) -> Result<()> {
        let p = self.send.addr(slot);
        let mut h = [0u8; MSG_HDR];
        h[0..4].copy_from_slice(&kind.to_le_bytes());
        h[4..8].copy_from_slice(&credits.to_le_bytes());
        // SAFETY: the slot is ours (taken from the free list) and holds
        // MSG_HDR + send_limit bytes; the NIC is not using it.
        unsafe {
            std::ptr::copy_nonoverlapping(h.as_ptr(), p, MSG_HDR);
            std::ptr::copy_nonoverlapping(payload.as_ptr(), p.add(MSG_HDR), payload.len());
        }
        let sge = ibv_sge {
            addr: p as u64,
            length: (MSG_HDR + payload.len()) as u32,
            lkey: self.send.mr.lkey(),
        };
        post_send(
            self.lanes[0].id.qp(),
            (TAG_SEND << TAG_SHIFT) | slot as u64,
            ibv_wr_opcode::IBV_WR_SEND,
            sge,
            None,
        )
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
