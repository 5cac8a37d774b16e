//! Reads over TCP into device memory through each lane's own pinned
//! staging (`HIPFS_TCP_LANE_STAGING`, off by default: on an H100, 64 MiB
//! requests, `direct` gave 60-65% of the 16-socket loopback ceiling and
//! `pipeline` 73% where the default gave 78-82%, one run; see README).
//!
//! Why: the staged pipeline receives each chunk into a pinned bounce slab
//! of 4 MiB and copies it to the device afterwards, so the bytes the
//! socket writes land in slabs that left the CPU caches long ago (one per
//! chunk in flight: 16 to 32 slabs, 64 to 128 MiB). Loopback TCP carried a
//! file's pages at 23.6-27.0 GiB/s into 64 MiB per receiver and at
//! 32.2-37.2 into a reused 4 MiB buffer (H100 machine, same runs). Here the
//! server's WRITE of a read's bytes is received by the lane's reader thread
//! into one of its two pinned buffers (1 MiB by default), which the GPU
//! copies to the destination while the lane receives into the other: the
//! receive buffers of all lanes together stay a few MiB, in the caches.
//!
//! Modes: `direct` places every read into device memory this way, whole
//! (no staged pipeline, hence no readahead); `pipeline` keeps the staged
//! pipeline and its readahead, and has each chunk placed this way (into
//! the caller's device memory, or a readahead device slab) instead of
//! through a bounce slab. `HIPFS_TCP_LANE_STAGING_KB` sets the buffer size
//! (64 to 16384, default 1024).

use std::sync::{Arc, Mutex, OnceLock};

use hipfs_rdma::{DeviceSink, Stager};

use crate::error::Error;
use crate::gpu::{DevicePtr, Event, GpuRuntime, LentDevice, PinnedHost, StagingSlot, Stream};
use crate::stats;

/// How TCP reads into device memory use lane staging.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Not at all: the staged pipeline's bounce slabs.
    Off,
    /// Every read into device memory.
    Direct,
    /// Each chunk of the staged pipeline (readahead included).
    Pipeline,
}

/// The mode `HIPFS_TCP_LANE_STAGING` asks for (read once; an unknown
/// value is logged and means off).
pub(crate) fn mode() -> Mode {
    static V: OnceLock<Mode> = OnceLock::new();
    *V.get_or_init(|| match std::env::var("HIPFS_TCP_LANE_STAGING") {
        Err(_) => Mode::Off,
        Ok(v) => match v.trim() {
            "" | "0" | "off" => Mode::Off,
            "direct" => Mode::Direct,
            "pipeline" => Mode::Pipeline,
            other => {
                log::warn!(
                    "HIPFS_TCP_LANE_STAGING={other:?} is not off, direct or pipeline; lane staging stays off"
                );
                Mode::Off
            }
        },
    })
}

/// Bytes per staging buffer (`HIPFS_TCP_LANE_STAGING_KB`, read once).
fn piece() -> usize {
    static V: OnceLock<usize> = OnceLock::new();
    *V.get_or_init(|| {
        std::env::var("HIPFS_TCP_LANE_STAGING_KB")
            .ok()
            .and_then(|v| v.trim().parse::<usize>().ok())
            .map(|kb| kb.clamp(64, 16 << 10) << 10)
            .unwrap_or(1 << 20)
    })
}

/// The sink for device memory on `device` of `rt` (one per device for the
/// process, so each lane makes one stager per device).
pub(crate) fn sink(rt: &'static dyn GpuRuntime, device: i32) -> Arc<dyn DeviceSink> {
    static SINKS: Mutex<Vec<(i32, Arc<LaneSink>)>> = Mutex::new(Vec::new());
    let mut all = SINKS.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((_, s)) = all.iter().find(|(d, _)| *d == device) {
        return s.clone();
    }
    let s = Arc::new(LaneSink {
        rt,
        device,
        piece: piece(),
    });
    all.push((device, s.clone()));
    s
}

struct LaneSink {
    rt: &'static dyn GpuRuntime,
    device: i32,
    piece: usize,
}

impl DeviceSink for LaneSink {
    fn stager(&self) -> hipfs_rdma::Result<Box<dyn Stager>> {
        let make = || -> crate::error::Result<LaneStager> {
            let _bound = self.rt.bind(self.device)?;
            let slot = || -> crate::error::Result<StagingSlot> {
                Ok(StagingSlot::new(
                    PinnedHost::alloc(self.rt, self.piece)?,
                    Event::new(self.rt, self.device)?,
                ))
            };
            Ok(LaneStager {
                slots: [slot()?, slot()?],
                stream: Stream::new(self.rt, self.device)?,
                next: 0,
                rt: self.rt,
                device: self.device,
            })
        };
        make()
            .map(|s| Box::new(s) as Box<dyn Stager>)
            .map_err(to_transport)
    }
}

/// One lane's two pinned buffers and the stream their copies run on.
struct LaneStager {
    slots: [StagingSlot; 2],
    stream: Stream,
    next: usize,
    rt: &'static dyn GpuRuntime,
    device: i32,
}

fn to_transport(e: Error) -> hipfs_rdma::Error {
    hipfs_rdma::Error::Unsupported(format!("lane staging: {e}"))
}

impl Stager for LaneStager {
    fn next_buf(&mut self, len: usize) -> hipfs_rdma::Result<&mut [u8]> {
        let slot = &mut self.slots[self.next];
        let n = len.clamp(1, slot.len());
        // Waits for the copy that last used this buffer.
        slot.host(n).map_err(to_transport)
    }

    unsafe fn copy_out(&mut self, dst: u64, len: usize) -> hipfs_rdma::Result<()> {
        let _bound = self.rt.bind(self.device).map_err(to_transport)?;
        // The transport's promise (registered device memory, kept until
        // `flush` returned) is the lent-memory module's here: the range
        // was registered by `lent::register_device_staged_with`.
        // `copy_to_device` refuses a length past the buffer.
        let target = LentDevice::vouched(DevicePtr(dst), len);
        self.slots[self.next]
            .copy_to_device(target, &self.stream)
            .map_err(to_transport)?;
        stats::record_lane_staged(len);
        self.next = 1 - self.next;
        Ok(())
    }

    fn flush(&mut self) -> hipfs_rdma::Result<()> {
        let _bound = self.rt.bind(self.device).map_err(to_transport)?;
        for s in &mut self.slots {
            s.wait().map_err(to_transport)?;
        }
        Ok(())
    }
}
