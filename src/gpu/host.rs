//! The `host` runtime: system memory, always present. Streams are emulated
//! by one FIFO worker thread per stream value so stream-ordered async I/O
//! keeps its ordering semantics without a GPU.

use super::{DevicePtr, GpuRuntime, PointerInfo, StreamId};
use crate::error::{Error, OpError, Result};
use std::collections::HashMap;
use std::sync::mpsc::{channel, Sender};
use std::sync::{Arc, Condvar, Mutex};

type Job = Box<dyn FnOnce() + Send>;

struct HostStream {
    tx: Sender<Job>,
    pending: Arc<(Mutex<usize>, Condvar)>,
}

/// System memory only.
pub struct HostRuntime {
    streams: Mutex<HashMap<usize, HostStream>>,
}

impl HostRuntime {
    /// A host runtime with no streams yet.
    pub fn new() -> HostRuntime {
        HostRuntime {
            streams: Mutex::new(HashMap::new()),
        }
    }

    fn with_stream<T>(&self, stream: usize, f: impl FnOnce(&HostStream) -> T) -> Result<T> {
        let mut streams = self.streams.lock().unwrap_or_else(|p| p.into_inner());
        if let std::collections::hash_map::Entry::Vacant(slot) = streams.entry(stream) {
            let (tx, rx) = channel::<Job>();
            let pending = Arc::new((Mutex::new(0usize), Condvar::new()));
            let p2 = Arc::clone(&pending);
            std::thread::Builder::new()
                .name(format!("hipfs-stream-{stream:x}"))
                .spawn(move || {
                    for job in rx {
                        job();
                        let (m, cv) = &*p2;
                        let mut n = m.lock().unwrap_or_else(|p| p.into_inner());
                        *n -= 1;
                        cv.notify_all();
                    }
                })
                .map_err(|e| Error::new(OpError::InternalError, format!("stream thread: {e}")))?;
            slot.insert(HostStream { tx, pending });
        }
        Ok(f(&streams[&stream]))
    }
}

impl Default for HostRuntime {
    fn default() -> Self {
        HostRuntime::new()
    }
}

impl GpuRuntime for HostRuntime {
    fn name(&self) -> &'static str {
        "host"
    }

    fn device_count(&self) -> usize {
        0
    }

    fn pointer_info(&self, _ptr: usize) -> Option<PointerInfo> {
        None
    }

    unsafe fn copy_to_device(&self, _dst: DevicePtr, _src: &[u8]) -> Result<()> {
        Err(Error::new(
            OpError::HipMemoryTypeInvalid,
            "no GPU runtime: device copies are impossible",
        ))
    }

    unsafe fn copy_from_device(&self, _dst: &mut [u8], _src: DevicePtr) -> Result<()> {
        Err(Error::new(
            OpError::HipMemoryTypeInvalid,
            "no GPU runtime: device copies are impossible",
        ))
    }

    unsafe fn launch_host_func(&self, stream: StreamId, f: Box<dyn FnOnce() + Send>) -> Result<()> {
        let stream = stream.0;
        self.with_stream(stream, |s| {
            *s.pending.0.lock().unwrap_or_else(|p| p.into_inner()) += 1;
            if let Err(e) = s.tx.send(f) {
                *s.pending.0.lock().unwrap_or_else(|p| p.into_inner()) -= 1;
                return Err(Error::new(
                    OpError::InternalError,
                    format!("stream worker gone: {e}"),
                ));
            }
            Ok(())
        })?
    }

    unsafe fn stream_synchronize(&self, stream: StreamId) -> Result<()> {
        let stream = stream.0;
        let pending = self.with_stream(stream, |s| Arc::clone(&s.pending))?;
        let (m, cv) = &*pending;
        let mut n = m.lock().unwrap_or_else(|p| p.into_inner());
        while *n > 0 {
            n = cv.wait(n).unwrap_or_else(|p| p.into_inner());
        }
        Ok(())
    }
}

/// Checks with `mincore(2)` that every page of `[ptr, ptr+len)` is mapped:
/// an unmapped start is an invalid pointer, an unmapped later page a range error.
pub(crate) fn check_mapped(ptr: usize, len: usize) -> Result<()> {
    // SAFETY: sysconf has no memory-safety preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as usize;
    let start = ptr & !(page - 1);
    let end = ptr.saturating_add(len.max(1));
    let mut vec = [0u8; 64];
    // The first page decides between "invalid pointer" and "range error".
    let probe = |addr: usize, pages: usize, vec: &mut [u8]| -> bool {
        // SAFETY: mincore only writes `pages` bytes into `vec` (pages <= vec.len())
        // and reads nothing from the probed range.
        unsafe { libc::mincore(addr as *mut libc::c_void, pages * page, vec.as_mut_ptr()) == 0 }
    };
    if !probe(start, 1, &mut vec) {
        return Err(Error::new(
            OpError::HipPointerInvalid,
            format!("{ptr:#x} is not mapped memory"),
        ));
    }
    let mut addr = start;
    while addr < end {
        let pages = ((end - addr).div_ceil(page)).min(vec.len());
        if !probe(addr, pages, &mut vec) {
            return Err(Error::new(
                OpError::HipPointerRangeError,
                format!("range of {len} bytes at {ptr:#x} runs into unmapped memory"),
            ));
        }
        addr += pages * page;
    }
    Ok(())
}
