//! The process a FUSE request is served for, so a backend waiting on the
//! network can give up when that process has been killed.
//!
//! Why: once the daemon has read a request, the kernel keeps the calling
//! process in uninterruptible sleep (D state) until the daemon answers, even
//! after SIGKILL. A backend that notices the kill answers at once (`EINTR`,
//! which nobody will read) and the process leaves instead of waiting out
//! the mount's timeout.

use std::cell::Cell;

thread_local! {
    static CALLER: Cell<u32> = const { Cell::new(0) };
}

/// Records the pid (thread id) of the request this thread now serves.
pub(crate) fn set_caller(pid: u32) {
    CALLER.with(|c| c.set(pid));
}

/// This thread serves no request any more.
pub(crate) fn clear_caller() {
    CALLER.with(|c| c.set(0));
}

/// The pid (thread id) of the process whose FUSE request this thread
/// serves, if it serves one: lets a backend tell the requests of one
/// system call apart from those of other processes.
pub fn caller_pid() -> Option<u32> {
    Some(CALLER.with(Cell::get)).filter(|&p| p != 0)
}

/// SIGKILL's bit in the pending-signal masks of `/proc/PID/status`.
const SIGKILL_BIT: u64 = 1 << (libc::SIGKILL - 1);

/// Whether the process this thread serves a request for has a SIGKILL
/// pending (or is gone): its answer will never be read. False outside a
/// FUSE request. Reads `/proc/PID/status`, so call it every 100 ms or so
/// while waiting, not in a tight loop.
pub fn caller_killed() -> bool {
    let pid = CALLER.with(Cell::get);
    if pid == 0 {
        return false;
    }
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        // Gone: nobody is waiting.
        return true;
    };
    status.lines().any(|l| {
        ["SigPnd:", "ShdPnd:"].iter().any(|k| {
            l.strip_prefix(k)
                .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
                .is_some_and(|m| m & SIGKILL_BIT != 0)
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outside_a_request_no_caller_is_killed_and_a_live_one_is_not_either() {
        clear_caller();
        assert!(!caller_killed());
        assert_eq!(caller_pid(), None);
        set_caller(std::process::id());
        assert_eq!(caller_pid(), Some(std::process::id()));
        assert!(!caller_killed());
        set_caller(u32::MAX - 1);
        assert!(
            caller_killed(),
            "a pid that does not exist waits for nothing"
        );
        clear_caller();
    }
}
