//! Warnings that a peer can trigger at will (refused frames, failed
//! handshakes), logged at most once per interval with a count, so a
//! client cannot fill the server's log or spend its time writing it.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A warning logged at most once per `every`; the lines in between are
/// counted and the next logged line says how many there were.
pub struct RateLimitedLog {
    every: Duration,
    state: Mutex<LogState>,
}

struct LogState {
    last: Option<Instant>,
    suppressed: u64,
}

impl RateLimitedLog {
    /// A limiter logging at most one line per `every`.
    ///
    /// ```
    /// use hipfs_rdma::RateLimitedLog;
    /// static REFUSED: RateLimitedLog = RateLimitedLog::new(std::time::Duration::from_secs(5));
    /// REFUSED.warn(|| "refused a peer".to_string());
    /// ```
    pub const fn new(every: Duration) -> RateLimitedLog {
        RateLimitedLog {
            every,
            state: Mutex::new(LogState {
                last: None,
                suppressed: 0,
            }),
        }
    }

    /// Logs `line()` as a warning, or counts it if a line went out less
    /// than `every` ago. Returns whether it was logged.
    pub fn warn(&self, line: impl FnOnce() -> String) -> bool {
        let now = Instant::now();
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if s.last.is_some_and(|t| now.duration_since(t) < self.every) {
            s.suppressed += 1;
            return false;
        }
        let suppressed = std::mem::take(&mut s.suppressed);
        s.last = Some(now);
        drop(s);
        if suppressed > 0 {
            log::warn!(
                "{} ({suppressed} more like it in the last {:?} not logged)",
                line(),
                self.every
            );
        } else {
            log::warn!("{}", line());
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_first_line_of_a_burst_is_logged() {
        let l = RateLimitedLog::new(Duration::from_secs(60));
        assert!(l.warn(|| "one".into()));
        assert!(!l.warn(|| "two".into()));
        assert!(!l.warn(|| "three".into()));
        assert_eq!(l.state.lock().unwrap().suppressed, 2);
    }
}
