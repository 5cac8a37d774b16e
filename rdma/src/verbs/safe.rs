//! The "safe" layer: RAII owners of verbs objects. Parent objects are held
//! by `Arc` in their children, so a protection domain outlives its memory
//! regions and an event channel outlives its CM ids, whatever order the
//! owners are dropped in.

use std::os::fd::RawFd;
use std::sync::Arc;

use rdma_sys::*;

use super::result::{check, non_null};
use crate::error::Result;

/// An RDMA CM event channel (all CM events of its ids arrive here).
pub struct EventChannel(pub(super) *mut rdma_event_channel);

// SAFETY: librdmacm objects may be used from any thread; we serialise use
// of each channel ourselves (one thread reads events at a time).
unsafe impl Send for EventChannel {}
// SAFETY: as above.
unsafe impl Sync for EventChannel {}

impl EventChannel {
    pub(super) fn new() -> Result<Arc<Self>> {
        // SAFETY: no arguments; returns an owned channel or NULL.
        let ec = non_null("rdma_create_event_channel", unsafe {
            rdma_create_event_channel()
        })?;
        Ok(Arc::new(EventChannel(ec)))
    }
    pub(super) fn fd(&self) -> RawFd {
        // SAFETY: self.0 is a live channel.
        unsafe { (*self.0).fd }
    }
    /// Non-blocking reads: the pollers wait with poll(2) and a deadline.
    pub(super) fn set_nonblocking(&self) -> Result<()> {
        set_nonblocking(self.fd())
    }
}

impl Drop for EventChannel {
    fn drop(&mut self) {
        // SAFETY: every id on this channel holds an Arc to it, so none is left.
        unsafe { rdma_destroy_event_channel(self.0) };
    }
}

pub(super) fn set_nonblocking(fd: RawFd) -> Result<()> {
    // SAFETY: plain fcntl on a descriptor we own.
    let fl = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    // SAFETY: as above.
    check("fcntl(O_NONBLOCK)", unsafe {
        libc::fcntl(fd, libc::F_SETFL, fl | libc::O_NONBLOCK)
    })
}

/// An RDMA CM id, with the QP created on it (if any).
pub struct CmId {
    pub(super) id: *mut rdma_cm_id,
    channel: Arc<EventChannel>,
}

// SAFETY: see EventChannel; verbs calls on one QP are thread-safe in
// libibverbs providers.
unsafe impl Send for CmId {}
// SAFETY: as above.
unsafe impl Sync for CmId {}

impl CmId {
    pub(super) fn new(channel: &Arc<EventChannel>) -> Result<Self> {
        let mut id = std::ptr::null_mut();
        // SAFETY: channel is live; id receives an owned cm id.
        check("rdma_create_id", unsafe {
            rdma_create_id(
                channel.0,
                &mut id,
                std::ptr::null_mut(),
                rdma_port_space::RDMA_PS_TCP,
            )
        })?;
        Ok(CmId {
            id,
            channel: channel.clone(),
        })
    }

    /// Takes ownership of an id handed out by a CONNECT_REQUEST event.
    ///
    /// # Safety
    /// `id` must be a new id from an event of `channel` that nobody else owns.
    pub(super) unsafe fn from_request(id: *mut rdma_cm_id, channel: &Arc<EventChannel>) -> Self {
        CmId {
            id,
            channel: channel.clone(),
        }
    }

    /// The device context librdmacm opened for this id (after address
    /// resolution); owned by librdmacm for the life of the process.
    pub(super) fn verbs(&self) -> *mut ibv_context {
        // SAFETY: self.id is live.
        unsafe { (*self.id).verbs }
    }

    pub(super) fn qp(&self) -> *mut ibv_qp {
        // SAFETY: self.id is live.
        unsafe { (*self.id).qp }
    }

    /// Moves the id's events to another channel.
    pub(super) fn migrate(&mut self, to: &Arc<EventChannel>) -> Result<()> {
        // SAFETY: both live; all events of this id have been acked.
        check("rdma_migrate_id", unsafe { rdma_migrate_id(self.id, to.0) })?;
        self.channel = to.clone();
        Ok(())
    }

    /// Creates the RC queue pair of this id on `pd`, completing into `cq`.
    pub(super) fn create_qp(
        &self,
        pd: &ProtectionDomain,
        cq: &CompletionQueue,
        send: u32,
        recv: u32,
    ) -> Result<()> {
        // SAFETY: an all-zero ibv_qp_init_attr is a valid starting point.
        let mut attr: ibv_qp_init_attr = unsafe { std::mem::zeroed() };
        attr.send_cq = cq.0;
        attr.recv_cq = cq.0;
        attr.qp_type = ibv_qp_type::IBV_QPT_RC;
        attr.cap.max_send_wr = send;
        attr.cap.max_recv_wr = recv.max(1);
        attr.cap.max_send_sge = 1;
        attr.cap.max_recv_sge = 1;
        // SAFETY: id, pd and cq are live; pd and cq outlive the QP because
        // the connection drops its CmIds (destroying QPs) before them.
        check("rdma_create_qp", unsafe {
            rdma_create_qp(self.id, pd.0, &mut attr)
        })
    }

    pub(super) fn disconnect(&self) {
        // SAFETY: id live; moves the QP to error, flushing its work.
        unsafe { rdma_disconnect(self.id) };
    }
}

impl Drop for CmId {
    fn drop(&mut self) {
        // SAFETY: the id is ours; its QP (if any) goes first. The channel
        // Arc is released after, so the channel outlives the id.
        unsafe {
            if !(*self.id).qp.is_null() {
                rdma_destroy_qp(self.id);
            }
            rdma_destroy_id(self.id);
        }
    }
}

/// A protection domain.
pub struct ProtectionDomain(pub(super) *mut ibv_pd);

// SAFETY: PDs are used concurrently by libibverbs design.
unsafe impl Send for ProtectionDomain {}
// SAFETY: as above.
unsafe impl Sync for ProtectionDomain {}

impl ProtectionDomain {
    pub(super) fn new(ctx: *mut ibv_context) -> Result<Arc<Self>> {
        // SAFETY: ctx is a device context kept open by librdmacm.
        let pd = non_null("ibv_alloc_pd", unsafe { ibv_alloc_pd(ctx) })?;
        Ok(Arc::new(ProtectionDomain(pd)))
    }
}

impl Drop for ProtectionDomain {
    fn drop(&mut self) {
        // SAFETY: every MR and QP on it holds an Arc or is gone already.
        unsafe { ibv_dealloc_pd(self.0) };
    }
}

/// A memory region; deregistered on drop.
pub struct MemoryRegion {
    pub(super) mr: *mut ibv_mr,
    _pd: Arc<ProtectionDomain>,
}

// SAFETY: an MR is an immutable handle after creation.
unsafe impl Send for MemoryRegion {}
// SAFETY: as above.
unsafe impl Sync for MemoryRegion {}

pub const ACCESS_ALL: i32 = (ibv_access_flags::IBV_ACCESS_LOCAL_WRITE.0
    | ibv_access_flags::IBV_ACCESS_REMOTE_WRITE.0
    | ibv_access_flags::IBV_ACCESS_REMOTE_READ.0) as i32;

impl MemoryRegion {
    /// # Safety
    /// `[ptr, ptr+len)` must stay valid until the region is dropped.
    pub(super) unsafe fn register(
        pd: &Arc<ProtectionDomain>,
        ptr: *mut u8,
        len: usize,
        access: i32,
    ) -> Result<Self> {
        // SAFETY: the caller vouches for the memory; pd is live.
        let mr = non_null("ibv_reg_mr", unsafe {
            ibv_reg_mr(pd.0, ptr.cast(), len, access)
        })?;
        Ok(MemoryRegion {
            mr,
            _pd: pd.clone(),
        })
    }

    /// # Safety
    /// `fd` must be a dmabuf that stays valid until the region is dropped.
    pub(super) unsafe fn register_dmabuf(
        pd: &Arc<ProtectionDomain>,
        fd: RawFd,
        offset: u64,
        len: usize,
        iova: u64,
    ) -> Result<Self> {
        // SAFETY: the caller vouches for the dmabuf; pd is live.
        let mr = non_null("ibv_reg_dmabuf_mr", unsafe {
            ibv_reg_dmabuf_mr(pd.0, offset, len, iova, fd, ACCESS_ALL)
        })?;
        Ok(MemoryRegion {
            mr,
            _pd: pd.clone(),
        })
    }

    pub(super) fn lkey(&self) -> u32 {
        // SAFETY: mr is live.
        unsafe { (*self.mr).lkey }
    }
    pub(super) fn rkey(&self) -> u32 {
        // SAFETY: mr is live.
        unsafe { (*self.mr).rkey }
    }
}

impl crate::region::RegionHandle for MemoryRegion {}

impl Drop for MemoryRegion {
    fn drop(&mut self) {
        // SAFETY: ours; work requests still using it complete with an error.
        unsafe { ibv_dereg_mr(self.mr) };
    }
}

/// A completion channel: lets an idle poller sleep until a completion.
pub struct CompChannel(pub(super) *mut ibv_comp_channel);

// SAFETY: only the connection's poller thread reads it.
unsafe impl Send for CompChannel {}
// SAFETY: as above.
unsafe impl Sync for CompChannel {}

impl CompChannel {
    pub(super) fn new(ctx: *mut ibv_context) -> Result<Self> {
        // SAFETY: ctx is live.
        let cc = non_null("ibv_create_comp_channel", unsafe {
            ibv_create_comp_channel(ctx)
        })?;
        let c = CompChannel(cc);
        // SAFETY: cc is live.
        set_nonblocking(unsafe { (*cc).fd })?;
        Ok(c)
    }
    pub(super) fn fd(&self) -> RawFd {
        // SAFETY: live.
        unsafe { (*self.0).fd }
    }
}

impl Drop for CompChannel {
    fn drop(&mut self) {
        // SAFETY: the CQ using it is dropped first (field order in the owner).
        unsafe { ibv_destroy_comp_channel(self.0) };
    }
}

/// A completion queue.
pub struct CompletionQueue(pub(super) *mut ibv_cq);

// SAFETY: polled by one thread; created/destroyed by the owner.
unsafe impl Send for CompletionQueue {}
// SAFETY: as above.
unsafe impl Sync for CompletionQueue {}

impl CompletionQueue {
    pub(super) fn new(ctx: *mut ibv_context, cqe: i32, channel: &CompChannel) -> Result<Self> {
        // SAFETY: ctx and channel live.
        let cq = non_null("ibv_create_cq", unsafe {
            ibv_create_cq(ctx, cqe, std::ptr::null_mut(), channel.0, 0)
        })?;
        Ok(CompletionQueue(cq))
    }
}

impl Drop for CompletionQueue {
    fn drop(&mut self) {
        // SAFETY: the QPs using it are destroyed first (field order).
        unsafe { ibv_destroy_cq(self.0) };
    }
}
