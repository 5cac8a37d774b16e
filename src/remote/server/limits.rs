//! What one client may hold of the server: connections, requests and
//! bytes in flight, open files, staging memory, and how long a worker
//! waits for it. Each limit keeps one client from stopping or exhausting
//! the server for the others.

use std::sync::{Condvar, Mutex};
use std::time::Duration;

/// Resource limits of a server; [`Limits::default`] documents the defaults
/// (README "Server limits" lists them with their `hipfs serve` flags).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Connections open at once, authenticated or not; more are refused
    /// with a message naming this limit. `--max-connections`, default 64.
    pub max_connections: usize,
    /// Requests of one connection accepted and not yet answered; at the
    /// limit the server stops reading that connection, so the client meets
    /// TCP backpressure. `--max-requests`, default 64.
    pub max_requests: usize,
    /// Bytes of one connection's requests in flight: the data of writes
    /// and the length of reads (their replies or staging). At the limit the
    /// connection is not read, as above. `--max-bytes-in-flight`, default
    /// 64 MiB; one request larger than the limit still runs, alone.
    pub max_bytes_in_flight: usize,
    /// Files one connection holds open; more opens fail with `EMFILE`.
    /// `--max-open-files`, default 1024.
    pub max_open_files: usize,
    /// Staging memory (registered buffers for placed reads) kept for reuse,
    /// over all connections; buffers beyond it are freed when their read is
    /// done. Staging in use is bounded by `max_bytes_in_flight` per
    /// connection. Default 256 MiB.
    pub max_kept_staging: usize,
    /// Longest a worker waits for a client: for the acknowledgment of a
    /// placed read, or for room to queue a reply the client is not reading.
    /// A client that does not keep up is disconnected. `--ack-timeout`,
    /// default 2 s.
    pub ack_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_connections: 64,
            max_requests: 64,
            max_bytes_in_flight: 64 << 20,
            max_open_files: 1024,
            max_kept_staging: 256 << 20,
            ack_timeout: Duration::from_secs(2),
        }
    }
}

/// Requests of one connection between being read and being answered.
pub(crate) struct InFlight {
    max_requests: usize,
    max_bytes: usize,
    state: Mutex<Load>,
    changed: Condvar,
}

#[derive(Default)]
struct Load {
    requests: usize,
    bytes: usize,
    /// Threads in [`InFlight::wait_for_room`]: without any, an answer
    /// wakes nobody (and costs no system call).
    waiting: usize,
}

impl InFlight {
    pub(crate) fn new(limits: &Limits) -> InFlight {
        InFlight {
            max_requests: limits.max_requests.max(1),
            max_bytes: limits.max_bytes_in_flight.max(1),
            state: Mutex::new(Load::default()),
            changed: Condvar::new(),
        }
    }

    /// Waits (at most `wait`) until another request may be read. False:
    /// still full, the caller checks whether to stop and asks again.
    pub(crate) fn wait_for_room(&self, wait: Duration) -> bool {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        s.waiting += 1;
        let (mut s, _) = self
            .changed
            .wait_timeout_while(s, wait, |l| {
                l.requests >= self.max_requests || l.bytes >= self.max_bytes
            })
            .unwrap_or_else(|p| p.into_inner());
        s.waiting -= 1;
        s.requests < self.max_requests && s.bytes < self.max_bytes
    }

    /// Counts a request costing `bytes` if another may be read now (what
    /// [`InFlight::wait_for_room`] waits for); false, counting nothing,
    /// when the connection is at its limits.
    pub(crate) fn try_add(&self, bytes: usize) -> bool {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if s.requests >= self.max_requests || s.bytes >= self.max_bytes {
            return false;
        }
        s.requests += 1;
        s.bytes += bytes;
        true
    }

    /// A request costing `bytes` was read.
    pub(crate) fn add(&self, bytes: usize) {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        s.requests += 1;
        s.bytes += bytes;
    }

    /// A request costing `bytes` was answered (or dropped).
    pub(crate) fn done(&self, bytes: usize) {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        s.requests = s.requests.saturating_sub(1);
        s.bytes = s.bytes.saturating_sub(bytes);
        let waiting = s.waiting > 0;
        drop(s);
        if waiting {
            self.changed.notify_all();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_connection_at_its_request_limit_waits_until_one_is_answered() {
        let f = InFlight::new(&Limits {
            max_requests: 2,
            ..Limits::default()
        });
        f.add(10);
        f.add(10);
        assert!(!f.wait_for_room(Duration::from_millis(10)));
        f.done(10);
        assert!(f.wait_for_room(Duration::from_millis(10)));
    }

    #[test]
    fn try_add_counts_a_request_only_while_the_connection_has_room() {
        let f = InFlight::new(&Limits {
            max_requests: 1,
            ..Limits::default()
        });
        assert!(f.try_add(10));
        assert!(!f.try_add(10));
        f.done(10);
        assert!(f.try_add(10));
    }

    #[test]
    fn a_connection_at_its_byte_limit_waits_and_a_lone_large_request_is_admitted() {
        let f = InFlight::new(&Limits {
            max_bytes_in_flight: 100,
            ..Limits::default()
        });
        assert!(f.wait_for_room(Duration::ZERO));
        f.add(1000);
        assert!(!f.wait_for_room(Duration::from_millis(10)));
        f.done(1000);
        assert!(f.wait_for_room(Duration::ZERO));
    }
}
