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

/// Checks GPU runtimes, RDMA devices, FUSE, (for `dir`) O_DIRECT support,
/// and which libcufile.so.0 cuFile programs would load.
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
    let in_use = hipfs::gpu::runtime().name();
    // An asked-for runtime that could not be used says why.
    let detail = match std::env::var("HIPFS_GPU_RUNTIME") {
        Ok(w) if w != in_use => format!(
            "{in_use} (HIPFS_GPU_RUNTIME={w}: {})",
            hipfs::gpu::selection_message()
        ),
        _ => in_use.to_string(),
    };
    out.push(finding("runtime in use", true, detail));
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
    if let Some(on) = hipfs_fusefs::wake_here() {
        out.push(finding(
            "fuse wake-ups",
            on,
            if on {
                "fuse.wake_here=Y: a FUSE request wakes the mount on the caller's CPU"
            } else {
                "fuse.wake_here=N: requests may wake the mount on another CPU (on small VMs \
                 tens of microseconds each; `echo Y > /sys/module/fuse/parameters/wake_here` \
                 as root turns it on for every FUSE mount, see README: Tuning)"
            },
        ));
    }
    out.push(check_direct_io(dir));
    out.extend(check_cufile());
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

/// What hipfs' libcufile.so.0 contains and NVIDIA's never does
/// (`hipfs_cufile::IDENT`; the CLI does not link that crate).
const CUFILE_IDENT: &[u8] = b"hipfs libcufile.so.0 (cuFile drop-in";

/// Whose libcufile a file is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CufileKind {
    /// hipfs' drop-in.
    Hipfs,
    /// Any other (NVIDIA's).
    Other,
}

/// Reads `path` looking for hipfs' marker.
pub fn cufile_kind(path: &Path) -> std::io::Result<CufileKind> {
    let bytes = std::fs::read(path)?;
    let ours = bytes.windows(CUFILE_IDENT.len()).any(|w| w == CUFILE_IDENT);
    Ok(if ours {
        CufileKind::Hipfs
    } else {
        CufileKind::Other
    })
}

/// Where the libcufile.so.0 a program loads comes from, in the dynamic
/// loader's order for a program without an RPATH of its own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CufileResolution {
    /// The file, when one is found.
    pub path: Option<std::path::PathBuf>,
    /// How it was found: "LD_PRELOAD", "LD_LIBRARY_PATH", "ld.so.cache", "default path".
    pub how: &'static str,
}

/// Resolves `libcufile.so.0` from the environment's `LD_PRELOAD` and
/// `LD_LIBRARY_PATH`, the `ldconfig -p` listing and the default directories.
pub fn resolve_cufile(
    preload: Option<&str>,
    library_path: Option<&str>,
    ldconfig: &str,
    defaults: &[&Path],
) -> CufileResolution {
    let preloaded = preload
        .unwrap_or("")
        .split([' ', ':'])
        .filter(|p| !p.is_empty())
        .map(Path::new)
        .find(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("libcufile.so"))
        });
    if let Some(p) = preloaded {
        return CufileResolution {
            path: Some(p.to_path_buf()),
            how: "LD_PRELOAD",
        };
    }
    let in_dir = |d: &Path| Some(d.join("libcufile.so.0")).filter(|p| p.exists());
    if let Some(p) = library_path
        .unwrap_or("")
        .split(':')
        .filter(|d| !d.is_empty())
        .find_map(|d| in_dir(Path::new(d)))
    {
        return CufileResolution {
            path: Some(p),
            how: "LD_LIBRARY_PATH",
        };
    }
    // `ldconfig -p` lines: "\tlibcufile.so.0 (libc6,x86-64) => /path".
    if let Some(p) = ldconfig.lines().find_map(|l| {
        let (name, target) = l.split_once("=>")?;
        (name.split_whitespace().next()? == "libcufile.so.0")
            .then(|| std::path::PathBuf::from(target.trim()))
    }) {
        return CufileResolution {
            path: Some(p),
            how: "ld.so.cache",
        };
    }
    CufileResolution {
        path: defaults.iter().find_map(|d| in_dir(d)),
        how: "default path",
    }
}

/// The `nvidia-cufile` wheel copies (`site-packages/nvidia/{cu13,cu12,cufile}/lib`)
/// under the Python installations found in `roots`: PyTorch's RPATH and
/// cuda.pathfinder load these unless a preload wins.
pub fn wheel_cufiles(roots: &[std::path::PathBuf]) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for root in roots {
        let Ok(pythons) = std::fs::read_dir(root) else {
            continue;
        };
        for py in pythons.flatten() {
            if !py.file_name().to_string_lossy().starts_with("python3") {
                continue;
            }
            for pkgs in ["site-packages", "dist-packages"] {
                for sub in ["cu13", "cu12", "cufile"] {
                    let p = py
                        .path()
                        .join(pkgs)
                        .join("nvidia")
                        .join(sub)
                        .join("lib")
                        .join("libcufile.so.0");
                    if p.exists() {
                        out.push(p);
                    }
                }
            }
        }
    }
    out
}

fn describe(path: &Path) -> (bool, String) {
    match cufile_kind(path) {
        Ok(CufileKind::Hipfs) => (true, format!("{}: hipfs' libcufile", path.display())),
        Ok(CufileKind::Other) => (false, format!("{}: NVIDIA's libcufile", path.display())),
        Err(e) => (false, format!("{}: {e}", path.display())),
    }
}

/// The cuFile section of `hipfs check`: which libcufile.so.0 a program
/// would load, and whether the nvidia-cufile wheel would win for Python.
pub fn check_cufile() -> Vec<Finding> {
    let ldconfig = std::process::Command::new("ldconfig")
        .arg("-p")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    let defaults = [
        Path::new("/lib/x86_64-linux-gnu"),
        Path::new("/usr/lib/x86_64-linux-gnu"),
        Path::new("/lib"),
        Path::new("/usr/lib"),
    ];
    let preload = std::env::var("LD_PRELOAD").ok();
    let r = resolve_cufile(
        preload.as_deref(),
        std::env::var("LD_LIBRARY_PATH").ok().as_deref(),
        &ldconfig,
        &defaults,
    );
    let mut out = Vec::new();
    match &r.path {
        Some(p) => {
            let (ours, d) = describe(p);
            out.push(finding("cufile", ours, format!("{d} (via {})", r.how)));
        }
        None => out.push(finding(
            "cufile",
            false,
            "no libcufile.so.0 found (make install puts hipfs' in PREFIX/lib; or LD_PRELOAD it)",
        )),
    }
    let mut roots = vec![
        std::path::PathBuf::from("/usr/lib"),
        std::path::PathBuf::from("/usr/local/lib"),
    ];
    if let Some(home) = std::env::var_os("HOME") {
        roots.push(Path::new(&home).join(".local/lib"));
    }
    if let Some(venv) = std::env::var_os("VIRTUAL_ENV") {
        roots.push(Path::new(&venv).join("lib"));
    }
    let preloaded_ours = r.how == "LD_PRELOAD" && out.first().is_some_and(|f| f.ok);
    for w in wheel_cufiles(&roots) {
        let (_, d) = describe(&w);
        let detail = if preloaded_ours {
            format!("{d}; the LD_PRELOAD above wins over it")
        } else {
            format!("{d}; PyTorch and cuda-python load this one unless hipfs' libcufile is preloaded (LD_PRELOAD)")
        };
        out.push(finding("cufile wheel", preloaded_ours, detail));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lib(dir: &Path, name: &str, ours: bool) -> std::path::PathBuf {
        let p = dir.join(name);
        let mut bytes = b"\x7fELF....".to_vec();
        if ours {
            bytes.extend_from_slice(
                b"xx hipfs libcufile.so.0 (cuFile drop-in over the hipfs core) yy",
            );
        }
        std::fs::write(&p, bytes).unwrap();
        p
    }

    #[test]
    fn the_marker_tells_hipfs_libcufile_from_nvidias() {
        let d = tempfile::tempdir().unwrap();
        assert_eq!(
            cufile_kind(&lib(d.path(), "a.so", true)).unwrap(),
            CufileKind::Hipfs
        );
        assert_eq!(
            cufile_kind(&lib(d.path(), "b.so", false)).unwrap(),
            CufileKind::Other
        );
        assert!(cufile_kind(&d.path().join("missing")).is_err());
    }

    #[test]
    fn resolution_follows_the_loaders_order() {
        let pre = tempfile::tempdir().unwrap();
        let llp = tempfile::tempdir().unwrap();
        let def = tempfile::tempdir().unwrap();
        let ours = lib(pre.path(), "libcufile.so.0", true);
        let theirs = lib(llp.path(), "libcufile.so.0", false);
        lib(def.path(), "libcufile.so.0", false);
        let cache =
            "\tlibcufile.so.0 (libc6,x86-64) => /cache/libcufile.so.0\n\tlibc.so.6 (libc6) => /x";
        let llp_s = llp.path().to_string_lossy().into_owned();
        let preload = format!("/other/libfoo.so {}", ours.display());
        let r = resolve_cufile(Some(&preload), Some(&llp_s), cache, &[def.path()]);
        assert_eq!(
            (r.path.as_deref(), r.how),
            (Some(ours.as_path()), "LD_PRELOAD")
        );
        let r = resolve_cufile(None, Some(&format!("/nope:{llp_s}")), cache, &[def.path()]);
        assert_eq!(
            (r.path.as_deref(), r.how),
            (Some(theirs.as_path()), "LD_LIBRARY_PATH")
        );
        let r = resolve_cufile(None, None, cache, &[def.path()]);
        assert_eq!(
            r.path,
            Some(std::path::PathBuf::from("/cache/libcufile.so.0"))
        );
        assert_eq!(r.how, "ld.so.cache");
        let r = resolve_cufile(None, None, "", &[Path::new("/nonexistent"), def.path()]);
        assert_eq!(r.path, Some(def.path().join("libcufile.so.0")));
        let r = resolve_cufile(None, None, "", &[Path::new("/nonexistent")]);
        assert_eq!(r.path, None);
    }

    #[test]
    fn wheel_copies_are_found_under_python_site_packages() {
        let root = tempfile::tempdir().unwrap();
        let libdir = root.path().join("python3.12/site-packages/nvidia/cu13/lib");
        std::fs::create_dir_all(&libdir).unwrap();
        lib(&libdir, "libcufile.so.0", false);
        std::fs::create_dir_all(root.path().join("perl5")).unwrap();
        let found = wheel_cufiles(&[root.path().to_path_buf(), root.path().join("missing")]);
        assert_eq!(found, vec![libdir.join("libcufile.so.0")]);
    }
}
