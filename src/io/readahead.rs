//! Sequential readahead for staged reads from a userspace filesystem (a
//! hipfs file over TCP into device memory, see `staged`).
//!
//! Why: a staged request ends with a drain. Its last chunks arrive and are
//! copied to the device while the network has nothing left to carry, and
//! the next request starts from idle sockets. With 64 MiB requests on a
//! 16-core machine the pipeline's workers were busy only 70-76% of the
//! time. Readahead keeps the network busy across requests: once a read that
//! continues a sequential run has handed out its last chunk, the chunks the
//! next reads of the same size would have are fetched by threads of their
//! own, so the request can finish without waiting for them: one read ahead
//! when the run begins, twice as far with each read that continues it, up
//! to what the window holds (two reads of 64 MiB, or thirty-two of 4 MiB).
//! Each later read copies its chunks to its buffer on the device, fetches
//! only what is not there, and tops the window up again: the window slides
//! along the file one read at a time.
//!
//! Where fetched chunks wait: in device memory. A fetch receives into a
//! pinned bounce slab, copies it to a device slab of the window at once and
//! gives the bounce slab back, most recently used first, so the few bounce
//! slabs in use stay in the CPU caches; the next read's copy is then device
//! to device. Holding the window in pinned host memory instead made every
//! received byte miss the caches twice (written by the socket copy, read
//! by the copy engine a request later): on the H100 machine 16 loopback
//! sockets carried a file's pages at 23.6-27.0 GiB/s into 64 MiB per
//! receiver and at 32.2-37.2 into a reused 4 MiB buffer, same runs.
//!
//! What a fetched chunk may be used for: only the read it was fetched for
//! (same offset, same length), at most [`MAX_AGE`] after it was fetched,
//! and only if no write to the file went through this library in the
//! meantime (through any handle of the process: files are told apart by
//! `UserspaceFs::identify`). Anything else is dropped and read again.
//!
//! Bounds: a window holds at most `HIPFS_READAHEAD_MB` of slabs (default
//! 128, `0` turns readahead off) and all windows together at most [`BUDGET`] of
//! device memory; slabs are reused across windows and kept once made.
//! Bounce slabs: one per running fetch, plus a few whose copy to the device
//! still runs, at most [`MAX_THREADS`] (`HIPFS_READAHEAD_THREADS` for
//! measuring) plus 8 ([`bounce_cap`]), kept.

use crate::error::Result;
use crate::gpu::{DeviceSlot, Event, GpuRuntime, LentDevice, StagingSlot, Stream};
use crate::job_pool::{Job, JobPool};
use crate::lent::Chunks;
use crate::stats;
use crate::userspace::{read_into, read_into_device, UserspaceFs};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

/// Device bytes every readahead window of the process may hold together.
const BUDGET: usize = 256 << 20;
/// How long after its fetch ended a fetched chunk may still be used: a
/// reader that pauses gets what the file holds then, not bytes fetched
/// before the pause.
pub const MAX_AGE: Duration = Duration::from_secs(1);
/// Threads that fetch ahead, for all windows together (two requests of 16
/// chunks in flight: a read launches the next one's fetches while its own
/// may still be arriving).
const MAX_THREADS: usize = 32;

/// The fetching threads' cap: [`MAX_THREADS`], or `HIPFS_READAHEAD_THREADS`
/// (1 to 64) for measuring; read once.
fn max_threads() -> usize {
    static V: OnceLock<usize> = OnceLock::new();
    *V.get_or_init(|| {
        crate::config::env_usize("HIPFS_READAHEAD_THREADS", 1..=64).unwrap_or(MAX_THREADS)
    })
}
/// The default window, MiB: two 64 MiB reads, so each of 16 lanes has a
/// second chunk queued behind the one it carries (measured against 64 and
/// 256: README, "GPU machine", the window's size).
const DEFAULT_WINDOW_MB: usize = 128;

/// The window cap in bytes (`HIPFS_READAHEAD_MB`, read once; 0 = off).
fn window_cap() -> usize {
    static V: OnceLock<usize> = OnceLock::new();
    *V.get_or_init(|| {
        let mb = match std::env::var("HIPFS_READAHEAD_MB") {
            Ok(v) => v.trim().parse::<usize>().unwrap_or_else(|_| {
                log::warn!(
                    "HIPFS_READAHEAD_MB={v:?} is not a number of MiB; using {DEFAULT_WINDOW_MB}"
                );
                DEFAULT_WINDOW_MB
            }),
            Err(_) => DEFAULT_WINDOW_MB,
        };
        mb.min(BUDGET >> 20) << 20
    })
}

/// Whether readahead is on (`HIPFS_READAHEAD_MB` is not 0).
pub(crate) fn enabled() -> bool {
    window_cap() > 0
}

/// Write counters, one per slot that files hash to: a write through the
/// library bumps its file's, and chunks fetched before it are not used
/// after it. Files that share a slot only drop each other's readahead.
static WRITES: [AtomicU64; WRITE_SLOTS] = [const { AtomicU64::new(0) }; WRITE_SLOTS];
const WRITE_SLOTS: usize = 4096;

/// The write counter of the file `fs` says it is (`UserspaceFs::identify`).
fn write_slot(fs: &dyn UserspaceFs) -> &'static AtomicU64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    fs.identify().hash(&mut h);
    &WRITES[(h.finish() % WRITE_SLOTS as u64) as usize]
}

/// A device slab of the readahead pool.
struct AheadSlab {
    slot: DeviceSlot,
    device: i32,
}

impl Drop for AheadSlab {
    fn drop(&mut self) {
        HELD.fetch_sub(self.slot.len(), Ordering::Relaxed);
    }
}

/// Device bytes the readahead slabs hold (free or in use).
static HELD: AtomicUsize = AtomicUsize::new(0);
/// Slabs not in use.
static FREE: Mutex<Vec<AheadSlab>> = Mutex::new(Vec::new());

/// A slab for one fetch: a free one, or device bytes reserved within the
/// budget for the fetching thread to make one of (allocating takes time no
/// request should wait for).
enum SlabFor {
    Free(AheadSlab),
    Reserved(SlabSource),
}

/// A free slab of at least `len` bytes on `source.device`, else a
/// reservation of `source.slab` bytes; `None` over the budget.
fn slab_for(source: SlabSource, len: usize) -> Option<SlabFor> {
    if let Some(s) = free_slab(source.device, len) {
        return Some(SlabFor::Free(s));
    }
    let bytes = source.bytes_for(len);
    let claimed = HELD.fetch_add(bytes, Ordering::Relaxed);
    if claimed + bytes > BUDGET {
        HELD.fetch_sub(bytes, Ordering::Relaxed);
        // The budget may be held by windows nobody will read any more
        // (a handle that stopped reading): take their slabs back.
        reclaim_stale();
        return free_slab(source.device, len).map(SlabFor::Free);
    }
    Some(SlabFor::Reserved(SlabSource {
        slab: bytes,
        ..source
    }))
}

impl SlabFor {
    /// The slab, made now if it was reserved (binding its device on this
    /// thread); a failure gives the reservation back.
    fn get(self) -> Result<AheadSlab> {
        let s = match self {
            SlabFor::Free(s) => return Ok(s),
            SlabFor::Reserved(s) => s,
        };
        let made =
            s.rt.bind(s.device)
                .and_then(|_bound| DeviceSlot::new(s.rt, s.device, s.slab));
        match made {
            // Counted in HELD since the reservation; AheadSlab's drop
            // takes it off.
            Ok(slot) => Ok(AheadSlab {
                slot,
                device: s.device,
            }),
            Err(e) => {
                HELD.fetch_sub(s.slab, Ordering::Relaxed);
                Err(e)
            }
        }
    }
}

/// Every readahead window of the process, for [`reclaim_stale`].
static WINDOWS: Mutex<Vec<Weak<Mutex<Window>>>> = Mutex::new(Vec::new());

/// Drops, from every window not in use right now, the chunks too old to
/// be used ([`MAX_AGE`]): their slabs go back to the pool (once fetched).
fn reclaim_stale() {
    let mut stale = Vec::new();
    {
        let mut all = WINDOWS.lock().unwrap_or_else(|p| p.into_inner());
        all.retain(|w| w.strong_count() > 0);
        for w in all.iter().filter_map(Weak::upgrade) {
            // A window locked now is being read or filled: not stale.
            let Ok(mut w) = w.try_lock() else { continue };
            let old: Vec<u64> = w
                .pieces
                .iter()
                .filter(|(_, p)| p.asked.elapsed() > MAX_AGE)
                .map(|(off, _)| *off)
                .collect();
            stale.extend(old.into_iter().filter_map(|off| w.pieces.remove(&off)));
        }
    }
    // Dropped here, with no lock held: a fetched piece gives its slab back.
    drop(stale);
}

/// A free slab of at least `len` bytes on `device`, taken from the pool.
fn free_slab(device: i32, len: usize) -> Option<AheadSlab> {
    let mut free = FREE.lock().unwrap_or_else(|p| p.into_inner());
    let i = free
        .iter()
        .position(|s| s.device == device && s.slot.len() >= len)?;
    Some(free.swap_remove(i))
}

/// A fetched slab nobody will copy from: counted as dropped, back to the
/// pool.
fn discard(slab: AheadSlab, got: &Result<usize>) {
    if let Ok(n) = got {
        stats::record_readahead(0, *n);
    }
    give_slab(slab);
}

/// Gives a slab back to the pool, once no copy uses it (one whose last copy
/// cannot be waited for is dropped, and leaked there).
fn give_slab(mut s: AheadSlab) {
    if s.slot.reusable() {
        FREE.lock().unwrap_or_else(|p| p.into_inner()).push(s);
    }
}

/// A pinned slab a fetch receives into, and the stream of its copy to the
/// fetch's device slab. Taken for one fetch, given back right after it.
struct Bounce {
    slot: StagingSlot,
    stream: Stream,
    device: i32,
}

/// Bounce slabs not in use by a fetch (their copy to the device may still
/// run); the last given back is taken first, so the bytes the socket
/// writes are still in the CPU caches.
static BOUNCES: Mutex<Vec<Bounce>> = Mutex::new(Vec::new());
/// Bounce slabs made (kept for the process).
static BOUNCES_MADE: AtomicUsize = AtomicUsize::new(0);

/// How many bounce slabs may be made: one per fetching thread, and a few
/// more whose copies are still running.
fn bounce_cap() -> usize {
    max_threads() + 8
}

/// A bounce slab for `len` bytes to `source.device`: the most recently
/// used free one whose copy has ended; else a new one made here (a
/// fetching thread) while under [`bounce_cap`]; else the most recently
/// used one, whose copy `StagingSlot::host` then waits for.
fn bounce(source: SlabSource, len: usize) -> Result<Bounce> {
    {
        let mut free = BOUNCES.lock().unwrap_or_else(|p| p.into_inner());
        let fits = |b: &Bounce| b.device == source.device && b.slot.len() >= len;
        let mut found = free.iter_mut().rposition(|b| fits(b) && b.slot.idle_now());
        if found.is_none() && BOUNCES_MADE.load(Ordering::Relaxed) >= bounce_cap() {
            found = free.iter().rposition(fits);
        }
        if let Some(i) = found {
            return Ok(free.remove(i));
        }
    }
    let made = (|| {
        let _bound = source.rt.bind(source.device)?;
        let buf = super::bounce_pool::pinned_slab(source.rt, source.bytes_for(len))?;
        let event = Event::new(source.rt, source.device)?;
        Ok(Bounce {
            slot: StagingSlot::new(buf, event),
            stream: Stream::new(source.rt, source.device)?,
            device: source.device,
        })
    })();
    if made.is_ok() {
        BOUNCES_MADE.fetch_add(1, Ordering::Relaxed);
    }
    made
}

/// Gives a bounce slab back, its copy possibly still running (one whose
/// copy can never be waited for is dropped, and leaked there).
fn give_bounce(b: Bounce) {
    if !b.slot.poisoned() {
        BOUNCES.lock().unwrap_or_else(|p| p.into_inner()).push(b);
    }
}

/// Where new readahead slabs come from: device memory of `rt` on
/// `device` (and pinned bounce slabs for copies to it), `slab` bytes each.
#[derive(Clone, Copy)]
pub(crate) struct SlabSource {
    pub rt: &'static dyn GpuRuntime,
    pub device: i32,
    pub slab: usize,
}

impl SlabSource {
    /// The bytes of the slab a chunk of `len` bytes takes: a whole slab,
    /// or the chunk where it is larger.
    fn bytes_for(self, len: usize) -> usize {
        self.slab.max(len)
    }
}

/// One chunk fetched (or being fetched) ahead.
pub(crate) struct Piece {
    off: u64,
    len: usize,
    /// Device bytes its slab counts against the window's cap.
    held: usize,
    asked: Instant,
    /// The file's write counter, and its value when the piece was asked for.
    writes: (&'static AtomicU64, u64),
    state: Mutex<PieceState>,
    done: Condvar,
}

enum PieceState {
    Fetching,
    /// The slab, what the read gave, and when it ended.
    Fetched(AheadSlab, Result<usize>, Instant),
    /// No slab could be had, or the fetch never ran to its end.
    Failed,
    Taken,
}

/// What a reader got from a piece: the device slab (holding `got` bytes)
/// to copy from, and give back with [`Fetched::finish`] once the copy
/// completed.
pub(crate) struct Fetched {
    slab: AheadSlab,
    /// Bytes the slab holds (fewer than asked: end of file).
    pub got: usize,
}

impl Fetched {
    /// The slot to copy from.
    pub(crate) fn slot(&mut self) -> &mut DeviceSlot {
        &mut self.slab.slot
    }
    /// Back to the pool once the copy from it completed (the caller has
    /// the device bound; a slab whose copy cannot be waited for is
    /// dropped, and `DeviceSlot` leaks it rather than free it under a
    /// copy).
    pub(crate) fn finish(self) {
        stats::record_readahead(self.got, 0);
        give_slab(self.slab);
    }
}

impl Piece {
    /// Waits for the fetch, then takes it if it may still be used.
    fn take(&self) -> Option<Fetched> {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        while matches!(*st, PieceState::Fetching) {
            st = self.done.wait(st).unwrap_or_else(|p| p.into_inner());
        }
        let PieceState::Fetched(slab, got, at) = std::mem::replace(&mut *st, PieceState::Taken)
        else {
            return None;
        };
        drop(st);
        let (counter, then) = self.writes;
        let fresh = at.elapsed() <= MAX_AGE && counter.load(Ordering::SeqCst) == then;
        match got {
            Ok(got) if fresh => Some(Fetched { slab, got }),
            got => {
                discard(slab, &got);
                None
            }
        }
    }

    /// Whether its fetch ended too long ago for the bytes to be used.
    fn stale(&self) -> bool {
        let st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        matches!(*st, PieceState::Fetched(_, _, at) if at.elapsed() > MAX_AGE)
    }

    fn finish(&self, slab: AheadSlab, got: Result<usize>) {
        *self.state.lock().unwrap_or_else(|p| p.into_inner()) =
            PieceState::Fetched(slab, got, Instant::now());
        self.done.notify_all();
    }

    fn fail(&self) {
        *self.state.lock().unwrap_or_else(|p| p.into_inner()) = PieceState::Failed;
        self.done.notify_all();
    }
}

impl Drop for Piece {
    fn drop(&mut self) {
        // Fetched and never used: the slab goes back.
        let st = std::mem::replace(
            self.state.get_mut().unwrap_or_else(|p| p.into_inner()),
            PieceState::Taken,
        );
        if let PieceState::Fetched(slab, got, _) = st {
            discard(slab, &got);
        }
    }
}

/// Reads `piece` with `fs` through a bounce slab into the device slab
/// `slab` gives, and hands the result to the piece (whatever happens: a
/// reader may be waiting for it).
fn fetch(fs: &dyn UserspaceFs, piece: &Piece, slab: SlabFor, source: SlabSource) {
    let done = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut slab = match slab.get() {
            Ok(s) => s,
            Err(e) => {
                log::debug!("no device slab for readahead: {e}");
                return false;
            }
        };
        if fs.places_device_chunks() {
            // The filesystem puts the bytes in the device slab itself
            // (hipfs over TCP with lane staging): no bounce slab.
            let at = LentDevice::vouched(slab.slot.device_ptr(), piece.len);
            let got = read_into_device(fs, at, piece.off);
            if matches!(got, Ok(0)) {
                give_slab(slab);
                return false;
            }
            piece.finish(slab, got);
            return true;
        }
        let mut b = match bounce(source, piece.len) {
            Ok(b) => b,
            Err(e) => {
                log::debug!("no pinned bounce slab for readahead: {e}");
                give_slab(slab);
                return false;
            }
        };
        let got = (b.slot.host(piece.len)).and_then(|dst| read_into(fs, dst, piece.off));
        let got = match got {
            Ok(0) => {
                // End of file: nothing to hold a slab for; the reader asks
                // itself (and learns the same).
                give_bounce(b);
                give_slab(slab);
                return false;
            }
            // Handed over as soon as the copy to the device slab is
            // enqueued: the reader's copy out of the slab waits for it
            // (`DeviceSlot::copy_to_device`), and the bounce slab goes back
            // with its copy still running (`bounce` takes one whose copy
            // ended). Waiting here spun this thread for every chunk's copy
            // (0.65-0.8 CPU s per 12 GiB read on a 16-vCPU GPU machine);
            // the reader's wait took back about a third of that (README,
            // "Where the time goes").
            Ok(n) => b.slot.copy_to_slot(&mut slab.slot, n, &b.stream).map(|_| n),
            Err(e) => Err(e),
        };
        give_bounce(b);
        piece.finish(slab, got);
        true
    }));
    if !matches!(done, Ok(true)) {
        piece.fail();
    }
}

/// The readahead of one registered file.
pub struct Readahead {
    win: Arc<Mutex<Window>>,
    /// The file's write counter.
    writes: &'static AtomicU64,
}

#[derive(Default)]
struct Window {
    /// Where the last read ended: a read starting there is sequential.
    last_end: Option<u64>,
    /// Chunks fetched for the reads expected next, by file offset.
    pieces: HashMap<u64, Arc<Piece>>,
    /// Where the fetches have got to, once the window has any.
    frontier: Option<Frontier>,
    /// Slab bytes the window may hold now: one read's when a run starts,
    /// doubled by each read that continues it, up to the cap.
    reach: usize,
}

/// A window's reach for a read whose chunks take `one_read` slab bytes:
/// one read ahead when its run starts (`reach` 0), then twice the last
/// reach, never more than `cap`. A short run wastes little; a long one
/// soon keeps the whole window in flight.
fn grown(reach: usize, one_read: usize, cap: usize) -> usize {
    reach.saturating_mul(2).max(one_read).min(cap)
}

/// The next chunk a window would fetch: chunk `index` of the expected read
/// of `size` bytes at `read`, cut into chunks of `chunk` bytes; and the
/// file's write counter when the window's pieces were asked for.
#[derive(Clone, Copy)]
struct Frontier {
    read: u64,
    size: usize,
    chunk: usize,
    index: usize,
    writes: u64,
}

/// A read's view of the readahead: the chunks fetched for it, and whether
/// it continues a sequential run (then it fetches for the next read).
pub(crate) struct Begun {
    pieces: HashMap<u64, Arc<Piece>>,
    pub sequential: bool,
}

impl Begun {
    /// The fetched chunk at `off` of `len` bytes, if there is one that may
    /// be used (waits for its fetch to end).
    pub(crate) fn take(&self, off: u64, len: usize) -> Option<Fetched> {
        self.pieces
            .get(&off)
            .filter(|p| p.len == len)
            .and_then(|p| p.take())
    }
}

impl Readahead {
    /// The readahead of the file `fs` serves.
    pub(crate) fn new(fs: &dyn UserspaceFs) -> Readahead {
        let win = Arc::new(Mutex::default());
        let mut all = WINDOWS.lock().unwrap_or_else(|p| p.into_inner());
        all.retain(|w| w.strong_count() > 0);
        all.push(Arc::downgrade(&win));
        drop(all);
        Readahead {
            win,
            writes: write_slot(fs),
        }
    }

    /// Says that a write to this file went through the library: what was
    /// fetched of it so far is not used.
    pub(crate) fn note_write(&self) {
        self.writes.fetch_add(1, Ordering::SeqCst);
    }

    /// A read of `size` bytes at `off` begins: takes what was fetched for
    /// it. What was fetched past it stays in the window if the read
    /// continues the run; everything else is dropped.
    pub(crate) fn begin(&self, off: u64, size: usize) -> Begun {
        let end = off + size as u64;
        let mut w = self.win.lock().unwrap_or_else(|p| p.into_inner());
        // A run starts at the file's start or where the last read ended;
        // only the second keeps what the window fetched further on.
        let continues = w.last_end == Some(off);
        w.last_end = Some(end);
        if !continues {
            w.frontier = None;
            w.reach = 0;
        }
        let mut mine = HashMap::new();
        let mut dropped = Vec::new();
        for (at, piece) in std::mem::take(&mut w.pieces) {
            if (off..end).contains(&at) {
                mine.insert(at, piece);
            } else if continues && at >= end {
                w.pieces.insert(at, piece);
            } else {
                dropped.push(piece);
            }
        }
        drop(w);
        // Dropped with no lock held: a fetched piece gives its slab back.
        drop(dropped);
        Begun {
            pieces: mine,
            sequential: off == 0 || continues,
        }
    }

    /// Fetches, in the background, the chunks of `chunk` bytes that the
    /// reads of `size` bytes from `next` on would have, into slabs from
    /// `slabs`, until the window holds its cap; unless a read has begun
    /// since or readahead is off. Goes on from where the window's fetches
    /// got to while they still serve such reads; otherwise drops them and
    /// starts at `next`.
    pub(crate) fn launch(
        &self,
        fs: &Arc<dyn UserspaceFs>,
        slabs: SlabSource,
        next: u64,
        size: usize,
        chunk: usize,
    ) {
        let cap = window_cap();
        let writes_now = self.writes.load(Ordering::SeqCst);
        let mut w = self.win.lock().unwrap_or_else(|p| p.into_inner());
        if w.last_end != Some(next) || size == 0 {
            // Another read of this file came in between.
            return;
        }
        let resume = w.frontier.filter(|f| {
            (f.size, f.chunk, f.writes) == (size, chunk, writes_now)
                && f.read >= next
                && (f.read - next).is_multiple_of(size as u64)
                && !w.pieces.values().any(|p| p.stale())
        });
        let mut dropped = Vec::new();
        let mut at = resume.unwrap_or_else(|| {
            dropped.extend(w.pieces.drain().map(|(_, p)| p));
            Frontier {
                read: next,
                size,
                chunk,
                index: 0,
                writes: writes_now,
            }
        });
        let writes = (self.writes, writes_now);
        let next_read = Chunks::new(next, size, chunk);
        let one_read = (0..next_read.count())
            .map(|i| slabs.bytes_for(next_read.get(i).1))
            .sum();
        w.reach = grown(w.reach, one_read, cap);
        let reach = w.reach;
        let mut held: usize = w.pieces.values().map(|p| p.held).sum();
        loop {
            let chunks = Chunks::new(at.read, size, chunk);
            if at.index == chunks.count() {
                at.read += size as u64;
                at.index = 0;
                continue;
            }
            let (off, len, _) = chunks.get(at.index);
            let hold = slabs.bytes_for(len);
            if held + hold > reach {
                break;
            }
            let Some(s) = slab_for(slabs, len) else {
                break;
            };
            held += hold;
            at.index += 1;
            let piece = Arc::new(Piece {
                off,
                len,
                held: hold,
                asked: Instant::now(),
                writes,
                state: Mutex::new(PieceState::Fetching),
                done: Condvar::new(),
            });
            w.pieces.insert(off, piece.clone());
            let fs = fs.clone();
            submit(Box::new(move || fetch(&*fs, &piece, s, slabs)));
        }
        w.frontier = Some(at);
        drop(w);
        drop(dropped);
    }
}

/// The fetching threads, for all windows together. Not shared with the
/// batch pool: a batch operation may wait on these fetches.
static FETCHERS: JobPool = JobPool::new(|_| "hipfs-ahead".into());

fn submit(job: Job) {
    if let Err(job) = FETCHERS.submit(job, max_threads()) {
        // No thread to run it: run it here (a job always ends, so no
        // reader waits for a fetch that never comes).
        log::debug!("cannot start a readahead thread; fetching inline");
        job();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::userspace::UserspaceBuf;

    struct Named(&'static str);
    impl UserspaceFs for Named {
        fn fs_type(&self) -> String {
            "test".into()
        }
        fn identify(&self) -> String {
            self.0.into()
        }
        fn read(&self, _: UserspaceBuf, _: u64) -> Result<usize> {
            Ok(0)
        }
        fn write(&self, _: UserspaceBuf, _: u64) -> Result<usize> {
            Ok(0)
        }
    }

    #[test]
    fn handles_of_one_file_share_its_write_counter() {
        let (a, b) = (Readahead::new(&Named("x/1")), Readahead::new(&Named("x/1")));
        let before = b.writes.load(Ordering::SeqCst);
        a.note_write();
        assert_eq!(b.writes.load(Ordering::SeqCst), before + 1);
    }

    #[test]
    fn the_reach_starts_at_one_read_and_doubles_up_to_the_cap() {
        const M: usize = 1 << 20;
        let mut reach = 0;
        let mut seen = Vec::new();
        for _ in 0..6 {
            reach = grown(reach, 4 * M, 64 * M);
            seen.push(reach / M);
        }
        assert_eq!(seen, [4, 8, 16, 32, 64, 64]);
        // A read larger than the cap: the cap.
        assert_eq!(grown(0, 256 * M, 64 * M), 64 * M);
        // A run that goes on with larger reads: at least one of them.
        assert_eq!(grown(8 * M, 64 * M, 64 * M), 64 * M);
    }

    #[test]
    fn a_run_starts_at_zero_or_where_the_last_read_ended() {
        let ra = Readahead::new(&Named("y"));
        assert!(ra.begin(0, 100).sequential);
        assert!(ra.begin(100, 50).sequential);
        assert!(!ra.begin(500, 50).sequential);
        assert!(ra.begin(550, 50).sequential);
    }
}
