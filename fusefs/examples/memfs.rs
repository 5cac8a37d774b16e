//! Mounts an empty in-memory filesystem until Ctrl-C or `umount`.
//!
//! ```text
//! cargo run -p hipfs-fusefs --example memfs -- /mnt/mem [--direct-io] [--ro] [--threads N]
//! ```

use std::sync::Arc;

use hipfs_fusefs::{mount_foreground, MemFs, MountConfig};

fn main() {
    let mut args = std::env::args().skip(1);
    let Some(mountpoint) = args.next() else {
        eprintln!("usage: memfs MOUNTPOINT [--direct-io] [--ro] [--threads N]");
        std::process::exit(2);
    };
    let mut config = MountConfig::new(mountpoint);
    config.fs_name = "memfs".into();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--direct-io" => config.direct_io = true,
            "--ro" => config.read_only = true,
            "--threads" => match args.next().and_then(|n| n.parse().ok()) {
                Some(n) => config.threads = n,
                None => {
                    eprintln!("--threads needs a number");
                    std::process::exit(2);
                }
            },
            other => {
                eprintln!("unknown argument {other:?}");
                std::process::exit(2);
            }
        }
    }
    eprintln!(
        "serving memfs on {} with {} threads; unmount with `umount {}`",
        config.mountpoint.display(),
        config.threads,
        config.mountpoint.display()
    );
    if let Err(e) = mount_foreground(Arc::new(MemFs::new()), config) {
        eprintln!("memfs: {e}");
        std::process::exit(1);
    }
}
