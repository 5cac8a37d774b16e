//! Memory the library stages bytes in between a file and the caller's
//! device memory, each with the event recorded after the last copy that
//! used it: a [`StagingSlot`] (pinned host memory, which the CPU fills or
//! drains) and a [`DeviceSlot`] (device memory, which readahead holds
//! fetched chunks in). Copies into and out of them are enqueued through
//! their own methods, so none can be in flight while the CPU holds a slab's
//! bytes, and neither is freed while a copy may still use it.

use super::{
    check_span, DeviceAllocation, DevicePtr, Event, GpuRuntime, LentDevice, PinnedHost, Stream,
};
use crate::error::{Error, OpError, Result};
use std::mem::ManuallyDrop;

/// When the GPU is done with a slab: the event recorded after its last
/// copy, and whether that is known.
struct Fence {
    event: Event,
    /// A copy was enqueued and not yet waited for.
    in_flight: bool,
    /// A copy may run and nothing can tell when it ends (an enqueue or
    /// record failed and the stream could not be drained): the slab is
    /// never handed out again, nor freed.
    poisoned: bool,
}

impl Fence {
    fn new(event: Event) -> Fence {
        Fence {
            event,
            in_flight: false,
            poisoned: false,
        }
    }

    fn usable(&self) -> Result<()> {
        if self.poisoned {
            return Err(Error::new(
                OpError::InternalError,
                "a staging slab's last copy cannot be waited for",
            ));
        }
        Ok(())
    }

    fn wait(&mut self) -> Result<()> {
        self.event.synchronize()?;
        self.in_flight = false;
        Ok(())
    }

    /// Records the event after an enqueue (marked in flight before it: even
    /// a failed enqueue may have started something). When the enqueue or
    /// the record failed, the event does not tell when the copy ends, so
    /// wait for the whole stream, or (if even that fails) poison the slab.
    fn settle(&mut self, enqueued: Result<()>, stream: &Stream) -> Result<()> {
        let r = enqueued.and_then(|_| self.event.record(stream));
        if r.is_err() {
            match stream.synchronize() {
                Ok(()) => self.in_flight = false,
                Err(_) => self.poisoned = true,
            }
        }
        r
    }

    /// Whether no copy uses the slab any more, without waiting: `false`
    /// while one may still run (or the slab is poisoned).
    fn idle_now(&mut self) -> bool {
        if self.poisoned {
            return false;
        }
        if self.in_flight && matches!(self.event.query(), Ok(true)) {
            self.in_flight = false;
        }
        !self.in_flight
    }

    /// Whether no copy can use the slab any more (waiting if one may).
    fn idle(&mut self) -> bool {
        if self.poisoned {
            return false;
        }
        !self.in_flight || self.event.synchronize().is_ok()
    }
}

/// A pinned slab and the event recorded after the GPU's last copy that
/// used it: the CPU reaches the bytes only once that copy completed, and
/// copies into or out of it are enqueued through its own methods, so no
/// copy can be in flight while the CPU holds the slice.
pub struct StagingSlot {
    buf: ManuallyDrop<PinnedHost>,
    fence: Fence,
}

impl StagingSlot {
    /// A slot over `buf`, with `event` of the device its copies run on.
    pub fn new(buf: PinnedHost, event: Event) -> StagingSlot {
        StagingSlot {
            buf: ManuallyDrop::new(buf),
            fence: Fence::new(event),
        }
    }
    /// Bytes of the slab.
    pub fn len(&self) -> usize {
        self.buf.len()
    }
    /// Whether the slab is empty.
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }
    /// Waits until the GPU is done with the slab (its last copy completed).
    pub fn wait(&mut self) -> Result<()> {
        self.fence.wait()
    }
    /// Whether the slab may be used again: no copy uses it any more
    /// (waiting for one that may), and none ever will unnoticed.
    pub fn reusable(&mut self) -> bool {
        self.fence.idle()
    }
    /// Whether the slab may be used again now, without waiting: no copy
    /// uses it any more (see [`StagingSlot::reusable`] for the waiting one).
    pub(crate) fn idle_now(&mut self) -> bool {
        self.fence.idle_now()
    }
    /// Whether the slab's last copy can never be waited for (it is never
    /// handed out again; dropping it leaks it).
    pub(crate) fn poisoned(&self) -> bool {
        self.fence.poisoned
    }
    /// The first `len` bytes, for the CPU, after waiting for the GPU if a
    /// copy may still use them; `len` past the slab is an error.
    pub fn host(&mut self, len: usize) -> Result<&mut [u8]> {
        self.fence.usable()?;
        if self.fence.in_flight {
            self.fence.wait()?;
        }
        let have = self.buf.len();
        self.buf.as_mut_slice().get_mut(..len).ok_or_else(|| {
            Error::new(
                OpError::InternalError,
                format!("{len} bytes do not fit a {have}-byte slab"),
            )
        })
    }
    /// Enqueues a copy of the slab's first `dst.len` bytes to `dst` on
    /// `stream`, then records the slot's event after it.
    pub(crate) fn copy_to_device(&mut self, dst: LentDevice, stream: &Stream) -> Result<()> {
        check_span("slab", 0, dst.len, self.buf.len())?;
        self.fence.usable()?;
        self.fence.in_flight = true;
        // SAFETY: the slab is ours and the CPU cannot touch it until the
        // event recorded below completed (`host` waits for it; Drop too;
        // `settle` covers a failed record); `dst` is device memory lent to
        // the request (LentDevice's maker checked it) or a DeviceSlot's,
        // borrowed mutably by the caller; the stream is live.
        let r = unsafe {
            self.buf
                .rt
                .copy_to_device_async(dst.ptr, self.buf.ptr(), dst.len, stream.id())
        };
        self.fence.settle(r, stream)
    }
    /// Enqueues a copy of the slab's first `len` bytes into `dst` on
    /// `stream`, recording both slots' events after it.
    pub(crate) fn copy_to_slot(
        &mut self,
        dst: &mut DeviceSlot,
        len: usize,
        stream: &Stream,
    ) -> Result<()> {
        check_span("device slab", 0, len, dst.len())?;
        dst.fence.usable()?;
        dst.fence.in_flight = true;
        let target = LentDevice {
            ptr: dst.mem.device_ptr(),
            len,
        };
        let r = self.copy_to_device(target, stream);
        dst.fence.settle(r, stream)
    }
    /// Enqueues a copy of `src` into the slab's first `src.len` bytes on
    /// `stream`, then records the slot's event after it.
    pub(crate) fn copy_from_device(&mut self, src: LentDevice, stream: &Stream) -> Result<()> {
        check_span("slab", 0, src.len, self.buf.len())?;
        self.fence.usable()?;
        self.fence.in_flight = true;
        // SAFETY: as in copy_to_device; the slab is written by the copy and
        // read by the CPU only after the event completed.
        let r = unsafe {
            self.buf
                .rt
                .copy_from_device_async(self.buf.ptr(), src.ptr, src.len, stream.id())
        };
        self.fence.settle(r, stream)
    }
}

impl Drop for StagingSlot {
    fn drop(&mut self) {
        // The slab may be freed only once no copy uses it; when that cannot
        // be known, leak it rather than free memory the GPU may still use.
        if !self.fence.idle() {
            log::warn!("a staging slab's last copy cannot be waited for; leaking the slab");
            return;
        }
        // SAFETY: dropped once, here, and never used again.
        unsafe { ManuallyDrop::drop(&mut self.buf) };
    }
}

/// Device memory the library holds bytes in (readahead keeps fetched chunks
/// there, so its pinned slabs are free again at once), and the event
/// recorded after the last copy into or out of it. Filled from a
/// [`StagingSlot`] ([`StagingSlot::copy_to_slot`]) and copied into the
/// request's device memory ([`DeviceSlot::copy_to_device`]); freed only
/// once no copy uses it.
pub struct DeviceSlot {
    mem: ManuallyDrop<DeviceAllocation<'static>>,
    fence: Fence,
}

impl DeviceSlot {
    /// `len` bytes of device memory on `device`.
    pub fn new(rt: &'static dyn GpuRuntime, device: i32, len: usize) -> Result<DeviceSlot> {
        let event = Event::new(rt, device)?;
        let mem = DeviceAllocation::new(rt, device, len)?;
        Ok(DeviceSlot {
            mem: ManuallyDrop::new(mem),
            fence: Fence::new(event),
        })
    }
    /// Bytes of the slab.
    pub fn len(&self) -> usize {
        self.mem.len()
    }
    /// Whether the slab is empty.
    pub fn is_empty(&self) -> bool {
        self.mem.is_empty()
    }
    /// Waits until the GPU is done with the slab (its last copy completed).
    pub fn wait(&mut self) -> Result<()> {
        self.fence.wait()
    }
    /// Where the slab is in device memory (for a filesystem that places a
    /// read there itself, once the slab is idle: see `reusable`).
    pub(crate) fn device_ptr(&self) -> DevicePtr {
        self.mem.device_ptr()
    }
    /// Whether the slab may be used again (see [`StagingSlot::reusable`]).
    pub fn reusable(&mut self) -> bool {
        self.fence.idle()
    }
    /// Enqueues a copy of the slab's first `dst.len` bytes to `dst` on
    /// `stream`, then records the slot's event after it. The slab's last
    /// copy (its fill, enqueued on another stream) is waited for first:
    /// the slab's bytes are whatever that fill left. A filler therefore
    /// need not wait for its own copy (readahead hands a slab over as soon
    /// as its fill is enqueued); a reader close behind the fetches waits
    /// here instead (120-138 us a chunk on the H100 machine).
    pub(crate) fn copy_to_device(&mut self, dst: LentDevice, stream: &Stream) -> Result<()> {
        check_span("device slab", 0, dst.len, self.len())?;
        self.fence.usable()?;
        if self.fence.in_flight {
            self.fence.wait()?;
        }
        self.fence.in_flight = true;
        let src: DevicePtr = self.mem.device_ptr();
        // SAFETY: the source lies inside this live allocation (checked),
        // freed only once the event recorded below completed (Drop); `dst`
        // is device memory lent to the request; the stream is live.
        let r = unsafe {
            self.mem
                .rt
                .copy_device_async(dst.ptr, src, dst.len, stream.id())
        };
        self.fence.settle(r, stream)
    }
}

impl Drop for DeviceSlot {
    fn drop(&mut self) {
        if !self.fence.idle() {
            log::warn!("a device slab's last copy cannot be waited for; leaking it");
            return;
        }
        // SAFETY: dropped once, here, and never used again.
        unsafe { ManuallyDrop::drop(&mut self.mem) };
    }
}
