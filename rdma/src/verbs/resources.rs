//! What a connection's queue pairs are built from: the registered message
//! rings, the shared PD/CQ set-up, work-request posting, and the gates
//! (counting semaphores with deadlines) that bound what is in flight.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use rdma_sys::*;

use super::cm;
use super::result::check_errno;
use super::safe::{CmId, CompChannel, CompletionQueue, MemoryRegion, ProtectionDomain, ACCESS_ALL};
use crate::error::{Error, Result};
use crate::mem::PageBuffer;

pub(super) const TAG_SHIFT: u32 = 62;
pub(super) const TAG_RECV: u64 = 1;
pub(super) const TAG_SEND: u64 = 2;
pub(super) const OP_BITS: u32 = 48;
pub(super) const OP_MASK: u64 = (1 << OP_BITS) - 1;
/// Message header: kind u32, credits returned u32.
pub(super) const MSG_HDR: usize = 8;
pub(super) const MSG_DATA: u32 = 1;
pub(super) const MSG_CREDIT: u32 = 2;
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
    pub(super) fn new(pd: &Arc<ProtectionDomain>, slot: usize, count: usize) -> Result<Self> {
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
    pub(super) fn addr(&self, i: usize) -> *mut u8 {
        // SAFETY: i < count, so the offset is inside the buffer.
        unsafe { self.mem.ptr().add(i * self.slot) }
    }
}

/// Resources of one connection, created with its first lane.
/// Field order is drop order (when set-up fails half-way): the CQ before
/// its completion channel, the rings before the PD.
pub(super) struct Setup {
    pub cq: CompletionQueue,
    pub cc: CompChannel,
    pub recv: Slots,
    pub send: Slots,
    pub pd: Arc<ProtectionDomain>,
    pub rd_atomic: u8,
    pub credits: u32,
    pub max_message: usize,
}

impl Setup {
    pub(super) fn new(
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

    pub(super) fn pd_context(&self) -> *mut ibv_context {
        self.pd.context()
    }

    /// Send queue depth of every QP.
    pub(super) fn sq_depth(&self) -> u32 {
        ONE_SIDED_DEPTH + self.credits + 4
    }

    /// Creates lane `lane`'s QP on `id`; lane 0 gets the RECV ring posted.
    pub(super) fn attach(&self, id: &CmId, lane: usize) -> Result<()> {
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

pub(super) fn post_recv(qp: *mut ibv_qp, ring: &Slots, i: usize) -> Result<()> {
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
pub(super) fn post_send(
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
pub(super) struct Gate {
    free: Mutex<u32>,
    pub(super) cv: Condvar,
}

impl Gate {
    pub(super) fn new(n: u32) -> Self {
        Gate {
            free: Mutex::new(n),
            cv: Condvar::new(),
        }
    }
    pub(super) fn acquire(&self, min: u32, deadline: Instant, dead: &AtomicBool) -> Result<()> {
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
    pub(super) fn try_acquire(&self, min: u32) -> bool {
        let mut f = self.free.lock().unwrap_or_else(|e| e.into_inner());
        if *f >= min {
            *f -= 1;
            true
        } else {
            false
        }
    }
    pub(super) fn release(&self, n: u32) {
        *self.free.lock().unwrap_or_else(|e| e.into_inner()) += n;
        self.cv.notify_all();
    }
}
