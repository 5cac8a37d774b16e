//! Heap memory owned by the crate: page-aligned buffers (message rings,
//! benchmark buffers) and registered staging memory ([`OwnedRegion`]).

use crate::error::{Error, Result};

// Only the verbs transport uses page buffers.
#[cfg_attr(not(feature = "verbs"), allow(dead_code))]
pub(crate) struct PageBuffer {
    ptr: *mut u8,
    layout: std::alloc::Layout,
}

// SAFETY: a plain heap allocation; users synchronise access to its bytes.
unsafe impl Send for PageBuffer {}
// SAFETY: as above.
unsafe impl Sync for PageBuffer {}

#[cfg_attr(not(feature = "verbs"), allow(dead_code))]
impl PageBuffer {
    pub(crate) fn new(len: usize) -> Result<Self> {
        let layout = std::alloc::Layout::from_size_align(len.max(1), 4096)
            .map_err(|e| Error::InvalidArgument(format!("buffer of {len} bytes: {e}")))?;
        // SAFETY: layout has a non-zero size.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        if ptr.is_null() {
            return Err(Error::InvalidArgument(format!(
                "cannot allocate {len} bytes"
            )));
        }
        Ok(PageBuffer { ptr, layout })
    }

    pub(crate) fn ptr(&self) -> *mut u8 {
        self.ptr
    }

    pub(crate) fn len(&self) -> usize {
        self.layout.size()
    }
}

impl Drop for PageBuffer {
    fn drop(&mut self) {
        // SAFETY: allocated in new() with this layout.
        unsafe { std::alloc::dealloc(self.ptr, self.layout) };
    }
}

/// Zeroed heap memory owned together with its registration on one
/// connection: the safe way to register memory allocated for the purpose
/// (staging and receive buffers).
///
/// The memory is freed only after the last clone of the region is gone:
/// if a clone is still alive when the owner drops, the memory is leaked
/// (with a warning) rather than freed under a live registration.
///
/// The peer may write the memory through the region while a one-sided
/// operation runs; [`OwnedRegion::bytes`] and [`OwnedRegion::bytes_mut`]
/// are for the times between them (before a request, after its reply).
pub struct OwnedRegion {
    region: Option<std::sync::Arc<crate::LocalRegion>>,
    mem: Option<Box<[u8]>>,
}

impl OwnedRegion {
    /// `len` zeroed bytes registered on `conn`.
    pub fn new(conn: &dyn crate::Connection, len: usize) -> Result<OwnedRegion> {
        let mut mem = vec![0u8; len].into_boxed_slice();
        // SAFETY: the heap block does not move with the Box and is freed
        // only once no clone of the region is left (see `release`).
        let region = unsafe { conn.register(mem.as_mut_ptr(), mem.len()) }?;
        Ok(OwnedRegion {
            region: Some(region),
            mem: Some(mem),
        })
    }

    /// The registration (clone it to keep it for an operation in flight).
    pub fn region(&self) -> &std::sync::Arc<crate::LocalRegion> {
        match &self.region {
            Some(r) => r,
            None => unreachable!("the region is only taken in release()"),
        }
    }

    /// The memory.
    pub fn bytes(&self) -> &[u8] {
        self.mem.as_deref().unwrap_or(&[])
    }

    /// The memory, for filling it before an operation.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        self.mem.as_deref_mut().unwrap_or(&mut [])
    }

    /// Bytes owned.
    pub fn len(&self) -> usize {
        self.bytes().len()
    }

    /// Whether no bytes are owned.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Deregisters and hands the memory over (a copy when a clone of the
    /// region is still alive, whose memory then stays allocated).
    pub fn into_vec(mut self) -> Vec<u8> {
        match self.release() {
            Some(mem) => mem.into_vec(),
            None => self.bytes().to_vec(),
        }
    }

    /// Drops the registration; the memory if no region clone is left.
    fn release(&mut self) -> Option<Box<[u8]>> {
        let region = self.region.take()?;
        let unique = std::sync::Arc::strong_count(&region) == 1;
        drop(region);
        if unique {
            self.mem.take()
        } else {
            log::warn!("a registered buffer outlives its owner; leaking its memory");
            if let Some(mem) = self.mem.take() {
                // Still registered through the other clone: never free it.
                let kept: &'static mut [u8] = Box::leak(mem);
                self.mem = Some(kept.to_vec().into_boxed_slice());
            }
            None
        }
    }
}

impl Drop for OwnedRegion {
    fn drop(&mut self) {
        drop(self.release());
    }
}

/// `len` bytes inside a live registered TCP region, found by a
/// bounds-checked lookup ([`RegisteredSpan::within`]): the one place where
/// the TCP transport moves bytes between the socket and registered memory.
///
/// A [`Range`](crate::tcp::regions::Range) exists only for memory handed to
/// the unsafe `Connection::register`, whose contract keeps the memory valid
/// until the region is dropped; the key table's slot lock, held by the
/// caller while the span is used, keeps the region from being dropped
/// meanwhile. The bytes are never formed into Rust references: the peer (or
/// the application, for memory it lent) may change them concurrently.
pub(crate) struct RegisteredSpan {
    ptr: *mut u8,
    len: usize,
}

impl RegisteredSpan {
    /// `[addr, addr+len)` when it lies inside `range`.
    pub(crate) fn within(range: &crate::tcp::regions::Range, addr: u64, len: u64) -> Option<Self> {
        let len = usize::try_from(len).ok()?;
        range
            .sub(addr, len as u64)
            .map(|ptr| RegisteredSpan { ptr, len })
    }

    /// Sends the span's bytes on a lane's sending half (plain or TLS).
    pub(crate) fn send(
        &self,
        tx: &mut crate::tcp::stream::TxStream,
        more: bool,
    ) -> std::io::Result<()> {
        // SAFETY: inside a live registered region (see the type's doc),
        // readable for the call.
        unsafe { tx.send_raw(self.ptr, self.len, more) }
    }

    /// Fills the span with exactly its length of bytes from a lane's
    /// receiving half (plain or TLS).
    pub(crate) fn recv(&self, rx: &mut crate::tcp::stream::RxStream) -> std::io::Result<()> {
        // SAFETY: inside a live registered region (see the type's doc),
        // writable for the call.
        unsafe { rx.recv_raw(self.ptr, self.len) }
    }
}

/// `len` bytes inside a live registered TCP device region (see
/// [`crate::Connection::register_device`]), found by a bounds-checked
/// lookup: received through a lane's [`Stager`](crate::Stager), never
/// touched by the CPU.
pub(crate) struct DeviceSpan {
    addr: u64,
    len: u64,
}

impl DeviceSpan {
    /// `[addr, addr+len)` when it lies inside `range`.
    pub(crate) fn within(range: &crate::tcp::regions::Range, addr: u64, len: u64) -> Option<Self> {
        range.sub(addr, len).map(|_| DeviceSpan { addr, len })
    }

    /// Receives the span's bytes from a lane into `stager`'s buffers and
    /// has it copy each one to the span, waiting for the last copy (on
    /// every path: no copy runs once this returns). Stream errors come back
    /// as the outer error; a stager's failure as the inner one, after the
    /// rest of the span's bytes were read off the stream (which stays in
    /// step).
    pub(crate) fn recv(
        &self,
        stager: &mut dyn crate::Stager,
        rx: &mut crate::tcp::stream::RxStream,
    ) -> std::io::Result<crate::Result<()>> {
        let mut done = 0u64;
        let mut failed = None;
        while done < self.len && failed.is_none() {
            let want = usize::try_from(self.len - done).unwrap_or(usize::MAX);
            let buf = match stager.next_buf(want) {
                Ok(b) => b,
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            };
            let n = buf.len().min(want);
            rx.recv_bytes(&mut buf[..n])?;
            done += n as u64;
            // SAFETY: inside the registered device range (checked by
            // `within`), which the caller keeps registered (it holds the
            // slot's lock) until this returns, after `flush`.
            failed = unsafe { stager.copy_out(self.addr + done - n as u64, n) }.err();
        }
        // On every path: no copy may run once the caller lets the region go.
        let flushed = stager.flush();
        rx.discard(self.len - done)?;
        Ok(match failed {
            Some(e) => Err(e),
            None => flushed,
        })
    }
}

/// Tries, on every RDMA device, to register `dmabuf` = (fd, offset, len,
/// iova) and the range `peer` = (address, len), and drops the
/// registrations again. Empty without devices or without verbs.
///
/// # Safety
/// `dmabuf`'s fd must be a dmabuf and `peer` memory (host or device) that
/// stays allocated for the call.
pub unsafe fn probe_registrations(
    dmabuf: Option<(std::os::fd::RawFd, u64, usize, u64)>,
    peer: Option<(*mut u8, usize)>,
) -> Vec<crate::RegistrationProbe> {
    #[cfg(feature = "verbs")]
    {
        // SAFETY: the caller's promise, passed on.
        unsafe { crate::verbs::probe_registrations(dmabuf, peer) }
    }
    #[cfg(not(feature = "verbs"))]
    {
        let _ = (dmabuf, peer);
        Vec::new()
    }
}
