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

use rdma_sys::*;

use crate::{DeviceInfo, Error, Result};

/// The host's RDMA devices; empty when libibverbs finds none, including
/// ENOSYS from a kernel without RDMA support.
pub fn devices() -> Result<Vec<DeviceInfo>> {
    let mut n = 0i32;
    // SAFETY: n receives the count; the list is freed below.
    let list = unsafe { ibv_get_device_list(&mut n) };
    if list.is_null() {
        let e = std::io::Error::last_os_error();
        return match e.raw_os_error() {
            Some(libc::ENOSYS) | Some(libc::ENODEV) | Some(libc::ENOENT) | Some(0) | None => {
                Ok(Vec::new())
            }
            _ => Err(Error::Verbs {
                call: "ibv_get_device_list",
                source: e,
            }),
        };
    }
    let mut out = Vec::new();
    for i in 0..n.max(0) as usize {
        // SAFETY: list has n entries.
        let dev = unsafe { *list.add(i) };
        if dev.is_null() {
            break;
        }
        // SAFETY: dev is a live entry of the list.
        let name = unsafe {
            let p = ibv_get_device_name(dev);
            if p.is_null() {
                String::new()
            } else {
                std::ffi::CStr::from_ptr(p).to_string_lossy().into_owned()
            }
        };
        // SAFETY: as above; the GUID comes in network order.
        let guid = u64::from_be(unsafe { ibv_get_device_guid(dev) });
        let (mut port_active, mut link_layer) = (false, String::from("unknown"));
        // SAFETY: dev live; the context is closed right after.
        let ctx = unsafe { ibv_open_device(dev) };
        if !ctx.is_null() {
            // SAFETY: all-zero port attr is valid output storage.
            let mut pa: ibv_port_attr = unsafe { std::mem::zeroed() };
            // SAFETY: ctx live, port 1 exists on every device.
            if unsafe { ibv_query_port(ctx, 1, &mut pa as *mut ibv_port_attr as *mut _) } == 0 {
                port_active = pa.state == ibv_port_state::IBV_PORT_ACTIVE;
                // IBV_LINK_LAYER_INFINIBAND = 1, IBV_LINK_LAYER_ETHERNET = 2.
                link_layer = match pa.link_layer {
                    2 => "Ethernet".into(),
                    0 | 1 => "InfiniBand".into(),
                    _ => "unknown".into(),
                };
            }
            // SAFETY: opened above.
            unsafe { ibv_close_device(ctx) };
        }
        out.push(DeviceInfo {
            name,
            guid,
            port_active,
            link_layer,
        });
    }
    // SAFETY: from ibv_get_device_list, freed once.
    unsafe { ibv_free_device_list(list) };
    Ok(out)
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
