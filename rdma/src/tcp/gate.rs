//! A byte budget for the control messages queued on a connection, so a
//! peer that stops reading (or floods requests) holds a bounded amount of
//! this process's memory instead of growing its queues without end.

use std::sync::{Condvar, Mutex};
use std::time::Instant;

/// Bytes of control messages queued in one direction of a connection.
pub(crate) struct ByteGate {
    limit: usize,
    state: Mutex<GateState>,
    changed: Condvar,
}

struct GateState {
    queued: usize,
    closed: bool,
    /// Threads waiting in [`ByteGate::acquire`]: without any, a release
    /// wakes nobody (and costs no system call).
    waiting: usize,
}

/// Why [`ByteGate::acquire`] did not admit the bytes.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum GateRefusal {
    /// Still full at the deadline.
    Full,
    /// The connection died while waiting.
    Closed,
}

/// What one queued message costs: its bytes, and at least a small fixed
/// amount so that a flood of tiny messages is bounded too (each is a heap
/// allocation and a queue slot).
pub(crate) fn cost(len: usize) -> usize {
    len.max(256)
}

impl ByteGate {
    pub(crate) fn new(limit: usize) -> ByteGate {
        ByteGate {
            limit,
            state: Mutex::new(GateState {
                queued: 0,
                closed: false,
                waiting: 0,
            }),
            changed: Condvar::new(),
        }
    }

    /// Waits until `n` more bytes fit (or the queue is empty: a single
    /// message larger than the limit must still pass), until `deadline`
    /// (`None`: no deadline).
    pub(crate) fn acquire(&self, n: usize, deadline: Option<Instant>) -> Result<(), GateRefusal> {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if s.closed {
                return Err(GateRefusal::Closed);
            }
            if s.queued == 0 || s.queued + n <= self.limit {
                s.queued += n;
                return Ok(());
            }
            let wait = match deadline {
                None => None,
                Some(d) => {
                    let now = Instant::now();
                    if now >= d {
                        return Err(GateRefusal::Full);
                    }
                    Some(d - now)
                }
            };
            s.waiting += 1;
            s = match wait {
                None => self.changed.wait(s).unwrap_or_else(|p| p.into_inner()),
                Some(w) => {
                    self.changed
                        .wait_timeout(s, w)
                        .unwrap_or_else(|p| p.into_inner())
                        .0
                }
            };
            s.waiting -= 1;
        }
    }

    /// Counts `n` more bytes at once, full or not: for a message that
    /// already held its room under another size.
    pub(crate) fn admit(&self, n: usize) {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).queued += n;
    }

    /// `n` bytes left the queue.
    pub(crate) fn release(&self, n: usize) {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        s.queued = s.queued.saturating_sub(n);
        let waiting = s.waiting > 0;
        drop(s);
        if waiting {
            self.changed.notify_all();
        }
    }

    /// Wakes every waiter for good (the connection died).
    pub(crate) fn close(&self) {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).closed = true;
        self.changed.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_full_gate_refuses_at_the_deadline_and_admits_after_a_release() {
        let g = ByteGate::new(1000);
        assert_eq!(g.acquire(800, None), Ok(()));
        let soon = Some(Instant::now() + Duration::from_millis(20));
        assert_eq!(g.acquire(800, soon), Err(GateRefusal::Full));
        g.release(800);
        assert_eq!(g.acquire(800, soon), Ok(()));
    }

    #[test]
    fn one_message_larger_than_the_limit_passes_an_empty_gate() {
        let g = ByteGate::new(10);
        assert_eq!(g.acquire(100, None), Ok(()));
    }

    #[test]
    fn closing_wakes_a_waiter_with_closed() {
        let g = std::sync::Arc::new(ByteGate::new(10));
        g.acquire(10, None).unwrap();
        let g2 = g.clone();
        let t = std::thread::spawn(move || g2.acquire(10, None));
        std::thread::sleep(Duration::from_millis(20));
        g.close();
        assert_eq!(t.join().unwrap(), Err(GateRefusal::Closed));
    }
}
