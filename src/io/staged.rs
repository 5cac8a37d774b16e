//! Device memory to and from a local file, or a userspace filesystem
//! without RDMA registration (UserspaceFs over TCP): the pipelined bounce
//! path. For a userspace filesystem the filesystem fills each slab where a
//! file read would.
//!
//! Several workers each hold a lane (a stream and `depth` pinned slabs,
//! see `bounce_pool`). Reading, a worker claims the next chunk, waits until
//! the GPU has finished with its next slab, reads the file into that slab
//! (a page-cache copy, or O_DIRECT for uncached pages) and enqueues the
//! host-to-device copy on its stream, so its file reads overlap its copies
//! and the workers' copies overlap one another. Writing is the reverse: the
//! device-to-host copy of the next chunk runs while the current one is
//! written to the file. Where the runtime has a peer-to-peer file path
//! (AMD's `hipAmdFileRead`), aligned requests try that first.

use super::bounce_pool::{self, Lane, Plan, Profile};
use super::host_path::{read_range, write_range};
use super::posix::{PosixFile, MAX_RW_COUNT};
use super::readahead::{self, Begun, SlabSource};
use super::UserspaceFile;
use super::{chunk_results, contiguous_prefix, workers, Chunks, Dir, Request};
use crate::config::Config;
use crate::error::{Error, OpError, Result};
use crate::gpu::{self, GpuRuntime, LentDevice};
use crate::lent::LentSpan;
use crate::stats::{self, IoPath};
use crate::userspace::{read_into, read_into_device, UserspaceBuf, UserspaceFs, UserspaceMem};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Instant;

/// Moves one request between device memory and a local file.
pub(crate) fn transfer(pf: &PosixFile, req: &Request, config: &Config) -> Result<usize> {
    let rt = gpu::runtime();
    if let Some(n) = try_p2p(rt, pf, req)? {
        return Ok(n);
    }
    let plan = Plan::new(config, pf.offset_align);
    pipeline(rt, &Source::File(pf), req, plan, None)
}

/// A userspace filesystem with device memory and no RDMA registration:
/// the same pinned pipeline, the filesystem filling (or draining) each
/// slab while the copy engine moves the slabs before it. One worker per
/// request the filesystem can serve at once. Reads keep the network busy
/// across requests with `file`'s readahead (see `readahead`).
pub(crate) fn userspace_transfer(
    file: &UserspaceFile,
    req: &Request,
    config: &Config,
) -> Result<usize> {
    let rt = gpu::runtime();
    let fs = &*file.fs;
    let mut plan = Plan::new(config, 4096);
    // Same slabs as the file path (the pool keeps one shape); the pinned
    // budget still caps the lanes.
    plan.workers = fs.parallelism().clamp(1, 64);
    let reads_ahead = req.dir == Dir::Read && fs.reads_ahead() && readahead::enabled();
    let ahead = reads_ahead.then(|| Ahead {
        file,
        begun: file.ahead.begin(req.file_offset, req.size),
        launched: AtomicBool::new(false),
    });
    pipeline(rt, &Source::Userspace(fs), req, plan, ahead.as_ref())
}

/// A staged read's readahead: what was fetched for it, and whether it has
/// started fetching for the next read.
struct Ahead<'a> {
    file: &'a UserspaceFile,
    begun: Begun,
    launched: AtomicBool,
}

/// Where the bytes of a staged request come from (reads) or go (writes).
enum Source<'a> {
    File(&'a PosixFile),
    Userspace(&'a dyn UserspaceFs),
}

impl Source<'_> {
    /// Fills `dst` from offset `off`.
    fn fill(&self, dst: &mut [u8], off: u64) -> Result<usize> {
        match self {
            Source::File(pf) => read_range(pf, dst, off),
            Source::Userspace(fs) => read_into(*fs, dst, off),
        }
    }

    /// Writes `src` to offset `off`.
    fn drain(&self, src: &[u8], off: u64) -> Result<usize> {
        match self {
            Source::File(pf) => write_range(pf, src, off),
            Source::Userspace(fs) => {
                // A write only reads the bytes (the UserspaceFs contract).
                let buf = UserspaceBuf::vouched(UserspaceMem::Host {
                    ptr: src.as_ptr().cast_mut(),
                    len: src.len(),
                });
                fs.write(buf, off)
            }
        }
    }

    /// The filesystem, if it places reads into device memory chunks
    /// itself (`UserspaceFs::places_device_chunks`).
    fn places_device_chunks(&self) -> Option<&dyn UserspaceFs> {
        match self {
            Source::Userspace(fs) if fs.places_device_chunks() => Some(*fs),
            _ => None,
        }
    }

    /// The counter its bytes go to.
    fn path(&self) -> IoPath {
        match self {
            Source::File(_) => IoPath::Staged,
            Source::Userspace(_) => IoPath::Remote,
        }
    }
}

/// The bounce pipeline between device memory and `src`.
fn pipeline(
    rt: &'static dyn GpuRuntime,
    src: &Source,
    req: &Request,
    plan: Plan,
    ahead: Option<&Ahead>,
) -> Result<usize> {
    let info = gpu::classify(req.mem);
    let device = info.device.max(0);
    // Chunks sit at multiples of their size in the file, so all but the
    // first and last are aligned for O_DIRECT.
    // A read in a sequential run moves whole slabs: readahead overlaps one
    // request's end with the next one's start, which is what smaller
    // chunks were for, and larger pieces carry more per round trip.
    let chunk = match ahead {
        Some(a) if a.begun.sequential && !split_ahead() => plan.slab,
        _ => chunk_len(req.size, &plan),
    };
    let chunks = Chunks::new(req.file_offset, req.size, chunk);
    let n = chunks.count();
    let bounds = |i: usize| chunks.get(i);
    let wanted = Plan {
        workers: plan.workers.min(n),
        ..plan
    };
    let lanes = bounce_pool::acquire(rt, device, &wanted)?;
    let results = chunk_results(&chunks);
    let fatal: Mutex<Option<Error>> = Mutex::new(None);
    let next = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    let job = Job {
        rt,
        src,
        req,
        n,
        bounds: &bounds,
        results: &results,
        next: &next,
        stop: &stop,
        ahead,
        chunk,
        slab: plan.slab,
        placer: src.places_device_chunks(),
    };
    workers::run_parallel(lanes.lanes.len(), &|w| {
        let mut lane = lanes.lanes[w].lock().unwrap_or_else(|p| p.into_inner());
        let r = match req.dir {
            Dir::Read => job.read_worker(&mut lane),
            Dir::Write => job.write_worker(&mut lane),
        };
        if let Err(e) = r {
            stop.store(true, Ordering::Relaxed);
            fatal
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get_or_insert(e);
        }
    })?;
    drop(lanes);
    if let Some(e) = fatal.into_inner().unwrap_or_else(|p| p.into_inner()) {
        // The GPU side failed: which bytes arrived is unknown.
        return Err(e);
    }
    contiguous_prefix(&chunks, results)
}

/// `HIPFS_READAHEAD_SPLIT=1`: reads in a sequential run are cut as
/// [`chunk_len`] cuts others (for measuring; read once).
fn split_ahead() -> bool {
    static V: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *V.get_or_init(|| std::env::var("HIPFS_READAHEAD_SPLIT").is_ok_and(|v| v.trim() == "1"))
}

/// Bytes per chunk of a `size`-byte request: the slab, unless the request
/// spans several workers yet is too small to give each of them `depth`
/// chunks. Then smaller chunks (1 MiB at least, whole MiBs), so that each
/// worker's slabs take turns within the request: the copy of one chunk
/// runs while the next is read, instead of every worker reading one chunk
/// and all copies running after the last byte arrived. On the H200 a
/// 64 MiB read over TCP by 16 workers went from 15.98 to 17.36 GiB/s.
/// A request of one slab stays whole: its caller's other requests overlap
/// its copy, and halving it only adds a read and a copy (KvikIO's 4 MiB
/// tasks through libcufile fell from 41.9 to 36.5 GiB/s when halved).
fn chunk_len(size: usize, plan: &Plan) -> usize {
    const MIB: usize = 1 << 20;
    let workers = plan.workers.clamp(1, size.div_ceil(plan.slab).max(1));
    let wanted = workers * plan.depth.max(1);
    if workers == 1 || size.div_ceil(plan.slab) >= wanted || plan.slab <= MIB {
        return plan.slab;
    }
    size.div_ceil(wanted)
        .div_ceil(MIB)
        .saturating_mul(MIB)
        .clamp(MIB, plan.slab)
}

/// Makes the bounce lanes that reads into a buffer on `device` will use,
/// so the first read does not pay for pinning memory and making streams.
/// Meant for `Buffer::register` of device memory, with the active
/// configuration; a no-op without a GPU.
pub fn prepare(device: i32, config: &Config) -> Result<()> {
    let rt = gpu::runtime();
    if rt.device_count() == 0 {
        return Ok(());
    }
    let plan = Plan::new(config, 4096);
    drop(bounce_pool::acquire(rt, device.max(0), &plan)?);
    Ok(())
}

/// What every worker of one request shares.
struct Job<'a> {
    rt: &'static dyn GpuRuntime,
    src: &'a Source<'a>,
    req: &'a Request,
    n: usize,
    bounds: &'a (dyn Fn(usize) -> (u64, usize, usize) + Sync),
    results: &'a [Mutex<Option<Result<usize>>>],
    next: &'a AtomicUsize,
    stop: &'a AtomicBool,
    ahead: Option<&'a Ahead<'a>>,
    /// Bytes per chunk, and per new slab.
    chunk: usize,
    slab: usize,
    /// The filesystem, when it places chunks in device memory itself
    /// (asked once per request): workers then use no slab.
    placer: Option<&'a dyn UserspaceFs>,
}

fn ns(t: Instant) -> u64 {
    t.elapsed().as_nanos() as u64
}

impl Job<'_> {
    /// `len` bytes at `m` in the request's device memory.
    fn device_range(&self, m: usize, len: usize) -> Result<LentDevice> {
        LentSpan::of_request(self.req.mem, self.req.size)
            .device_range(m, len)
            .ok_or_else(|| {
                Error::new(
                    OpError::InternalError,
                    format!("chunk at {m} of {len} bytes is past the request"),
                )
            })
    }

    fn claim(&self) -> Option<usize> {
        if self.stop.load(Ordering::Relaxed) {
            return None;
        }
        let i = self.next.fetch_add(1, Ordering::Relaxed);
        (i < self.n).then_some(i)
    }

    fn put(&self, i: usize, r: Result<usize>, len: usize) {
        if !matches!(r, Ok(got) if got == len) {
            // End of file or an error: later chunks are moot.
            self.stop.store(true, Ordering::Relaxed);
        }
        *self.results[i].lock().unwrap_or_else(|p| p.into_inner()) = Some(r);
    }

    /// File → slab → device. An `Err` is a GPU failure (fatal); file errors
    /// are recorded per chunk.
    fn read_worker(&self, lane: &mut Lane) -> Result<()> {
        let rt = self.rt;
        let _bound = rt.bind(lane.device)?;
        let mut prof = Profile::default();
        let depth = lane.slots.len();
        let mut k = 0usize;
        // Slabs fetched ahead that this worker copied from: they go back
        // once its stream has run the copies.
        let mut used = Vec::new();
        while let Some(i) = self.claim() {
            let (off, len, m) = (self.bounds)(i);
            let t = Instant::now();
            if let Some(mut f) = self.ahead.and_then(|a| a.begun.take(off, len)) {
                prof.file_ns += ns(t);
                prof.ahead += 1;
                let got = f.got;
                self.deliver(m, got, &mut prof, |dst| {
                    f.slot().copy_to_device(dst, &lane.stream)
                })?;
                used.push(f);
                self.put(i, Ok(got), len);
                continue;
            }
            if let Some(fs) = self.placer {
                // The filesystem puts the chunk in the request's device
                // memory itself (hipfs over TCP with lane staging), and
                // has when `read` returns: no slab, nothing to enqueue.
                let t = Instant::now();
                let r = read_into_device(fs, self.device_range(m, len)?, off);
                prof.file_ns += ns(t);
                if let Ok(got) = r {
                    self.deliver(m, got, &mut prof, |_| Ok(()))?;
                }
                self.put(i, r, len);
                continue;
            }
            let slot = &mut lane.slots[k % depth];
            k += 1;
            let t = Instant::now();
            slot.wait()?;
            prof.wait_ns += ns(t);
            let t = Instant::now();
            // The GPU is done with the slab (waited just above); it holds
            // plan.slab >= len bytes.
            let r = slot.host(len).and_then(|dst| self.src.fill(dst, off));
            prof.file_ns += ns(t);
            if let Ok(got) = r {
                self.deliver(m, got, &mut prof, |dst| {
                    slot.copy_to_device(dst, &lane.stream)
                })?;
            }
            self.put(i, r, len);
        }
        self.read_ahead(lane.device);
        let t = Instant::now();
        lane.stream.synchronize()?;
        prof.wait_ns += ns(t);
        for f in used {
            f.finish();
        }
        bounce_pool::add_profile(&prof);
        Ok(())
    }

    /// Enqueues, with `copy`, the copy of a chunk's `got` bytes to offset
    /// `m` of the request's device memory, and counts the chunk.
    fn deliver(
        &self,
        m: usize,
        got: usize,
        prof: &mut Profile,
        copy: impl FnOnce(LentDevice) -> Result<()>,
    ) -> Result<()> {
        if got > 0 {
            let t = Instant::now();
            copy(self.device_range(m, got)?)?;
            prof.enqueue_ns += ns(t);
            stats::record_read(self.src.path(), got);
        }
        prof.chunks += 1;
        Ok(())
    }

    /// The first worker out of chunks of a sequential read that went well
    /// so far starts fetching the next read's chunks, while the others
    /// finish this one's.
    fn read_ahead(&self, device: i32) {
        let Some(a) = self.ahead else { return };
        if !a.begun.sequential
            || self.stop.load(Ordering::Relaxed)
            || a.launched.swap(true, Ordering::Relaxed)
        {
            return;
        }
        let next = self.req.file_offset + self.req.size as u64;
        let slabs = SlabSource {
            rt: self.rt,
            device,
            slab: self.slab,
        };
        a.file
            .ahead
            .launch(&a.file.fs, slabs, next, self.req.size, self.chunk);
    }

    /// Device → slab → file, the next chunk's copy overlapping this chunk's write.
    fn write_worker(&self, lane: &mut Lane) -> Result<()> {
        let rt = self.rt;
        let _bound = rt.bind(lane.device)?;
        let mut prof = Profile::default();
        let depth = lane.slots.len();
        let mut k = 0usize;
        // Chunks whose copy is enqueued and whose write is still to do.
        let mut queued: std::collections::VecDeque<(usize, usize)> = Default::default();
        loop {
            // Keep every slab busy: while one is written to the file, the
            // others' device-to-host copies run.
            while queued.len() < depth {
                let Some(i) = self.claim() else { break };
                let (_, len, m) = (self.bounds)(i);
                let s = k % depth;
                k += 1;
                let slot = &mut lane.slots[s];
                let t = Instant::now();
                // This slab's previous write to the file finished (writes
                // are synchronous), so the copy may overwrite it.
                let src = self.device_range(m, len)?;
                slot.copy_from_device(src, &lane.stream)?;
                prof.enqueue_ns += ns(t);
                queued.push_back((i, s));
            }
            let Some((i, s)) = queued.pop_front() else {
                break;
            };
            let (off, len, _) = (self.bounds)(i);
            let slot = &mut lane.slots[s];
            let t = Instant::now();
            slot.wait()?;
            prof.wait_ns += ns(t);
            let t = Instant::now();
            // The slab holds len bytes copied from the device (waited above).
            let r = slot.host(len).and_then(|src| self.src.drain(&*src, off));
            prof.file_ns += ns(t);
            if let Ok(put) = r {
                stats::record_write(self.src.path(), put);
                prof.chunks += 1;
            }
            self.put(i, r, len);
        }
        bounce_pool::add_profile(&prof);
        Ok(())
    }
}

/// The runtime's peer-to-peer file path, for requests it can take whole:
/// an O_DIRECT fd, offset, size and address aligned as the filesystem
/// wants. `None`: not taken (or the runtime said it cannot), so bounce.
fn try_p2p(rt: &dyn GpuRuntime, pf: &PosixFile, req: &Request) -> Result<Option<usize>> {
    let Some(p2p) = rt.p2p_file_io() else {
        return Ok(None);
    };
    let Some(fd) = pf.direct_fd() else {
        return Ok(None);
    };
    let align = pf.offset_align as u64;
    let aligned = req.file_offset.is_multiple_of(align)
        && (req.size as u64).is_multiple_of(align)
        && req.mem.is_multiple_of(pf.mem_align.max(1));
    if !aligned {
        return Ok(None);
    }
    let max = (MAX_RW_COUNT as u64 / align * align) as usize;
    let mut done = 0usize;
    while done < req.size {
        let len = (req.size - done).min(max);
        let off = req.file_offset + done as u64;
        let r = match req.dir {
            Dir::Read => p2p.read(fd, req.mem + done, len, off)?,
            Dir::Write => p2p.write(fd, req.mem + done, len, off)?,
        };
        match r {
            // Refused before anything moved: the bounce path does it all.
            None if done == 0 => return Ok(None),
            None => {
                return Err(Error::new(
                    OpError::HipDriverError,
                    "the peer-to-peer file path stopped working in the middle of a request",
                ))
            }
            Some(got) => {
                match req.dir {
                    Dir::Read => stats::record_read(IoPath::Direct, got),
                    Dir::Write => stats::record_write(IoPath::Direct, got),
                }
                done += got;
                if got < len {
                    break;
                }
            }
        }
    }
    Ok(Some(done))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::bounce_pool::PinMode;

    const MIB: usize = 1 << 20;

    fn plan(workers: usize) -> Plan {
        Plan {
            slab: 4 * MIB,
            depth: 2,
            workers,
            max_lanes: 16,
            pin: PinMode::Alloc,
        }
    }

    #[test]
    fn large_requests_move_whole_slabs() {
        assert_eq!(chunk_len(8 << 30, &plan(16)), 4 * MIB);
        // 64 MiB over 8 workers already gives each worker two slabs.
        assert_eq!(chunk_len(64 * MIB, &plan(8)), 4 * MIB);
    }

    #[test]
    fn small_requests_split_so_each_workers_slabs_take_turns() {
        // 64 MiB over 16 workers: two 2 MiB chunks each, not one of 4.
        assert_eq!(chunk_len(64 * MIB, &plan(16)), 2 * MIB);
        // 16 MiB: four workers, two 2 MiB chunks each.
        assert_eq!(chunk_len(16 * MIB, &plan(16)), 2 * MIB);
    }

    #[test]
    fn a_request_of_one_slab_stays_whole() {
        assert_eq!(chunk_len(4 * MIB, &plan(16)), 4 * MIB);
        assert_eq!(chunk_len(3 * MIB + 5, &plan(16)), 4 * MIB);
        assert_eq!(chunk_len(4096, &plan(16)), 4 * MIB);
    }

    #[test]
    fn chunks_stay_whole_mibs_of_at_least_one() {
        // 5 MiB on two workers: four chunks of 2 MiB at most, whole MiBs.
        assert_eq!(chunk_len(5 * MIB, &plan(16)), 2 * MIB);
        // 9 MiB on three workers wants six chunks: 2 MiB each (1.5 rounded up).
        assert_eq!(chunk_len(9 * MIB, &plan(16)), 2 * MIB);
        // 6 MiB on two workers wants four: 2 MiB (1.5 rounded up).
        assert_eq!(chunk_len(6 * MIB, &plan(16)), 2 * MIB);
        let tiny_slab = Plan {
            slab: 512 << 10,
            ..plan(4)
        };
        assert_eq!(chunk_len(64 * MIB, &tiny_slab), 512 << 10);
    }
}
