//! The ibverbs transport, in three layers after cudarc: `rdma-sys` (raw
//! declarations), `result` (status codes to `Result`), `safe` (RAII
//! owners whose `Arc`s keep parents alive), then connection management
//! (`cm`, `setup`) and the connection itself (`conn`).

mod cm;
mod conn;
mod resources;
mod result;
mod safe;
mod setup;

pub use conn::VerbsConnection;
pub use setup::{DualListener, VerbsListener};

use crate::{DeviceInfo, Result};

/// The host's RDMA devices; empty when libibverbs finds none, including
/// ENOSYS from a kernel without RDMA support.
pub fn devices() -> Result<Vec<DeviceInfo>> {
    safe::device_infos()
}

/// See [`crate::probe_registrations`].
///
/// # Safety
/// As there.
pub unsafe fn probe_registrations(
    dmabuf: Option<(std::os::fd::RawFd, u64, usize, u64)>,
    peer: Option<(*mut u8, usize)>,
) -> Vec<crate::RegistrationProbe> {
    // SAFETY: the caller's promise, passed on.
    unsafe { safe::probe_registrations(dmabuf, peer) }
}

#[cfg(test)]
mod tests {
    #[test]
    fn devices_match_what_the_kernel_exposes_and_none_is_an_empty_list() {
        let sys = std::fs::read_dir("/sys/class/infiniband")
            .map(|d| d.count())
            .unwrap_or(0);
        let devs = super::devices().expect("no devices must not be an error");
        assert_eq!(devs.len(), sys, "{devs:?}");
    }
}
