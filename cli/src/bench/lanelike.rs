//! Loopback sockets for the benches' ceilings, made as hipfs' lanes are:
//! with the congestion control `HIPFS_TCP_CONGESTION` gives a lane to a
//! loopback peer (see `hipfs_rdma::tcp::congestion`), so that a ceiling
//! runs as the lanes do. Where the host's default paces (BBR), loopback
//! lanes do not, and neither do the ceilings.

use std::io;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

use hipfs_rdma::tcp::congestion;
use hipfs_rdma::Congestion;

/// How long a ceiling's socket may take to connect.
const CONNECT: Duration = Duration::from_secs(10);

/// A loopback listener whose connections are made like lanes.
pub struct LaneLikeListener {
    listener: TcpListener,
    connector: LaneLikeConnector,
}

/// Connects to a [`LaneLikeListener`] (from any thread).
#[derive(Clone)]
pub struct LaneLikeConnector {
    addr: SocketAddr,
    cc: Congestion,
}

impl LaneLikeListener {
    /// Listens on a free loopback port.
    pub fn bind() -> io::Result<LaneLikeListener> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let cc = hipfs::remote::server::tcp_congestion();
        congestion::listener(&listener, &cc);
        let addr = listener.local_addr()?;
        Ok(LaneLikeListener {
            listener,
            connector: LaneLikeConnector { addr, cc },
        })
    }

    /// What connects to this listener.
    pub fn connector(&self) -> LaneLikeConnector {
        self.connector.clone()
    }

    /// The next connection.
    pub fn accept(&self) -> io::Result<TcpStream> {
        let (s, _) = self.listener.accept()?;
        congestion::accepted(&s, &self.connector.cc);
        Ok(s)
    }
}

impl LaneLikeConnector {
    pub fn connect(&self) -> io::Result<TcpStream> {
        congestion::connect(self.addr, CONNECT, &self.cc)
    }
}

/// What loopback lanes and the ceilings run, for a bench table's title:
/// "TCP cubic, system default bbr".
pub fn loopback_congestion() -> String {
    let lane = LaneLikeListener::bind()
        .and_then(|l| l.connector().connect())
        .ok()
        .and_then(|c| congestion::algorithm(&c));
    let name = |n: Option<String>| n.unwrap_or_else(|| "?".into());
    format!(
        "TCP {}, system default {}",
        name(lane),
        name(congestion::system_default())
    )
}
