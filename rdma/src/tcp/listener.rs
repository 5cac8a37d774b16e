//! Listening and connecting: every lane is its own TCP stream that starts
//! with a hello naming the connection (a random token) and its lane index;
//! the listener groups streams by token and hands out a connection once all
//! lanes are there.

use std::collections::HashMap;
use std::io::Write;
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::os::fd::{AsFd, AsRawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use crossbeam_channel::{unbounded, Receiver, Sender};

use super::conn::{ConnParams, TcpConnection};
use super::frame::{self, Hello, HELLO_ACK_LEN, HELLO_LEN};
use super::{random_u64, sock};
use crate::{Connection, Error, Listener, Result, TransportConfig};

/// Listener of the TCP transport.
pub struct TcpListener {
    addr: SocketAddr,
    closed: Arc<AtomicBool>,
    ready: Receiver<Result<TcpConnection>>,
}

struct Group {
    streams: Vec<Option<TcpStream>>,
    max_message: u32,
    started: Instant,
}

type Groups = Arc<Mutex<HashMap<u64, Group>>>;

impl TcpListener {
    pub(crate) fn bind(addr: &str, cfg: &TransportConfig) -> Result<Self> {
        let l = std::net::TcpListener::bind(addr)
            .map_err(|e| Error::InvalidArgument(format!("cannot listen on '{addr}': {e}")))?;
        let local = l.local_addr()?;
        let closed = Arc::new(AtomicBool::new(false));
        let (tx, rx) = unbounded();
        let cfg = cfg.clone();
        let c = closed.clone();
        std::thread::Builder::new()
            .name("hipfs-tcp-accept".into())
            .spawn(move || accept_loop(l, cfg, c, tx))?;
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
        let (groups, cfg, ready) = (groups.clone(), cfg.clone(), ready.clone());
        // Handshake off the accept thread: a silent client must not stall others.
        let _ = std::thread::Builder::new()
            .name("hipfs-tcp-hello".into())
            .spawn(move || {
                if let Err(e) = handshake(s, &groups, &cfg, &ready) {
                    log::warn!("tcp handshake failed: {e}");
                }
            });
    }
}

fn handshake(
    s: TcpStream,
    groups: &Groups,
    cfg: &TransportConfig,
    ready: &Sender<Result<TcpConnection>>,
) -> Result<()> {
    s.set_read_timeout(Some(cfg.op_timeout))?;
    s.set_nodelay(true)?;
    let hello = Hello::decode(&sock::recv_array::<HELLO_LEN>(s.as_raw_fd())?)?;
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
        group.streams[hello.lane as usize] = Some(s);
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
    let mut streams: Vec<TcpStream> = group.streams.into_iter().flatten().collect();
    for s in &mut streams {
        s.write_all(&frame::encode_hello_ack(cfg.max_message as u32))?;
    }
    let conn = TcpConnection::start(
        streams,
        ConnParams {
            max_message: max_message as usize,
            chunk: cfg.chunk_size,
            op_timeout: cfg.op_timeout,
            key_seed: random_u64()? as u32,
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
        let mut streams = Vec::with_capacity(cfg.lanes);
        let mut peer_max = u32::MAX;
        for lane in 0..cfg.lanes {
            let mut s =
                TcpStream::connect_timeout(&sa, cfg.op_timeout).map_err(|e| match e.kind() {
                    std::io::ErrorKind::TimedOut => Error::Timeout(cfg.op_timeout),
                    _ => Error::Io(e),
                })?;
            s.set_nodelay(true)?;
            s.set_read_timeout(Some(cfg.op_timeout))?;
            let hello = Hello {
                token,
                lane: lane as u16,
                lanes: cfg.lanes as u16,
                max_message: cfg.max_message as u32,
            };
            s.write_all(&hello.encode())?;
            streams.push(s);
        }
        // The listener answers only when every lane has arrived.
        for s in &streams {
            let ack =
                sock::recv_array::<HELLO_ACK_LEN>(s.as_raw_fd()).map_err(|e| match e.kind() {
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => {
                        Error::Timeout(cfg.op_timeout)
                    }
                    _ => Error::Disconnected(format!(
                        "listener at {addr} refused the connection: {e}"
                    )),
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
            },
        )
    }
}
