//! Listening and connecting: every lane is its own TCP stream that starts
//! with a hello naming the connection (a random token) and its lane index;
//! the listener groups streams by token and hands out a connection once all
//! lanes are there.

use std::collections::HashMap;
use std::io::Write;
use std::net::{Shutdown, SocketAddr, TcpStream, ToSocketAddrs};
use std::os::fd::{AsFd, AsRawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use crossbeam_channel::{unbounded, Receiver, Sender};

use super::conn::{ConnParams, LaneSock, TcpConnection};
use super::frame::{self, Hello, HELLO_ACK_LEN, HELLO_LEN};
use super::{random_u64, sock, tls};
use crate::{Connection, Error, Listener, Result, TransportConfig};

/// Listener of the TCP transport.
pub struct TcpListener {
    addr: SocketAddr,
    closed: Arc<AtomicBool>,
    ready: Receiver<Result<TcpConnection>>,
}

struct Group {
    streams: Vec<Option<LaneSock>>,
    max_message: u32,
    started: Instant,
}

type Groups = Arc<Mutex<HashMap<u64, Group>>>;

type ServerTls = Option<Arc<rustls::ServerConfig>>;

static HANDSHAKE_LOG: crate::RateLimitedLog =
    crate::RateLimitedLog::new(std::time::Duration::from_secs(5));

impl TcpListener {
    pub(crate) fn bind(addr: &str, cfg: &TransportConfig) -> Result<Self> {
        let l = std::net::TcpListener::bind(addr)
            .map_err(|e| Error::InvalidArgument(format!("cannot listen on '{addr}': {e}")))?;
        super::congestion::listener(&l, &cfg.congestion);
        let local = l.local_addr()?;
        // Read the certificate and key now: a bad file fails `listen`,
        // not every connection later.
        let tls: ServerTls = cfg.tls.as_ref().map(tls::server_config).transpose()?;
        let closed = Arc::new(AtomicBool::new(false));
        let (tx, rx) = unbounded();
        let cfg = cfg.clone();
        let c = closed.clone();
        std::thread::Builder::new()
            .name("hipfs-tcp-accept".into())
            .spawn(move || accept_loop(l, cfg, tls, c, tx))?;
        Ok(TcpListener {
            addr: local,
            closed,
            ready: rx,
        })
    }
}

fn accept_loop(
    l: std::net::TcpListener,
    cfg: TransportConfig,
    tls: ServerTls,
    closed: Arc<AtomicBool>,
    ready: Sender<Result<TcpConnection>>,
) {
    let groups: Groups = Arc::new(Mutex::new(HashMap::new()));
    while !closed.load(Ordering::SeqCst) {
        // A short timeout lets close() take effect without a wake-up socket.
        let readable = hipfs_sys::process::poll_readable(l.as_fd(), 100).unwrap_or(false);
        // Forget half-open connections whose lanes never all arrived.
        groups
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|_, g| g.started.elapsed() < cfg.op_timeout);
        if !readable {
            continue;
        }
        let (s, _) = match l.accept() {
            Ok(x) => x,
            Err(e) => {
                log::warn!("tcp accept failed: {e}");
                continue;
            }
        };
        let (groups, cfg, ready, tls) = (groups.clone(), cfg.clone(), ready.clone(), tls.clone());
        // Handshake off the accept thread: a silent client must not stall others.
        let _ = std::thread::Builder::new()
            .name("hipfs-tcp-hello".into())
            .spawn(move || {
                if let Err(e) = handshake(s, &groups, &cfg, tls.as_ref(), &ready) {
                    // Any peer can fail handshakes at will (one per lane):
                    // one line per interval, not one per attempt.
                    HANDSHAKE_LOG.warn(|| format!("tcp handshake failed: {e}"));
                }
            });
    }
}

fn handshake(
    mut s: TcpStream,
    groups: &Groups,
    cfg: &TransportConfig,
    tls: Option<&Arc<rustls::ServerConfig>>,
    ready: &Sender<Result<TcpConnection>>,
) -> Result<()> {
    s.set_read_timeout(Some(cfg.op_timeout))?;
    s.set_write_timeout(Some(cfg.op_timeout))?;
    s.set_nodelay(true)?;
    super::congestion::accepted(&s, &cfg.congestion);
    let (hello, session) = match tls {
        None => (
            Hello::decode(&sock::recv_array::<HELLO_LEN>(s.as_raw_fd())?)?,
            None,
        ),
        Some(sc) => {
            let peer = s
                .peer_addr()
                .map(|a| a.to_string())
                .unwrap_or_else(|_| "?".into());
            let mut first = [0u8; 8];
            let n = sock::peek(s.as_raw_fd(), &mut first)?;
            if frame::is_plain_hello(&first[..n]) {
                // Take the hello first: closing with unread bytes would
                // reset the connection before the client reads why.
                let _ = sock::recv_array::<HELLO_LEN>(s.as_raw_fd());
                let _ = s.write_all(&frame::encode_hello_refusal_needs_tls());
                let _ = s.shutdown(Shutdown::Write);
                return Err(Error::Tls(format!(
                    "refused a plaintext client at {peer}: this listener requires TLS"
                )));
            }
            let mut c = rustls::Connection::Server(
                rustls::ServerConnection::new(sc.clone()).map_err(|e| Error::Tls(e.to_string()))?,
            );
            tls::handshake(&mut c, &mut s, &peer, cfg.op_timeout)?;
            let mut b = [0u8; HELLO_LEN];
            tls::read_exact(&mut c, &mut s, &mut b)
                .map_err(|e| tls::handshake_error(e, &peer, cfg.op_timeout))?;
            (Hello::decode(&b)?, Some(c))
        }
    };
    let complete = {
        let mut g = groups.lock().unwrap_or_else(|p| p.into_inner());
        let group = g.entry(hello.token).or_insert_with(|| Group {
            streams: (0..hello.lanes).map(|_| None).collect(),
            max_message: hello.max_message,
            started: Instant::now(),
        });
        if group.streams.len() != hello.lanes as usize
            || group.streams[hello.lane as usize].is_some()
        {
            return Err(Error::Protocol("inconsistent lane hello".into()));
        }
        group.streams[hello.lane as usize] = Some(LaneSock {
            stream: s,
            tls: session,
        });
        if group.streams.iter().all(Option::is_some) {
            g.remove(&hello.token)
        } else {
            None
        }
    };
    let Some(group) = complete else {
        return Ok(());
    };
    let max_message = (cfg.max_message as u32).min(group.max_message);
    let mut streams: Vec<LaneSock> = group.streams.into_iter().flatten().collect();
    let ack = frame::encode_hello_ack(cfg.max_message as u32);
    for l in &mut streams {
        match &mut l.tls {
            None => l.stream.write_all(&ack)?,
            Some(c) => tls::write_all(c, &mut l.stream, &ack)?,
        }
    }
    let conn = TcpConnection::start(
        streams,
        ConnParams {
            max_message: max_message as usize,
            chunk: cfg.chunk_size,
            op_timeout: cfg.op_timeout,
            key_seed: random_u64()? as u32,
            thread_prefix: "hipfs-srv",
        },
    );
    let _ = ready.send(conn);
    Ok(())
}

impl TcpListener {
    /// The next connection, or None after `t`.
    pub(crate) fn accept_timeout(
        &self,
        t: std::time::Duration,
    ) -> Result<Option<Box<dyn Connection>>> {
        if self.closed.load(Ordering::SeqCst) {
            return Err(Error::Disconnected("listener closed".into()));
        }
        match self.ready.recv_timeout(t) {
            Ok(Ok(c)) => Ok(Some(Box::new(c))),
            Ok(Err(e)) => {
                log::warn!("tcp connection set-up failed: {e}");
                Ok(None)
            }
            Err(crossbeam_channel::RecvTimeoutError::Timeout) => Ok(None),
            Err(crossbeam_channel::RecvTimeoutError::Disconnected) => {
                Err(Error::Disconnected("listener stopped".into()))
            }
        }
    }
}

impl Listener for TcpListener {
    fn accept(&self) -> Result<Box<dyn Connection>> {
        loop {
            if let Some(c) = self.accept_timeout(std::time::Duration::from_millis(100))? {
                return Ok(c);
            }
        }
    }

    fn local_addr(&self) -> String {
        self.addr.to_string()
    }

    fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
    }
}

impl Drop for TcpListener {
    fn drop(&mut self) {
        self.close();
    }
}

impl TcpConnection {
    /// Opens `cfg.lanes` streams to a [`TcpListener`] at `addr`.
    pub(crate) fn connect(addr: &str, cfg: &TransportConfig) -> Result<Self> {
        let sa = addr
            .to_socket_addrs()
            .map_err(|e| Error::InvalidArgument(format!("cannot resolve '{addr}': {e}")))?
            .next()
            .ok_or_else(|| Error::InvalidArgument(format!("'{addr}' resolves to nothing")))?;
        let token = random_u64()?;
        let client_tls = match &cfg.tls {
            Some(t) => Some((tls::client_config(t)?, tls::server_name(t, addr)?)),
            None => None,
        };
        let mut streams = Vec::with_capacity(cfg.lanes);
        let mut peer_max = u32::MAX;
        for lane in 0..cfg.lanes {
            let mut s = super::congestion::connect(sa, cfg.op_timeout, &cfg.congestion).map_err(
                |e| match e.kind() {
                    std::io::ErrorKind::TimedOut => Error::Timeout(cfg.op_timeout),
                    _ => Error::Io(e),
                },
            )?;
            s.set_nodelay(true)?;
            s.set_read_timeout(Some(cfg.op_timeout))?;
            s.set_write_timeout(Some(cfg.op_timeout))?;
            let mut session = match &client_tls {
                None => None,
                Some((cc, name)) => {
                    let mut c = rustls::Connection::Client(
                        rustls::ClientConnection::new(cc.clone(), name.clone())
                            .map_err(|e| Error::Tls(e.to_string()))?,
                    );
                    tls::handshake(&mut c, &mut s, addr, cfg.op_timeout)?;
                    Some(c)
                }
            };
            let hello = Hello {
                token,
                lane: lane as u16,
                lanes: cfg.lanes as u16,
                max_message: cfg.max_message as u32,
            };
            match &mut session {
                None => s.write_all(&hello.encode())?,
                Some(c) => tls::write_all(c, &mut s, &hello.encode())?,
            }
            streams.push(LaneSock {
                stream: s,
                tls: session,
            });
        }
        // The listener answers only when every lane has arrived.
        for l in &mut streams {
            let got = match &mut l.tls {
                None => sock::recv_array::<HELLO_ACK_LEN>(l.stream.as_raw_fd()),
                Some(c) => {
                    let mut b = [0u8; HELLO_ACK_LEN];
                    tls::read_exact(c, &mut l.stream, &mut b).map(|()| b)
                }
            };
            let ack = got.map_err(|e| match e.kind() {
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => {
                    Error::Timeout(cfg.op_timeout)
                }
                _ => Error::Disconnected(format!("listener at {addr} refused the connection: {e}")),
            })?;
            peer_max = peer_max.min(frame::decode_hello_ack(&ack)?);
        }
        TcpConnection::start(
            streams,
            ConnParams {
                max_message: (cfg.max_message as u32).min(peer_max) as usize,
                chunk: cfg.chunk_size,
                op_timeout: cfg.op_timeout,
                key_seed: random_u64()? as u32,
                thread_prefix: "hipfs-tcp",
            },
        )
    }
}
