//! Which TCP congestion control a lane's socket runs.
//!
//! A host whose default is BBR paces every socket: without the `fq`
//! queueing discipline the kernel does it itself, with a timer per socket
//! that releases the next burst. Over loopback there is no queue to spare
//! and nothing to be fair to, so the pacing only costs: on this
//! repository's machine (2 vCPUs, BBR by default) loopback sendfile
//! sockets moved 3.86 GiB/s under BBR and 8.74 under cubic, and the
//! server's lane senders spent 0.27 CPU s per GiB against 0.05, most of it
//! in the pacing timer's interrupts and the softirq work they run. So
//! lanes to a loopback peer run an algorithm that does not pace; lanes to
//! other hosts keep the system's choice (the administrator's, who may have
//! chosen BBR for a lossy or long path), unless configured otherwise.
//!
//! The choice is made before the connection is established: a socket
//! that started under BBR stays paced by the kernel after a switch to
//! another algorithm. So the connecting side sets it before `connect`,
//! the listening socket carries it for the connections it accepts, and an
//! accepted connection from another host is switched to the system
//! default (switching *to* BBR takes full effect).

use std::io;
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::sync::OnceLock;
use std::time::Duration;

use socket2::{Domain, Protocol, SockAddr, SockRef, Socket, Type};

/// The congestion control of a TCP connection's lanes
/// ([`TransportConfig::congestion`](crate::TransportConfig::congestion)).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Congestion {
    /// Lanes to a loopback peer run cubic (reno where the kernel does not
    /// permit cubic to this process), which do not pace; lanes to other
    /// hosts keep the system default.
    #[default]
    Auto,
    /// Every lane keeps the system default (`net.ipv4.tcp_congestion_control`).
    System,
    /// Every lane runs this algorithm (`TCP_CONGESTION`); where the kernel
    /// refuses it (not loaded, or not permitted to this process) the lane
    /// keeps the system default and a warning says so.
    Named(String),
}

impl Congestion {
    /// Parses a setting: `auto` (or empty), `system` (or `default`), or
    /// an algorithm's name, which the kernel judges when a lane is made.
    pub fn parse(s: &str) -> Congestion {
        match s.trim() {
            "" | "auto" => Congestion::Auto,
            "system" | "default" => Congestion::System,
            name => Congestion::Named(name.to_string()),
        }
    }

    /// The algorithms to try, in order, for a lane whose peer is (or is
    /// not) loopback; empty: keep the system default.
    fn wanted(&self, loopback: bool) -> Vec<&str> {
        match self {
            Congestion::System => vec![],
            Congestion::Auto if loopback => UNPACED.to_vec(),
            Congestion::Auto => vec![],
            Congestion::Named(name) => vec![name.as_str()],
        }
    }
}

/// Algorithms tried, in order, for a loopback lane under
/// [`Congestion::Auto`]: neither paces. Reno is permitted to every
/// process; cubic only where it is the default or listed in
/// `net.ipv4.tcp_allowed_congestion_control` (or to a process with
/// CAP_NET_ADMIN).
const UNPACED: [&str; 2] = ["cubic", "reno"];

/// Sets on `s` the first algorithm `policy` wants for a lane whose peer
/// is (or is not) loopback that the kernel accepts; with none accepted the
/// socket keeps what it has (a refused name the user gave is a warning).
fn set(s: SockRef<'_>, policy: &Congestion, loopback: bool) {
    for name in policy.wanted(loopback) {
        match s.set_tcp_congestion(name.as_bytes()) {
            Ok(()) => return,
            Err(e) if matches!(policy, Congestion::Named(_)) => {
                log::warn!(
                    "TCP congestion control {name:?} refused ({e}); keeping the system default"
                )
            }
            Err(e) => log::debug!("TCP congestion control {name:?} refused ({e})"),
        }
    }
}

/// The algorithm `s` runs, as the kernel names it.
pub fn algorithm<'a>(s: impl Into<SockRef<'a>>) -> Option<String> {
    let raw = s.into().tcp_congestion().ok()?;
    let name = raw.split(|&b| b == 0).next().unwrap_or_default();
    Some(String::from_utf8_lossy(name).into_owned())
}

/// The algorithm a new socket of this process gets (`None` where the
/// kernel does not say); asked once.
pub fn system_default() -> Option<String> {
    static V: OnceLock<Option<String>> = OnceLock::new();
    V.get_or_init(|| {
        let s = Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP)).ok()?;
        algorithm(&s)
    })
    .clone()
}

/// Connects to `addr` within `timeout` with the congestion control
/// `policy` gives a lane to that address, set before the handshake.
pub fn connect(addr: SocketAddr, timeout: Duration, policy: &Congestion) -> io::Result<TcpStream> {
    let s = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    set(SockRef::from(&s), policy, is_loopback(addr.ip()));
    s.connect_timeout(&SockAddr::from(addr), timeout)?;
    Ok(s.into())
}

/// Prepares a listening socket: the connections it accepts inherit its
/// algorithm, so under [`Congestion::Auto`] it gets the unpaced one
/// (connections from other hosts are switched back by [`accepted`]).
pub fn listener(l: &TcpListener, policy: &Congestion) {
    set(SockRef::from(l), policy, true);
}

/// Finishes an accepted connection of a listener prepared by [`listener`]:
/// under [`Congestion::Auto`] one from another host gets the system
/// default (switching *to* BBR after the handshake takes full effect).
pub fn accepted(s: &TcpStream, policy: &Congestion) {
    let remote = s.peer_addr().is_ok_and(|a| !is_loopback(a.ip()));
    if *policy == Congestion::Auto && remote {
        if let Some(name) = system_default() {
            if let Err(e) = SockRef::from(s).set_tcp_congestion(name.as_bytes()) {
                log::warn!("TCP congestion control {name:?} (the system default) refused ({e})");
            }
        }
    }
}

/// Whether `ip` is this host's loopback (IPv4, IPv6 or IPv4-mapped IPv6).
fn is_loopback(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(ip) => ip.is_loopback(),
        IpAddr::V6(ip) => {
            ip.is_loopback() || ip.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Duration = Duration::from_secs(5);

    /// A listener prepared for `policy` on `ip`, a lane connected to it
    /// the same way, and the accepted end.
    fn lane(ip: IpAddr, policy: &Congestion) -> (TcpStream, TcpStream) {
        let l = TcpListener::bind((ip, 0)).unwrap();
        listener(&l, policy);
        let c = connect(l.local_addr().unwrap(), T, policy).unwrap();
        let (a, _) = l.accept().unwrap();
        accepted(&a, policy);
        (c, a)
    }

    fn sysctl_default() -> String {
        std::fs::read_to_string("/proc/sys/net/ipv4/tcp_congestion_control")
            .unwrap()
            .trim()
            .to_string()
    }

    /// An address of this host other than loopback (the one a datagram
    /// to a documentation address would leave from; nothing is sent).
    fn host_address() -> Option<IpAddr> {
        let u = std::net::UdpSocket::bind("0.0.0.0:0").ok()?;
        u.connect("192.0.2.1:9").ok()?;
        let ip = u.local_addr().ok()?.ip();
        (!ip.is_loopback() && !ip.is_unspecified()).then_some(ip)
    }

    #[test]
    fn both_ends_of_a_loopback_lane_run_cubic_or_reno() {
        let (c, a) = lane("127.0.0.1".parse().unwrap(), &Congestion::Auto);
        for s in [&c, &a] {
            let got = algorithm(s).expect("the kernel names the algorithm");
            assert!(UNPACED.contains(&got.as_str()), "loopback lane runs {got}");
        }
    }

    #[test]
    fn lanes_to_another_address_keep_the_system_default() {
        assert_eq!(system_default(), Some(sysctl_default()));
        let Some(ip) = host_address() else {
            eprintln!("SKIPPED: this host has no address but loopback");
            return;
        };
        let (c, a) = lane(ip, &Congestion::Auto);
        assert_eq!(algorithm(&c), Some(sysctl_default()), "connecting end");
        assert_eq!(algorithm(&a), Some(sysctl_default()), "accepted end");
    }

    #[test]
    fn system_keeps_the_default_and_a_name_is_set_or_refused_cleanly() {
        let (c, a) = lane("127.0.0.1".parse().unwrap(), &Congestion::System);
        assert_eq!(algorithm(&c), Some(sysctl_default()));
        assert_eq!(algorithm(&a), Some(sysctl_default()));
        // Reno is built in and permitted to every process.
        let (c, a) = lane(
            "127.0.0.1".parse().unwrap(),
            &Congestion::Named("reno".into()),
        );
        assert_eq!(algorithm(&c).as_deref(), Some("reno"));
        assert_eq!(algorithm(&a).as_deref(), Some("reno"));
        // An unknown name is refused by the kernel: the lane keeps the
        // default and connects all the same.
        let bad = Congestion::Named("no-such-algorithm".into());
        let (c, a) = lane("127.0.0.1".parse().unwrap(), &bad);
        assert_eq!(algorithm(&c), Some(sysctl_default()));
        assert_eq!(algorithm(&a), Some(sysctl_default()));
    }

    #[test]
    fn settings_parse() {
        assert_eq!(Congestion::parse(""), Congestion::Auto);
        assert_eq!(Congestion::parse("auto"), Congestion::Auto);
        assert_eq!(Congestion::parse(" system "), Congestion::System);
        assert_eq!(Congestion::parse("bbr"), Congestion::Named("bbr".into()));
    }

    #[test]
    fn loopback_addresses_are_told_apart() {
        for (ip, lo) in [
            ("127.0.0.1", true),
            ("127.3.2.1", true),
            ("::1", true),
            ("::ffff:127.0.0.1", true),
            ("192.0.2.2", false),
            ("::ffff:192.0.2.2", false),
            ("2001:db8::1", false),
        ] {
            assert_eq!(is_loopback(ip.parse().unwrap()), lo, "{ip}");
        }
    }
}
