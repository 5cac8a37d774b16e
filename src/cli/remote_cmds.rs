//! `hipfs serve`, `hipfs mount`, `hipfs umount`, `hipfs stats MOUNTPOINT`.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use super::parse_size;

use crate::remote::mount::{mount_local, mount_remote, MountOptions};
use crate::remote::server::{IdentityPolicy, ServeConfig, Server};
use crate::remote::RemoteError;

/// `hipfs serve DIR --listen ADDR ...`
#[derive(Args, Debug, Clone)]
#[command(
    about = "Export a directory to hipfs clients",
    long_about = "Export DIR to hipfs clients. Runs in the foreground until SIGTERM or Ctrl-C, then finishes the requests in flight and exits.\n\nExample: hipfs serve /srv/datasets --listen 0.0.0.0:7471 --token-file /etc/hipfs/token --read-only"
)]
pub struct ServeArgs {
    /// The directory to export.
    pub dir: PathBuf,
    /// Address to listen on (ip:port).
    #[arg(long, default_value = "127.0.0.1:7471")]
    pub listen: String,
    /// Refuse every change with EROFS.
    #[arg(long)]
    pub read_only: bool,
    /// File holding the shared secret clients must prove they know (at least 16 bytes).
    #[arg(long)]
    pub token_file: Option<PathBuf>,
    /// Transport: auto (verbs when the host has an RDMA device, else tcp), tcp, verbs.
    #[arg(long, default_value = "auto")]
    pub transport: String,
    /// Act as nobody (65534) for root on every client, local root daemons
    /// too (root of token-authenticated hosts is squashed by default).
    #[arg(long)]
    pub squash_root: bool,
    /// Let root of token-authenticated hosts act as root on the export.
    #[arg(long, conflicts_with = "squash_root")]
    pub no_root_squash: bool,
    /// The uids clients may claim, e.g. 1000-1999,0 (default: any).
    #[arg(long, value_name = "RANGES")]
    pub allow_uids: Option<String>,
    /// Unix socket local clients get their tickets from (mode 0666;
    /// default /run/hipfs/serve-PORT.sock).
    #[arg(long, value_name = "PATH")]
    pub local_socket: Option<PathBuf>,
    /// Act as UID:GID for every request.
    #[arg(long, value_name = "UID:GID")]
    pub map_all: Option<String>,
    /// Allow listening on a non-loopback address without --token-file
    /// (only local users, through the local socket, can then connect).
    #[arg(long)]
    pub insecure: bool,
    /// Worker threads (default: 4 per CPU, at least 8).
    #[arg(long, default_value_t = 0)]
    pub workers: usize,
    /// Send placed reads straight from the file with sendfile(2) (TCP)
    /// instead of through registered staging memory: one copy less on the
    /// server; on loopback it was slower on 2 CPUs and faster on 16
    /// (compare with `hipfs bench userspace --sendfile`). Only for clients
    /// without message authentication (HIPFS_UNAUTHENTICATED_MESSAGES=1):
    /// authenticated TCP connections hash placed bytes, so they stage.
    #[arg(long)]
    pub sendfile: bool,
}

/// `hipfs mount SERVER[:PORT][:/] MOUNTPOINT -o ...` or `hipfs mount --local DIR MOUNTPOINT`.
#[derive(Args, Debug, Clone)]
#[command(
    about = "Mount a hipfs export (or serve and mount a local directory with --local)",
    long_about = "Mount the export of a hipfs server on MOUNTPOINT. Goes to the background once the mount is up unless --foreground is given.\n\nExamples:\n  hipfs mount storage1:7471 /mnt/data -o ro,token_file=/etc/hipfs/token\n  hipfs mount --local /srv/datasets /mnt/data"
)]
pub struct MountArgs {
    /// SERVER[:PORT] (a trailing ":/" as mount(8) passes it is accepted), or with --local the directory to serve.
    pub source: String,
    /// Where to mount.
    pub mountpoint: PathBuf,
    /// Options: ro, allow_other, direct_io, noxattr, token_file=FILE, local_socket=PATH, attr_timeout=S, entry_timeout=S, timeout=S, transport=auto|tcp|verbs, threads=N, max_readahead=SIZE (page-cache readahead window, 4K..16M, default 8M).
    #[arg(short = 'o', value_name = "OPTIONS")]
    pub options: Vec<String>,
    /// Serve SOURCE (a local directory) inside this process and mount it.
    #[arg(long)]
    pub local: bool,
    /// Stay in the foreground (logs go to stderr).
    #[arg(long, short = 'f')]
    pub foreground: bool,
}

/// `hipfs umount MOUNTPOINT`
#[derive(Args, Debug, Clone)]
#[command(
    about = "Unmount a hipfs mount",
    long_about = "Unmount a hipfs mount (lazily if it is busy).\n\nExample: hipfs umount /mnt/data"
)]
pub struct UmountArgs {
    pub mountpoint: PathBuf,
}

fn parse_map_all(s: &str) -> Result<(u32, u32), RemoteError> {
    let bad = || RemoteError::Config(format!("--map-all {s}: expected UID:GID, e.g. 1000:1000"));
    let (u, g) = s.split_once(':').ok_or_else(bad)?;
    Ok((
        u.trim().parse().map_err(|_| bad())?,
        g.trim().parse().map_err(|_| bad())?,
    ))
}

/// Blocks SIGTERM and SIGINT in this thread (and every thread it starts
/// afterwards) so that [`wait_for_signal`] receives them.
fn block_term_signals() -> libc::sigset_t {
    // SAFETY: sigset manipulation on a local value, then a thread mask change.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
    }
}

fn wait_for_signal(set: &libc::sigset_t) -> i32 {
    let mut sig = 0;
    // SAFETY: `set` is initialised and its signals are blocked in every thread.
    unsafe { libc::sigwait(set, &mut sig) };
    sig
}

/// Runs `hipfs serve` until SIGTERM/SIGINT.
pub fn run_serve(args: &ServeArgs) -> crate::Result<()> {
    let mut cfg = ServeConfig::new(&args.dir, args.listen.clone());
    cfg.read_only = args.read_only;
    cfg.insecure = args.insecure;
    cfg.workers = args.workers;
    cfg.send_from_file = args.sendfile;
    cfg.transport = args
        .transport
        .parse()
        .map_err(|e: hipfs_rdma::Error| RemoteError::Config(e.to_string()))?;
    if let Some(t) = &args.token_file {
        cfg.token = Some(crate::remote::auth::Token::from_file(t)?);
    }
    cfg.local_socket = args.local_socket.clone();
    cfg.policy = IdentityPolicy {
        squash_root: args.squash_root,
        no_root_squash: args.no_root_squash,
        map_all: args.map_all.as_deref().map(parse_map_all).transpose()?,
        allow_uids: args
            .allow_uids
            .as_deref()
            .map(crate::remote::server::parse_uid_ranges)
            .transpose()
            .map_err(|e| RemoteError::Config(format!("--allow-uids {e}")))?,
    };
    let set = block_term_signals();
    let server = Server::start(cfg)?;
    eprintln!(
        "hipfs: serving {} on {}{} (SIGTERM or Ctrl-C stops)",
        args.dir.display(),
        server.local_addr(),
        if args.read_only { ", read-only" } else { "" }
    );
    let sig = wait_for_signal(&set);
    eprintln!("hipfs: signal {sig}: finishing requests in flight");
    server.shutdown(Duration::from_secs(30));
    Ok(())
}

/// `mount(8)` passes `server:/` or `server:port:/`; the export path is the
/// server's own choice, so a trailing `:/` (or `:/anything`) is dropped.
fn server_addr(source: &str) -> String {
    match source.find(":/") {
        Some(i) => source[..i].to_string(),
        None => source.to_string(),
    }
}

/// Runs `hipfs mount`.
pub fn run_mount(args: &MountArgs) -> crate::Result<()> {
    let opts = MountOptions::parse(&args.options.join(","))?;
    if hipfs_fusefs::is_mounted(&args.mountpoint).unwrap_or(false) {
        return Err(RemoteError::Config(format!(
            "{} is already a mount point (hipfs umount it first)",
            args.mountpoint.display()
        ))
        .into());
    }
    if !args.mountpoint.is_dir() {
        return Err(RemoteError::Config(format!(
            "mount point {} is not a directory",
            args.mountpoint.display()
        ))
        .into());
    }
    let mountpoint = args.mountpoint.canonicalize().map_err(RemoteError::Io)?;
    let source = if args.local {
        args.source.clone()
    } else {
        server_addr(&args.source)
    };
    if args.local && !PathBuf::from(&source).is_dir() {
        return Err(RemoteError::Config(format!("--local {source}: not a directory")).into());
    }
    let set = block_term_signals();
    if !args.foreground {
        // Threads must not exist before fork: everything starts in the child.
        daemonize()?;
    }
    let result = if args.local {
        mount_local(&PathBuf::from(&source), &mountpoint, &opts)
    } else {
        mount_remote(&source, &mountpoint, &opts)
    };
    let mounted = match result {
        Ok(m) => {
            report_ready(Ok(()));
            m
        }
        Err(e) => {
            report_ready(Err(e.to_string()));
            return Err(e.into());
        }
    };
    // Wait for a signal or for the mount to go away (umount from outside).
    let watcher_mp = mountpoint.clone();
    std::thread::spawn(move || {
        // Give the mount table a moment, then poll it.
        loop {
            std::thread::sleep(Duration::from_millis(500));
            if !hipfs_fusefs::is_mounted(&watcher_mp).unwrap_or(true) {
                // SAFETY: raising a signal to our own process.
                unsafe { libc::kill(libc::getpid(), libc::SIGTERM) };
                return;
            }
        }
    });
    let _ = wait_for_signal(&set);
    mounted.unmount()?;
    Ok(())
}

static READY_FD: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(-1);

/// Forks; the parent waits until the child reports the mount up (exit 0) or
/// failed (its message on stderr, exit 1). The child continues detached.
fn daemonize() -> Result<(), RemoteError> {
    let mut fds = [0i32; 2];
    // SAFETY: `fds` has room for two descriptors.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error().into());
    }
    // SAFETY: no other threads exist yet (checked by the caller's order of work).
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(std::io::Error::last_os_error().into());
    }
    if pid > 0 {
        // SAFETY: closing our copy of the write end.
        unsafe { libc::close(fds[1]) };
        let mut msg = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            // SAFETY: reading into a local buffer.
            let n = unsafe { libc::read(fds[0], buf.as_mut_ptr().cast(), buf.len()) };
            if n <= 0 {
                break;
            }
            msg.extend_from_slice(&buf[..n as usize]);
        }
        if msg == b"ok" {
            std::process::exit(0);
        }
        let text = String::from_utf8_lossy(&msg);
        eprintln!(
            "hipfs: mount failed: {}",
            if text.is_empty() {
                "the mount process died"
            } else {
                &text
            }
        );
        std::process::exit(1);
    }
    // SAFETY: child: its own session, away from the terminal.
    unsafe {
        libc::close(fds[0]);
        libc::setsid();
    }
    READY_FD.store(fds[1], std::sync::atomic::Ordering::SeqCst);
    Ok(())
}

fn report_ready(r: Result<(), String>) {
    let fd = READY_FD.swap(-1, std::sync::atomic::Ordering::SeqCst);
    if fd < 0 {
        return;
    }
    let msg = match &r {
        Ok(()) => b"ok".to_vec(),
        Err(e) => e.as_bytes().to_vec(),
    };
    // SAFETY: writing a local buffer to our pipe, then detaching stdio.
    unsafe {
        libc::write(fd, msg.as_ptr().cast(), msg.len());
        libc::close(fd);
        if r.is_ok() {
            let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
            if null >= 0 {
                libc::dup2(null, 0);
                libc::dup2(null, 1);
                libc::dup2(null, 2);
                libc::close(null);
            }
        }
    }
}

/// Runs `hipfs umount`.
pub fn run_umount(args: &UmountArgs) -> crate::Result<()> {
    if !hipfs_fusefs::is_mounted(&args.mountpoint).unwrap_or(false) {
        return Err(
            RemoteError::Config(format!("{} is not mounted", args.mountpoint.display())).into(),
        );
    }
    hipfs_fusefs::unmount_path(&args.mountpoint).map_err(RemoteError::Io)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mount_sources_drop_the_export_suffix_and_map_all_parses() {
        assert_eq!(server_addr("srv:/"), "srv");
        assert_eq!(server_addr("srv:7471:/"), "srv:7471");
        assert_eq!(server_addr("srv:7471"), "srv:7471");
        assert_eq!(parse_map_all("1000:100").unwrap(), (1000, 100));
        assert!(parse_map_all("1000").is_err());
        assert!(parse_map_all("a:b").is_err());
    }
}

/// `hipfs bench mount FILE` and `hipfs bench userspace FILE`.
#[derive(Args, Debug, Clone)]
pub struct BenchRemoteArgs {
    /// The file to read (served from its directory by an in-process server on loopback).
    pub file: PathBuf,
    /// Generate FILE with this many bytes first if it is missing (e.g. 2G).
    #[arg(long, value_parser = parse_size)]
    pub create: Option<u64>,
    /// Repetitions after one warm-up round; the median is reported.
    #[arg(long, default_value_t = 3)]
    pub repeats: usize,
    /// Bytes per library call (bench userspace).
    #[arg(long, default_value = "64M", value_parser = parse_size)]
    pub request: u64,
    /// Read into GPU memory (bench userspace): the whole file into one
    /// device buffer, checked against the file afterwards.
    #[arg(long)]
    pub gpu: bool,
    /// The GPU to use with --gpu.
    #[arg(long, default_value_t = 0)]
    pub device: i32,
    /// Mount options for the FUSE mount, as `hipfs mount -o` takes them (e.g. max_readahead=8M,threads=4).
    #[arg(short = 'o', value_name = "OPTIONS")]
    pub options: Vec<String>,
    /// The in-process server sends placed reads straight from the file
    /// (sendfile on TCP) instead of staging them (`hipfs serve --sendfile`).
    #[arg(long)]
    pub sendfile: bool,
}

fn bench_opts(args: &BenchRemoteArgs) -> crate::Result<crate::remote::bench::MountBenchOptions> {
    Ok(crate::remote::bench::MountBenchOptions {
        file: args.file.clone(),
        create_size: args.create,
        repeats: args.repeats,
        mount: MountOptions::parse(&args.options.join(","))?,
        server_sendfile: args.sendfile,
    })
}

/// `hipfs bench mount`: sequential 1 MiB reads through a FUSE mount beside
/// the same reads through the remote client directly.
///
/// Example: hipfs bench mount /tmp/hipfs-1g.bin --create 1G
pub fn run_bench_mount(args: &BenchRemoteArgs) -> crate::Result<()> {
    let rows = crate::remote::bench::bench_mount(&bench_opts(args)?)?;
    crate::remote::bench::print_mount_table(
        &format!(
            "hipfs bench mount {} (loopback, server page cache warm, median of {})",
            args.file.display(),
            args.repeats
        ),
        &rows,
    );
    Ok(())
}

/// `hipfs bench userspace`: UserspaceFs reads into host memory beside the
/// loopback TCP ceiling and OpaqueFd reads through the FUSE mount.
///
/// Example: hipfs bench userspace /tmp/hipfs-1g.bin --create 1G
pub fn run_bench_userspace(args: &BenchRemoteArgs) -> crate::Result<()> {
    let request = usize::try_from(args.request)
        .ok()
        .filter(|r| *r > 0)
        .ok_or_else(|| RemoteError::Config("--request must be > 0".into()))?;
    use crate::remote::bench::BenchMemory;
    let memory = if args.gpu {
        let rt = crate::gpu::runtime();
        if rt.name() == "host" || rt.device_count() == 0 {
            return Err(RemoteError::Config(format!(
                "--gpu: no GPU runtime with a device ({})",
                crate::gpu::selection_message()
            ))
            .into());
        }
        BenchMemory::Gpu {
            device: args.device,
        }
    } else {
        BenchMemory::Host
    };
    let rows = crate::remote::bench::bench_userspace(&bench_opts(args)?, request, memory)?;
    let what = match memory {
        BenchMemory::Host => "host memory".to_string(),
        BenchMemory::Gpu { device } => {
            format!("GPU {device} memory via {}", crate::gpu::runtime().name())
        }
    };
    crate::remote::bench::print_mount_table(
        &format!(
            "hipfs bench userspace {} ({what}, loopback, median of {}{})",
            args.file.display(),
            args.repeats,
            if args.sendfile {
                ", server sendfile"
            } else {
                ""
            }
        ),
        &rows,
    );
    Ok(())
}

/// `hipfs stats [MOUNTPOINT]`.
#[derive(Args, Debug, Clone)]
#[command(
    about = "Print I/O counters: of this process, or of a running hipfs mount",
    long_about = "Without MOUNTPOINT: the per-path I/O counters of this process. With it: the counters of the process serving that hipfs mount (requests, failures, reconnects, bytes).\n\nExample: hipfs stats /mnt/data"
)]
pub struct StatsArgs {
    /// A hipfs mount point.
    pub mountpoint: Option<PathBuf>,
}

/// The counters of the process serving the hipfs mount at `mountpoint`
/// (read through an attribute of its root directory).
pub fn mount_stats(mountpoint: &std::path::Path) -> Result<String, RemoteError> {
    use std::os::unix::ffi::OsStrExt;
    let p = std::ffi::CString::new(mountpoint.as_os_str().as_bytes())
        .map_err(|_| RemoteError::Config("mount point contains NUL".into()))?;
    let name = std::ffi::CString::new(crate::remote::client::backend::STATS_XATTR)
        .map_err(|_| RemoteError::Config("bad attribute name".into()))?;
    let mut buf = vec![0u8; 64 * 1024];
    // SAFETY: NUL-terminated strings; the kernel writes at most buf.len() bytes.
    let n = unsafe {
        libc::getxattr(
            p.as_ptr(),
            name.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    if n < 0 {
        let e = std::io::Error::last_os_error();
        return Err(RemoteError::Config(format!(
            "{}: not a hipfs mount root, or its daemon does not answer ({e})",
            mountpoint.display()
        )));
    }
    buf.truncate(n as usize);
    Ok(String::from_utf8_lossy(&buf).into_owned())
}

/// Runs `hipfs stats [MOUNTPOINT]`.
pub fn run_stats(args: &StatsArgs) -> crate::Result<()> {
    match &args.mountpoint {
        Some(m) => print!("{}", mount_stats(m)?),
        None => println!("{}", crate::stats::snapshot()),
    }
    Ok(())
}
