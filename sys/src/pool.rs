//! A persistent pool of worker threads with a scoped, safe entry point:
//! [`run_parallel`] runs one closure on `n` workers (the calling thread is
//! one of them) and returns only when all have finished, so the closure may
//! borrow from the caller's stack, as with `std::thread::scope`, but without
//! spawning threads per call (the I/O engine calls it per request).
//!
//! This is the one place where that borrow is made `'static` for the
//! queued jobs (the primitive `std::thread::scope` hides in std), kept here
//! with the other code that policy code must not contain.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, LazyLock, Mutex};

type Job = Box<dyn FnOnce() + Send + 'static>;

struct Queue {
    jobs: Mutex<VecDeque<Job>>,
    ready: Condvar,
    idle: AtomicUsize,
    spawned: AtomicUsize,
}

static QUEUE: LazyLock<Arc<Queue>> = LazyLock::new(|| {
    Arc::new(Queue {
        jobs: Mutex::new(VecDeque::new()),
        ready: Condvar::new(),
        idle: AtomicUsize::new(0),
        spawned: AtomicUsize::new(0),
    })
});

fn worker_loop(q: Arc<Queue>) {
    loop {
        let job = {
            let mut jobs = q.jobs.lock().unwrap_or_else(|p| p.into_inner());
            loop {
                if let Some(j) = jobs.pop_front() {
                    break j;
                }
                q.idle.fetch_add(1, Ordering::Relaxed);
                jobs = q.ready.wait(jobs).unwrap_or_else(|p| p.into_inner());
                q.idle.fetch_sub(1, Ordering::Relaxed);
            }
        };
        job();
    }
}

fn ensure_threads(n: usize) {
    let q = &*QUEUE;
    while q.spawned.load(Ordering::Relaxed) < n {
        let id = q.spawned.fetch_add(1, Ordering::Relaxed);
        if id >= n {
            break;
        }
        let qc = Arc::clone(q);
        if std::thread::Builder::new()
            .name(format!("hipfs-io-{id}"))
            .spawn(move || worker_loop(qc))
            .is_err()
        {
            q.spawned.fetch_sub(1, Ordering::Relaxed);
            break;
        }
    }
}

struct Latch {
    left: Mutex<usize>,
    done: Condvar,
    panicked: AtomicBool,
}

/// A worker (the caller's share or a pool thread's) panicked; every
/// worker has still finished when this is returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkerPanicked;

/// Runs `f(worker_index)` on `n` workers and waits for all of them.
pub fn run_parallel(
    n: usize,
    f: &(dyn Fn(usize) + Sync),
) -> std::result::Result<(), WorkerPanicked> {
    if n <= 1 {
        f(0);
        return Ok(());
    }
    ensure_threads(n - 1);
    let latch = Arc::new(Latch {
        left: Mutex::new(n - 1),
        done: Condvar::new(),
        panicked: AtomicBool::new(false),
    });
    // SAFETY: the closure reference is extended to 'static only for the jobs
    // queued below, and this function does not return until the latch says
    // every one of them has finished running it (panics included).
    let f_static: &'static (dyn Fn(usize) + Sync) = unsafe { std::mem::transmute(f) };
    {
        let mut jobs = QUEUE.jobs.lock().unwrap_or_else(|p| p.into_inner());
        for i in 1..n {
            let l = Arc::clone(&latch);
            jobs.push_back(Box::new(move || {
                if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f_static(i))).is_err() {
                    l.panicked.store(true, Ordering::Relaxed);
                }
                let mut left = l.left.lock().unwrap_or_else(|p| p.into_inner());
                *left -= 1;
                if *left == 0 {
                    l.done.notify_all();
                }
            }));
        }
    }
    QUEUE.ready.notify_all();
    let own = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(0)));
    let mut left = latch.left.lock().unwrap_or_else(|p| p.into_inner());
    while *left > 0 {
        left = latch.done.wait(left).unwrap_or_else(|p| p.into_inner());
    }
    if own.is_err() || latch.panicked.load(Ordering::Relaxed) {
        return Err(WorkerPanicked);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_worker_runs_once_and_borrows_from_the_caller() {
        let hits: Vec<AtomicUsize> = (0..8).map(|_| AtomicUsize::new(0)).collect();
        run_parallel(8, &|i| {
            hits[i].fetch_add(1, Ordering::Relaxed);
        })
        .unwrap();
        assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) == 1));
    }

    #[test]
    fn a_panicking_worker_becomes_an_error_not_a_hang() {
        let r = run_parallel(3, &|i| {
            if i == 2 {
                panic!("boom");
            }
        });
        assert_eq!(r.unwrap_err(), WorkerPanicked);
    }
}
