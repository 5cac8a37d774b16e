//! Kept background threads that run queued jobs, first in first out.
//!
//! A [`JobPool`] lives in a `static`. Its threads start as jobs come (one
//! more whenever the jobs waiting outnumber the idle threads), up to the
//! limit the caller passes with each job, and are kept for the life of the
//! process. A panicking job is caught and logged, so a thread never dies
//! and the thread count stays true.
//!
//! When no thread exists and none can start, [`JobPool::submit`] gives the
//! job back: what to do then (fail, run it inline) is the caller's policy.
//!
//! Each user has its own pool rather than sharing one: a batch operation
//! can wait on readahead fetches and on the request worker pool, so jobs
//! that wait on each other in one pool could fill it and deadlock.

use std::collections::VecDeque;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Condvar, Mutex, MutexGuard};

/// A unit of work for a [`JobPool`].
pub(crate) type Job = Box<dyn FnOnce() + Send>;

/// Threads started as jobs come, kept, and fed from one FIFO queue.
pub(crate) struct JobPool {
    /// The name of the pool's `n`th thread (0-based).
    thread_name: fn(usize) -> String,
    state: Mutex<PoolState>,
    work: Condvar,
}

struct PoolState {
    queue: VecDeque<Job>,
    threads: usize,
    idle: usize,
}

impl JobPool {
    /// An empty pool; no thread starts before the first job.
    pub(crate) const fn new(thread_name: fn(usize) -> String) -> JobPool {
        JobPool {
            thread_name,
            state: Mutex::new(PoolState {
                queue: VecDeque::new(),
                threads: 0,
                idle: 0,
            }),
            work: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, PoolState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queues `job`, starting a thread for it if every thread is busy and
    /// fewer than `max_threads` run. Threads are never stopped, so a smaller
    /// `max_threads` later only keeps the pool from growing.
    ///
    /// Gives `job` back when the pool has no thread and none could start
    /// (or `max_threads` is 0): nothing would ever run it.
    pub(crate) fn submit(&'static self, job: Job, max_threads: usize) -> Result<(), Job> {
        let mut st = self.lock();
        if st.idle <= st.queue.len() && st.threads < max_threads {
            let name = (self.thread_name)(st.threads);
            match std::thread::Builder::new()
                .name(name.clone())
                .spawn(move || self.serve())
            {
                Ok(_) => st.threads += 1,
                Err(e) => log::debug!("cannot start thread {name} ({} running): {e}", st.threads),
            }
        }
        if st.threads == 0 {
            return Err(job);
        }
        st.queue.push_back(job);
        drop(st);
        self.work.notify_one();
        Ok(())
    }

    /// A pool thread: runs jobs as they come, forever.
    fn serve(&self) {
        loop {
            let job = {
                let mut st = self.lock();
                loop {
                    if let Some(job) = st.queue.pop_front() {
                        break job;
                    }
                    st.idle += 1;
                    st = self.work.wait(st).unwrap_or_else(|p| p.into_inner());
                    st.idle -= 1;
                }
            };
            if catch_unwind(AssertUnwindSafe(job)).is_err() {
                let me = std::thread::current();
                log::warn!("a job panicked on thread {}", me.name().unwrap_or("?"));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{mpsc, LazyLock};
    use std::time::{Duration, Instant};

    const WAIT: Duration = Duration::from_secs(10);

    fn test_name(n: usize) -> String {
        format!("job-pool-test-{n}")
    }

    #[test]
    fn every_submitted_job_runs() {
        static POOL: JobPool = JobPool::new(test_name);
        let (tx, rx) = mpsc::channel();
        for i in 0..200 {
            let tx = tx.clone();
            assert!(POOL
                .submit(Box::new(move || tx.send(i).unwrap()), 4)
                .is_ok());
        }
        let mut got: Vec<i32> = (0..200).map(|_| rx.recv_timeout(WAIT).unwrap()).collect();
        got.sort_unstable();
        assert_eq!(got, (0..200).collect::<Vec<_>>());
    }

    /// Blocked jobs: they count how many run at once and on which threads,
    /// and wait until the gate opens.
    #[derive(Default)]
    struct Gate {
        state: Mutex<GateState>,
        changed: Condvar,
    }

    #[derive(Default)]
    struct GateState {
        open: bool,
        running: usize,
        peak: usize,
        threads: HashSet<std::thread::ThreadId>,
    }

    impl Gate {
        fn pass(&self) {
            let mut st = self.state.lock().unwrap();
            st.running += 1;
            st.peak = st.peak.max(st.running);
            st.threads.insert(std::thread::current().id());
            self.changed.notify_all();
            while !st.open {
                st = self.changed.wait(st).unwrap();
            }
            st.running -= 1;
        }

        fn wait_running(&self, n: usize) -> bool {
            let end = Instant::now() + WAIT;
            let mut st = self.state.lock().unwrap();
            while st.running < n {
                let left = end.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return false;
                }
                st = self.changed.wait_timeout(st, left).unwrap().0;
            }
            true
        }

        fn open(&self) {
            self.state.lock().unwrap().open = true;
            self.changed.notify_all();
        }
    }

    #[test]
    fn no_more_than_max_threads_start_however_many_jobs_wait() {
        static POOL: JobPool = JobPool::new(test_name);
        static GATE: LazyLock<Gate> = LazyLock::new(Gate::default);
        let gate: &'static Gate = &GATE;
        let (tx, rx) = mpsc::channel();
        for _ in 0..10 {
            let tx = tx.clone();
            let job = Box::new(move || {
                gate.pass();
                tx.send(()).unwrap();
            });
            assert!(POOL.submit(job, 3).is_ok());
        }
        assert!(gate.wait_running(3), "three jobs should run at once");
        // Room for a fourth thread to show up if the limit did not hold.
        std::thread::sleep(Duration::from_millis(100));
        assert_eq!(gate.state.lock().unwrap().peak, 3);
        gate.open();
        for _ in 0..10 {
            rx.recv_timeout(WAIT).unwrap();
        }
        assert_eq!(gate.state.lock().unwrap().threads.len(), 3);
    }

    #[test]
    fn a_panicking_job_does_not_stop_later_jobs() {
        // One thread: if the panic killed it, nothing would run the rest.
        static POOL: JobPool = JobPool::new(test_name);
        assert!(POOL
            .submit(Box::new(|| panic!("a job that panics on purpose")), 1)
            .is_ok());
        let (tx, rx) = mpsc::channel();
        for i in 0..5 {
            let tx = tx.clone();
            assert!(POOL
                .submit(Box::new(move || tx.send(i).unwrap()), 1)
                .is_ok());
        }
        let got: Vec<i32> = (0..5).map(|_| rx.recv_timeout(WAIT).unwrap()).collect();
        assert_eq!(got, vec![0, 1, 2, 3, 4], "one thread runs jobs in order");
    }

    #[test]
    fn a_job_comes_back_when_no_thread_may_start() {
        static POOL: JobPool = JobPool::new(test_name);
        static RAN: AtomicBool = AtomicBool::new(false);
        let job = POOL
            .submit(Box::new(|| RAN.store(true, Ordering::SeqCst)), 0)
            .expect_err("a pool without threads cannot take a job");
        assert!(!RAN.load(Ordering::SeqCst));
        job();
        assert!(RAN.load(Ordering::SeqCst));
    }
}
