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
