//! Connection set-up: "prepare, exchange endpoints, handshake" through the
//! RDMA CM. The connecting side opens `lanes` CM connections carrying the
//! same random token in their private data; the listener groups them and
//! hands out a connection once every lane is ESTABLISHED.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{unbounded, Receiver, RecvTimeoutError, Sender};
use rdma_sys::*;

use super::cm::{self, LaneHello, RawAddr};
use super::conn::{Established, VerbsConnection};
use super::resources::Setup;
use super::result::check;
use super::safe::{CmId, EventChannel};
use crate::tcp::random_u64;
use crate::{Connection, Error, Listener, Result, TransportConfig};

const RESOLVE_MS: i32 = 5000;

impl VerbsConnection {
    /// Connects `cfg.lanes` RC queue pairs to a verbs listener at `addr`.
    pub(crate) fn connect(addr: &str, cfg: &TransportConfig) -> Result<Self> {
        let sa = cm::resolve(addr)?;
        let deadline = Instant::now() + cfg.op_timeout;
        let ec = EventChannel::new()?;
        ec.set_nonblocking()?;
        let token = random_u64()?;
        let mut setup: Option<Setup> = None;
        let mut ids = Vec::with_capacity(cfg.lanes);
        let mut peer: Option<LaneHello> = None;
        for lane in 0..cfg.lanes {
            let id = CmId::new(&ec)?;
            let mut dst = RawAddr::new(sa);
            // SAFETY: id live; dst valid for the call.
            check("rdma_resolve_addr", unsafe {
                rdma_resolve_addr(id.as_ptr(), std::ptr::null_mut(), dst.as_ptr(), RESOLVE_MS)
            })?;
            cm::expect(
                &ec,
                id.as_ptr(),
                rdma_cm_event_type::RDMA_CM_EVENT_ADDR_RESOLVED,
                deadline,
            )
            .map_err(|e| timeout_as(e, cfg))?;
            // SAFETY: address resolved.
            check("rdma_resolve_route", unsafe {
                rdma_resolve_route(id.as_ptr(), RESOLVE_MS)
            })?;
            cm::expect(
                &ec,
                id.as_ptr(),
                rdma_cm_event_type::RDMA_CM_EVENT_ROUTE_RESOLVED,
                deadline,
            )
            .map_err(|e| timeout_as(e, cfg))?;
            if setup.is_none() {
                setup = Some(Setup::new(
                    id.verbs(),
                    cfg.lanes,
                    cfg.max_message,
                    cfg.recv_credits as u32,
                )?);
            }
            let s = setup
                .as_ref()
                .ok_or_else(|| Error::Protocol("no set-up".into()))?;
            if id.verbs() != s.pd_context() {
                return Err(Error::Protocol(
                    "lanes resolved to different RDMA devices".into(),
                ));
            }
            s.attach(&id, lane)?;
            let hello = LaneHello {
                token,
                lane: lane as u16,
                lanes: cfg.lanes as u16,
                max_message: cfg.max_message as u32,
                credits: cfg.recv_credits as u32,
            }
            .encode();
            let mut param = cm::conn_param(&hello, s.rd_atomic);
            // SAFETY: id has a QP; param and its private data live across the call.
            check("rdma_connect", unsafe {
                rdma_connect(id.as_ptr(), &mut param)
            })?;
            let ev = cm::expect(
                &ec,
                id.as_ptr(),
                rdma_cm_event_type::RDMA_CM_EVENT_ESTABLISHED,
                deadline,
            )
            .map_err(|e| timeout_as(e, cfg))?;
            let p = LaneHello::decode(&ev.private)?;
            if lane == 0 {
                peer = Some(p);
            }
            ids.push(id);
        }
        let (Some(setup), Some(peer)) = (setup, peer) else {
            return Err(Error::InvalidArgument("lanes must be > 0".into()));
        };
        VerbsConnection::start(Established {
            setup,
            ids,
            ec,
            peer,
            peer_addr: sa.to_string(),
            op_timeout: cfg.op_timeout,
            chunk: cfg.chunk_size,
        })
    }
}

fn timeout_as(e: Error, cfg: &TransportConfig) -> Error {
    match e {
        Error::Timeout(_) => Error::Timeout(cfg.op_timeout),
        e => e,
    }
}

/// Listener of the verbs transport.
pub struct VerbsListener {
    addr: String,
    closed: Arc<AtomicBool>,
    ready: Receiver<Result<VerbsConnection>>,
}

/// A connection whose lanes are still arriving. Field order is drop
/// order: the lanes' QPs go before the CQ in `setup`.
struct Group {
    ids: Vec<Option<CmId>>,
    setup: Setup,
    established: Vec<bool>,
    peer: Option<LaneHello>,
    started: Instant,
}

impl VerbsListener {
    pub(crate) fn bind(addr: &str, cfg: &TransportConfig) -> Result<Self> {
        let sa = cm::resolve(addr)?;
        let ec = EventChannel::new()?;
        ec.set_nonblocking()?;
        let listen_id = CmId::new(&ec)?;
        let port = cm::bind_and_listen(listen_id.as_ptr(), sa).map_err(|e| {
            Error::InvalidArgument(format!("cannot listen for verbs on '{addr}': {e}"))
        })?;
        let mut local = sa;
        local.set_port(port);
        let closed = Arc::new(AtomicBool::new(false));
        let (tx, rx) = unbounded();
        let (c, cfg) = (closed.clone(), cfg.clone());
        std::thread::Builder::new()
            .name("hipfs-verbs-accept".into())
            .spawn(move || accept_loop(ec, listen_id, cfg, c, tx))?;
        Ok(VerbsListener {
            addr: local.to_string(),
            closed,
            ready: rx,
        })
    }

    pub(crate) fn accept_timeout(&self, t: Duration) -> Result<Option<VerbsConnection>> {
        if self.closed.load(Ordering::SeqCst) {
            return Err(Error::Disconnected("listener closed".into()));
        }
        match self.ready.recv_timeout(t) {
            Ok(Ok(c)) => Ok(Some(c)),
            Ok(Err(e)) => {
                log::warn!("verbs connection set-up failed: {e}");
                Ok(None)
            }
            Err(RecvTimeoutError::Timeout) => Ok(None),
            Err(RecvTimeoutError::Disconnected) => {
                Err(Error::Disconnected("listener stopped".into()))
            }
        }
    }
}

fn accept_loop(
    ec: Arc<EventChannel>,
    listen_id: CmId,
    cfg: TransportConfig,
    closed: Arc<AtomicBool>,
    ready: Sender<Result<VerbsConnection>>,
) {
    let mut groups: HashMap<u64, Group> = HashMap::new();
    while !closed.load(Ordering::SeqCst) {
        groups.retain(|_, g| g.started.elapsed() < cfg.op_timeout);
        let ev = match cm::next_event(&ec, Duration::from_millis(100)) {
            Ok(Some(ev)) => ev,
            Ok(None) => continue,
            Err(e) => {
                log::warn!("verbs listener: {e}");
                continue;
            }
        };
        match ev.kind {
            rdma_cm_event_type::RDMA_CM_EVENT_CONNECT_REQUEST => {
                // SAFETY: a CONNECT_REQUEST hands us a new id we now own.
                let id = unsafe { CmId::from_request(ev.id, &ec) };
                if let Err(e) = on_request(&mut groups, id, &ev.private, &cfg) {
                    log::warn!("verbs listener: refused a lane: {e}");
                }
            }
            rdma_cm_event_type::RDMA_CM_EVENT_ESTABLISHED => {
                let Some((&token, g)) = groups
                    .iter_mut()
                    .find(|(_, g)| g.ids.iter().flatten().any(|i| i.as_ptr() == ev.id))
                else {
                    continue;
                };
                if let Some(k) = g
                    .ids
                    .iter()
                    .position(|i| i.as_ref().is_some_and(|i| i.as_ptr() == ev.id))
                {
                    g.established[k] = true;
                }
                if g.established.iter().all(|&e| e) {
                    if let Some(g) = groups.remove(&token) {
                        let _ = ready.send(finish(g, &cfg));
                    }
                }
            }
            k => {
                // A lane of a half-built connection failed: drop the whole group.
                groups.retain(|_, g| !g.ids.iter().flatten().any(|i| i.as_ptr() == ev.id));
                log::debug!("verbs listener: {}", cm::event_name(k));
            }
        }
    }
    drop(groups);
    drop(listen_id);
}

fn on_request(
    groups: &mut HashMap<u64, Group>,
    id: CmId,
    private: &[u8],
    cfg: &TransportConfig,
) -> Result<()> {
    let reject = |id: &CmId| {
        // SAFETY: id is a live connect request.
        unsafe { rdma_reject(id.as_ptr(), std::ptr::null(), 0) };
    };
    let hello = match LaneHello::decode(private) {
        Ok(h) => h,
        Err(e) => {
            reject(&id);
            return Err(e);
        }
    };
    let g = match groups.entry(hello.token) {
        std::collections::hash_map::Entry::Occupied(o) => o.into_mut(),
        std::collections::hash_map::Entry::Vacant(v) => v.insert(Group {
            setup: Setup::new(
                id.verbs(),
                hello.lanes as usize,
                cfg.max_message,
                cfg.recv_credits as u32,
            )?,
            ids: (0..hello.lanes).map(|_| None).collect(),
            established: vec![false; hello.lanes as usize],
            peer: None,
            started: Instant::now(),
        }),
    };
    let lane = hello.lane as usize;
    if g.ids.len() != hello.lanes as usize
        || g.ids[lane].is_some()
        || id.verbs() != g.setup.pd_context()
    {
        reject(&id);
        return Err(Error::Protocol("inconsistent lane request".into()));
    }
    g.setup.attach(&id, lane)?;
    let reply = LaneHello {
        token: hello.token,
        lane: hello.lane,
        lanes: hello.lanes,
        max_message: cfg.max_message as u32,
        credits: cfg.recv_credits as u32,
    }
    .encode();
    let mut param = cm::conn_param(&reply, g.setup.rd_atomic);
    // SAFETY: id has its QP; param and private data live across the call.
    check("rdma_accept", unsafe {
        rdma_accept(id.as_ptr(), &mut param)
    })?;
    if lane == 0 {
        g.peer = Some(hello);
    }
    g.ids[lane] = Some(id);
    Ok(())
}

fn finish(g: Group, cfg: &TransportConfig) -> Result<VerbsConnection> {
    let ec = EventChannel::new()?;
    let mut ids: Vec<CmId> = g.ids.into_iter().flatten().collect();
    for id in &mut ids {
        id.migrate(&ec)?;
    }
    let peer = g
        .peer
        .ok_or_else(|| Error::Protocol("lane 0 missing".into()))?;
    let peer_addr = peer_of(&ids[0]);
    VerbsConnection::start(Established {
        setup: g.setup,
        ids,
        ec,
        peer,
        peer_addr,
        op_timeout: cfg.op_timeout,
        chunk: cfg.chunk_size,
    })
}

fn peer_of(id: &CmId) -> String {
    // SAFETY: id live; dst_addr is a sockaddr filled in by the CM.
    unsafe {
        let sa = rdma_get_peer_addr_ptr(id.as_ptr());
        if sa.is_null() || (*sa).sa_family != libc::AF_INET as u16 {
            return "?".into();
        }
        let sin = &*(sa as *const libc::sockaddr_in);
        let ip = std::net::Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr));
        format!("{ip}:{}", u16::from_be(sin.sin_port))
    }
}

/// `rdma_get_peer_addr` is a static inline in rdma_cma.h: the peer address
/// sits in the id's route.
unsafe fn rdma_get_peer_addr_ptr(id: *mut rdma_cm_id) -> *const libc::sockaddr {
    // SAFETY: caller passes a live id.
    unsafe { std::ptr::addr_of!((*id).route.addr.dst_addr_union.dst_addr) }
}

impl Listener for VerbsListener {
    fn accept(&self) -> Result<Box<dyn Connection>> {
        loop {
            if let Some(c) = self.accept_timeout(Duration::from_millis(100))? {
                return Ok(Box::new(c));
            }
        }
    }
    fn local_addr(&self) -> String {
        self.addr.clone()
    }
    fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
    }
}

impl Drop for VerbsListener {
    fn drop(&mut self) {
        self.close();
    }
}

/// `auto` on a host with a device: TCP and verbs on the same port number
/// (the RDMA CM has its own port space), whichever connects first.
pub struct DualListener {
    tcp: crate::tcp::TcpListener,
    verbs: VerbsListener,
}

impl DualListener {
    pub(crate) fn bind(addr: &str, cfg: &TransportConfig) -> Result<Self> {
        let tcp = crate::tcp::TcpListener::bind(addr, cfg)?;
        let verbs = VerbsListener::bind(&tcp.local_addr(), cfg)?;
        Ok(DualListener { tcp, verbs })
    }
}

impl Listener for DualListener {
    fn accept(&self) -> Result<Box<dyn Connection>> {
        loop {
            if let Some(c) = self.verbs.accept_timeout(Duration::from_millis(50))? {
                return Ok(Box::new(c));
            }
            if let Some(c) = self.tcp.accept_timeout(Duration::from_millis(50))? {
                return Ok(c);
            }
        }
    }
    fn local_addr(&self) -> String {
        self.tcp.local_addr()
    }
    fn close(&self) {
        self.tcp.close();
        self.verbs.close();
    }
}
