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
pub struct EventChannel(*mut rdma_event_channel);

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
    /// The raw channel, for the CM calls of `cm` (valid while `self` is).
    pub(super) fn as_ptr(&self) -> *mut rdma_event_channel {
        self.0
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
    id: *mut rdma_cm_id,
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

    /// The raw id, for the CM calls of `setup` (valid while `self` is).
    pub(super) fn as_ptr(&self) -> *mut rdma_cm_id {
        self.id
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
pub struct ProtectionDomain(*mut ibv_pd);

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

impl ProtectionDomain {
    /// The device context the domain was allocated on.
    pub(super) fn context(&self) -> *mut ibv_context {
        // SAFETY: the domain is live while `self` is.
        unsafe { (*self.0).context }
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
pub struct CompChannel(*mut ibv_comp_channel);

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
    /// Takes and acknowledges one pending completion event, if any (the
    /// channel is non-blocking); returns whether there was one.
    pub(super) fn ack_event(&self) -> bool {
        let mut cq = std::ptr::null_mut();
        let mut ctx = std::ptr::null_mut();
        // SAFETY: the channel is live; on success the event is acked once.
        if unsafe { ibv_get_cq_event(self.0, &mut cq, &mut ctx) } == 0 {
            // SAFETY: `cq` is the queue the event came from, one event received.
            unsafe { ibv_ack_cq_events(cq, 1) };
            true
        } else {
            false
        }
    }
}

impl Drop for CompChannel {
    fn drop(&mut self) {
        // SAFETY: the CQ using it is dropped first (field order in the owner).
        unsafe { ibv_destroy_comp_channel(self.0) };
    }
}

/// A completion queue.
pub struct CompletionQueue(*mut ibv_cq);

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

    /// Polls up to `wcs.len()` completions into `wcs`; returns those filled.
    pub(super) fn poll<'a>(&self, wcs: &'a mut [ibv_wc]) -> Result<&'a [ibv_wc]> {
        let room = i32::try_from(wcs.len()).unwrap_or(i32::MAX);
        // SAFETY: the CQ is live; the provider writes at most `room` entries.
        let n = unsafe { ibv_poll_cq(self.0, room, wcs.as_mut_ptr()) };
        if n < 0 {
            return Err(crate::Error::Verbs {
                call: "ibv_poll_cq",
                source: std::io::Error::from_raw_os_error(-n),
            });
        }
        Ok(&wcs[..n as usize])
    }

    /// Arms the completion channel for the next completion.
    pub(super) fn req_notify(&self) -> Result<()> {
        // SAFETY: the CQ is live.
        let rc = unsafe { ibv_req_notify_cq(self.0, 0) };
        if rc != 0 {
            return Err(crate::Error::Verbs {
                call: "ibv_req_notify_cq",
                source: std::io::Error::from_raw_os_error(rc),
            });
        }
        Ok(())
    }
}

impl Drop for CompletionQueue {
    fn drop(&mut self) {
        // SAFETY: the QPs using it are destroyed first (field order).
        unsafe { ibv_destroy_cq(self.0) };
    }
}

/// libibverbs' device list, freed on drop.
struct DeviceList {
    list: *mut *mut ibv_device,
    n: usize,
}

impl DeviceList {
    /// The list; `Ok(None)` when libibverbs finds no devices (including
    /// ENOSYS/ENODEV from a kernel without RDMA support).
    fn get() -> Result<Option<DeviceList>> {
        let mut n = 0i32;
        // SAFETY: n receives the count; the list is freed on drop.
        let list = unsafe { ibv_get_device_list(&mut n) };
        if list.is_null() {
            let e = std::io::Error::last_os_error();
            return match e.raw_os_error() {
                Some(libc::ENOSYS) | Some(libc::ENODEV) | Some(libc::ENOENT) | Some(0) | None => {
                    Ok(None)
                }
                _ => Err(crate::Error::Verbs {
                    call: "ibv_get_device_list",
                    source: e,
                }),
            };
        }
        Ok(Some(DeviceList {
            list,
            n: n.max(0) as usize,
        }))
    }

    /// Each device with its name, while the list lives.
    fn devices(&self) -> impl Iterator<Item = (*mut ibv_device, String)> + '_ {
        (0..self.n)
            // SAFETY: the list has n entries.
            .map(|i| unsafe { *self.list.add(i) })
            .take_while(|dev| !dev.is_null())
            .map(|dev| {
                // SAFETY: dev is a live entry of the list; the name is a C
                // string libibverbs owns, copied here.
                let name = unsafe {
                    let p = ibv_get_device_name(dev);
                    if p.is_null() {
                        String::new()
                    } else {
                        std::ffi::CStr::from_ptr(p).to_string_lossy().into_owned()
                    }
                };
                (dev, name)
            })
    }
}

impl Drop for DeviceList {
    fn drop(&mut self) {
        // SAFETY: from ibv_get_device_list, freed once.
        unsafe { ibv_free_device_list(self.list) };
    }
}

/// The host's RDMA devices; empty when libibverbs finds none, including
/// ENOSYS from a kernel without RDMA support.
pub(super) fn device_infos() -> Result<Vec<crate::DeviceInfo>> {
    let Some(list) = DeviceList::get()? else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for (dev, name) in list.devices() {
        // SAFETY: dev is a live entry of the list; the GUID comes in network order.
        let guid = u64::from_be(unsafe { ibv_get_device_guid(dev) });
        let (mut port_active, mut link_layer) = (false, String::from("unknown"));
        // SAFETY: dev live; the context is closed right after.
        let ctx = unsafe { ibv_open_device(dev) };
        if !ctx.is_null() {
            // SAFETY: all-zero port attr is valid output storage.
            let mut pa: ibv_port_attr = unsafe { std::mem::zeroed() };
            // SAFETY: ctx live, port 1 exists on every device.
            if unsafe { ibv_query_port(ctx, 1, &mut pa as *mut ibv_port_attr as *mut _) } == 0 {
                port_active = pa.state == ibv_port_state::IBV_PORT_ACTIVE;
                // IBV_LINK_LAYER_INFINIBAND = 1, IBV_LINK_LAYER_ETHERNET = 2.
                link_layer = match pa.link_layer {
                    2 => "Ethernet".into(),
                    0 | 1 => "InfiniBand".into(),
                    _ => "unknown".into(),
                };
            }
            // SAFETY: opened above.
            unsafe { ibv_close_device(ctx) };
        }
        out.push(crate::DeviceInfo {
            name,
            guid,
            port_active,
            link_layer,
        });
    }
    Ok(out)
}

/// Tries, on every RDMA device, to register `dmabuf` (fd, offset, len,
/// iova) and the address range `peer`; each result is `None` when not
/// asked, else `Ok` or the refusal.
///
/// # Safety
/// `dmabuf`'s fd must be a dmabuf and `peer` memory that stays valid for
/// the call (the registrations are dropped before it returns).
pub(super) unsafe fn probe_registrations(
    dmabuf: Option<(RawFd, u64, usize, u64)>,
    peer: Option<(*mut u8, usize)>,
) -> Vec<crate::RegistrationProbe> {
    let Ok(Some(list)) = DeviceList::get() else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for (dev, name) in list.devices() {
        // SAFETY: dev live; the context is closed below, after the PD and
        // every region (dropped inside the block) are gone.
        let ctx = unsafe { ibv_open_device(dev) };
        if ctx.is_null() {
            let e = std::io::Error::last_os_error().to_string();
            out.push(crate::RegistrationProbe {
                device: name,
                dmabuf: dmabuf.map(|_| Err(format!("ibv_open_device: {e}"))),
                peer_memory: peer.map(|_| Err(format!("ibv_open_device: {e}"))),
            });
            continue;
        }
        {
            let probe = match ProtectionDomain::new(ctx) {
                Ok(pd) => crate::RegistrationProbe {
                    device: name,
                    dmabuf: dmabuf.map(|(fd, off, len, iova)| {
                        // SAFETY: the caller's dmabuf; the region is dropped at once.
                        unsafe { MemoryRegion::register_dmabuf(&pd, fd, off, len, iova) }
                            .map(drop)
                            .map_err(|e| e.to_string())
                    }),
                    peer_memory: peer.map(|(ptr, len)| {
                        // SAFETY: the caller's memory; the region is dropped at once.
                        unsafe { MemoryRegion::register(&pd, ptr, len, ACCESS_ALL) }
                            .map(drop)
                            .map_err(|e| e.to_string())
                    }),
                },
                Err(e) => crate::RegistrationProbe {
                    device: name,
                    dmabuf: dmabuf.map(|_| Err(e.to_string())),
                    peer_memory: peer.map(|_| Err(e.to_string())),
                },
            };
            out.push(probe);
        }
        // SAFETY: opened above; nothing made on it is alive any more.
        unsafe { ibv_close_device(ctx) };
    }
    out
}
