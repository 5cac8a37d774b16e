//! The pinned bounce buffers of the device path, grouped in lanes: a lane is
//! one worker's stream and its `depth` pinned slabs, each with an event that
//! says when the GPU is done with it. Lanes are made on first use, kept
//! for reuse (making streams and pinning memory is slow), and bounded in
//! total by `PropertiesMaxDeviceCacheSizeKB`, so many concurrent requests
//! share them instead of pinning without limit.
//!
//! Two tunables for measurements live here (read once from the environment):
//! `HIPFS_BOUNCE_DEPTH` (slabs per lane, default 2) and `HIPFS_BOUNCE_PIN`
//! (`alloc`: the runtime's pinned allocator, the default; `register`:
//! anonymous memory advised to use transparent huge pages, then pinned by
//! the runtime, which makes the CPU's copy into it touch fewer TLB entries).
//! The pin mode holds for the lanes' slabs here and readahead's bounce
//! slabs ([`pinned_slab`]).

use crate::config::{Config, SizeTParam};
use crate::error::{Error, OpError, Result};
use crate::gpu::{Event, GpuRuntime, PinnedHost, Stream};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, OnceLock};

/// How slabs are pinned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PinMode {
    /// The runtime's pinned allocator (`cuMemHostAlloc`).
    Alloc,
    /// `mmap` + `MADV_HUGEPAGE`, then `cuMemHostRegister`.
    Register,
}

struct Tunables {
    depth: usize,
    pin: PinMode,
}

fn tunables() -> &'static Tunables {
    static T: OnceLock<Tunables> = OnceLock::new();
    T.get_or_init(|| {
        let depth = crate::config::env_usize("HIPFS_BOUNCE_DEPTH", 1..=8).unwrap_or(2);
        let pin = match std::env::var("HIPFS_BOUNCE_PIN")
            .ok()
            .as_deref()
            .map(str::trim)
        {
            Some("register") => PinMode::Register,
            Some("alloc") | None => PinMode::Alloc,
            Some(other) => {
                log::warn!("HIPFS_BOUNCE_PIN={other:?} is neither alloc nor register; using alloc");
                PinMode::Alloc
            }
        };
        Tunables { depth, pin }
    })
}

/// The shape of the pipeline for one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Plan {
    /// Bytes per slab (= per chunk a worker moves at once).
    pub slab: usize,
    /// Slabs per lane.
    pub depth: usize,
    /// Workers wanted.
    pub workers: usize,
    /// Lanes the pool may hold in total.
    pub max_lanes: usize,
    /// How slabs are pinned.
    pub pin: PinMode,
}

impl Plan {
    /// Whether lanes made for `other` fit this plan (slab size, depth and
    /// pinning; the worker count is per request and does not matter).
    fn same_shape(&self, other: &Plan) -> bool {
        (self.slab, self.depth, self.pin) == (other.slab, other.depth, other.pin)
    }

    /// Workers from `ExecutionMaxIOThreads`, chunk from
    /// `PropertiesMaxDirectIOSizeKB`, pinned total from
    /// `PropertiesMaxDeviceCacheSizeKB`. When the budget cannot give every
    /// worker `depth` chunk-sized slabs, slabs shrink (to 1 MiB at least)
    /// before workers are dropped: parallel copies out of the page cache
    /// are what makes this path fast.
    pub fn new(config: &Config, align: usize) -> Plan {
        let t = tunables();
        let align = align.max(4096);
        let budget = config
            .size(SizeTParam::PropertiesMaxDeviceCacheSizeKB)
            .saturating_mul(1024)
            .max(2 << 20);
        let workers = config.io_threads();
        let chunk = config.chunk_bytes();
        let fit = budget / (workers * t.depth);
        let slab = chunk.min(fit.max(1 << 20)).div_ceil(align) * align;
        let max_lanes = (budget / (slab * t.depth)).max(1);
        Plan {
            slab,
            depth: t.depth,
            workers,
            max_lanes,
            pin: t.pin,
        }
    }
}

/// Pinned host memory owned by the pool (freed on drop).
pub type PinnedBuf = PinnedHost;

fn pinned_buf(rt: &'static dyn GpuRuntime, len: usize, pin: PinMode) -> Result<PinnedBuf> {
    match pin {
        PinMode::Alloc => PinnedHost::alloc(rt, len),
        PinMode::Register => PinnedHost::map_and_register(rt, len),
    }
}

/// A pinned bounce slab of at least `len` bytes, pinned as
/// `HIPFS_BOUNCE_PIN` says (for slabs outside the lanes: readahead's).
pub(crate) fn pinned_slab(rt: &'static dyn GpuRuntime, len: usize) -> Result<PinnedBuf> {
    pinned_buf(rt, len, tunables().pin)
}

/// One slab and the event recorded after the last copy that used it.
pub type Slot = crate::gpu::StagingSlot;

/// One worker's stream and slabs. Everything is freed on drop, after the
/// stream has drained (nothing may still read a slab when it goes).
pub struct Lane {
    /// The device the stream and events belong to.
    pub device: i32,
    /// The slabs, each with its event. Declared before `stream`: fields
    /// drop in order, and the stream is destroyed last.
    pub slots: Vec<Slot>,
    /// The worker's stream.
    pub stream: Stream,
    rt: &'static dyn GpuRuntime,
    plan: Plan,
}

impl Lane {
    fn new(rt: &'static dyn GpuRuntime, device: i32, plan: Plan) -> Result<Lane> {
        let _bound = rt.bind(device)?;
        let stream = Stream::new(rt, device)?;
        // On an error below, what was made so far drops and frees itself.
        let mut slots = Vec::with_capacity(plan.depth);
        for _ in 0..plan.depth {
            let buf = pinned_buf(rt, plan.slab, plan.pin)?;
            let event = Event::new(rt, device)?;
            slots.push(Slot::new(buf, event));
        }
        Ok(Lane {
            device,
            slots,
            stream,
            rt,
            plan,
        })
    }
}

impl Drop for Lane {
    fn drop(&mut self) {
        // Wait for the copies still queued before the slabs are freed. When
        // the device cannot be bound (its context is gone) nothing of ours
        // can still run on it; the fields are freed all the same.
        match self.rt.bind(self.device) {
            Ok(_bound) => {
                if let Err(e) = self.stream.synchronize() {
                    log::warn!("draining a bounce lane before freeing it: {e}");
                }
            }
            Err(e) => log::warn!(
                "cannot bind device {} to drain a bounce lane: {e}",
                self.device
            ),
        }
    }
}

struct Pool {
    free: HashMap<i32, Vec<Lane>>,
    /// Lanes in existence (free or lent).
    live: usize,
}

static POOL: Mutex<Option<Pool>> = Mutex::new(None);
static RETURNED: Condvar = Condvar::new();

/// Lanes lent to one request; they go back to the pool on drop.
pub struct Lanes {
    rt: &'static dyn GpuRuntime,
    /// The lanes, one per worker.
    pub lanes: Vec<Mutex<Lane>>,
}

impl Drop for Lanes {
    fn drop(&mut self) {
        let mut guard = POOL.lock().unwrap_or_else(|p| p.into_inner());
        let pool = guard.get_or_insert_with(|| Pool {
            free: HashMap::new(),
            live: 0,
        });
        for l in self.lanes.drain(..) {
            let lane = l.into_inner().unwrap_or_else(|p| p.into_inner());
            pool.free.entry(lane.device).or_default().push(lane);
        }
        RETURNED.notify_all();
    }
}

/// Lends up to `plan.workers` lanes on `device` (at least one; waits for
/// one when the pool is at its limit). Lanes of another shape (the
/// parameters changed since they were made) are freed on the way.
pub fn acquire(rt: &'static dyn GpuRuntime, device: i32, plan: &Plan) -> Result<Lanes> {
    let mut out = Vec::new();
    let mut guard = POOL.lock().unwrap_or_else(|p| p.into_inner());
    loop {
        let pool = guard.get_or_insert_with(|| Pool {
            free: HashMap::new(),
            live: 0,
        });
        // Drop lanes of an old shape, from every device.
        let mut stale = Vec::new();
        for lanes in pool.free.values_mut() {
            let (keep, old): (Vec<Lane>, Vec<Lane>) =
                lanes.drain(..).partition(|l| l.plan.same_shape(plan));
            *lanes = keep;
            stale.extend(old);
        }
        pool.live -= stale.len();
        drop(stale);
        let free = pool.free.entry(device).or_default();
        while out.len() < plan.workers {
            match free.pop() {
                Some(l) => out.push(l),
                None => break,
            }
        }
        while out.len() < plan.workers && pool.live < plan.max_lanes {
            pool.live += 1;
            match Lane::new(rt, device, *plan) {
                Ok(l) => out.push(l),
                Err(e) => {
                    pool.live -= 1;
                    if out.is_empty() {
                        return Err(e);
                    }
                    log::warn!(
                        "making another bounce lane failed ({e}); going on with {}",
                        out.len()
                    );
                    break;
                }
            }
        }
        if !out.is_empty() {
            break;
        }
        if pool.live == 0 {
            return Err(Error::new(
                OpError::InternalError,
                "the bounce pool can make no lane",
            ));
        }
        // Every lane is lent: wait for one to come back.
        guard = RETURNED.wait(guard).unwrap_or_else(|p| p.into_inner());
    }
    Ok(Lanes {
        rt,
        lanes: out.into_iter().map(Mutex::new).collect(),
    })
}

impl Lanes {
    /// The runtime the lanes belong to.
    pub fn runtime(&self) -> &'static dyn GpuRuntime {
        self.rt
    }
}

/// Where the device path's workers spend their time, summed over workers
/// (nanoseconds): reading the file into slabs, waiting for the GPU to free
/// a slab or finish, and enqueueing copies.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Profile {
    /// Reading the file into slabs.
    pub file_ns: u64,
    /// Waiting for the GPU.
    pub wait_ns: u64,
    /// Enqueueing copies.
    pub enqueue_ns: u64,
    /// Chunks moved.
    pub chunks: u64,
    /// Of those, chunks fetched ahead (their network time is the wait
    /// for the fetch, in `file_ns`).
    pub ahead: u64,
}

static FILE_NS: AtomicU64 = AtomicU64::new(0);
static WAIT_NS: AtomicU64 = AtomicU64::new(0);
static ENQUEUE_NS: AtomicU64 = AtomicU64::new(0);
static CHUNKS: AtomicU64 = AtomicU64::new(0);
static AHEAD: AtomicU64 = AtomicU64::new(0);

/// Adds one worker's times.
pub(crate) fn add_profile(p: &Profile) {
    FILE_NS.fetch_add(p.file_ns, Ordering::Relaxed);
    WAIT_NS.fetch_add(p.wait_ns, Ordering::Relaxed);
    ENQUEUE_NS.fetch_add(p.enqueue_ns, Ordering::Relaxed);
    CHUNKS.fetch_add(p.chunks, Ordering::Relaxed);
    AHEAD.fetch_add(p.ahead, Ordering::Relaxed);
}

/// The times summed since the last call, and resets them.
pub fn take_profile() -> Profile {
    Profile {
        file_ns: FILE_NS.swap(0, Ordering::Relaxed),
        wait_ns: WAIT_NS.swap(0, Ordering::Relaxed),
        enqueue_ns: ENQUEUE_NS.swap(0, Ordering::Relaxed),
        chunks: CHUNKS.swap(0, Ordering::Relaxed),
        ahead: AHEAD.swap(0, Ordering::Relaxed),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slabs_shrink_to_give_every_worker_its_depth_within_the_budget() {
        let mut c = Config::default();
        c.set_size(SizeTParam::ExecutionMaxIOThreads, 16);
        c.set_size(SizeTParam::ExecutionMaxRequestParallelism, 16);
        c.set_size(SizeTParam::PropertiesMaxDirectIOSizeKB, 16384);
        c.set_size(SizeTParam::PropertiesMaxDeviceCacheSizeKB, 131072);
        let p = Plan::new(&c, 4096);
        assert_eq!(p.workers, 16);
        assert!(p.slab * p.depth * p.workers <= 128 << 20, "{p:?}");
        assert!(p.max_lanes >= 16, "{p:?}");
        assert_eq!(p.slab % 4096, 0);
    }

    #[test]
    fn a_tiny_budget_still_gives_one_lane_of_one_mib_slabs() {
        let mut c = Config::default();
        c.set_size(SizeTParam::PropertiesMaxDeviceCacheSizeKB, 1);
        let p = Plan::new(&c, 4096);
        assert_eq!(p.slab, 1 << 20);
        assert_eq!(p.max_lanes, 1);
    }
}
