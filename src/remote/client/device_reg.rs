//! Device memory registered with a verbs connection, so the server's RDMA
//! WRITE lands in GPU memory with no host copy.
//!
//! Three ways, tried in order, each refusal logged once (with the reason)
//! and counted in [`crate::stats::device_registrations`]:
//! 1. dmabuf: the GPU runtime exports the range as a dmabuf and the NIC
//!    registers it (`ibv_reg_dmabuf_mr`) — the upstream kernel path;
//! 2. peer memory: `ibv_reg_mr` on the device address, which works where a
//!    peer-memory client (nvidia-peermem, amdgpu peer-direct) is loaded;
//! 3. neither: the caller stages through pinned host memory.
//!
//! TCP cannot place bytes in device memory (the receiving CPU would write
//! through a device address), so device memory always stages there.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use hipfs_rdma::{Connection, LocalRegion, TransportKind};

use crate::gpu::{DevicePtr, DmabufExport, GpuRuntime};
use crate::stats::{record_device_registration, DeviceRegistration};

/// A device registration and what must outlive it.
pub(crate) struct DeviceRegion {
    pub(crate) region: Arc<LocalRegion>,
    /// The dmabuf the NIC registered (kept open as long as the region).
    _dmabuf: Option<DmabufExport>,
}

static SAID_DMABUF: AtomicBool = AtomicBool::new(false);
static SAID_PEER: AtomicBool = AtomicBool::new(false);
static SAID_TCP: AtomicBool = AtomicBool::new(false);

fn first(said: &AtomicBool) -> bool {
    !said.swap(true, Ordering::Relaxed)
}

/// Registers device memory `[base, base + len)` with `conn`, the first way
/// that works; `None` (counted as staged) when none does.
pub(crate) fn register_device(
    conn: &dyn Connection,
    rt: &dyn GpuRuntime,
    base: usize,
    len: usize,
) -> Option<DeviceRegion> {
    if conn.kind() != TransportKind::Verbs {
        if first(&SAID_TCP) {
            log::info!(
                "device memory over {}: staged through pinned host memory (only verbs place bytes in GPU memory)",
                conn.kind()
            );
        }
        record_device_registration(DeviceRegistration::Staged);
        return None;
    }
    let span = crate::lent::LentSpan::of_registration(base, len);
    match rt.export_dmabuf(DevicePtr(base as u64), len) {
        Ok(export) => match crate::lent::register_device_dmabuf_with(conn, &export, span) {
            Ok(region) => {
                record_device_registration(DeviceRegistration::Dmabuf);
                return Some(DeviceRegion {
                    region,
                    _dmabuf: Some(export),
                });
            }
            Err(e) => refused(
                &SAID_DMABUF,
                DeviceRegistration::DmabufRefused,
                &format!("the NIC refused the dmabuf of {len} bytes at {base:#x}: {e}"),
            ),
        },
        Err(e) => refused(
            &SAID_DMABUF,
            DeviceRegistration::DmabufRefused,
            &format!(
                "{} did not export {len} bytes at {base:#x} as a dmabuf: {e}",
                rt.name()
            ),
        ),
    }
    match crate::lent::register_device_address_with(conn, span) {
        Ok(region) => {
            record_device_registration(DeviceRegistration::PeerMemory);
            Some(DeviceRegion {
                region,
                _dmabuf: None,
            })
        }
        Err(e) => {
            refused(
                &SAID_PEER,
                DeviceRegistration::PeerMemoryRefused,
                &format!(
                    "ibv_reg_mr on the device address {base:#x} (peer memory) failed: {e}; staging through pinned host memory"
                ),
            );
            record_device_registration(DeviceRegistration::Staged);
            None
        }
    }
}

fn refused(said: &AtomicBool, what: DeviceRegistration, why: &str) {
    record_device_registration(what);
    if first(said) {
        log::info!("device memory registration: {why}");
    } else {
        log::debug!("device memory registration: {why}");
    }
}

/// Registrations of device allocations nobody registered with the driver
/// (a tensor handed straight to a read), keyed by allocation, so repeated
/// reads into the same tensor do not register again. Bounded: the least
/// recently used goes first.
#[derive(Default)]
pub(crate) struct AllocationCache {
    entries: Mutex<Vec<CachedAllocation>>,
}

struct CachedAllocation {
    /// (allocation id, base, size): a new allocation at the same address
    /// has another id (where the runtime gives ids) and misses.
    key: (Option<u64>, usize, usize),
    region: Option<Arc<DeviceRegion>>,
}

/// Most allocations kept registered per connection.
const CACHED_ALLOCATIONS: usize = 64;

impl AllocationCache {
    /// The registration of the whole allocation holding `[ptr, ptr + len)`
    /// (made now if needed), with the offset of `ptr` in it; `None` when
    /// the memory is not one device allocation or cannot be registered
    /// (remembered: it is not tried again for that allocation).
    pub(crate) fn region_for(
        &self,
        conn: &dyn Connection,
        rt: &dyn GpuRuntime,
        ptr: usize,
        len: usize,
    ) -> Option<(Arc<DeviceRegion>, u64)> {
        let info = rt.pointer_info(ptr)?;
        if info.kind != crate::gpu::MemoryKind::Device
            || ptr.checked_add(len)? > info.base.checked_add(info.size)?
        {
            return None;
        }
        let id = rt.allocation_id(DevicePtr(ptr as u64));
        if id.is_none() {
            // Without an id a freed tensor's successor at the same address
            // would hit the old registration (and the NIC would write the
            // old pages): register for this request only.
            let region = register_device(conn, rt, info.base, info.size).map(Arc::new)?;
            return Some((region, (ptr - info.base) as u64));
        }
        let key = (id, info.base, info.size);
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(i) = entries.iter().position(|e| e.key == key) {
            let e = entries.remove(i);
            let hit = e.region.clone();
            entries.push(e);
            return hit.map(|r| (r, (ptr - info.base) as u64));
        }
        // Registering pins the allocation; done under the lock so two
        // readers of one tensor register it once.
        let region = register_device(conn, rt, info.base, info.size).map(Arc::new);
        if entries.len() >= CACHED_ALLOCATIONS {
            entries.remove(0);
        }
        entries.push(CachedAllocation {
            key,
            region: region.clone(),
        });
        region.map(|r| (r, (ptr - info.base) as u64))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Result;
    use crate::gpu::{MemoryKind, PointerInfo, StreamId};
    use hipfs_rdma::{ConnectionStats, RemoteDescriptor};
    use std::time::Duration;

    /// A NIC stand-in: says it is verbs, refuses or takes dmabufs and
    /// device addresses as told, and registers through a real TCP
    /// connection underneath (so the region it returns is real).
    struct Nic {
        inner: Box<dyn Connection>,
        takes_dmabuf: bool,
        takes_address: bool,
    }

    impl Connection for Nic {
        fn kind(&self) -> TransportKind {
            TransportKind::Verbs
        }
        fn peer_addr(&self) -> String {
            self.inner.peer_addr()
        }
        fn send(&self, msg: &[u8]) -> hipfs_rdma::Result<()> {
            self.inner.send(msg)
        }
        fn recv(&self, timeout: Duration) -> hipfs_rdma::Result<Vec<u8>> {
            self.inner.recv(timeout)
        }
        unsafe fn register(
            &self,
            ptr: *mut u8,
            len: usize,
        ) -> hipfs_rdma::Result<Arc<LocalRegion>> {
            if !self.takes_address {
                return Err(hipfs_rdma::Error::Unsupported(
                    "no peer-memory client".into(),
                ));
            }
            // The test's memory outlives the region (see the tests).
            crate::lent::register_buffer_with(
                &*self.inner,
                crate::lent::LentSpan::of_registration(ptr as usize, len),
            )
        }
        unsafe fn register_dmabuf(
            &self,
            _fd: std::os::fd::RawFd,
            _offset: u64,
            len: usize,
            iova: u64,
        ) -> hipfs_rdma::Result<Arc<LocalRegion>> {
            if !self.takes_dmabuf {
                return Err(hipfs_rdma::Error::Unsupported("rxe refuses dmabufs".into()));
            }
            // As in `register`: `iova` is the test's memory.
            crate::lent::register_buffer_with(
                &*self.inner,
                crate::lent::LentSpan::of_registration(iova as usize, len),
            )
        }
        fn write_remote(
            &self,
            local: &LocalRegion,
            local_off: usize,
            len: usize,
            remote: &RemoteDescriptor,
            remote_off: u64,
        ) -> hipfs_rdma::Result<()> {
            self.inner
                .write_remote(local, local_off, len, remote, remote_off)
        }
        fn write_remote_from_file(
            &self,
            file: std::os::fd::BorrowedFd<'_>,
            file_offset: u64,
            len: usize,
            remote: &RemoteDescriptor,
            remote_off: u64,
        ) -> hipfs_rdma::Result<usize> {
            self.inner
                .write_remote_from_file(file, file_offset, len, remote, remote_off)
        }
        fn read_remote(
            &self,
            local: &LocalRegion,
            local_off: usize,
            len: usize,
            remote: &RemoteDescriptor,
            remote_off: u64,
        ) -> hipfs_rdma::Result<()> {
            self.inner
                .read_remote(local, local_off, len, remote, remote_off)
        }
        fn stats(&self) -> ConnectionStats {
            self.inner.stats()
        }
        fn close(&self) {
            self.inner.close()
        }
    }

    /// A GPU stand-in whose "device memory" is one host range; exports a
    /// dmabuf (a memfd stands in for it: the NIC stand-in never reads it)
    /// or refuses, as told.
    struct Gpu {
        base: usize,
        len: usize,
        exports: bool,
    }

    impl GpuRuntime for Gpu {
        fn name(&self) -> &'static str {
            "test-gpu"
        }
        fn device_count(&self) -> usize {
            1
        }
        fn pointer_info(&self, ptr: usize) -> Option<PointerInfo> {
            (ptr >= self.base && ptr < self.base + self.len).then_some(PointerInfo {
                kind: MemoryKind::Device,
                base: self.base,
                size: self.len,
                device: 0,
            })
        }
        unsafe fn copy_to_device(&self, _dst: DevicePtr, _src: &[u8]) -> Result<()> {
            unreachable!("registration copies nothing")
        }
        unsafe fn copy_from_device(&self, _dst: &mut [u8], _src: DevicePtr) -> Result<()> {
            unreachable!("registration copies nothing")
        }
        unsafe fn launch_host_func(
            &self,
            _s: StreamId,
            _f: Box<dyn FnOnce() + Send>,
        ) -> Result<()> {
            unreachable!("no streams here")
        }
        unsafe fn stream_synchronize(&self, _s: StreamId) -> Result<()> {
            unreachable!("no streams here")
        }
        fn export_dmabuf(&self, ptr: DevicePtr, len: usize) -> Result<DmabufExport> {
            if !self.exports {
                return Err(crate::error::Error::new(
                    crate::error::OpError::IoNotSupported,
                    "no dmabuf export here",
                ));
            }
            let f = tempfile::tempfile().expect("stand-in fd");
            Ok(DmabufExport {
                fd: f.into(),
                start: ptr,
                len,
            })
        }
        fn allocation_id(&self, _ptr: DevicePtr) -> Option<u64> {
            Some(7)
        }
    }

    fn tcp_pair() -> (Box<dyn Connection>, Box<dyn Connection>) {
        let cfg = hipfs_rdma::TransportConfig {
            kind: TransportKind::Tcp,
            ..Default::default()
        };
        let l = hipfs_rdma::listen("127.0.0.1:0", &cfg).unwrap();
        let addr = l.local_addr();
        let t = std::thread::spawn(move || l.accept().unwrap());
        let c = hipfs_rdma::connect(&addr, &cfg).unwrap();
        (c, t.join().unwrap())
    }

    #[test]
    fn device_memory_tries_dmabuf_then_peer_memory_then_stages_counting_each_outcome() {
        let mut mem = vec![0u8; 1 << 20];
        let base = mem.as_mut_ptr() as usize;
        let cases = [
            // (gpu exports, nic takes dmabuf, nic takes address) -> outcome
            (true, true, true, Some(DeviceRegistration::Dmabuf)),
            (true, false, true, Some(DeviceRegistration::PeerMemory)),
            (false, false, true, Some(DeviceRegistration::PeerMemory)),
            (true, false, false, None),
        ];
        for (exports, takes_dmabuf, takes_address, want) in cases {
            let (c, _server) = tcp_pair();
            let nic = Nic {
                inner: c,
                takes_dmabuf,
                takes_address,
            };
            let gpu = Gpu {
                base,
                len: mem.len(),
                exports,
            };
            let before = crate::stats::device_registrations();
            let got = register_device(&nic, &gpu, base, 1 << 20);
            let after = crate::stats::device_registrations();
            let case = format!("exports {exports}, dmabuf {takes_dmabuf}, address {takes_address}");
            assert_eq!(got.is_some(), want.is_some(), "{case}");
            // Counters are process-wide and other tests register too:
            // each attempt of this case shows up (at least) once.
            let grew = |f: fn(&crate::stats::DeviceRegistrations) -> u64| f(&after) > f(&before);
            match want {
                Some(DeviceRegistration::Dmabuf) => {
                    assert!(grew(|d| d.dmabuf), "{case}");
                    assert!(got.as_ref().is_some_and(|r| r._dmabuf.is_some()), "{case}");
                }
                Some(_) => {
                    assert!(grew(|d| d.dmabuf_refused), "{case}");
                    assert!(grew(|d| d.peer_memory), "{case}");
                    assert!(got.as_ref().is_some_and(|r| r._dmabuf.is_none()), "{case}");
                }
                None => {
                    assert!(grew(|d| d.dmabuf_refused), "{case}");
                    assert!(grew(|d| d.peer_memory_refused), "{case}");
                    assert!(grew(|d| d.staged), "{case}");
                }
            }
            if let Some(r) = got {
                assert_eq!(r.region.len(), 1 << 20, "{case}");
            }
        }
        drop(mem);
    }

    #[test]
    fn tcp_never_registers_device_memory_and_counts_it_staged() {
        let mut mem = vec![0u8; 4096];
        let base = mem.as_mut_ptr() as usize;
        let (c, _server) = tcp_pair();
        let gpu = Gpu {
            base,
            len: 4096,
            exports: true,
        };
        let before = crate::stats::device_registrations().staged;
        assert!(register_device(&*c, &gpu, base, 4096).is_none());
        assert!(crate::stats::device_registrations().staged > before);
        drop(mem);
    }

    #[test]
    fn an_allocation_is_registered_once_and_reads_inside_it_reuse_the_registration() {
        let mut mem = vec![0u8; 1 << 20];
        let base = mem.as_mut_ptr() as usize;
        let (c, _server) = tcp_pair();
        let nic = Nic {
            inner: c,
            takes_dmabuf: true,
            takes_address: true,
        };
        let gpu = Gpu {
            base,
            len: mem.len(),
            exports: true,
        };
        let cache = AllocationCache::default();
        let (a, off_a) = cache.region_for(&nic, &gpu, base + 4096, 8192).unwrap();
        let (b, off_b) = cache.region_for(&nic, &gpu, base + 65536, 4096).unwrap();
        assert!(Arc::ptr_eq(&a, &b), "one registration for the allocation");
        assert_eq!((off_a, off_b), (4096, 65536));
        assert!(cache
            .region_for(&nic, &gpu, base + mem.len() - 10, 20)
            .is_none());
        drop((a, b, cache));
        drop(mem);
    }
}
