//! Stream-ordered async I/O: a read or write is enqueued on a GPU stream
//! (as a host function) and happens when the stream reaches it, after the
//! work enqueued before it and before the work enqueued after it.
//!
//! Rules (the C ABI relies on these):
//! - Registration ([`stream_register`]) is an optimisation, as in cuFile and
//!   hipFile 0.5: I/O on a stream never registered acts as on one registered
//!   with flags 0. Registering a registered stream again is `InvalidValue`.
//! - The size, file offset and buffer offset are read when the stream runs
//!   the operation, unless the stream was registered with the matching
//!   `STREAM_FIXED_*` flag: then that value is read at enqueue time (and a
//!   negative offset is refused right there).
//! - The result is written when the operation ran: the bytes moved, or a
//!   negative error (`-errno` for a system error, else `-OpError`).
//! - The handle is resolved at enqueue time; the operation keeps the file
//!   alive even if the handle is deregistered before the stream gets there.
//!
//! On the `host` runtime, streams are emulated by one FIFO thread per
//! stream value, so any value works as a stream. On CUDA it must be a real
//! stream, and no thread of ours that does the I/O makes a GPU runtime
//! call: such a call can wait behind another thread's `cudaFree`, which
//! waits for the whole device, i.e. for the stream, i.e. for the I/O (a
//! deadlock seen on an H200). Everything GPU-side is enqueued at
//! submission, in the caller's thread:
//! - Device memory: a host function that starts a worker thread, then a
//!   copy-server kernel (`gpu/kernels/copy_server.cu`). Each stream has a
//!   `gpu::CopyChannel` of pinned, device-mapped slots; the worker reads the
//!   size and offsets when the stream gets there, moves file bytes through
//!   the slots with plain host I/O and posts one descriptor per slot (copy
//!   `n` bytes slot → device, or device → slot for a write, whose worker
//!   then waits for the kernel's completion word before writing the file).
//!   The kernel polls the descriptors and leaves when the worker posts the
//!   end, after the result is written. No bound on the size is needed at
//!   submission; a range past the buffer (the safe wrapper's length, the
//!   registered length, else the allocation holding the pointer, all known
//!   at submission) fails the operation with `-InvalidValue`.
//! - Host memory: a host function that starts the worker, then a wait on
//!   the device (`cuStreamWaitValue32`) for the completion word the worker
//!   stores; the memory's kind is classified at submission, so the worker
//!   makes no pointer query.
//!
//! Fallbacks, which keep the old hazard (do not free device memory in
//! another thread while such an operation is pending): where the runtime
//! has no copy server (HIP; a driver without the kernel's calls) device
//! memory goes through the worker's staged copies behind the completion
//! word; without stream waits a host function holds the stream while a
//! helper thread does the I/O.

use crate::batch::error_value;
use crate::buffer::Buffer;
use crate::error::{Error, OpError, Result};
use crate::gpu::{
    ChannelLane, CopyChannel, ForeignStream, MemoryKind, PinnedWord, PinnedWords, StreamId,
};
use crate::handle::{FileHandle, RegisteredFile};
use crate::io::Dir;
use crate::io::{MemTarget, Span};
use crate::lent::CallerSlots;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicIsize, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock, Mutex, MutexGuard};

/// `HIPFILE_STREAM_FIXED_BUF_OFFSET`: the buffer offset is read at enqueue time.
pub const STREAM_FIXED_BUF_OFFSET: u32 = 1;
/// `HIPFILE_STREAM_FIXED_FILE_OFFSET`: the file offset is read at enqueue time.
pub const STREAM_FIXED_FILE_OFFSET: u32 = 2;
/// `HIPFILE_STREAM_FIXED_FILE_SIZE`: the size is read at enqueue time.
pub const STREAM_FIXED_FILE_SIZE: u32 = 4;
/// `HIPFILE_STREAM_PAGE_ALIGNED_INPUTS`: a promise that inputs are 4 KiB
/// aligned; accepted as a hint (the I/O path handles any alignment).
pub const STREAM_PAGE_ALIGNED_INPUTS: u32 = 8;
/// `HIPFILE_STREAM_FLAGS_MASK`: every valid flag.
pub const STREAM_FLAGS_MASK: u32 = 0xf;

/// Registers `stream` for async I/O with `flags` (within [`STREAM_FLAGS_MASK`]).
/// A stream registered already is `InvalidValue`.
pub fn stream_register(stream: usize, flags: u32) -> Result<()> {
    if flags & !STREAM_FLAGS_MASK != 0 {
        return Err(Error::new(
            OpError::InvalidValue,
            format!("stream flags {flags:#x} are outside {STREAM_FLAGS_MASK:#x}"),
        ));
    }
    if stream_flags(stream).is_some() {
        return Err(Error::new(
            OpError::InvalidValue,
            format!("stream {stream:#x} is registered already"),
        ));
    }
    if crate::gpu::runtime().name() != "host" {
        Completions::ensure_word(stream)?;
        Channels::ensure(stream);
    }
    crate::registry::insert_stream(stream, flags);
    Ok(())
}

/// Forgets `stream`; one that is not registered is `InvalidValue`.
/// Operations already enqueued on it still run.
pub fn stream_deregister(stream: usize) -> Result<()> {
    if crate::registry::remove_stream(stream) {
        Channels::release(stream);
        Ok(())
    } else {
        Err(Error::new(
            OpError::InvalidValue,
            format!("stream {stream:#x} is not registered"),
        ))
    }
}

/// The flags `stream` is registered with, `None` when it is not.
pub fn stream_flags(stream: usize) -> Option<u32> {
    crate::registry::stream_flags(stream)
}

/// The arguments of a safe async operation, shared with the stream: set
/// them before the stream reaches the operation, read the result after.
/// Use one `AsyncArgs` for one operation at a time.
#[derive(Debug)]
pub struct AsyncArgs {
    size: AtomicUsize,
    file_offset: AtomicI64,
    buffer_offset: AtomicI64,
    result: AtomicIsize,
    done: AtomicBool,
}

impl AsyncArgs {
    /// Arguments for `size` bytes at `file_offset` / `buffer_offset`.
    pub fn new(size: usize, file_offset: i64, buffer_offset: i64) -> Arc<AsyncArgs> {
        Arc::new(AsyncArgs {
            size: AtomicUsize::new(size),
            file_offset: AtomicI64::new(file_offset),
            buffer_offset: AtomicI64::new(buffer_offset),
            result: AtomicIsize::new(0),
            done: AtomicBool::new(false),
        })
    }

    /// Sets the size slot.
    pub fn set_size(&self, v: usize) {
        self.size.store(v, Ordering::Release);
    }

    /// Sets the file-offset slot.
    pub fn set_file_offset(&self, v: i64) {
        self.file_offset.store(v, Ordering::Release);
    }

    /// Sets the buffer-offset slot.
    pub fn set_buffer_offset(&self, v: i64) {
        self.buffer_offset.store(v, Ordering::Release);
    }

    /// The size slot.
    pub fn size(&self) -> usize {
        self.size.load(Ordering::Acquire)
    }

    /// The file-offset slot.
    pub fn file_offset(&self) -> i64 {
        self.file_offset.load(Ordering::Acquire)
    }

    /// The buffer-offset slot.
    pub fn buffer_offset(&self) -> i64 {
        self.buffer_offset.load(Ordering::Acquire)
    }

    /// Bytes moved or a negative error; `None` until the stream ran the operation.
    pub fn result(&self) -> Option<isize> {
        self.done
            .load(Ordering::Acquire)
            .then(|| self.result.load(Ordering::Acquire))
    }
}

/// Where an operation reads its arguments and writes its result.
trait ArgSlots: Send + Sync + 'static {
    fn size(&self) -> usize;
    fn file_offset(&self) -> i64;
    fn buffer_offset(&self) -> i64;
    fn finish(&self, v: isize);
}

impl ArgSlots for Arc<AsyncArgs> {
    fn size(&self) -> usize {
        AsyncArgs::size(self)
    }
    fn file_offset(&self) -> i64 {
        AsyncArgs::file_offset(self)
    }
    fn buffer_offset(&self) -> i64 {
        AsyncArgs::buffer_offset(self)
    }
    fn finish(&self, v: isize) {
        self.result.store(v, Ordering::Release);
        self.done.store(true, Ordering::Release);
    }
}

/// The C caller's argument pointers, read when the stream runs the
/// operation (the lent-memory module owns the raw accesses).
impl ArgSlots for CallerSlots {
    fn size(&self) -> usize {
        CallerSlots::size(self)
    }
    fn file_offset(&self) -> i64 {
        CallerSlots::file_offset(self)
    }
    fn buffer_offset(&self) -> i64 {
        CallerSlots::buffer_offset(self)
    }
    fn finish(&self, v: isize) {
        CallerSlots::finish(self, v)
    }
}

fn invalid(what: impl Into<String>) -> Error {
    Error::new(OpError::InvalidValue, what)
}

/// One operation waiting for its stream.
struct StreamOp<S: ArgSlots> {
    dir: Dir,
    file: Arc<RegisteredFile>,
    base: usize,
    /// The buffer's length when known (safe wrapper): checked at run time.
    buf_len: Option<usize>,
    size: Option<usize>,
    file_offset: Option<i64>,
    buffer_offset: Option<i64>,
    slots: S,
    /// The memory's kind, classified at submission on a GPU runtime (so
    /// the worker makes no pointer query); `None` on the host runtime.
    kind: Option<MemoryKind>,
}

impl<S: ArgSlots> StreamOp<S> {
    /// Size, file offset and buffer offset: the fixed ones, else read now.
    fn args(&self) -> (usize, i64, i64) {
        let size = self.size.unwrap_or_else(|| self.slots.size());
        let foff = self.file_offset.unwrap_or_else(|| self.slots.file_offset());
        let boff = self
            .buffer_offset
            .unwrap_or_else(|| self.slots.buffer_offset());
        (size, foff, boff)
    }

    fn execute(&self) -> Result<usize> {
        let (size, foff, boff) = self.args();
        if let Some(len) = self.buf_len {
            let end = usize::try_from(boff).ok().and_then(|b| b.checked_add(size));
            if end.is_none_or(|e| e > len) {
                return Err(invalid(format!(
                    "{size} bytes at buffer offset {boff} do not fit the {len}-byte buffer"
                )));
            }
        }
        let Some(kind) = self.kind else {
            return crate::handle::transfer_vouched(
                self.dir, &self.file, self.base, size, foff, boff,
            );
        };
        let (config, mut target) = crate::registry::io_context(self.base)?;
        target.kind = target.kind.or(Some(kind));
        let span = Span {
            base: self.base,
            size,
            file_offset: foff,
            buffer_offset: boff,
        };
        crate::io::transfer(self.dir, &self.file.backend, &target, span, &config)
    }

    /// Bytes moved or the negative error, never a panic.
    fn outcome(&self) -> isize {
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.execute()))
            .unwrap_or_else(|_| Err(Error::new(OpError::InternalError, "async I/O panicked")));
        match r {
            Ok(n) => n as isize,
            Err(e) => {
                log::debug!("async {:?} on stream failed: {e}", self.dir);
                error_value(&e)
            }
        }
    }

    /// Runs on the stream's own thread (host runtime) or holds the stream's
    /// host function while a helper thread does the I/O (GPU runtime
    /// without stream waits): a host function must not call the GPU runtime
    /// itself, and the bounce path into device memory does.
    fn run_holding_stream(self) {
        let v = if crate::gpu::runtime().name() == "host" {
            self.outcome()
        } else {
            std::thread::scope(|scope| {
                match std::thread::Builder::new()
                    .name("hipfs-async-io".into())
                    .spawn_scoped(scope, || self.outcome())
                {
                    Ok(h) => h.join().unwrap_or(INTERNAL),
                    Err(e) => {
                        log::warn!("async I/O: cannot start a helper thread: {e}");
                        INTERNAL
                    }
                }
            })
        };
        self.slots.finish(v);
    }
}

const INTERNAL: isize = -(OpError::InternalError as isize);

/// Completion words for GPU streams: the stream waits on the device for
/// its word to reach an operation's ticket, and a worker thread stores the
/// ticket when the I/O is done. So no host function holds the stream while
/// the I/O makes its own GPU calls (a held host function deadlocked against
/// the implicit synchronisation of `cuMemFree` in a concurrent thread).
#[derive(Default)]
struct Completions {
    /// Whether the runtime can wait on a word; `None` until first asked.
    supported: Option<bool>,
    /// Pinned pages of words, never freed (freeing pinned memory
    /// synchronises the device); one word per stream ever used.
    page: Option<&'static PinnedWords>,
    used_in_page: usize,
    /// Each stream's word and the last ticket handed out on it.
    by_stream: HashMap<usize, (PinnedWord, u32)>,
}

const WORDS_PER_PAGE: usize = 1024;

static COMPLETIONS: LazyLock<Mutex<Completions>> = LazyLock::new(Default::default);

impl Completions {
    fn lock() -> MutexGuard<'static, Completions> {
        COMPLETIONS.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Gives `stream` its word. Called at registration, never while an
    /// operation is being enqueued, and the pinned allocation happens
    /// outside the lock: allocating pinned memory can wait for the device,
    /// which may be waiting for a host function of another stream.
    fn ensure_word(stream: usize) -> Result<()> {
        if Completions::lock().by_stream.contains_key(&stream) {
            return Ok(());
        }
        let need_page = {
            let c = Completions::lock();
            c.page.is_none() || c.used_in_page == WORDS_PER_PAGE
        };
        let fresh = if need_page {
            Some(PinnedWords::leak(WORDS_PER_PAGE)?)
        } else {
            None
        };
        let mut c = Completions::lock();
        if c.by_stream.contains_key(&stream) {
            return Ok(());
        }
        if c.page.is_none() || c.used_in_page == WORDS_PER_PAGE {
            match fresh {
                Some(page) => {
                    c.page = Some(page);
                    c.used_in_page = 0;
                }
                // Another registration took the last word meanwhile: retry.
                None => {
                    drop(c);
                    return Completions::ensure_word(stream);
                }
            }
        }
        let word = c.page.and_then(|p| p.get(c.used_in_page)).ok_or_else(|| {
            Error::new(OpError::InternalError, "completion word page out of words")
        })?;
        let w = (word, 0);
        c.used_in_page += 1;
        c.by_stream.insert(stream, w);
        Ok(())
    }
}

/// Enqueues `op` on a GPU stream: a host function that only hands the I/O
/// to a worker thread, then a device-side wait for the worker's ticket.
/// Falls back to holding the stream when the runtime cannot wait on a word.
fn enqueue_gpu<S: ArgSlots>(stream: ForeignStream, op: StreamOp<S>) -> Result<()> {
    let rt = crate::gpu::runtime();
    // Held across both enqueues so tickets on one stream are enqueued in order.
    let mut c = Completions::lock();
    let word = c.by_stream.get(&stream.key()).copied();
    let (word, last) = match word {
        Some(w) if c.supported != Some(false) => w,
        _ => {
            drop(c);
            return stream.launch_host_func(Box::new(move || op.run_holding_stream()));
        }
    };
    if c.supported.is_none() {
        // Probe with a wait that already holds (the word is at `last`).
        let ok = stream.wait_value32(word, last)?;
        c.supported = Some(ok);
        if !ok {
            log::info!(
                "async I/O: {} cannot wait on memory; host functions hold the stream",
                rt.name()
            );
            drop(c);
            return stream.launch_host_func(Box::new(move || op.run_holding_stream()));
        }
    }
    let ticket = last.wrapping_add(1);
    let done: &'static AtomicU32 = word.atomic();
    let job = Arc::new(Mutex::new(Some(op)));
    let start = {
        let job = Arc::clone(&job);
        move || start_worker(job, done, ticket)
    };
    stream.launch_host_func(Box::new(start))?;
    // From here the worker will store `ticket`, so it is spent either way.
    if let Some(w) = c.by_stream.get_mut(&stream.key()) {
        w.1 = ticket;
    }
    match stream.wait_value32(word, ticket) {
        Ok(true) => Ok(()),
        Ok(false) => Err(Error::new(
            OpError::InternalError,
            "the stream wait vanished: the I/O runs but later work is not ordered after it",
        )),
        Err(e) => {
            Err(e.with_context("the I/O runs but later work on the stream is not ordered after it"))
        }
    }
}

/// The host function: starts the worker and returns at once (no GPU calls).
fn start_worker<S: ArgSlots>(
    job: Arc<Mutex<Option<StreamOp<S>>>>,
    done: &'static AtomicU32,
    ticket: u32,
) {
    let take =
        |job: &Mutex<Option<StreamOp<S>>>| job.lock().unwrap_or_else(|p| p.into_inner()).take();
    let worker = Arc::clone(&job);
    let spawned = std::thread::Builder::new()
        .name("hipfs-async-io".into())
        .spawn(move || {
            if let Some(op) = take(&worker) {
                let v = op.outcome();
                op.slots.finish(v);
            }
            done.store(ticket, Ordering::Release);
        });
    if let Err(e) = spawned {
        log::warn!("async I/O: cannot start a worker thread: {e}");
        if let Some(op) = take(&job) {
            op.slots.finish(INTERNAL);
        }
        done.store(ticket, Ordering::Release);
    }
}

fn enqueue<S: ArgSlots>(
    dir: Dir,
    handle: u64,
    base: usize,
    buf_len: Option<usize>,
    slots: S,
    stream: ForeignStream,
) -> Result<()> {
    let flags = match stream_flags(stream.key()) {
        Some(flags) => flags,
        None => {
            if crate::gpu::runtime().name() != "host" {
                Completions::ensure_word(stream.key())?;
            }
            0
        }
    };
    if base == 0 {
        return Err(invalid("buffer pointer is null"));
    }
    let file = crate::handle::lookup(handle)?;
    let size = (flags & STREAM_FIXED_FILE_SIZE != 0).then(|| slots.size());
    let file_offset = (flags & STREAM_FIXED_FILE_OFFSET != 0).then(|| slots.file_offset());
    let buffer_offset = (flags & STREAM_FIXED_BUF_OFFSET != 0).then(|| slots.buffer_offset());
    if file_offset.is_some_and(|o| o < 0) {
        return Err(invalid("fixed file offset is negative"));
    }
    if buffer_offset.is_some_and(|o| o < 0) {
        return Err(invalid("fixed buffer offset is negative"));
    }
    let host = crate::gpu::runtime().name() == "host";
    let info = (!host).then(|| crate::gpu::classify(base));
    let op = StreamOp {
        dir,
        file,
        base,
        buf_len,
        size,
        file_offset,
        buffer_offset,
        slots,
        kind: info.map(|i| i.kind),
    };
    match info {
        None => stream.launch_host_func(Box::new(move || op.run_holding_stream())),
        Some(info) if info.kind == MemoryKind::Device => enqueue_device(stream, op, info),
        Some(_) => enqueue_gpu(stream, op),
    }
}

// ---------------------------------------------------------------- device memory

/// Each GPU stream's copy channel (see the module doc); channels of
/// deregistered streams wait in `idle` for a stream registered later.
#[derive(Default)]
struct Channels {
    by_stream: HashMap<usize, &'static CopyChannel>,
    idle: Vec<&'static CopyChannel>,
    /// Whether making one failed (then every stream falls back).
    unavailable: bool,
}

static CHANNELS: LazyLock<Mutex<Channels>> = LazyLock::new(Default::default);

/// Slots per lane: one filled by the CPU while the GPU copies the other.
const CHANNEL_DEPTH: usize = 2;

impl Channels {
    fn lock() -> MutexGuard<'static, Channels> {
        CHANNELS.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Gives `stream` a channel (at registration, in the caller's thread);
    /// where none can be made, its device I/O falls back (logged once).
    fn ensure(stream: usize) {
        {
            let mut c = Channels::lock();
            if c.unavailable || c.by_stream.contains_key(&stream) {
                return;
            }
            if let Some(ch) = c.idle.pop() {
                c.by_stream.insert(stream, ch);
                return;
            }
        }
        // The active configuration shapes the channel: lanes as the I/O
        // threads (at most 8), slots as the chunk (64 KiB to 1 MiB).
        let (threads, chunk) = crate::registry::io_context(0)
            .map_or((4, 1 << 20), |(c, _)| (c.io_threads(), c.chunk_bytes()));
        // Pinned allocation can wait for the device: outside the lock.
        let made = CopyChannel::leak(
            threads.clamp(1, 8),
            CHANNEL_DEPTH,
            chunk.clamp(64 << 10, 1 << 20),
        );
        let mut c = Channels::lock();
        match made {
            Ok(ch) => {
                // Another registration of the stream may have won meanwhile.
                if let Some(spare) = c.by_stream.insert(stream, ch) {
                    c.idle.push(spare);
                }
            }
            Err(e) => {
                if !c.unavailable {
                    log::info!(
                        "async I/O: no copy channel ({e}); device memory is copied by the worker \
                         (do not free device memory while such I/O is pending)"
                    );
                }
                c.unavailable = true;
            }
        }
    }

    /// Puts `stream`'s channel aside for reuse. Its operations still
    /// pending keep using it: a later one waits for their lease.
    fn release(stream: usize) {
        let mut c = Channels::lock();
        if let Some(ch) = c.by_stream.remove(&stream) {
            c.idle.push(ch);
        }
    }
}

/// Generation of the next device operation: tags its kernel's slots (the
/// channel's slots keep the tags of earlier operations).
static NEXT_GEN: AtomicU32 = AtomicU32::new(1);

/// A device operation between submission and its worker.
struct DeviceJob<S: ArgSlots> {
    op: Mutex<Option<StreamOp<S>>>,
    channel: &'static CopyChannel,
    gen: u32,
    /// Bytes from `base` the operation may touch (buffer, registration or
    /// allocation), known at submission.
    limit: usize,
    /// Set when the kernel could not be enqueued: the worker must not wait for it.
    abandoned: AtomicBool,
}

/// Enqueues a device-memory operation: the worker's host function and the
/// copy kernel, both from this (the caller's) thread. Falls back to
/// [`enqueue_gpu`] where the stream has no channel or the kernel does not
/// load.
fn enqueue_device<S: ArgSlots>(
    stream: ForeignStream,
    op: StreamOp<S>,
    info: crate::gpu::PointerInfo,
) -> Result<()> {
    let rt = crate::gpu::runtime();
    let alloc_left = (info.base.saturating_add(info.size)).saturating_sub(op.base);
    let registered = crate::registry::io_context(op.base)
        .ok()
        .and_then(|(_, t)| t.registered_len);
    let limit = op
        .buf_len
        .or(registered)
        .unwrap_or(alloc_left)
        .min(alloc_left);
    let channel = Channels::lock().by_stream.get(&stream.key()).copied();
    let Some(channel) = channel.filter(|_| rt.copy_server_ready(info.device.max(0))) else {
        // The worker-side path checks the same bound when it runs (an
        // unregistered pointer's range is checked against nothing else:
        // a read past the allocation would reach the runtime's copy).
        return enqueue_gpu(
            stream,
            StreamOp {
                buf_len: Some(limit),
                ..op
            },
        );
    };
    // Held across both enqueues: on one stream, the host function and the
    // kernel of one operation must not be split by another operation's
    // (its worker would hold the channel that the earlier kernel needs).
    let _order = Completions::lock();
    let gen = NEXT_GEN.fetch_add(1, Ordering::Relaxed);
    let job = Arc::new(DeviceJob {
        op: Mutex::new(Some(op)),
        channel,
        gen,
        limit,
        abandoned: AtomicBool::new(false),
    });
    let start = {
        let job = Arc::clone(&job);
        move || start_device_worker(job)
    };
    stream.launch_host_func(Box::new(start))?;
    if let Err(e) = channel.launch(stream, info.device.max(0), gen) {
        job.abandoned.store(true, Ordering::Release);
        return Err(e.with_context("the async operation fails: its copy kernel was not enqueued"));
    }
    Ok(())
}

/// The host function: starts the worker and returns at once (no GPU calls).
fn start_device_worker<S: ArgSlots>(job: Arc<DeviceJob<S>>) {
    let worker = Arc::clone(&job);
    let spawned = std::thread::Builder::new()
        .name("hipfs-async-io".into())
        .spawn(move || run_device_job(&worker, true));
    if let Err(e) = spawned {
        log::warn!("async I/O: cannot start a worker thread: {e}");
        // Still end the kernel, or the stream never moves on.
        run_device_job(&job, false);
    }
}

/// Does the operation (unless `io` is false: then it fails), writes its
/// result, then ends the kernel.
fn run_device_job<S: ArgSlots>(job: &DeviceJob<S>, io: bool) {
    let abort = || job.abandoned.load(Ordering::Acquire);
    let Some(op) = job.op.lock().unwrap_or_else(|p| p.into_inner()).take() else {
        return;
    };
    let Some(mut lease) = job.channel.lease(job.gen, &abort) else {
        op.slots.finish(INTERNAL);
        return;
    };
    let v = if io {
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            device_transfer(
                &op,
                job.limit,
                job.channel.payload(),
                &mut lease.lanes,
                &abort,
            )
        }))
        .unwrap_or_else(|_| Err(Error::new(OpError::InternalError, "async I/O panicked")));
        match r {
            Ok(n) => n as isize,
            Err(e) => {
                log::debug!("async {:?} on stream failed: {e}", op.dir);
                error_value(&e)
            }
        }
    } else {
        INTERNAL
    };
    // The result is in place before the kernel, and so the stream, moves on.
    op.slots.finish(v);
    for lane in &mut lease.lanes {
        if let Err(e) = lane.end(&abort) {
            log::debug!("async I/O: ending the copy kernel: {e}");
        }
    }
}

/// Moves the operation's bytes through the lanes: chunk `c` of the range
/// goes through lane `c % lanes`, each lane on its own thread.
fn device_transfer<S: ArgSlots>(
    op: &StreamOp<S>,
    limit: usize,
    payload: usize,
    lanes: &mut [ChannelLane],
    abort: &(dyn Fn() -> bool + Sync),
) -> Result<usize> {
    let (size, foff, boff) = op.args();
    let foff = u64::try_from(foff).map_err(|_| invalid("file offset is negative"))?;
    let boff = usize::try_from(boff).map_err(|_| invalid("buffer offset is negative"))?;
    if boff.checked_add(size).is_none_or(|end| end > limit) {
        return Err(invalid(format!(
            "{size} bytes at buffer offset {boff} do not fit the {limit}-byte buffer"
        )));
    }
    foff.checked_add(size as u64)
        .filter(|end| *end <= i64::MAX as u64)
        .ok_or_else(|| invalid("file offset + size overflows"))?;
    if size == 0 {
        return Ok(0);
    }
    let (config, _) = crate::registry::io_context(op.base)?;
    let n = size.div_ceil(payload);
    // Lanes beyond the chunks would idle: each one used costs a thread.
    let nl = lanes.len().min(n);
    let lanes = &mut lanes[..nl];
    let results: Vec<Mutex<Option<Result<usize>>>> = (0..n).map(|_| Mutex::new(None)).collect();
    let stop = AtomicBool::new(false);
    let mem = op.base + boff;
    // Validated above against what the submission knew of the buffer.
    let lent = crate::lent::LentSpan::of_request(mem, size);
    let device_range = |off: usize, len: usize| {
        lent.device_range(off, len)
            .ok_or_else(|| Error::new(OpError::InternalError, "a chunk past the request"))
    };
    let file_io = |dir: Dir, host: usize, len: usize, off: u64| -> Result<usize> {
        let target = MemTarget {
            kind: Some(MemoryKind::PinnedHost),
            ..MemTarget::unregistered()
        };
        let span = Span {
            base: host,
            size: len,
            file_offset: off as i64,
            buffer_offset: 0,
        };
        crate::io::transfer(dir, &op.file.backend, &target, span, &config)
    };
    let put = |c: usize, r: Result<usize>, len: usize| {
        if !matches!(r, Ok(got) if got == len) {
            stop.store(true, Ordering::Relaxed);
        }
        *results[c].lock().unwrap_or_else(|p| p.into_inner()) = Some(r);
    };
    let piece = |c: usize| {
        let off = c * payload;
        (off, payload.min(size - off))
    };
    let fatal: Mutex<Option<Error>> = Mutex::new(None);
    std::thread::scope(|scope| {
        for (b, lane) in lanes.iter_mut().enumerate() {
            let (file_io, put, piece, stop, fatal) = (&file_io, &put, &piece, &stop, &fatal);
            let device_range = &device_range;
            let dir = op.dir;
            let work = move || -> Result<()> {
                let mine = (b..n).step_by(nl);
                match dir {
                    Dir::Read => {
                        for c in mine {
                            if stop.load(Ordering::Relaxed) {
                                break;
                            }
                            let (off, len) = piece(c);
                            let dev = device_range(off, len)?;
                            let at = (mem + off) % 16;
                            let slot = lane.slot(abort)?;
                            let host = slot[at..at + len].as_mut_ptr() as usize;
                            let r = file_io(Dir::Read, host, len, foff + off as u64);
                            if let Ok(got) = r {
                                if got > 0 {
                                    lane.post_to_device(at, got, dev)?;
                                }
                            }
                            put(c, r, len);
                        }
                    }
                    Dir::Write => {
                        let mut queued: std::collections::VecDeque<(usize, u32)> =
                            Default::default();
                        let mut next = mine.peekable();
                        loop {
                            while queued.len() < CHANNEL_DEPTH && !stop.load(Ordering::Relaxed) {
                                let Some(c) = next.next() else { break };
                                let (off, len) = piece(c);
                                let dev = device_range(off, len)?;
                                lane.slot(abort)?;
                                let step = lane.post_from_device(dev)?;
                                queued.push_back((c, step));
                            }
                            let Some((c, step)) = queued.pop_front() else {
                                break;
                            };
                            let (off, len) = piece(c);
                            let at = (mem + off) % 16;
                            let slot = lane.take(step, abort)?;
                            let host = slot[at..at + len].as_ptr() as usize;
                            let r = file_io(Dir::Write, host, len, foff + off as u64);
                            put(c, r, len);
                        }
                    }
                }
                Ok(())
            };
            let run = move || {
                let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(work))
                    .unwrap_or_else(|_| {
                        Err(Error::new(
                            OpError::InternalError,
                            "async I/O lane panicked",
                        ))
                    });
                if let Err(e) = r {
                    stop.store(true, Ordering::Relaxed);
                    fatal
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .get_or_insert(e);
                }
            };
            if nl == 1 {
                run();
            } else {
                scope.spawn(run);
            }
        }
    });
    if let Some(e) = fatal.into_inner().unwrap_or_else(|p| p.into_inner()) {
        return Err(e);
    }
    let mut total = 0;
    for (c, slot) in results.into_iter().enumerate() {
        let (_, len) = piece(c);
        match slot.into_inner().unwrap_or_else(|p| p.into_inner()) {
            Some(Ok(got)) => {
                total += got;
                if got < len {
                    break;
                }
            }
            Some(Err(e)) if total == 0 => return Err(e),
            _ => break,
        }
    }
    Ok(total)
}

/// Enqueues a read into `base + *buffer_offset_p` of `*size_p` bytes at
/// `*file_offset_p` on `stream`; the stream writes the bytes read (or a
/// negative error) to `*bytes_read_p` when it runs the read.
///
/// # Safety
/// `stream` must be a live stream of the active runtime (or 0). The four
/// pointers must be valid, and the buffer range valid for writes, until
/// the stream has run the operation (e.g. until
/// `gpu::runtime().stream_synchronize(stream)` returns).
pub unsafe fn read_async(
    handle: u64,
    base: usize,
    size_p: *const usize,
    file_offset_p: *const i64,
    buffer_offset_p: *const i64,
    bytes_read_p: *mut isize,
    stream: usize,
) -> Result<()> {
    let slots = raw_slots(size_p, file_offset_p, buffer_offset_p, bytes_read_p)?;
    // The caller vouched for the stream and the pointers (the contract above).
    let stream = ForeignStream::vouched(StreamId(stream));
    enqueue(Dir::Read, handle, base, None, slots, stream)
}

/// Enqueues a write of `*size_p` bytes from `base + *buffer_offset_p` to
/// `*file_offset_p` on `stream`; the stream writes the bytes written (or a
/// negative error) to `*bytes_written_p`.
///
/// # Safety
/// As [`read_async`], with the buffer range valid for reads.
pub unsafe fn write_async(
    handle: u64,
    base: usize,
    size_p: *const usize,
    file_offset_p: *const i64,
    buffer_offset_p: *const i64,
    bytes_written_p: *mut isize,
    stream: usize,
) -> Result<()> {
    let slots = raw_slots(size_p, file_offset_p, buffer_offset_p, bytes_written_p)?;
    // The caller vouched for the stream and the pointers (the contract above).
    let stream = ForeignStream::vouched(StreamId(stream));
    enqueue(Dir::Write, handle, base, None, slots, stream)
}

fn raw_slots(
    size_p: *const usize,
    file_offset_p: *const i64,
    buffer_offset_p: *const i64,
    out_p: *mut isize,
) -> Result<CallerSlots> {
    CallerSlots::vouched(size_p, file_offset_p, buffer_offset_p, out_p)
        .ok_or_else(|| invalid("an async size, offset or result pointer is null"))
}

impl FileHandle {
    fn async_op(
        &self,
        dir: Dir,
        buffer: &Buffer<'_>,
        args: &Arc<AsyncArgs>,
        stream: ForeignStream,
    ) -> Result<()> {
        let handle = self.handle().ok_or_else(|| {
            Error::new(
                OpError::HandleNotRegistered,
                format!("{} is not open", self.path().display()),
            )
        })?;
        args.done.store(false, Ordering::Release);
        let base = buffer.ptr() as usize;
        enqueue(
            dir,
            handle,
            base,
            Some(buffer.len()),
            Arc::clone(args),
            stream,
        )
    }

    /// Enqueues a read into `buffer` on `stream`, with the size and offsets
    /// in `args` (read when the stream gets there unless FIXED); the result
    /// lands in [`AsyncArgs::result`]. A range past the buffer's end fails
    /// the operation with `-InvalidValue`.
    ///
    /// # Safety
    /// The buffer's memory must stay valid until the stream has run the
    /// operation, even if `buffer` itself is dropped before.
    pub unsafe fn read_async(
        &self,
        buffer: &Buffer<'_>,
        args: &Arc<AsyncArgs>,
        stream: usize,
    ) -> Result<()> {
        // The caller vouched for the stream (the contract above).
        self.async_op(
            Dir::Read,
            buffer,
            args,
            ForeignStream::vouched(StreamId(stream)),
        )
    }

    /// Enqueues a write from `buffer` on `stream`: see [`FileHandle::read_async`].
    ///
    /// # Safety
    /// As [`FileHandle::read_async`].
    pub unsafe fn write_async(
        &self,
        buffer: &Buffer<'_>,
        args: &Arc<AsyncArgs>,
        stream: usize,
    ) -> Result<()> {
        // The caller vouched for the stream (the contract above).
        self.async_op(
            Dir::Write,
            buffer,
            args,
            ForeignStream::vouched(StreamId(stream)),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_outside_the_mask_are_invalid_and_inside_are_accepted() {
        let s = 0x5eed_0001;
        assert_eq!(
            stream_register(s, 0x10).unwrap_err().op(),
            OpError::InvalidValue
        );
        assert_eq!(stream_flags(s), None);
        stream_register(s, STREAM_FIXED_FILE_SIZE).unwrap();
        assert_eq!(
            stream_register(s, STREAM_FLAGS_MASK).unwrap_err().op(),
            OpError::InvalidValue
        );
        assert_eq!(stream_flags(s), Some(STREAM_FIXED_FILE_SIZE));
        stream_deregister(s).unwrap();
        assert_eq!(
            stream_deregister(s).unwrap_err().op(),
            OpError::InvalidValue
        );
    }
}
