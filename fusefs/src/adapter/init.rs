//! INIT negotiation: what the adapter asks of the kernel.

use fuser::{InitFlags, KernelConfig};
use log::{debug, warn};

use super::AdapterOptions;

/// Sets request sizes and asks for the capabilities the adapter uses; anything the kernel
/// cannot grant is logged and left at the kernel's value, never a failed mount.
pub(super) fn negotiate(opts: &AdapterOptions, kills_privileges: bool, config: &mut KernelConfig) {
    if let Err(max) = config.set_max_write(opts.max_write) {
        warn!("max_write {} refused, kernel limit {max}", opts.max_write);
        let _ = config.set_max_write(max);
    }
    if let Err(max) = config.set_max_readahead(opts.max_readahead) {
        // The kernel offers its own ceiling; take it rather than fail the mount.
        debug!(
            "max_readahead {} above kernel limit {max}",
            opts.max_readahead
        );
        let _ = config.set_max_readahead(max);
    }
    let _ = config.set_max_background(opts.max_background);
    // Each wanted capability is requested alone so one the kernel lacks does not drop the
    // others. Readdirplus (always, not "auto") returns attributes with names, which saves
    // one lookup round trip per entry of `ls -l`; parallel dirops lets lookups in one
    // directory run concurrently; auto_inval_data drops cached pages when a file changed
    // on the server (seen through mtime/size on getattr).
    for cap in [
        InitFlags::FUSE_DO_READDIRPLUS,
        InitFlags::FUSE_PARALLEL_DIROPS,
        InitFlags::FUSE_AUTO_INVAL_DATA,
        InitFlags::FUSE_ASYNC_DIO,
        InitFlags::FUSE_ATOMIC_O_TRUNC,
    ] {
        if let Err(missing) = config.add_capabilities(cap) {
            debug!("kernel lacks FUSE capability {missing:?}");
        }
    }
    if opts.posix_acl {
        if let Err(missing) = config.add_capabilities(InitFlags::FUSE_POSIX_ACL) {
            debug!("kernel lacks FUSE capability {missing:?}");
        }
    }
    if kills_privileges {
        if let Err(missing) = config.add_capabilities(InitFlags::FUSE_HANDLE_KILLPRIV_V2) {
            debug!("kernel lacks FUSE capability {missing:?}");
        }
    }
}
