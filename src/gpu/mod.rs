//! GPU runtimes behind one small trait, chosen at run time among those
//! compiled in. `host` (system memory) is always there; a runtime whose
//! library is missing is skipped with a log line, never a crash.

use crate::error::{Error, OpError, Result};
use std::marker::PhantomData;
use std::sync::OnceLock;

mod dumb;
mod host;
mod slots;
pub use host::HostRuntime;
pub use slots::{DeviceSlot, StagingSlot};

/// What memory a pointer points at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemoryKind {
    /// Ordinary pageable host memory.
    Host,
    /// Host memory pinned by the GPU runtime.
    PinnedHost,
    /// Device memory.
    Device,
    /// Managed (unified) memory.
    Managed,
}

/// What the runtime knows of a pointer's allocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PointerInfo {
    /// What kind of memory it is.
    pub kind: MemoryKind,
    /// First byte of the allocation holding the pointer.
    pub base: usize,
    /// Size of that allocation.
    pub size: usize,
    /// Device ordinal (-1 for host memory).
    pub device: i32,
}

/// A device address (`CUdeviceptr`/`hipDeviceptr_t`): never dereferenced
/// on the host, and a type of its own so it cannot be passed where host
/// memory or a handle is expected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DevicePtr(pub u64);

impl DevicePtr {
    /// The address `bytes` further on.
    pub fn offset(self, bytes: usize) -> DevicePtr {
        DevicePtr(self.0 + bytes as u64)
    }
    /// The address as an integer, where the API carries device and host
    /// addresses alike (`Buffer`, `Request.mem`).
    pub fn addr(self) -> usize {
        self.0 as usize
    }
    /// A device address carried as an integer.
    pub fn from_addr(addr: usize) -> DevicePtr {
        DevicePtr(addr as u64)
    }
}

/// A driver stream handle (`CUstream`/`hipStream_t` as an integer). Only a
/// name: whoever holds one must know it is live (see [`Stream`] for an
/// owning one).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct StreamId(pub usize);

/// A driver event handle (`CUevent`/`hipEvent_t`); see [`StreamId`] and
/// [`Event`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct EventId(pub usize);

/// A GPU runtime: pointer queries and the copies the bounce path needs.
///
/// Methods that take a raw handle or address are `unsafe fn`: the driver
/// trusts them, so the caller must. The RAII types [`Stream`], [`Event`],
/// [`PinnedHost`] and [`DeviceAllocation`] make and free them safely.
pub trait GpuRuntime: Send + Sync {
    /// `cuda`, `hip` or `host` (or `dmabuf-test`, a test runtime).
    fn name(&self) -> &'static str;
    /// Number of devices visible.
    fn device_count(&self) -> usize;
    /// The allocation holding `ptr`, or `None` when the runtime does not know
    /// the pointer (plain pageable host memory).
    fn pointer_info(&self, ptr: usize) -> Option<PointerInfo>;
    /// Copies host bytes to device memory, synchronously.
    ///
    /// # Safety
    /// `dst..dst+src.len()` must be device memory of this runtime that
    /// nothing else uses during the copy.
    unsafe fn copy_to_device(&self, dst: DevicePtr, src: &[u8]) -> Result<()>;
    /// Copies device bytes to host memory, synchronously.
    ///
    /// # Safety
    /// `src..src+dst.len()` must be device memory of this runtime.
    unsafe fn copy_from_device(&self, dst: &mut [u8], src: DevicePtr) -> Result<()>;
    /// Runs `f` when `stream` reaches this point (stream-ordered async I/O).
    ///
    /// # Safety
    /// `stream` must be a live stream of this runtime (or 0, the default).
    unsafe fn launch_host_func(&self, stream: StreamId, f: Box<dyn FnOnce() + Send>) -> Result<()>;
    /// Waits until everything enqueued on `stream` has run.
    ///
    /// # Safety
    /// As [`GpuRuntime::launch_host_func`].
    unsafe fn stream_synchronize(&self, stream: StreamId) -> Result<()>;
    /// Makes `stream` wait, on the device and without holding a host
    /// thread, until the 32-bit word at `flag` (memory from
    /// [`GpuRuntime::alloc_pinned`]) is at least `value` (wrapping compare).
    /// `Ok(false)`: this runtime cannot, nothing was enqueued. Async I/O
    /// uses it so the I/O's own GPU calls never run while a host function
    /// holds the stream (which can deadlock against implicit synchronisation).
    ///
    /// # Safety
    /// `stream` as in [`GpuRuntime::launch_host_func`]; `flag` must be
    /// pinned memory that stays allocated until the wait has completed.
    unsafe fn stream_wait_value32(
        &self,
        stream: StreamId,
        flag: usize,
        value: u32,
    ) -> Result<bool> {
        let _ = (stream, flag, value);
        Ok(false)
    }

    // What follows is what the pipelined bounce path and the GPU tests need.
    // The defaults say "not here", which is right for the host runtime.

    /// Like [`GpuRuntime::pointer_info`], but a pointer the runtime knows and
    /// hipFile cannot use is an error (`HipMemoryTypeInvalid`).
    fn check_pointer(&self, ptr: usize) -> Result<Option<PointerInfo>> {
        Ok(self.pointer_info(ptr))
    }
    /// Makes `device` the calling thread's device until the guard drops
    /// (which restores what was current before).
    fn bind(&self, device: i32) -> Result<DeviceGuard> {
        let _ = device;
        Err(no_gpu())
    }
    /// `len` bytes of pinned host memory usable by every device (see
    /// [`PinnedHost`] for an owning form).
    fn alloc_pinned(&self, len: usize) -> Result<usize> {
        let _ = len;
        Err(no_gpu())
    }
    /// Frees what [`GpuRuntime::alloc_pinned`] returned.
    ///
    /// # Safety
    /// `ptr` came from `alloc_pinned` of this runtime, is freed once, and
    /// no copy still uses it.
    unsafe fn free_pinned(&self, ptr: usize) {
        let _ = ptr;
    }
    /// Pins (page-locks) existing host memory for DMA.
    ///
    /// # Safety
    /// `ptr..ptr+len` must be mapped host memory that stays mapped until
    /// [`GpuRuntime::unregister_host`].
    unsafe fn register_host(&self, ptr: usize, len: usize) -> Result<()> {
        let _ = (ptr, len);
        Err(no_gpu())
    }
    /// Undoes [`GpuRuntime::register_host`].
    ///
    /// # Safety
    /// `ptr` was registered and no copy still uses it.
    unsafe fn unregister_host(&self, ptr: usize) {
        let _ = ptr;
    }
    /// A new non-blocking stream on `device` (the device must be bound); see
    /// [`Stream`] for an owning form.
    fn stream_create(&self, device: i32) -> Result<StreamId> {
        let _ = device;
        Err(no_gpu())
    }
    /// Destroys a stream made by [`GpuRuntime::stream_create`].
    ///
    /// # Safety
    /// `stream` is live, destroyed once, and not used afterwards.
    unsafe fn stream_destroy(&self, stream: StreamId) {
        let _ = stream;
    }
    /// Enqueues a host-to-device copy on `stream`.
    ///
    /// # Safety
    /// `src` must stay valid and unchanged for `len` bytes until the copy is
    /// known complete (event or stream synchronisation); `dst..dst+len` must
    /// be device memory of the stream's device; `stream` must be live.
    unsafe fn copy_to_device_async(
        &self,
        dst: DevicePtr,
        src: *const u8,
        len: usize,
        stream: StreamId,
    ) -> Result<()> {
        let _ = (dst, src, len, stream);
        Err(no_gpu())
    }
    /// Enqueues a device-to-host copy on `stream`.
    ///
    /// # Safety
    /// `dst` must stay valid and untouched for `len` bytes until the copy is
    /// known complete; `src..src+len` must be device memory; `stream` live.
    unsafe fn copy_from_device_async(
        &self,
        dst: *mut u8,
        src: DevicePtr,
        len: usize,
        stream: StreamId,
    ) -> Result<()> {
        let _ = (dst, src, len, stream);
        Err(no_gpu())
    }
    /// Enqueues a device-to-device copy on `stream`.
    ///
    /// # Safety
    /// `src..src+len` and `dst..dst+len` must be device memory of the
    /// stream's device that nothing else writes until the copy is known
    /// complete; `stream` must be live.
    unsafe fn copy_device_async(
        &self,
        dst: DevicePtr,
        src: DevicePtr,
        len: usize,
        stream: StreamId,
    ) -> Result<()> {
        let _ = (dst, src, len, stream);
        Err(no_gpu())
    }
    /// A new event (no timing) on the bound device; see [`Event`].
    fn event_create(&self) -> Result<EventId> {
        Err(no_gpu())
    }
    /// Records `event` at the current end of `stream`.
    ///
    /// # Safety
    /// Both handles are live and of the same device.
    unsafe fn event_record(&self, event: EventId, stream: StreamId) -> Result<()> {
        let _ = (event, stream);
        Err(no_gpu())
    }
    /// Waits until `event` has completed (immediately if never recorded).
    ///
    /// # Safety
    /// `event` is live.
    unsafe fn event_synchronize(&self, event: EventId) -> Result<()> {
        let _ = event;
        Err(no_gpu())
    }
    /// Whether `event` has completed, without waiting (`true` if never
    /// recorded). By default it waits, which answers the same, later.
    ///
    /// # Safety
    /// `event` is live.
    unsafe fn event_query(&self, event: EventId) -> Result<bool> {
        // SAFETY: the caller's promise, passed on.
        unsafe { self.event_synchronize(event) }.map(|()| true)
    }
    /// Destroys an event.
    ///
    /// # Safety
    /// `event` is live, destroyed once, and not used afterwards.
    unsafe fn event_destroy(&self, event: EventId) {
        let _ = event;
    }
    /// `len` bytes of device memory on `device` (tests and benchmarks); see
    /// [`DeviceAllocation`].
    fn device_alloc(&self, device: i32, len: usize) -> Result<DevicePtr> {
        let _ = (device, len);
        Err(no_gpu())
    }
    /// Frees what [`GpuRuntime::device_alloc`] returned.
    ///
    /// # Safety
    /// `ptr` came from `device_alloc`, is freed once, and nothing uses it.
    unsafe fn device_free(&self, ptr: DevicePtr) {
        let _ = ptr;
    }
    /// Sets `len` bytes of device memory to `byte`.
    ///
    /// # Safety
    /// `ptr..ptr+len` is device memory of this runtime nothing else uses.
    unsafe fn device_memset(&self, ptr: DevicePtr, byte: u8, len: usize) -> Result<()> {
        let _ = (ptr, byte, len);
        Err(no_gpu())
    }
    /// The vendor's peer-to-peer file read straight into device memory
    /// (AMD's `hipAmdFileRead`), where the runtime has one.
    fn p2p_file_io(&self) -> Option<&dyn P2pFileIo> {
        None
    }

    // ---- RDMA registration of device memory (dmabuf export) ----

    /// Exports the device memory `[ptr, ptr + len)` as a dmabuf for an RDMA
    /// NIC to register (`ibv_reg_dmabuf_mr`). CUDA:
    /// `cuMemGetHandleForAddressRange(.., DMA_BUF_FD)`. The exported range
    /// is widened to whole host pages; see [`DmabufExport`].
    fn export_dmabuf(&self, ptr: DevicePtr, len: usize) -> Result<DmabufExport> {
        let _ = (ptr, len);
        Err(Error::new(
            OpError::IoNotSupported,
            format!(
                "the {} runtime cannot export device memory as a dmabuf",
                self.name()
            ),
        ))
    }

    /// A number unique to the allocation holding `ptr` for the life of the
    /// process (CUDA's buffer id), so a cached registration is never reused
    /// for a new allocation at the same address. `None` when unknown.
    fn allocation_id(&self, ptr: DevicePtr) -> Option<u64> {
        let _ = ptr;
        None
    }

    // ---- begin: copy server of stream-ordered async I/O (see CopyChannel) ----

    /// `len` bytes of pinned host memory mapped into every device's address
    /// space at its host address. The defaults say "not here": async I/O
    /// then falls back to its worker-side copies.
    fn alloc_mapped(&self, len: usize) -> Result<usize> {
        let _ = len;
        Err(no_gpu())
    }
    /// Whether [`GpuRuntime::launch_copy_server`] can run on `device` (its
    /// kernel loads there); loads it on first ask.
    fn copy_server_ready(&self, device: i32) -> bool {
        let _ = device;
        false
    }
    /// Enqueues the copy-server kernel (`kernels/copy_server.cu`) on
    /// `stream`: `blocks` blocks, each serving `depth` slot descriptors of
    /// the array at `slots`, for operation `gen`.
    ///
    /// # Safety
    /// `stream` is a live stream of `device`; `slots` is memory from
    /// [`GpuRuntime::alloc_mapped`] holding `blocks * depth` descriptors that
    /// stays allocated (never freed) while the kernel can run.
    unsafe fn launch_copy_server(
        &self,
        stream: StreamId,
        device: i32,
        slots: usize,
        blocks: u32,
        depth: u32,
        gen: u32,
    ) -> Result<()> {
        let _ = (stream, device, slots, blocks, depth, gen);
        Err(no_gpu())
    }

    // ---- end: copy server of stream-ordered async I/O ----
}

/// Device memory exported as a dmabuf: the fd (closed on drop), and where
/// the asked-for address lies in it.
#[derive(Debug)]
pub struct DmabufExport {
    /// The dmabuf.
    pub fd: std::os::fd::OwnedFd,
    /// Device address of the dmabuf's first byte (page aligned).
    pub start: DevicePtr,
    /// Bytes the dmabuf covers (whole pages).
    pub len: usize,
}

impl DmabufExport {
    /// The byte offset of `ptr` inside the dmabuf.
    pub fn offset_of(&self, ptr: DevicePtr) -> u64 {
        ptr.0 - self.start.0
    }
}

/// `[ptr, ptr + len)` widened to whole pages of `page` bytes: (start, len).
pub fn page_span(ptr: u64, len: usize, page: u64) -> Option<(u64, usize)> {
    let start = ptr - ptr % page;
    let end = ptr
        .checked_add(len as u64)?
        .checked_next_multiple_of(page)?;
    usize::try_from(end - start).ok().map(|l| (start, l))
}

/// A runtime's file-to-device DMA without a host bounce.
pub trait P2pFileIo: Send + Sync {
    /// Reads `len` bytes at `offset` of the O_DIRECT `fd` into device memory.
    /// `Ok(None)` means "this runtime cannot do it here; use the bounce path".
    fn read(&self, fd: i32, dev: usize, len: usize, offset: u64) -> Result<Option<usize>>;
    /// Writes `len` bytes of device memory to the O_DIRECT `fd` at `offset`.
    fn write(&self, fd: i32, dev: usize, len: usize, offset: u64) -> Result<Option<usize>>;
}

/// Restores the thread's previous device context when dropped.
pub struct DeviceGuard {
    restore: Option<Box<dyn FnOnce()>>,
}

impl DeviceGuard {
    /// A guard that runs `restore` on drop (`None`: nothing to undo).
    pub fn new(restore: Option<Box<dyn FnOnce()>>) -> DeviceGuard {
        DeviceGuard { restore }
    }
}

impl Drop for DeviceGuard {
    fn drop(&mut self) {
        if let Some(f) = self.restore.take() {
            f();
        }
    }
}

/// Device memory allocated through a runtime, freed when dropped.
pub struct DeviceAllocation<'a> {
    rt: &'a dyn GpuRuntime,
    ptr: DevicePtr,
    len: usize,
}

impl<'a> DeviceAllocation<'a> {
    /// `len` bytes on `device`.
    pub fn new(rt: &'a dyn GpuRuntime, device: i32, len: usize) -> Result<DeviceAllocation<'a>> {
        let ptr = rt.device_alloc(device, len)?;
        Ok(DeviceAllocation { rt, ptr, len })
    }
    /// The device address of the first byte, as an integer (for
    /// `Buffer::new` and other faces that carry addresses of any kind).
    pub fn ptr(&self) -> usize {
        self.ptr.addr()
    }
    /// The device address of the first byte.
    pub fn device_ptr(&self) -> DevicePtr {
        self.ptr
    }
    /// Bytes allocated.
    pub fn len(&self) -> usize {
        self.len
    }
    /// Whether no bytes are allocated.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// Sets every byte to `byte`.
    pub fn fill(&mut self, byte: u8) -> Result<()> {
        // SAFETY: the whole allocation is ours, and `&mut self` means no
        // other call of this type uses it now.
        unsafe { self.rt.device_memset(self.ptr, byte, self.len) }
    }
    /// Copies `dst.len()` bytes from offset `off` into host memory.
    pub fn read(&self, off: usize, dst: &mut [u8]) -> Result<()> {
        self.check_range(off, dst.len())?;
        // SAFETY: the range lies inside this live allocation (checked above).
        unsafe { self.rt.copy_from_device(dst, self.ptr.offset(off)) }
    }
    /// Copies `src` into the allocation at offset `off`.
    pub fn write(&mut self, off: usize, src: &[u8]) -> Result<()> {
        self.check_range(off, src.len())?;
        // SAFETY: the range lies inside this allocation, borrowed mutably.
        unsafe { self.rt.copy_to_device(self.ptr.offset(off), src) }
    }
    fn check_range(&self, off: usize, len: usize) -> Result<()> {
        match off.checked_add(len) {
            Some(end) if end <= self.len => Ok(()),
            _ => Err(Error::new(
                OpError::InvalidValue,
                format!(
                    "{len} bytes at {off} pass the end of a {}-byte allocation",
                    self.len
                ),
            )),
        }
    }
}

impl Drop for DeviceAllocation<'_> {
    fn drop(&mut self) {
        // SAFETY: allocated in new() by this runtime and freed only here.
        unsafe { self.rt.device_free(self.ptr) };
    }
}

/// A stream of a runtime, destroyed (after a synchronise) when dropped.
pub struct Stream {
    rt: &'static dyn GpuRuntime,
    device: i32,
    id: StreamId,
}

impl Stream {
    /// A new non-blocking stream on `device` (binds it for the call).
    pub fn new(rt: &'static dyn GpuRuntime, device: i32) -> Result<Stream> {
        let _bound = rt.bind(device)?;
        let id = rt.stream_create(device)?;
        Ok(Stream { rt, device, id })
    }
    /// The driver handle, for enqueueing on it.
    pub fn id(&self) -> StreamId {
        self.id
    }
    /// The device the stream belongs to.
    pub fn device(&self) -> i32 {
        self.device
    }
    /// Waits until everything enqueued so far has run.
    pub fn synchronize(&self) -> Result<()> {
        // SAFETY: the stream is live while `self` is.
        unsafe { self.rt.stream_synchronize(self.id) }
    }
}

impl Stream {
    /// Runs `f` with a [`StreamScope`] whose async copies borrow host and
    /// device memory from the caller, and synchronises the stream before it
    /// returns (also when `f` fails or panics), so no copy outlives the
    /// memory it uses: the `std::thread::scope` pattern for stream work.
    ///
    /// Returns `f`'s error first, then the synchronisation's. If the stream
    /// cannot be synchronised, whether the copies finished is unknown and
    /// the borrowed memory could still be written by the GPU: the process
    /// aborts rather than hand that memory back.
    pub fn scope<'env, T>(
        &'env self,
        f: impl for<'scope> FnOnce(&'scope StreamScope<'scope, 'env>) -> Result<T>,
    ) -> Result<T> {
        let scope = StreamScope {
            stream: self,
            _scope: PhantomData,
            _env: PhantomData,
        };
        // Synchronises on every way out of `f` (a panic included).
        let guard = SyncOnDrop(self);
        let r = f(&scope);
        std::mem::forget(guard);
        let synced = self.synchronize();
        if let Err(e) = &synced {
            sync_failed(e);
        }
        let out = r?;
        synced.map(|_| out)
    }
}

fn sync_failed(e: &Error) -> ! {
    log::error!("a stream scope cannot synchronise its stream ({e}): copies may still use borrowed memory; aborting");
    std::process::abort()
}

struct SyncOnDrop<'a>(&'a Stream);

impl Drop for SyncOnDrop<'_> {
    fn drop(&mut self) {
        if let Err(e) = self.0.synchronize() {
            sync_failed(&e);
        }
    }
}

/// Async copies on one stream that borrow memory for `'scope`: see
/// [`Stream::scope`]. Host memory that device-to-host copies write is lent
/// to the scope once ([`StreamScope::lend_mut`]) and the CPU cannot touch it
/// until the scope ends; copies on one stream run in order.
pub struct StreamScope<'scope, 'env: 'scope> {
    stream: &'env Stream,
    // Invariant in 'scope (as std::thread::Scope), so borrows handed in
    // must outlive the whole scope.
    _scope: PhantomData<&'scope mut &'scope ()>,
    _env: PhantomData<&'env mut &'env ()>,
}

/// Host memory lent to a [`StreamScope`] as a device-to-host copy target.
pub struct ScopedHostMut<'scope> {
    ptr: *mut u8,
    len: usize,
    _memory: PhantomData<&'scope mut [u8]>,
}

impl ScopedHostMut<'_> {
    /// Bytes lent.
    pub fn len(&self) -> usize {
        self.len
    }
    /// Whether no bytes are lent.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

fn check_span(what: &str, off: usize, len: usize, total: usize) -> Result<()> {
    match off.checked_add(len) {
        Some(end) if end <= total => Ok(()),
        _ => Err(Error::new(
            OpError::InvalidValue,
            format!("{len} bytes at {off} pass the end of the {total}-byte {what}"),
        )),
    }
}

impl<'scope> StreamScope<'scope, '_> {
    /// Lends `mem` to the scope as the target of device-to-host copies.
    pub fn lend_mut(&self, mem: &'scope mut [u8]) -> ScopedHostMut<'scope> {
        ScopedHostMut {
            ptr: mem.as_mut_ptr(),
            len: mem.len(),
            _memory: PhantomData,
        }
    }

    /// Enqueues a copy of `src` into `dst` at `dst_off`.
    pub fn copy_to_device(
        &self,
        dst: &'scope DeviceAllocation<'_>,
        dst_off: usize,
        src: &'scope [u8],
    ) -> Result<()> {
        check_span("device allocation", dst_off, src.len(), dst.len())?;
        // SAFETY: `src` is borrowed for the whole scope, which synchronises
        // the stream before the borrow ends; the device range lies inside
        // `dst` (checked), also borrowed for the scope; the stream is live.
        unsafe {
            self.stream.rt.copy_to_device_async(
                dst.device_ptr().offset(dst_off),
                src.as_ptr(),
                src.len(),
                self.stream.id,
            )
        }
    }

    /// Enqueues a copy of `len` bytes at `src_off` in `src` into `dst` at
    /// `dst_off`.
    pub fn copy_from_device(
        &self,
        dst: &ScopedHostMut<'scope>,
        dst_off: usize,
        src: &'scope DeviceAllocation<'_>,
        src_off: usize,
        len: usize,
    ) -> Result<()> {
        check_span("lent host memory", dst_off, len, dst.len)?;
        check_span("device allocation", src_off, len, src.len())?;
        // SAFETY: the host range lies inside memory lent exclusively to the
        // scope (checked), which the CPU cannot reach until the scope has
        // synchronised the stream; the device range lies inside `src`,
        // borrowed for the scope; the stream is live.
        unsafe {
            self.stream.rt.copy_from_device_async(
                dst.ptr.add(dst_off),
                src.device_ptr().offset(src_off),
                len,
                self.stream.id,
            )
        }
    }
}

/// Device memory lent to one I/O (a range of the caller's registered
/// device buffer, checked against the request): made only by the
/// lent-memory module (`LentSpan::device_range`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct LentDevice {
    ptr: DevicePtr,
    len: usize,
}

impl LentDevice {
    /// A range the lent-memory module vouches for.
    pub(crate) fn vouched(ptr: DevicePtr, len: usize) -> LentDevice {
        LentDevice { ptr, len }
    }
    /// Where the range starts, for a filesystem that places bytes there
    /// itself (`UserspaceFs::places_device_chunks`).
    pub(crate) fn addr(&self) -> u64 {
        self.ptr.0
    }
    /// Bytes in the range.
    pub(crate) fn len(&self) -> usize {
        self.len
    }
}

/// A stream handle the caller of an `unsafe` stream-ordered I/O entry
/// point (`stream::read_async`/`write_async`, `FileHandle::read_async`/
/// `write_async`, the C ABI's `hipFileReadAsync`/`WriteAsync`) passed in:
/// their contract is that it is a live stream of the active runtime (or 0)
/// until the stream has run what is enqueued on it. Only those entry points
/// make one ([`ForeignStream::vouched`]); the methods are then safe.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ForeignStream(StreamId);

impl ForeignStream {
    /// The stream a caller of an unsafe entry point vouched for (see the
    /// type's doc; for those entry points only).
    pub(crate) fn vouched(id: StreamId) -> ForeignStream {
        ForeignStream(id)
    }
    /// The raw handle (as a key; never to make GPU calls with).
    pub(crate) fn key(self) -> usize {
        self.0 .0
    }
    /// Runs `f` when the stream reaches this point.
    pub(crate) fn launch_host_func(self, f: Box<dyn FnOnce() + Send>) -> Result<()> {
        // SAFETY: the stream is live (the vouching caller's contract).
        unsafe { runtime().launch_host_func(self.0, f) }
    }
    /// Makes the stream wait until `word` reaches `value`; `Ok(false)`: the
    /// runtime cannot (see [`GpuRuntime::stream_wait_value32`]).
    pub(crate) fn wait_value32(self, word: PinnedWord, value: u32) -> Result<bool> {
        // SAFETY: the stream is live (the vouching caller's contract), and a
        // PinnedWord is pinned memory that is never freed.
        unsafe { runtime().stream_wait_value32(self.0, word.addr(), value) }
    }
}

/// A page of 32-bit words in pinned host memory that is never freed
/// (freeing pinned memory synchronises the device): completion words that
/// streams wait on while the host stores into them.
pub(crate) struct PinnedWords {
    mem: PinnedHost,
}

/// One word of a [`PinnedWords`] page: pinned, 4-byte aligned, `'static`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PinnedWord(&'static std::sync::atomic::AtomicU32);

impl PinnedWord {
    /// The word, for the host's side.
    pub(crate) fn atomic(self) -> &'static std::sync::atomic::AtomicU32 {
        self.0
    }
    fn addr(self) -> usize {
        self.0 as *const std::sync::atomic::AtomicU32 as usize
    }
}

impl PinnedWords {
    /// `n` zeroed words from the active runtime's pinned allocator, kept for
    /// the life of the process.
    pub(crate) fn leak(n: usize) -> Result<&'static PinnedWords> {
        let mem = PinnedHost::alloc(runtime(), n.max(1) * 4)?;
        if !mem.ptr().cast::<u32>().is_aligned() {
            return Err(Error::new(
                OpError::InternalError,
                "pinned memory is not 4-byte aligned",
            ));
        }
        Ok(Box::leak(Box::new(PinnedWords { mem })))
    }
    /// Word `i`, if the page has it.
    pub(crate) fn get(&'static self, i: usize) -> Option<PinnedWord> {
        if i >= self.mem.len() / 4 {
            return None;
        }
        // SAFETY: word i lies inside the page (checked), which is 4-byte
        // aligned (checked in leak), zero-initialised (PinnedHost::alloc)
        // and never freed (leaked); the CPU only accesses it atomically
        // (this type hands out no other view) and the device only reads it.
        let atom =
            unsafe { std::sync::atomic::AtomicU32::from_ptr(self.mem.ptr().cast::<u32>().add(i)) };
        Some(PinnedWord(atom))
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        match self.rt.bind(self.device) {
            Ok(_bound) => {
                // Nothing may still run on the stream (copies out of memory
                // about to be freed) when it goes.
                if let Err(e) = self.synchronize() {
                    log::warn!("synchronising a stream before destroying it: {e}");
                }
                // SAFETY: live, destroyed only here, never used again.
                unsafe { self.rt.stream_destroy(self.id) };
            }
            Err(e) => log::warn!(
                "cannot bind device {} to destroy a stream ({e}); it leaks",
                self.device
            ),
        }
    }
}

/// An event of a runtime, destroyed when dropped.
pub struct Event {
    rt: &'static dyn GpuRuntime,
    device: i32,
    id: EventId,
}

impl Event {
    /// A new event on `device` (binds it for the call).
    pub fn new(rt: &'static dyn GpuRuntime, device: i32) -> Result<Event> {
        let _bound = rt.bind(device)?;
        let id = rt.event_create()?;
        Ok(Event { rt, device, id })
    }
    /// Records the event at the current end of `stream` (same device).
    pub fn record(&self, stream: &Stream) -> Result<()> {
        if stream.device != self.device {
            return Err(Error::new(
                OpError::InvalidValue,
                "event and stream are of different devices",
            ));
        }
        // SAFETY: both handles are live while their owners are, and of the
        // same device (checked above).
        unsafe { self.rt.event_record(self.id, stream.id) }
    }
    /// Waits until the event has completed (at once if never recorded).
    pub fn synchronize(&self) -> Result<()> {
        // SAFETY: live while `self` is.
        unsafe { self.rt.event_synchronize(self.id) }
    }
    /// Whether the event has completed, without waiting.
    pub fn query(&self) -> Result<bool> {
        // SAFETY: live while `self` is.
        unsafe { self.rt.event_query(self.id) }
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        match self.rt.bind(self.device) {
            // SAFETY: live, destroyed only here, never used again.
            Ok(_bound) => unsafe { self.rt.event_destroy(self.id) },
            Err(e) => log::warn!(
                "cannot bind device {} to destroy an event ({e}); it leaks",
                self.device
            ),
        }
    }
}

/// How [`PinnedHost`] memory is pinned.
enum Pinning {
    /// The runtime's pinned allocator.
    Alloc,
    /// An anonymous mapping registered with the runtime.
    /// Kept only to be unmapped (after unregistering) when dropped.
    Registered { _map: hipfs_sys::mem::AnonMap },
}

/// Pinned (page-locked) host memory, unpinned and freed when dropped.
pub struct PinnedHost {
    rt: &'static dyn GpuRuntime,
    ptr: std::ptr::NonNull<u8>,
    len: usize,
    pinning: Pinning,
}

// SAFETY: PinnedHost owns its memory exclusively; the runtime is Sync.
unsafe impl Send for PinnedHost {}
// SAFETY: shared references only hand out the address, never the bytes.
unsafe impl Sync for PinnedHost {}

impl PinnedHost {
    /// `len` bytes from the runtime's pinned allocator.
    /// The bytes are zeroed (once, here), so that they can be handed out
    /// as a slice.
    pub fn alloc(rt: &'static dyn GpuRuntime, len: usize) -> Result<PinnedHost> {
        let addr = rt.alloc_pinned(len)?;
        let ptr = std::ptr::NonNull::new(addr as *mut u8)
            .ok_or_else(|| Error::new(OpError::InternalError, "pinned allocator gave NULL"))?;
        // SAFETY: a fresh allocation of `len` writable bytes, ours alone.
        unsafe { std::ptr::write_bytes(ptr.as_ptr(), 0, len) };
        Ok(PinnedHost {
            rt,
            ptr,
            len,
            pinning: Pinning::Alloc,
        })
    }
    /// At least `len` bytes of anonymous memory (advised to use huge
    /// pages, rounded up to 2 MiB) registered with the runtime.
    pub fn map_and_register(rt: &'static dyn GpuRuntime, len: usize) -> Result<PinnedHost> {
        let map_len = len.div_ceil(2 << 20) * (2 << 20);
        let map = hipfs_sys::mem::AnonMap::new(map_len, true).map_err(|e| {
            Error::system(
                e.raw_os_error().unwrap_or(libc::ENOMEM),
                "mmap for a bounce buffer",
            )
        })?;
        // SAFETY: the mapping is ours and stays mapped until Drop, which
        // unregisters before the map goes.
        unsafe { rt.register_host(map.as_ptr() as usize, map.len())? };
        let ptr = std::ptr::NonNull::new(map.as_ptr())
            .ok_or_else(|| Error::new(OpError::InternalError, "mapping at NULL"))?;
        Ok(PinnedHost {
            rt,
            ptr,
            len: map.len(),
            pinning: Pinning::Registered { _map: map },
        })
    }
    /// The first byte.
    pub fn ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }
    /// Bytes usable.
    pub fn len(&self) -> usize {
        self.len
    }
    /// Whether no bytes are usable.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// The memory, for the CPU. Only between the GPU's uses of it: an
    /// async copy that reads or writes it (an `unsafe` runtime call) must
    /// have completed.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: the memory is ours (allocated zeroed in alloc(), or an
        // anonymous mapping, which the kernel zeroes), `len` bytes, and
        // borrowed exclusively through `&mut self`; a copy still in flight
        // would be the broken contract of the unsafe call that started it
        // (or is excluded by the scope's borrow).
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for PinnedHost {
    fn drop(&mut self) {
        let addr = self.ptr.as_ptr() as usize;
        match &self.pinning {
            // SAFETY: allocated in alloc() by this runtime, freed only here;
            // owners synchronise their copies before dropping (Lane does).
            Pinning::Alloc => unsafe { self.rt.free_pinned(addr) },
            // SAFETY: registered in map_and_register(); the map itself is
            // unmapped after this, when the field drops.
            Pinning::Registered { .. } => unsafe { self.rt.unregister_host(addr) },
        }
    }
}

fn no_gpu() -> Error {
    Error::new(OpError::DeviceNotFound, "no GPU runtime is active")
}

static RUNTIME: OnceLock<Box<dyn GpuRuntime>> = OnceLock::new();

/// The runtime in use: the first compiled-in GPU runtime that finds a device,
/// else `host`. `HIPFS_GPU_RUNTIME=host|cuda|hip` picks one explicitly, and
/// `HIPFS_GPU_RUNTIME=dmabuf-test` the test runtime whose device memory is
/// DRM dumb buffers, `pinnable-test` the same with pinnable pages (see
/// `dumb.rs`; never chosen otherwise).
pub fn runtime() -> &'static dyn GpuRuntime {
    RUNTIME.get_or_init(select).as_ref()
}

/// Every runtime compiled in, with why each is or is not usable.
pub fn probe_report() -> Vec<(String, std::result::Result<usize, String>)> {
    let mut out = Vec::new();
    for (name, probe) in candidates() {
        out.push((name.to_string(), probe().map(|rt| rt.device_count())));
    }
    out.push(("host".to_string(), Ok(0)));
    out
}

type Probe = fn() -> std::result::Result<Box<dyn GpuRuntime>, String>;

#[allow(clippy::vec_init_then_push)]
fn candidates() -> Vec<(&'static str, Probe)> {
    // Which pushes exist depends on the features compiled in.
    #[allow(unused_mut)]
    let mut v: Vec<(&'static str, Probe)> = Vec::new();
    #[cfg(feature = "cuda")]
    v.push(("cuda", cuda_probe));
    #[cfg(feature = "hip")]
    v.push(("hip", hip_probe));
    v
}

#[cfg(feature = "cuda")]
fn cuda_probe() -> std::result::Result<Box<dyn GpuRuntime>, String> {
    cuda::CudaRuntime::probe().map(|r| Box::new(r) as Box<dyn GpuRuntime>)
}

#[cfg(feature = "hip")]
fn hip_probe() -> std::result::Result<Box<dyn GpuRuntime>, String> {
    hip::HipRuntime::probe().map(|r| Box::new(r) as Box<dyn GpuRuntime>)
}

#[cfg(feature = "cuda")]
pub mod cuda;
#[cfg(feature = "hip")]
pub mod hip;

static SELECTION: OnceLock<String> = OnceLock::new();

/// Why the runtime in use was chosen, in one line (also logged once).
pub fn selection_message() -> &'static str {
    runtime();
    SELECTION.get().map_or("", String::as_str)
}

fn select() -> Box<dyn GpuRuntime> {
    let wanted = std::env::var("HIPFS_GPU_RUNTIME").ok();
    let (rt, why) = choose(wanted.as_deref());
    log::info!("{why}");
    let _ = SELECTION.set(why);
    rt
}

fn choose(wanted: Option<&str>) -> (Box<dyn GpuRuntime>, String) {
    if wanted == Some("host") {
        return (
            Box::new(HostRuntime::new()),
            "GPU runtime: host (HIPFS_GPU_RUNTIME=host)".to_string(),
        );
    }
    let mut tried = Vec::new();
    if let Some(w) = wanted.filter(|w| [dumb::NAME, dumb::NAME_PINNABLE].contains(w)) {
        let pinnable = w == dumb::NAME_PINNABLE;
        match dumb::DumbRuntime::probe(pinnable) {
            Ok(rt) => {
                let what = if pinnable {
                    "device memory of anonymous shared pages, pinnable by any NIC, for tests"
                } else {
                    "dmabuf-backed device memory from DRM dumb buffers, for tests"
                };
                return (
                    Box::new(rt),
                    format!("GPU runtime: {w} ({what}; HIPFS_GPU_RUNTIME={w})"),
                );
            }
            Err(why) => tried.push(format!("{w}: {why}")),
        }
    }
    for (name, probe) in candidates() {
        if wanted.is_some_and(|w| w != name) {
            continue;
        }
        match probe() {
            Ok(rt) if rt.device_count() > 0 => {
                let msg = format!("GPU runtime: {name} with {} device(s)", rt.device_count());
                return (rt, msg);
            }
            Ok(_) => tried.push(format!("{name}: no device")),
            Err(why) => tried.push(format!("{name}: {why}")),
        }
    }
    if let Some(w) = wanted.filter(|w| {
        ![dumb::NAME, dumb::NAME_PINNABLE].contains(w) && !candidates().iter().any(|(n, _)| n == w)
    }) {
        tried.push(format!("HIPFS_GPU_RUNTIME={w} is not compiled in"));
    }
    let detail = if tried.is_empty() {
        "no GPU runtime compiled in".to_string()
    } else {
        tried.join("; ")
    };
    (
        Box::new(HostRuntime::new()),
        format!("GPU runtime: host memory only ({detail})"),
    )
}

/// Classifies `ptr`: the runtime's answer, or pageable host memory.
pub fn classify(ptr: usize) -> PointerInfo {
    runtime().pointer_info(ptr).unwrap_or(PointerInfo {
        kind: MemoryKind::Host,
        base: ptr,
        size: usize::MAX - ptr,
        device: -1,
    })
}

/// Checks that `[ptr, ptr+len)` lies in one allocation the runtime or the
/// kernel knows, with the codes the spec gives.
pub fn validate_range(ptr: usize, len: usize) -> Result<PointerInfo> {
    if ptr == 0 {
        return Err(Error::new(OpError::InvalidValue, "buffer pointer is null"));
    }
    let end = ptr
        .checked_add(len)
        .ok_or_else(|| Error::new(OpError::HipPointerRangeError, "pointer + length overflows"))?;
    match runtime().check_pointer(ptr)? {
        Some(info) => {
            if end > info.base.saturating_add(info.size) {
                return Err(Error::new(
                    OpError::HipPointerRangeError,
                    format!(
                        "range of {len} bytes at {ptr:#x} passes the end of its {}-byte allocation",
                        info.size
                    ),
                ));
            }
            Ok(info)
        }
        None => {
            host::check_mapped(ptr, len)?;
            Ok(PointerInfo {
                kind: MemoryKind::Host,
                base: ptr,
                size: len,
                device: -1,
            })
        }
    }
}

/// What `hipfs check` reports about registering device memory for RDMA.
#[derive(Debug)]
pub struct RdmaMemoryProbe {
    /// A real device allocation exported as a dmabuf: the exporter's name
    /// (e.g. `nv_dmabuf`) or why not; `None` without a GPU.
    pub device_export: Option<std::result::Result<String, String>>,
    /// The dmabuf the NIC probe registered: `device`, `udmabuf` (host
    /// memory), or why there is none.
    pub dmabuf_source: String,
    /// Each RDMA device's answer to a dmabuf and a peer-memory registration.
    pub nics: Vec<hipfs_rdma::RegistrationProbe>,
}

/// Probes with real allocations: exports 2 MiB of device memory as a
/// dmabuf, then asks every RDMA device to register it (or, without a GPU,
/// a host dmabuf from `/dev/udmabuf`) and the device address itself.
pub fn probe_rdma_memory(rt: &dyn GpuRuntime) -> RdmaMemoryProbe {
    const LEN: usize = 2 << 20;
    let exporter = |fd: &std::os::fd::OwnedFd| {
        use std::os::fd::AsRawFd;
        let info = std::fs::read_to_string(format!("/proc/self/fdinfo/{}", fd.as_raw_fd()))
            .unwrap_or_default();
        info.lines()
            .find_map(|l| l.strip_prefix("exp_name:"))
            .map(|n| n.trim().to_string())
            .unwrap_or_else(|| "dmabuf".into())
    };
    let alloc =
        (rt.name() != "host" && rt.device_count() > 0).then(|| DeviceAllocation::new(rt, 0, LEN));
    let (device_export, export) = match &alloc {
        None => (None, None),
        Some(Err(e)) => (
            Some(Err(format!("cannot allocate device memory: {e}"))),
            None,
        ),
        Some(Ok(a)) => match rt.export_dmabuf(a.device_ptr(), LEN) {
            Ok(x) => (Some(Ok(exporter(&x.fd))), Some(x)),
            Err(e) => (Some(Err(e.to_string())), None),
        },
    };
    let host = if export.is_none() {
        Some(hipfs_sys::mem::host_dmabuf(LEN))
    } else {
        None
    };
    let (dmabuf, dmabuf_source) = match (&export, &host) {
        (Some(x), _) => {
            use std::os::fd::AsRawFd;
            (
                Some((x.fd.as_raw_fd(), 0, LEN, x.start.0)),
                "device".to_string(),
            )
        }
        (None, Some(Ok(fd))) => {
            use std::os::fd::AsRawFd;
            (
                Some((fd.as_raw_fd(), 0, LEN, 0)),
                "host dmabuf (udmabuf or DRM dumb buffer)".to_string(),
            )
        }
        (None, Some(Err(e))) => (None, format!("none: no device dmabuf; {e}")),
        (None, None) => (None, "none".to_string()),
    };
    let peer = match &alloc {
        Some(Ok(a)) => Some((a.ptr() as *mut u8, LEN)),
        _ => None,
    };
    // SAFETY: the dmabufs and the allocation live until this function
    // returns, after the probe dropped its registrations.
    let nics = unsafe { hipfs_rdma::probe_registrations(dmabuf, peer) };
    RdmaMemoryProbe {
        device_export,
        dmabuf_source,
        nics,
    }
}

// ======== begin: copy channel of stream-ordered async I/O (crate::stream) ========
//
// The worker thread of an async operation on device memory makes no GPU
// runtime call: it moves file bytes through pinned, device-mapped slots and
// talks to a copy-server kernel (enqueued on the caller's stream at
// submission) only through these slots' descriptor words. See
// kernels/copy_server.cu for the protocol's other side.

/// One slot's descriptor, laid out as `struct Slot` in copy_server.cu.
#[repr(C)]
struct SlotCtl {
    tag: std::sync::atomic::AtomicU64,
    done: std::sync::atomic::AtomicU64,
    src: std::sync::atomic::AtomicU64,
    dst: std::sync::atomic::AtomicU64,
    count: std::sync::atomic::AtomicU64,
    op: std::sync::atomic::AtomicU64,
    _pad: [u64; 2],
}

const CTL_BYTES: usize = std::mem::size_of::<SlotCtl>();
const OP_COPY: u64 = 0;
const OP_END: u64 = 1;
/// Spare bytes before a slot's payload, so that the payload can start at the
/// device address's offset modulo 16 (the kernel then copies 16 bytes a load).
const SLOT_SHIFT: usize = 16;

/// Descriptors and slots in mapped pinned memory, for one stream's async
/// operations (which the stream runs one at a time). Never freed: freeing
/// pinned memory synchronises the device, and a kernel may still use it.
pub(crate) struct CopyChannel {
    /// `blocks * depth` descriptors, then as many slots of `stride` bytes.
    base: usize,
    blocks: usize,
    depth: usize,
    payload: usize,
    stride: usize,
    /// Held by the one operation whose worker uses the slots.
    busy: std::sync::atomic::AtomicBool,
}

fn round_up(n: usize, to: usize) -> usize {
    n.div_ceil(to) * to
}

impl CopyChannel {
    /// A channel of `blocks` lanes, `depth` slots each, of `payload` bytes,
    /// from the active runtime (an error where it has no mapped memory).
    pub(crate) fn leak(
        blocks: usize,
        depth: usize,
        payload: usize,
    ) -> Result<&'static CopyChannel> {
        let (blocks, depth) = (blocks.clamp(1, 64), depth.clamp(1, 16));
        let payload = round_up(payload.max(4096), 4096);
        let stride = payload + 4096;
        let ctl = round_up(blocks * depth * CTL_BYTES, 4096);
        let len = ctl + blocks * depth * stride;
        let base = runtime().alloc_mapped(len)?;
        if base == 0 || base % 4096 != 0 {
            return Err(Error::new(
                OpError::InternalError,
                "mapped pinned memory is not page aligned",
            ));
        }
        // SAFETY: a fresh allocation of `len` bytes, ours alone; zero tags
        // match no operation (each operation's tags carry a step from 1).
        unsafe { std::ptr::write_bytes(base as *mut u8, 0, len) };
        Ok(Box::leak(Box::new(CopyChannel {
            base,
            blocks,
            depth,
            payload,
            stride,
            busy: std::sync::atomic::AtomicBool::new(false),
        })))
    }

    /// Bytes one step moves at most.
    pub(crate) fn payload(&self) -> usize {
        self.payload
    }

    /// Enqueues the kernel of operation `gen` on `stream` (memory of `device`).
    pub(crate) fn launch(
        &'static self,
        stream: ForeignStream,
        device: i32,
        gen: u32,
    ) -> Result<()> {
        // SAFETY: the stream is live (the vouching caller's contract); the
        // descriptors are mapped memory that is never freed (leaked).
        unsafe {
            runtime().launch_copy_server(
                stream.0,
                device,
                self.base,
                self.blocks as u32,
                self.depth as u32,
                gen,
            )
        }
    }

    /// Takes the slots for operation `gen` once the previous operation's
    /// worker let go; `None` when `abort` says so first.
    pub(crate) fn lease(&'static self, gen: u32, abort: &dyn Fn() -> bool) -> Option<ChannelLease> {
        let mut spins = 0u32;
        while self
            .busy
            .compare_exchange(
                false,
                true,
                std::sync::atomic::Ordering::Acquire,
                std::sync::atomic::Ordering::Relaxed,
            )
            .is_err()
        {
            if abort() {
                return None;
            }
            backoff(&mut spins);
        }
        let lanes = (0..self.blocks)
            .map(|block| ChannelLane {
                ch: self,
                block,
                gen,
                step: 0,
                posted: vec![None; self.depth],
            })
            .collect();
        Some(ChannelLease { ch: self, lanes })
    }

    fn ctl(&self, block: usize, k: usize) -> &SlotCtl {
        debug_assert!(block < self.blocks && k < self.depth);
        // SAFETY: descriptor block*depth+k lies in the leaked allocation
        // (sized for blocks*depth of them), page aligned, zero-initialised,
        // and accessed only through atomics (by the CPU and by the kernel).
        unsafe { &*((self.base + (block * self.depth + k) * CTL_BYTES) as *const SlotCtl) }
    }

    fn slot_addr(&self, block: usize, k: usize) -> usize {
        let ctl = round_up(self.blocks * self.depth * CTL_BYTES, 4096);
        self.base + ctl + (block * self.depth + k) * self.stride
    }
}

/// Waits a little longer each time: spins, then yields, then sleeps.
fn backoff(spins: &mut u32) {
    *spins = spins.saturating_add(1);
    if *spins < 64 {
        std::hint::spin_loop();
    } else if *spins < 256 {
        std::thread::yield_now();
    } else {
        std::thread::sleep(std::time::Duration::from_micros(20));
    }
}

/// One operation's hold on a channel: its lanes; let go when dropped.
pub(crate) struct ChannelLease {
    ch: &'static CopyChannel,
    /// One per kernel block.
    pub(crate) lanes: Vec<ChannelLane>,
}

impl Drop for ChannelLease {
    fn drop(&mut self) {
        self.ch
            .busy
            .store(false, std::sync::atomic::Ordering::Release);
    }
}

/// The host side of one kernel block for one operation: its slots, which
/// the lane hands to the CPU only while the GPU is not using them.
pub(crate) struct ChannelLane {
    ch: &'static CopyChannel,
    block: usize,
    gen: u32,
    /// The next step to post.
    step: u32,
    /// Per slot: the step posted to the GPU whose completion is not yet seen.
    posted: Vec<Option<u32>>,
}

impl ChannelLane {
    fn tag(&self, step: u32) -> u64 {
        (u64::from(self.gen) << 32) | u64::from(step.wrapping_add(1))
    }

    /// Waits until the GPU has finished `step` in slot `k`.
    fn wait_done(&mut self, k: usize, step: u32, abort: &dyn Fn() -> bool) -> Result<()> {
        let want = self.tag(step);
        let mut spins = 0u32;
        while self
            .ch
            .ctl(self.block, k)
            .done
            .load(std::sync::atomic::Ordering::Acquire)
            != want
        {
            if abort() {
                return Err(Error::new(
                    OpError::InternalError,
                    "the copy kernel of an async operation was never enqueued",
                ));
            }
            backoff(&mut spins);
        }
        self.posted[k] = None;
        Ok(())
    }

    /// The slot of the next step (`SLOT_SHIFT` spare bytes, then the
    /// payload), once the GPU is done with what it last held.
    pub(crate) fn slot(&mut self, abort: &dyn Fn() -> bool) -> Result<&mut [u8]> {
        let k = self.step as usize % self.ch.depth;
        if let Some(prev) = self.posted[k] {
            self.wait_done(k, prev, abort)?;
        }
        let addr = self.ch.slot_addr(self.block, k);
        // SAFETY: the slot lies in the leaked mapped allocation; the lease
        // makes this lane its only CPU user, and the GPU touches it only
        // between a post and the completion seen above, so nothing else
        // accesses it while the returned borrow of `self` lasts.
        Ok(
            unsafe {
                std::slice::from_raw_parts_mut(addr as *mut u8, SLOT_SHIFT + self.ch.payload)
            },
        )
    }

    fn post(&mut self, src: u64, dst: u64, count: usize, op: u64) -> u32 {
        use std::sync::atomic::Ordering::{Relaxed, Release};
        let k = self.step as usize % self.ch.depth;
        let c = self.ch.ctl(self.block, k);
        c.src.store(src, Relaxed);
        c.dst.store(dst, Relaxed);
        c.count.store(count as u64, Relaxed);
        c.op.store(op, Relaxed);
        // The kernel reads the descriptor (and slot) after it sees the tag.
        c.tag.store(self.tag(self.step), Release);
        let step = self.step;
        self.posted[k] = Some(step);
        self.step = step.wrapping_add(1);
        step
    }

    fn check_span(&self, at: usize, len: usize, dev: DevicePtr) -> Result<u64> {
        if at > SLOT_SHIFT || len > self.ch.payload || at != (dev.0 % SLOT_SHIFT as u64) as usize {
            return Err(Error::new(
                OpError::InternalError,
                format!(
                    "{len} bytes at {at} do not fit a copy slot for {:#x}",
                    dev.0
                ),
            ));
        }
        let k = self.step as usize % self.ch.depth;
        if self.posted[k].is_some() {
            return Err(Error::new(
                OpError::InternalError,
                "posting into a busy copy slot",
            ));
        }
        Ok((self.ch.slot_addr(self.block, k) + at) as u64)
    }

    /// Has the GPU copy `len` bytes at `at` of the next step's slot to `dst`
    /// (`at` is `dst`'s offset modulo 16).
    pub(crate) fn post_to_device(&mut self, at: usize, len: usize, dst: LentDevice) -> Result<()> {
        if len > dst.len {
            return Err(Error::new(
                OpError::InternalError,
                "copy longer than its device range",
            ));
        }
        let src = self.check_span(at, len, dst.ptr)?;
        self.post(src, dst.ptr.0, len, OP_COPY);
        Ok(())
    }

    /// Has the GPU copy `src` into the next step's slot, at `src`'s offset
    /// modulo 16; returns the step, for [`ChannelLane::take`].
    pub(crate) fn post_from_device(&mut self, src: LentDevice) -> Result<u32> {
        let at = (src.ptr.0 % SLOT_SHIFT as u64) as usize;
        let dst = self.check_span(at, src.len, src.ptr)?;
        Ok(self.post(src.ptr.0, dst, src.len, OP_COPY))
    }

    /// The bytes `step` (a [`ChannelLane::post_from_device`]) copied, once
    /// the GPU has finished it.
    pub(crate) fn take(&mut self, step: u32, abort: &dyn Fn() -> bool) -> Result<&[u8]> {
        let k = step as usize % self.ch.depth;
        if self.posted[k] != Some(step) {
            return Err(Error::new(
                OpError::InternalError,
                "taking a step never posted",
            ));
        }
        self.wait_done(k, step, abort)?;
        let addr = self.ch.slot_addr(self.block, k);
        // SAFETY: as in slot(): the GPU finished writing it (seen above) and
        // this lane is its only CPU user while the borrow lasts.
        Ok(unsafe { std::slice::from_raw_parts(addr as *const u8, SLOT_SHIFT + self.ch.payload) })
    }

    /// Ends this block of the kernel and waits until it has left.
    pub(crate) fn end(&mut self, abort: &dyn Fn() -> bool) -> Result<()> {
        for k in 0..self.ch.depth {
            if let Some(prev) = self.posted[k] {
                self.wait_done(k, prev, abort)?;
            }
        }
        let step = self.post(0, 0, 0, OP_END);
        let k = step as usize % self.ch.depth;
        self.wait_done(k, step, abort)
    }
}
// ======== end: copy channel of stream-ordered async I/O ========
