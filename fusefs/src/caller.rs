//! The process a FUSE request is served for, so a backend waiting on the
//! network can give up when that process has been killed.
//!
//! Why: once the daemon has read a request, the kernel keeps the calling
//! process in uninterruptible sleep (D state) until the daemon answers, even
//! after SIGKILL. A backend that notices the kill answers at once (`EINTR`,
//! which nobody will read) and the process leaves instead of waiting out
//! the mount's timeout. The same holds when the mount is being torn down:
//! a backend retrying for a hard mount must let its thread go.

use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

thread_local! {
    static CALLER: Cell<u32> = const { Cell::new(0) };
    /// The closing flag of the mount whose request this thread serves.
    static CLOSING: RefCell<Option<Arc<AtomicBool>>> = const { RefCell::new(None) };
}

/// Records the pid (thread id) of the request this thread now serves, and
/// the flag its mount's teardown sets.
pub(crate) fn set_caller(pid: u32, closing: &Arc<AtomicBool>) {
    CALLER.with(|c| c.set(pid));
    CLOSING.with(|c| *c.borrow_mut() = Some(closing.clone()));
}

/// This thread serves no request any more.
pub(crate) fn clear_caller() {
    CALLER.with(|c| c.set(0));
    CLOSING.with(|c| *c.borrow_mut() = None);
}

/// Whether the mount of this thread's request is being unmounted.
fn closing() -> bool {
    CLOSING.with(|c| {
        c.borrow()
            .as_ref()
            .is_some_and(|f| f.load(Ordering::SeqCst))
    })
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
/// pending (or is gone), or its mount is being unmounted: its answer will
/// never be read. False outside a FUSE request. Reads `/proc/PID/status`,
/// so call it every 100 ms or so while waiting, not in a tight loop.
pub fn caller_killed() -> bool {
    let pid = CALLER.with(Cell::get);
    if pid == 0 {
        return false;
    }
    if closing() {
        return true;
    }
    let Ok(status) = super::credentials::read_proc_status(pid) else {
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
        let closing = Arc::new(AtomicBool::new(false));
        set_caller(std::process::id(), &closing);
        assert_eq!(caller_pid(), Some(std::process::id()));
        assert!(!caller_killed());
        set_caller(u32::MAX - 1, &closing);
        assert!(
            caller_killed(),
            "a pid that does not exist waits for nothing"
        );
        clear_caller();
    }

    #[test]
    fn a_live_caller_of_a_mount_being_unmounted_counts_as_gone() {
        let closing = Arc::new(AtomicBool::new(false));
        set_caller(std::process::id(), &closing);
        assert!(!caller_killed());
        closing.store(true, Ordering::SeqCst);
        assert!(caller_killed(), "teardown must release waiting backends");
        clear_caller();
        assert!(!caller_killed(), "outside a request nothing is waited for");
    }
}
