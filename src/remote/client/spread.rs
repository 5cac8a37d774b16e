//! Reads spread over several servers of one export: a request is cut into
//! extents that the servers take from one queue, several in flight per
//! server, so each server carries what it delivers (a faster or less busy
//! one takes more). An extent whose server fails, stops answering or is
//! cut off goes back to the queue for the others; that server is left out
//! for the rest of the request and rests a while (longer after each
//! failure) before new requests try it again: it rejoins when it answers.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

/// What one server of a spread did (`hipfs stats` shows it per server).
#[derive(Default, Debug)]
pub struct ServerStats {
    /// Bytes it delivered.
    pub bytes: AtomicU64,
    /// Extents it delivered.
    pub extents: AtomicU64,
    /// Extents it failed (transport errors, no answer in time).
    pub errors: AtomicU64,
    /// Extents it failed that another server then read.
    pub retried: AtomicU64,
    /// Sum of the delivered extents' latencies, microseconds.
    pub latency_us: AtomicU64,
    /// The longest delivered extent, microseconds.
    pub max_latency_us: AtomicU64,
}

/// One server's share of spread reads: its counters and whether it is
/// down.
#[derive(Default, Debug)]
pub struct Member {
    /// What it did.
    pub stats: ServerStats,
    /// After a failure: (when to probe it again, the next wait). Reads
    /// leave a down server out; a probe (not a read) brings it back.
    down: Mutex<Option<(Instant, Duration)>>,
    /// A probe is under way.
    probing: std::sync::atomic::AtomicBool,
}

/// A server of a spread read that can be left out and probed back in.
pub trait Probed: Send + Sync + 'static {
    /// Its state in the spread.
    fn member(&self) -> &Member;
    /// One small request to it, bounded by `stall`: whether it answered
    /// (see [`answered`]).
    fn probe(&self, stall: Duration) -> bool;
}

/// Starts a probe of `server` if it is down and one is due, on its own
/// thread, so no read waits on a server that may hang; it rejoins the
/// reads when it answers.
pub fn probe_if_due<P: Probed>(server: &std::sync::Arc<P>, stall: Duration) {
    if !server.member().claim_probe() {
        return;
    }
    let s = server.clone();
    let spawned = std::thread::Builder::new()
        .name("hipfs-probe".into())
        .spawn(move || {
            let answered = s.probe(stall);
            s.member().probed(answered);
        });
    if spawned.is_err() {
        server.member().probed(false);
    }
}

/// The wait before the first probe after a failure; each failed probe
/// doubles it.
const FIRST_REST: Duration = Duration::from_millis(200);
/// The longest wait between probes: a server that is back rejoins within it.
const MAX_REST: Duration = Duration::from_secs(4);

impl Member {
    /// Whether reads leave this server out for now.
    pub fn resting(&self) -> bool {
        self.down
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_some()
    }

    fn failed(&self) {
        let mut r = self.down.lock().unwrap_or_else(|p| p.into_inner());
        let next = r.map_or(FIRST_REST, |(_, d)| (d * 2).min(MAX_REST));
        *r = Some((Instant::now() + next, next));
    }

    /// Whether a probe of this down server is due; true claims it (the
    /// caller probes, then says [`Member::probed`]).
    pub fn claim_probe(&self) -> bool {
        let due = self
            .down
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_some_and(|(at, _)| Instant::now() >= at);
        due && !self.probing.swap(true, Ordering::SeqCst)
    }

    /// The outcome of a claimed probe: up again, or down for longer.
    pub fn probed(&self, answered: bool) {
        if answered {
            *self.down.lock().unwrap_or_else(|p| p.into_inner()) = None;
        } else {
            self.failed();
        }
        self.probing.store(false, Ordering::SeqCst);
    }

    fn delivered(&self, n: usize, took: Duration) {
        let s = &self.stats;
        let us = took.as_micros().min(u128::from(u64::MAX)) as u64;
        s.bytes.fetch_add(n as u64, Ordering::Relaxed);
        s.extents.fetch_add(1, Ordering::Relaxed);
        s.latency_us.fetch_add(us, Ordering::Relaxed);
        s.max_latency_us.fetch_max(us, Ordering::Relaxed);
        *self.down.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }

    /// One line for `hipfs stats`.
    pub fn line(&self, server: &str) -> String {
        let s = &self.stats;
        let extents = s.extents.load(Ordering::Relaxed);
        format!(
            "server {server}: {}, {} bytes in {} extents, {} errors, {} extents retried elsewhere, latency avg {} us max {} us",
            if self.resting() { "down (probed until it answers)" } else { "up" },
            s.bytes.load(Ordering::Relaxed),
            extents,
            s.errors.load(Ordering::Relaxed),
            s.retried.load(Ordering::Relaxed),
            s.latency_us.load(Ordering::Relaxed).checked_div(extents).unwrap_or(0),
            s.max_latency_us.load(Ordering::Relaxed),
        )
    }
}

/// Whether a failed extent may be read from another server: the server
/// or the path to it failed, not the file (ENOENT, EBADF... would fail
/// the same everywhere).
pub fn elsewhere(errno: i32) -> bool {
    matches!(
        errno,
        libc::EIO
            | libc::ENOTCONN
            | libc::ETIMEDOUT
            | libc::ECONNRESET
            | libc::ECONNREFUSED
            | libc::EHOSTUNREACH
            | libc::ENETUNREACH
            | libc::EPROTO
            | libc::EACCES
            | libc::ENOMEM
    )
}

/// Reads one extent: (server index, destination, file offset, the
/// attempt's deadline) → bytes read.
pub type ReadExtent<'a> = dyn Fn(usize, &mut [u8], u64, Instant) -> Result<usize, i32> + Sync + 'a;

/// Whether a probe's outcome means the server answers: a reply, even an
/// errno about the file, but not a transport failure or a refusal.
pub fn answered<T>(r: &Result<T, i32>) -> bool {
    match r {
        Ok(_) => true,
        Err(e) => !matches!(
            *e,
            libc::ENOTCONN | libc::ETIMEDOUT | libc::EIO | libc::EINTR | libc::EACCES
        ),
    }
}

/// How a spread read runs.
#[derive(Clone, Copy, Debug)]
pub struct Plan {
    /// Bytes per extent.
    pub extent: usize,
    /// Extents in flight per server.
    pub per_server: usize,
    /// The whole read's deadline: no attempt waits past it.
    pub deadline: Instant,
    /// How long one attempt may take before its server is taken for hung.
    pub stall: Duration,
}

struct Work<'a> {
    queue: VecDeque<(usize, &'a mut [u8])>,
    got: Vec<Option<usize>>,
    done: usize,
    failed: Option<i32>,
    /// Servers left out of this read after a failure.
    out: Vec<bool>,
    /// A failed server gave an extent back: standby workers join.
    given_back: bool,
}

/// The server the next request's first extent goes to (turns).
static NEXT_FIRST: AtomicUsize = AtomicUsize::new(0);

/// Reads `buf.len()` bytes at `offset` with `read(server, dst, at,
/// attempt_deadline)` spread over `members` (by index); returns the bytes
/// of the contiguous prefix read (short at end of file). `EIO` when every
/// server failed; another errno when a server answered one that would be
/// the same everywhere.
pub fn read(
    members: &[&Member],
    buf: &mut [u8],
    offset: u64,
    plan: Plan,
    read: &ReadExtent<'_>,
) -> Result<usize, i32> {
    let extent = plan.extent.max(4096);
    let lens: Vec<usize> = buf.chunks(extent).map(<[u8]>::len).collect();
    let total = lens.len();
    if total == 0 {
        return Ok(0);
    }
    // Servers that are down are left out, unless all are: then all are
    // tried (one may be back, and failing fast is the other answer).
    let mut use_: Vec<usize> = (0..members.len())
        .filter(|&i| !members[i].resting())
        .collect();
    if use_.is_empty() {
        use_ = (0..members.len()).collect();
    }
    let work = Mutex::new(Work {
        queue: buf.chunks_mut(extent).enumerate().collect(),
        got: vec![None; total],
        done: 0,
        failed: None,
        out: vec![false; members.len()],
        given_back: false,
    });
    let changed = Condvar::new();
    // Workers round-robin over the servers, from a server that turns with
    // each request (so that small reads spread too): one per extent, and
    // a standby for each server left, which only takes extents a failed
    // server gave back.
    let turn = NEXT_FIRST.fetch_add(1, Ordering::Relaxed);
    let n_use = use_.len();
    use_.rotate_left(turn % n_use);
    let workers: Vec<(usize, bool)> = (0..plan.per_server.max(1))
        .flat_map(|_| use_.iter().copied())
        .take(total.max(use_.len()))
        .enumerate()
        .map(|(k, m)| (m, k >= total))
        .collect();
    let worker = |m: usize, standby: bool| loop {
        let (i, dst) = {
            let mut w = work.lock().unwrap_or_else(|p| p.into_inner());
            loop {
                if w.failed.is_some() || w.done == total || w.out[m] {
                    return;
                }
                if !standby || w.given_back {
                    if let Some(item) = w.queue.pop_front() {
                        break item;
                    }
                }
                // Wait for an extent to come back (its server failed) or
                // for the read to end.
                w = changed
                    .wait_timeout(w, Duration::from_millis(50))
                    .unwrap_or_else(|p| p.into_inner())
                    .0;
            }
        };
        let at = offset + (i * extent) as u64;
        let start = Instant::now();
        let attempt = (start + plan.stall).min(plan.deadline);
        let r = read(m, dst, at, attempt);
        let mut w = work.lock().unwrap_or_else(|p| p.into_inner());
        match r {
            Ok(n) => {
                members[m].delivered(n, start.elapsed());
                w.got[i] = Some(n);
                w.done += 1;
            }
            Err(e) if elsewhere(e) => {
                let s = &members[m].stats;
                s.errors.fetch_add(1, Ordering::Relaxed);
                members[m].failed();
                w.out[m] = true;
                let left = use_.iter().filter(|&&k| !w.out[k]).count();
                if left == 0 || Instant::now() >= plan.deadline {
                    log::warn!("spread read at {at}: every server failed (last errno {e})");
                    w.failed = Some(libc::EIO);
                } else {
                    s.retried.fetch_add(1, Ordering::Relaxed);
                    // The slice comes back whole: the next server reads it all.
                    w.queue.push_front((i, dst));
                    w.given_back = true;
                }
            }
            Err(e) => w.failed = Some(e),
        }
        drop(w);
        changed.notify_all();
    };
    std::thread::scope(|s| {
        for &(m, standby) in &workers {
            let worker = &worker;
            s.spawn(move || worker(m, standby));
        }
    });
    let w = work.into_inner().unwrap_or_else(|p| p.into_inner());
    if let Some(e) = w.failed {
        return Err(e);
    }
    // The answer is the contiguous prefix: stop at the first short extent.
    let mut n = 0;
    for (got, &len) in w.got.iter().zip(&lens) {
        let g = got.ok_or(libc::EIO)?.min(len);
        n += g;
        if g < len {
            break;
        }
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(extent: usize) -> Plan {
        Plan {
            extent,
            per_server: 2,
            deadline: Instant::now() + Duration::from_secs(5),
            stall: Duration::from_secs(1),
        }
    }

    fn fill(dst: &mut [u8], at: u64) {
        for (k, b) in dst.iter_mut().enumerate() {
            *b = ((at as usize + k) % 251) as u8;
        }
    }

    #[test]
    fn extents_of_a_failing_server_are_read_by_the_others_and_the_bytes_are_right() {
        let ms: Vec<Member> = (0..3).map(|_| Member::default()).collect();
        let refs: Vec<&Member> = ms.iter().collect();
        let mut buf = vec![0u8; 64 * 4096 + 100];
        let n = read(&refs, &mut buf, 7, plan(4096), &|m, dst, at, _| {
            if m == 1 {
                return Err(libc::ENOTCONN);
            }
            // Slow enough that every server's worker gets to the queue.
            std::thread::sleep(Duration::from_millis(2));
            fill(dst, at);
            Ok(dst.len())
        })
        .unwrap();
        assert_eq!(n, buf.len());
        let mut want = vec![0u8; buf.len()];
        fill(&mut want, 7);
        assert!(buf == want);
        assert!(ms[1].stats.errors.load(Ordering::Relaxed) >= 1);
        assert_eq!(ms[1].stats.bytes.load(Ordering::Relaxed), 0);
        assert!(ms[1].resting());
        let delivered: u64 = ms
            .iter()
            .map(|m| m.stats.bytes.load(Ordering::Relaxed))
            .sum();
        assert_eq!(delivered, buf.len() as u64);
    }

    #[test]
    fn a_faster_server_takes_more_extents() {
        let ms: Vec<Member> = (0..2).map(|_| Member::default()).collect();
        let refs: Vec<&Member> = ms.iter().collect();
        let mut buf = vec![0u8; 64 * 4096];
        read(&refs, &mut buf, 0, plan(4096), &|m, dst, _, _| {
            // Server 0 delivers an extent in 10 ms, server 1 in 1 ms.
            std::thread::sleep(Duration::from_millis(if m == 0 { 10 } else { 1 }));
            Ok(dst.len())
        })
        .unwrap();
        let slow = ms[0].stats.extents.load(Ordering::Relaxed);
        let fast = ms[1].stats.extents.load(Ordering::Relaxed);
        assert_eq!(slow + fast, 64);
        assert!(fast > 2 * slow, "fast {fast}, slow {slow}");
    }

    #[test]
    fn every_server_failing_gives_eio_and_a_file_error_is_passed_on() {
        let ms: Vec<Member> = (0..2).map(|_| Member::default()).collect();
        let refs: Vec<&Member> = ms.iter().collect();
        let mut buf = vec![0u8; 8 * 4096];
        let r = read(&refs, &mut buf, 0, plan(4096), &|_, _, _, _| {
            Err(libc::ETIMEDOUT)
        });
        assert_eq!(r, Err(libc::EIO));
        let r = read(&refs, &mut buf, 0, plan(4096), &|_, _, _, _| {
            Err(libc::EBADF)
        });
        assert_eq!(r, Err(libc::EBADF));
    }

    #[test]
    fn a_short_extent_ends_the_read_there() {
        let ms = [Member::default()];
        let refs: Vec<&Member> = ms.iter().collect();
        let mut buf = vec![0u8; 10 * 4096];
        let eof: usize = 3 * 4096 + 10;
        let n = read(&refs, &mut buf, 0, plan(4096), &|_, dst, at, _| {
            Ok(dst.len().min(eof.saturating_sub(at as usize)))
        })
        .unwrap();
        assert_eq!(n, eof);
    }
}
