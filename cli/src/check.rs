//! `hipfs check [DIR]`: what this host can do.

use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// One line of the report.
pub struct Finding {
    pub what: String,
    pub ok: bool,
    pub detail: String,
}

fn finding(what: &str, ok: bool, detail: impl Into<String>) -> Finding {
    Finding {
        what: what.to_string(),
        ok,
        detail: detail.into(),
    }
}

/// Checks GPU runtimes, RDMA devices, FUSE and (for `dir`) O_DIRECT support.
pub fn run_checks(dir: &Path) -> Vec<Finding> {
    let mut out = Vec::new();
    let (maj, min, pat) = hipfs::get_version();
    out.push(finding("hipfs", true, format!("version {maj}.{min}.{pat}")));
    for (name, r) in hipfs::gpu::probe_report() {
        match r {
            Ok(_) if name == "host" => out.push(finding(
                "runtime host",
                true,
                "system memory (always available)",
            )),
            Ok(n) => out.push(finding(
                &format!("runtime {name}"),
                n > 0,
                format!("{n} device(s)"),
            )),
            Err(why) => out.push(finding(&format!("runtime {name}"), false, why)),
        }
    }
    out.push(finding(
        "runtime in use",
        true,
        hipfs::gpu::runtime().name().to_string(),
    ));
    match hipfs_rdma_devices() {
        Ok(0) => out.push(finding(
            "rdma",
            false,
            "no RDMA devices: the TCP transport will be used",
        )),
        Ok(n) => out.push(finding("rdma", true, format!("{n} verbs device(s)"))),
        Err(e) => out.push(finding("rdma", false, e)),
    }
    out.extend(check_rdma_memory());
    let fuse = Path::new("/dev/fuse");
    match std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(fuse)
    {
        Ok(_) => out.push(finding("fuse", true, "/dev/fuse opens: hipfs mount works")),
        Err(e) => out.push(finding(
            "fuse",
            false,
            format!("/dev/fuse: {e} (hipfs mount needs FUSE)"),
        )),
    }
    out.push(check_direct_io(dir));
    out
}

/// Whether device memory can be exported as a dmabuf, and whether each RDMA
/// device registers a dmabuf and a device address (peer memory), probed
/// with real allocations.
fn check_rdma_memory() -> Vec<Finding> {
    let p = hipfs::gpu::probe_rdma_memory(hipfs::gpu::runtime());
    let mut out = Vec::new();
    match &p.device_export {
        Some(Ok(name)) => out.push(finding(
            "gpu dmabuf export",
            true,
            format!("device memory exports as a dmabuf ({name})"),
        )),
        Some(Err(e)) => out.push(finding("gpu dmabuf export", false, e.clone())),
        None => {}
    }
    let verdict = |r: &Option<Result<(), String>>| match r {
        None => "not tried".to_string(),
        Some(Ok(())) => "accepted".to_string(),
        Some(Err(e)) => format!("refused ({e})"),
    };
    for n in &p.nics {
        let ok = matches!(n.dmabuf, Some(Ok(()))) || matches!(n.peer_memory, Some(Ok(())));
        out.push(finding(
            &format!("rdma {} gpu memory", n.device),
            ok,
            format!(
                "dmabuf [{}]: {}; peer memory: {}",
                p.dmabuf_source,
                verdict(&n.dmabuf),
                verdict(&n.peer_memory)
            ),
        ));
    }
    out
}

fn hipfs_rdma_devices() -> Result<usize, String> {
    // The transport crate answers "no devices" on hosts without verbs.
    Ok(hipfs::rdma_device_count())
}

fn check_direct_io(dir: &Path) -> Finding {
    let probe = dir.join(format!(".hipfs-check-{}", std::process::id()));
    let opened = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(libc::O_DIRECT)
        .open(&probe);
    let res = match opened {
        Err(e) => finding(
            "o_direct",
            false,
            format!(
                "{}: O_DIRECT refused ({e}); hipfs uses buffered I/O here",
                dir.display()
            ),
        ),
        Ok(file) => {
            let f = hipfs::io::posix::PosixFile::open(
                file.as_raw_fd(),
                &hipfs::config::Config::default(),
            );
            let detail = match f {
                Ok(pf) if pf.direct.is_some() => format!(
                    "{} ({}): O_DIRECT works, offset alignment {} B, memory alignment {} B",
                    dir.display(),
                    pf.fs_name,
                    pf.offset_align,
                    pf.mem_align
                ),
                Ok(pf) => format!("{} ({}): buffered only", dir.display(), pf.fs_name),
                Err(e) => format!("{}: {e}", dir.display()),
            };
            // `file` closes the descriptor when it goes out of scope, after `f`.
            finding("o_direct", true, detail)
        }
    };
    let _ = std::fs::remove_file(&probe);
    res
}
