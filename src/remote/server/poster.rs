//! Posting to verbs connections from a thread that still has the process's
//! original credentials.
//!
//! Why: workers switch their credentials per request (creds.rs), and the
//! kernel refuses `write(2)` on a uverbs file from a thread whose credentials
//! are not the very ones the file was opened with (`ib_safe_file_access`
//! compares the pointers, so switching back does not help: EACCES).
//! Soft-RoCE (rxe) rings its doorbell with such a write, so every reply and
//! every RDMA WRITE a worker posted after its first request failed there.
//! Each worker therefore starts a companion thread before it ever switches,
//! and hands its verbs posts to it. TCP connections post inline.

use std::cell::RefCell;
use std::sync::mpsc::{channel, sync_channel, Sender};

use hipfs_rdma::{Connection, TransportKind};

type Job = Box<dyn FnOnce() + Send>;

thread_local! {
    static COMPANION: RefCell<Option<Sender<Job>>> = const { RefCell::new(None) };
}

/// Starts this thread's companion. Call before the thread switches
/// credentials: the companion inherits the credentials it has now.
pub(crate) fn start_companion(name: String) {
    let (tx, rx) = channel::<Job>();
    let spawned = std::thread::Builder::new().name(name).spawn(move || {
        // Ends when the worker (the only sender) goes.
        while let Ok(job) = rx.recv() {
            job();
        }
    });
    match spawned {
        Ok(_) => COMPANION.with(|c| *c.borrow_mut() = Some(tx)),
        Err(e) => log::warn!("cannot start a verbs posting thread ({e}); posting inline"),
    }
}

/// Runs `f` (a post on `conn`) where the kernel accepts it: on this
/// thread's companion for verbs connections, inline otherwise.
pub(crate) fn post<R: Send + 'static>(
    conn: &dyn Connection,
    f: impl FnOnce() -> R + Send + 'static,
) -> R {
    if conn.kind() != TransportKind::Verbs {
        return f();
    }
    let Some(tx) = COMPANION.with(|c| c.borrow().clone()) else {
        return f();
    };
    let (done_tx, done_rx) = sync_channel::<R>(1);
    let job: Job = Box::new(move || {
        let _ = done_tx.send(f());
    });
    if let Err(back) = tx.send(job) {
        // The companion is gone (cannot happen while its worker lives):
        // post inline rather than lose the reply.
        (back.0)();
    }
    match done_rx.recv() {
        Ok(r) => r,
        // Only if `f` panicked on the companion: surface it here.
        Err(_) => panic!("verbs posting thread failed"),
    }
}
