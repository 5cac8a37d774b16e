//! One live connection to a server: the handshake, a reader thread that
//! matches replies to waiting callers by request id, and registered receive
//! buffers the server writes read data into.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, Sender, SyncSender};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use hipfs_rdma::{Connection, LocalRegion, OwnedRegion};

use super::super::auth::{
    default_local_socket, is_loopback, port_of, random_nonce, secret_id, transcript, Token,
    CLIENT_PROOF, SERVER_PROOF,
};
use super::super::proto::{
    export_id_transcript, Challenge, ChangedName, CredKind, Hello, Kind, Payload, Proof, Refused,
    Reply, Welcome, EXPORT_ID_VERSION, FLAG_NO_MAC, MAX_IO, NOTICE_ID,
};
use super::super::seal::{Opener, Sealer};
use super::super::server::{fetch_ticket, transport_config};
use super::super::RemoteError;
use super::{ClientConfig, LocalTicket};
use crate::gpu::MemoryKind;
use crate::registry::RegisteredBuffer;

/// A receive buffer registered on a link: the server places read data in it.
pub(crate) struct RecvBuf(OwnedRegion);

impl RecvBuf {
    /// The first `n` bytes (after the reply: the server wrote them).
    pub(crate) fn bytes(&self, n: usize) -> &[u8] {
        let b = self.0.bytes();
        &b[..n.min(b.len())]
    }
    /// The registration the server writes through.
    pub(crate) fn region(&self) -> &Arc<LocalRegion> {
        self.0.region()
    }
}

/// A driver-registered buffer's registration on one link, kept in the
/// buffer's `rdma_keepalive` so it lives exactly as long as the buffer
/// registration (or until the link dies and a newer one replaces it).
pub(crate) struct BufferRegion {
    link: Weak<Link>,
    /// `None`: device memory the link's NIC refused (every way was tried
    /// and counted once; reads into the buffer stage without asking again).
    region: Option<Arc<LocalRegion>>,
    /// For device memory: the registration's dmabuf, kept with it.
    _device: Option<super::device_reg::DeviceRegion>,
}

impl BufferRegion {
    /// Whether this is a remembered refusal (device memory the link's NIC
    /// would not register).
    #[cfg(test)]
    pub(crate) fn is_refusal(&self) -> bool {
        self.region.is_none()
    }
}

/// Most receive buffers kept per link.
const MAX_RECV_BUFS: usize = 32;

pub(crate) struct Link {
    pub(crate) conn: Arc<dyn Connection>,
    pub(crate) epoch: u64,
    pub(crate) welcome: Welcome,
    /// The protocol version the handshake agreed on.
    pub(crate) version: u16,
    pending: Mutex<HashMap<u64, SyncSender<Reply>>>,
    dead: AtomicBool,
    recv_bufs: Mutex<Vec<RecvBuf>>,
    /// Device allocations read into without a driver registration.
    pub(crate) device_allocs: super::device_reg::AllocationCache,
    seal: Sealer,
    open: Opener,
    /// Where pushed change notices go (set before `Op::Watch` is sent).
    notices: Mutex<Option<Sender<Notice>>>,
}

/// A change notice pushed by the server (see `Op::Watch`).
#[derive(Debug)]
pub(crate) enum Notice {
    /// Names below the export root that changed.
    Changed(Vec<ChangedName>),
    /// Anything may have changed (the server lost track, or this client
    /// was disconnected).
    Everything,
}

fn refused_or(msg: &[u8], what: RemoteError) -> RemoteError {
    if Kind::of(msg) == Ok(Kind::Refused) {
        match Refused::decode(msg) {
            Ok(r) => RemoteError::Refused(r.reason),
            Err(e) => RemoteError::Proto(e),
        }
    } else {
        what
    }
}

/// The credential a client authenticates with: kind, public id, secret.
fn credential(cfg: &ClientConfig, epoch: u64) -> Result<(CredKind, [u8; 32], Token), RemoteError> {
    if let Some(cap) = &cfg.capability {
        // A reconnect may find a server that no longer knows the old one.
        let secret = cap.secret(epoch > 1);
        return Ok((
            CredKind::FileCap,
            secret_id(&secret),
            Token::from_bytes(&secret),
        ));
    }
    if let Some(t) = &cfg.token {
        return Ok((CredKind::Token, [0; 32], t.clone()));
    }
    let socket = match &cfg.local_ticket {
        LocalTicket::At(p) => Some(p.clone()),
        LocalTicket::Auto if is_loopback(&cfg.server) => {
            port_of(&cfg.server).map(default_local_socket)
        }
        _ => None,
    };
    let Some(socket) = socket else {
        return Err(RemoteError::Auth(format!(
            "no credential for {}: the server requires a token (-o token_file=FILE, a copy of the server's token file), or on the server's host a local ticket (-o local_socket=PATH)",
            cfg.server
        )));
    };
    let secret = fetch_ticket(&socket).map_err(|e| {
        RemoteError::Auth(format!(
            "{e}; without a token the server requires a local ticket from its socket (a token: -o token_file=FILE)"
        ))
    })?;
    Ok((
        CredKind::Ticket,
        secret_id(&secret),
        Token::from_bytes(&secret),
    ))
}

fn handshake(
    conn: &dyn Connection,
    cfg: &ClientConfig,
    epoch: u64,
) -> Result<(Welcome, u16, Sealer, Opener), RemoteError> {
    let t = cfg.connect_timeout;
    let client_nonce = random_nonce()?;
    conn.send(&Hello::new(client_nonce).encode())?;
    let msg = conn.recv(t)?;
    let ch = Challenge::decode(&msg).map_err(|e| refused_or(&msg, e.into()))?;
    // The ticket is fetched after the server answered, so that a server
    // that is not there does not cost one.
    let (kind, id, secret) = credential(cfg, epoch)?;
    let flags = if cfg.unauthenticated_messages {
        FLAG_NO_MAC
    } else {
        0
    };
    let tr = transcript(kind as u8, flags, &id, &ch.nonce, &client_nonce);
    conn.send(
        &Proof {
            kind,
            flags,
            id,
            mac: secret.proof(CLIENT_PROOF, &tr),
        }
        .encode(),
    )?;
    let msg = conn.recv(t).map_err(|e| match e {
        hipfs_rdma::Error::Disconnected(_) => RemoteError::Auth(
            "the server closed the connection after the proof (wrong token?)".into(),
        ),
        e => e.into(),
    })?;
    let w = Welcome::decode(&msg).map_err(|e| refused_or(&msg, e.into()))?;
    // From version 3 on the proof covers the export id as well.
    let covered = match (&w.export_id, ch.version >= EXPORT_ID_VERSION) {
        (Some(id), true) => export_id_transcript(&tr, id),
        (None, false) => tr.clone(),
        _ => {
            return Err(RemoteError::Auth(
                "the server's welcome does not match the protocol version it chose".into(),
            ))
        }
    };
    if !secret.verify(SERVER_PROOF, &covered, &w.mac) {
        return Err(RemoteError::Auth(
            "the server could not prove it holds the credential; refusing to talk to it".into(),
        ));
    }
    let (c2s, s2c) = secret.session_keys(&tr);
    let on = flags & FLAG_NO_MAC == 0;
    Ok((
        w,
        ch.version,
        Sealer::new(on.then_some(c2s)),
        Opener::new(on.then_some(s2c)),
    ))
}

impl Link {
    /// Connects, authenticates and starts the reply reader.
    pub(crate) fn open(cfg: &ClientConfig, epoch: u64) -> Result<Arc<Link>, RemoteError> {
        let mut tcfg = transport_config(cfg.transport);
        tcfg.op_timeout = cfg.timeout;
        if cfg.lanes > 0 {
            tcfg.lanes = cfg.lanes;
        }
        tcfg.tls = cfg.tls.clone();
        let conn: Arc<dyn Connection> = Arc::from(hipfs_rdma::connect(&cfg.server, &tcfg)?);
        let (welcome, version, seal, open) = match handshake(conn.as_ref(), cfg, epoch) {
            Ok(w) => w,
            Err(e) => {
                conn.close();
                return Err(e);
            }
        };
        let link = Arc::new(Link {
            conn,
            epoch,
            welcome,
            version,
            pending: Mutex::new(HashMap::new()),
            dead: AtomicBool::new(false),
            recv_bufs: Mutex::new(Vec::new()),
            device_allocs: Default::default(),
            seal,
            open,
            notices: Mutex::new(None),
        });
        // Replies are routed to their callers on the transport's own
        // reader where it allows (TCP): one thread wake-up fewer per
        // request. The thread below then only waits for the end of the
        // connection (and reads the replies itself on verbs).
        let hooked = link.clone();
        if let Err(e) = link.conn.set_message_hook(Box::new(move |msg| {
            if hooked.is_dead() {
                return None;
            }
            if let Err(e) = hooked.route(msg) {
                hooked.bad_reply(&e);
            }
            None
        })) {
            log::debug!("replies through the reader thread: {e}");
        }
        let reader = link.clone();
        std::thread::Builder::new()
            .name("hipfs-client-rx".into())
            .spawn(move || reader.read_replies())?;
        Ok(link)
    }

    /// Sends this link's change notices to `tx`.
    pub(crate) fn set_notices(&self, tx: Sender<Notice>) {
        *self.notices.lock().unwrap_or_else(|p| p.into_inner()) = Some(tx);
    }

    pub(crate) fn is_dead(&self) -> bool {
        self.dead.load(Ordering::SeqCst)
    }

    /// Marks the link dead and wakes every waiter (their channels close).
    pub(crate) fn kill(&self) {
        self.dead.store(true, Ordering::SeqCst);
        self.conn.close();
        self.pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
    }

    fn read_replies(self: Arc<Self>) {
        loop {
            match self.conn.recv(Duration::from_secs(3600)) {
                Ok(msg) => {
                    if let Err(e) = self.route(msg) {
                        self.bad_reply(&e);
                        break;
                    }
                }
                Err(hipfs_rdma::Error::Timeout(_)) => continue,
                // kill() ran first: this client closed the link (its
                // owner went, or a reason was logged where it was killed).
                Err(e) if self.is_dead() => {
                    log::debug!(
                        "connection to {} closed by this client ({e})",
                        self.conn.peer_addr()
                    );
                    break;
                }
                Err(e) => {
                    log::info!("connection to {} lost: {e}", self.conn.peer_addr());
                    break;
                }
            }
        }
        self.kill();
    }

    /// Hands a message from the server to its waiting caller (or, for a
    /// change notice, to the notice channel). Never blocks.
    fn route(&self, msg: Vec<u8>) -> Result<(), String> {
        let reply = self
            .open
            .open(msg)
            .map_err(|e| e.to_string())
            .and_then(|m| Reply::decode(&m).map_err(|e| e.to_string()))?;
        if reply.id == NOTICE_ID {
            if let Some((names, everything)) = reply.result.ok().and_then(Payload::into_changes) {
                let tx = self.notices.lock().unwrap_or_else(|p| p.into_inner());
                if let Some(tx) = tx.as_ref() {
                    let _ = tx.send(Notice::Changed(names));
                    if everything {
                        let _ = tx.send(Notice::Everything);
                    }
                }
            }
            return Ok(());
        }
        let waiter = self
            .pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&reply.id);
        if let Some(tx) = waiter {
            let _ = tx.try_send(reply);
        }
        Ok(())
    }

    /// A reply that failed authentication or decoding: the stream can no
    /// longer be trusted, so the link goes (the client reconnects).
    fn bad_reply(&self, e: &str) {
        log::warn!(
            "bad reply from {}: {e}; reconnecting",
            self.conn.peer_addr()
        );
        self.kill();
    }

    /// Sends `msg` as request `id`; the reply arrives on the returned channel
    /// (which closes if the link dies first).
    pub(crate) fn send(&self, id: u64, msg: Vec<u8>) -> Result<Receiver<Reply>, hipfs_rdma::Error> {
        let (tx, rx) = sync_channel(1);
        self.pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id, tx);
        if self.is_dead() {
            self.forget(id);
            return Err(hipfs_rdma::Error::Disconnected("link closed".into()));
        }
        if let Err(e) = self.seal.send(self.conn.as_ref(), msg) {
            self.forget(id);
            if e.is_disconnect() {
                self.kill();
            }
            return Err(e);
        }
        Ok(rx)
    }

    /// Sends `msg` without waiting for an answer.
    pub(crate) fn send_only(&self, msg: Vec<u8>) -> Result<(), hipfs_rdma::Error> {
        self.seal.send(self.conn.as_ref(), msg)
    }

    pub(crate) fn forget(&self, id: u64) {
        self.pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&id);
    }

    pub(crate) fn take_recv_buf(&self) -> Result<RecvBuf, RemoteError> {
        if let Some(b) = self
            .recv_bufs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .pop()
        {
            return Ok(b);
        }
        Ok(RecvBuf(OwnedRegion::new(self.conn.as_ref(), MAX_IO)?))
    }

    pub(crate) fn put_recv_buf(&self, b: RecvBuf) {
        let mut v = self.recv_bufs.lock().unwrap_or_else(|p| p.into_inner());
        if v.len() < MAX_RECV_BUFS {
            v.push(b);
        }
    }

    /// The registration of all of `buf` on this link, made now if the
    /// buffer has none here yet. Registrations on dead links are dropped on
    /// the way: their keys mean nothing to any live connection.
    pub(crate) fn buffer_region(
        self: &Arc<Self>,
        buf: &RegisteredBuffer,
    ) -> Result<Arc<LocalRegion>, RemoteError> {
        let mut keep = buf.rdma_keepalive.lock().unwrap_or_else(|p| p.into_inner());
        keep.retain(|k| {
            (**k)
                .downcast_ref::<BufferRegion>()
                .is_none_or(|r| r.link.upgrade().is_some_and(|l| !l.is_dead()))
        });
        let mine = keep
            .iter()
            .filter_map(|k| (**k).downcast_ref::<BufferRegion>())
            .find(|r| std::ptr::eq(r.link.as_ptr(), Arc::as_ptr(self)));
        let refused = || {
            RemoteError::Io(std::io::Error::new(
                std::io::ErrorKind::Unsupported,
                format!(
                    "device memory cannot be registered with this {} connection",
                    self.conn.kind()
                ),
            ))
        };
        if let Some(r) = mine {
            return r.region.clone().ok_or_else(refused);
        }
        // Kept in the registration's keepalive, dropped with it.
        let (region, device) = if buf.info.kind == MemoryKind::Device {
            // dmabuf, else peer memory, else refused (the caller stages).
            match super::device_reg::register_device(
                &*self.conn,
                crate::gpu::runtime(),
                buf.base,
                buf.len,
            ) {
                Some(d) => (d.region.clone(), Some(d)),
                None => {
                    // Remembered for this link: the NIC's answer does not
                    // change, and asking costs an export and two refused
                    // registrations on every read.
                    keep.push(Box::new(BufferRegion {
                        link: Arc::downgrade(self),
                        region: None,
                        _device: None,
                    }));
                    return Err(refused());
                }
            }
        } else {
            let r = crate::lent::register_buffer_with(
                &*self.conn,
                crate::lent::LentSpan::of_registration(buf.base, buf.len),
            )?;
            (r, None)
        };
        keep.push(Box::new(BufferRegion {
            link: Arc::downgrade(self),
            region: Some(region.clone()),
            _device: device,
        }));
        Ok(region)
    }
}
