//! `hipfs serve`, `hipfs mount`, `hipfs umount`, `hipfs stats MOUNTPOINT`.

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use clap::Args;
use signal_hook::consts::{SIGINT, SIGTERM};
use signal_hook::iterator::Signals;

use hipfs::remote::mount::{mount_local, mount_remote, MountOptions};
use hipfs::remote::server::{IdentityPolicy, ServeConfig, Server};
use hipfs::remote::RemoteError;
use hipfs::units::parse_size;

/// What the `hipfs` subcommands return: any error, printed once by `main`.
pub type CmdResult = Result<(), Box<dyn std::error::Error>>;

/// `hipfs serve DIR --listen ADDR ...`
#[derive(Args, Debug, Clone)]
#[command(
    about = "Export a directory to hipfs clients",
    long_about = "Export DIR to hipfs clients. Runs in the foreground until SIGTERM or Ctrl-C, then finishes the requests in flight and exits.\n\nExample: hipfs serve /srv/datasets --listen 0.0.0.0:7471 --token-file /etc/hipfs/token --read-only"
)]
pub struct ServeArgs {
    /// The directory to export.
    pub dir: PathBuf,
    /// Address to listen on (ip:port; port 0 lets the OS choose). Once the
    /// server accepts connections, stdout gets one line
    /// `hipfs serve: listening on ADDR` with the bound address.
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
    /// Refuse to make block and character device nodes (EPERM), even for
    /// a caller acting as root. Without it, root callers (those the root
    /// squash leaves root) may mknod them; the server never opens one for
    /// a client either way.
    #[arg(long)]
    pub no_devices: bool,
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
    /// Run every request on the workers. By default cheap ones (metadata,
    /// reads and writes up to 64 KiB) run on the TCP connection's own
    /// receiving thread, two thread wake-ups fewer per request; use this
    /// for an export on a filesystem whose metadata calls may hang (a
    /// hard-mounted NFS export would then stop the whole connection).
    #[arg(long)]
    pub no_inline: bool,
    /// Stage placed reads through registered memory instead of sending
    /// them straight from the file with sendfile(2) (TCP), the default:
    /// one copy less on the server, 1.7x the direct path's rate into GPU
    /// memory on a 16-CPU loopback run (`hipfs bench userspace
    /// --no-sendfile` compares). With --hash-placed-reads or TLS placed
    /// reads are always staged (the server must see the bytes).
    #[arg(long)]
    pub no_sendfile: bool,
    /// Accepted for older command lines: sendfile is the default.
    #[arg(long, hide = true)]
    pub sendfile: bool,
    /// Put a BLAKE3 hash of every placed read's bytes in its authenticated
    /// reply (TCP), so bytes altered on the path are caught without TLS.
    /// Costs about a quarter of UserspaceFs throughput; --tls-cert covers
    /// the bytes too, and hides them.
    #[arg(long)]
    pub hash_placed_reads: bool,
    /// Connections open at once; more are refused with a message.
    #[arg(long, default_value_t = 64)]
    pub max_connections: usize,
    /// Requests in flight per connection before the server stops reading it.
    #[arg(long, default_value_t = 64)]
    pub max_requests: usize,
    /// Bytes in flight per connection (write data, read lengths), in MiB.
    #[arg(long, value_name = "MIB", default_value_t = 64)]
    pub max_bytes_in_flight: usize,
    /// Open files per connection; more opens fail with EMFILE.
    #[arg(long, default_value_t = 1024)]
    pub max_open_files: usize,
    /// Seconds a worker waits for a client (acknowledging a placed read,
    /// reading its replies) before disconnecting it.
    #[arg(long, value_name = "S", default_value_t = 2.0)]
    pub ack_timeout: f64,
    /// PEM certificate chain (leaf first): serve TCP over TLS, refusing
    /// plaintext clients (they mount with -o tls,ca=FILE). Needs --tls-key.
    /// Verbs connections are not encrypted; --sendfile reads are staged.
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// PEM private key of --tls-cert.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// The export's identity, said to clients in the handshake. Servers
    /// exporting the same namespace (a directory of a shared filesystem)
    /// for one multi-server mount must say the same id; the mount refuses
    /// servers that differ. Default: an id kept in the export root (an
    /// extended attribute the first server creates), so servers of one
    /// shared directory agree without being told.
    #[arg(long, value_name = "ID")]
    pub export_id: Option<String>,
}

/// `hipfs mount SERVER[:PORT][:/] MOUNTPOINT -o ...` or `hipfs mount --local DIR MOUNTPOINT`.
#[derive(Args, Debug, Clone)]
#[command(
    about = "Mount a hipfs export (or serve and mount a local directory with --local)",
    long_about = "Mount the export of a hipfs server on MOUNTPOINT. Goes to the background once the mount is up unless --foreground is given. Several servers of one shared filesystem, comma-separated, make one mount whose reads are spread over all of them (docs/MULTI_SERVER.md).\n\nExamples:\n  hipfs mount storage1:7471 /mnt/data -o ro,token_file=/etc/hipfs/token\n  hipfs mount storage1:7471,storage2:7471,storage3:7471:/ /mnt/data -o token_file=/etc/hipfs/token\n  hipfs mount --local /srv/datasets /mnt/data"
)]
pub struct MountArgs {
    /// SERVER[:PORT] or several, comma-separated (S1:PORT,S2:PORT: one mount over servers of one shared filesystem); a trailing ":/" as mount(8) passes it is accepted. With --local: the directory to serve.
    pub source: String,
    /// Where to mount.
    pub mountpoint: PathBuf,
    /// Options: ro, allow_other, direct_io, noxattr, noacl (no POSIX ACLs through the mount: `ls -l` stops asking for each file's; other xattrs stay), nohold (files made through the mount send each write and attribute change at once, not at their close), token_file=FILE, local_socket=PATH, tls,ca=FILE (TLS on TCP; tls_name=NAME: the name the certificate carries), attr_timeout=S, entry_timeout=S, timeout=S, transport=auto|tcp|verbs, threads=N, max_readahead=SIZE (page-cache readahead window, 4K..16M, default 8M), hard (default: a request the server does not answer is retried until it answers or the caller is killed) or soft (fail after timeout=S, default 30).
    #[arg(short = 'o', value_name = "OPTIONS")]
    pub options: Vec<String>,
    /// Serve SOURCE (a local directory) inside this process and mount it.
    #[arg(long)]
    pub local: bool,
    /// Stay in the foreground (logs go to stderr).
    #[arg(long, short = 'f')]
    pub foreground: bool,
    /// Internal: this process is the background mount that a `hipfs mount`
    /// without --foreground started; it reports `ready` or `error: MSG` as
    /// one line on stdout, then detaches its output.
    #[arg(long, hide = true)]
    pub daemon_child: bool,
}

/// `hipfs umount MOUNTPOINT`
#[derive(Args, Debug, Clone)]
#[command(
    about = "Unmount a hipfs mount",
    long_about = "Unmount a hipfs mount (lazily if it is busy). Refuses anything the mount table does not list as a hipfs mount (type fuse.hipfs).\n\nExample: hipfs umount /mnt/data"
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

/// SIGTERM and SIGINT, delivered as messages from now on: registered before
/// any work starts, so a signal that arrives early is not lost.
fn term_signals() -> std::io::Result<Signals> {
    Signals::new([SIGTERM, SIGINT])
}

/// Forwards the first of `signals` to `tx` (from a thread of its own, so the
/// caller can wait for other events on the same channel).
fn forward_signal(mut signals: Signals, tx: mpsc::Sender<StopReason>) {
    std::thread::spawn(move || {
        if let Some(sig) = signals.forever().next() {
            let _ = tx.send(StopReason::Signal(sig));
        }
    });
}

/// Why a foreground server or mount stops.
enum StopReason {
    Signal(i32),
    /// The mount went away (unmounted from outside).
    Unmounted,
}

/// Runs `hipfs serve` until SIGTERM/SIGINT.
pub fn run_serve(args: &ServeArgs) -> CmdResult {
    let mut cfg = ServeConfig::new(&args.dir, args.listen.clone());
    cfg.read_only = args.read_only;
    cfg.allow_devices = !args.no_devices;
    cfg.insecure = args.insecure;
    cfg.workers = args.workers;
    cfg.inline_requests = !args.no_inline;
    cfg.send_from_file = !args.no_sendfile;
    cfg.hash_placed_reads = args.hash_placed_reads;
    cfg.limits.max_connections = args.max_connections;
    cfg.limits.max_requests = args.max_requests;
    cfg.limits.max_bytes_in_flight = args.max_bytes_in_flight.saturating_mul(1 << 20);
    cfg.limits.max_open_files = args.max_open_files;
    cfg.limits.ack_timeout = std::time::Duration::try_from_secs_f64(args.ack_timeout)
        .ok()
        .filter(|d| !d.is_zero())
        .ok_or_else(|| RemoteError::Config("--ack-timeout: expected seconds > 0".into()))?;
    cfg.transport = args
        .transport
        .parse()
        .map_err(|e: hipfs_rdma::Error| RemoteError::Config(e.to_string()))?;
    if let Some(t) = &args.token_file {
        cfg.token = Some(hipfs::remote::auth::Token::from_file(t)?);
    }
    cfg.local_socket = args.local_socket.clone();
    cfg.export_id = args.export_id.clone();
    if let (Some(cert), Some(key)) = (&args.tls_cert, &args.tls_key) {
        cfg.tls = Some(hipfs_rdma::TlsConfig::server(cert, key));
    }
    cfg.policy = IdentityPolicy {
        squash_root: args.squash_root,
        no_root_squash: args.no_root_squash,
        map_all: args.map_all.as_deref().map(parse_map_all).transpose()?,
        allow_uids: args
            .allow_uids
            .as_deref()
            .map(hipfs::remote::server::parse_uid_ranges)
            .transpose()
            .map_err(|e| RemoteError::Config(format!("--allow-uids {e}")))?,
    };
    let mut signals = term_signals()?;
    let server = Server::start(cfg)?;
    eprintln!(
        "hipfs: serving {} on {} as export id {}{} (SIGTERM or Ctrl-C stops)",
        args.dir.display(),
        server.local_addr(),
        server.export_id(),
        if args.read_only { ", read-only" } else { "" }
    );
    // The machine-readable line (tests and scripts read the bound port from
    // it): printed once the listener is bound, so connections succeed.
    let mut out = std::io::stdout().lock();
    writeln!(out, "hipfs serve: listening on {}", server.local_addr())?;
    out.flush()?;
    drop(out);
    let sig = signals.forever().next().unwrap_or(SIGTERM);
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

/// Runs `hipfs mount`. Without `--foreground` the mount is served by a
/// copy of this program started in the background (`--daemon-child`); this
/// process returns once that copy reports the mount up, or fails with its
/// error.
pub fn run_mount(args: &MountArgs) -> CmdResult {
    let opts = MountOptions::parse(&args.options.join(","))?;
    if hipfs_fusefs::is_mounted(&args.mountpoint).unwrap_or(false) {
        return report_failure(
            args,
            RemoteError::Config(format!(
                "{} is already a mount point (hipfs umount it first)",
                args.mountpoint.display()
            ))
            .into(),
        );
    }
    if !args.mountpoint.is_dir() {
        return report_failure(
            args,
            RemoteError::Config(format!(
                "mount point {} is not a directory",
                args.mountpoint.display()
            ))
            .into(),
        );
    }
    let mountpoint = match args.mountpoint.canonicalize() {
        Ok(m) => m,
        Err(e) => return report_failure(args, RemoteError::Io(e).into()),
    };
    let source = if args.local {
        args.source.clone()
    } else {
        server_addr(&args.source)
    };
    if args.local && !PathBuf::from(&source).is_dir() {
        return report_failure(
            args,
            RemoteError::Config(format!("--local {source}: not a directory")).into(),
        );
    }
    if !args.foreground && !args.daemon_child {
        return spawn_background_mount();
    }
    if args.daemon_child {
        // Away from the terminal's session, as a daemon: the mount must
        // outlive the shell (or mount(8)) that started it.
        let _ = rustix::process::setsid();
    }
    let signals = term_signals()?;
    let result = if args.local {
        mount_local(&PathBuf::from(&source), &mountpoint, &opts)
    } else {
        mount_remote(&source, &mountpoint, &opts)
    };
    let mounted = match result {
        Ok(m) => m,
        Err(e) => return report_failure(args, e.into()),
    };
    if args.daemon_child {
        report_ready()?;
    }
    // Wait for a signal or for this mount's own FUSE session to end (an
    // unmount from outside). The session, not the mount table: a new mount
    // at the same place, or a mount point gone with its parent, must not
    // keep this process alive or be unmounted by it.
    let (tx, rx) = mpsc::channel();
    forward_signal(signals, tx);
    let reason = loop {
        match rx.recv_timeout(Duration::from_millis(50)) {
            Ok(r) => break r,
            Err(mpsc::RecvTimeoutError::Timeout) if !mounted.session_ended() => {}
            Err(_) => break StopReason::Unmounted,
        }
    };
    match reason {
        StopReason::Signal(sig) => log::info!("signal {sig}: unmounting"),
        StopReason::Unmounted => log::info!("unmounted from outside"),
    }
    mounted.unmount()?;
    Ok(())
}

/// The error of a mount that could not be set up: a background copy
/// reports it to the process that started it (which prints it, once) and
/// exits; a foreground mount returns it for `main` to print.
fn report_failure(args: &MountArgs, e: Box<dyn std::error::Error>) -> CmdResult {
    if !args.daemon_child {
        return Err(e);
    }
    // One line: newlines in the message would end it early.
    let line = e.to_string().replace('\n', " ");
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "error: {line}");
    let _ = out.flush();
    Err(Box::new(AlreadyReported))
}

/// A failure the background mount has already handed to its parent; `main`
/// exits nonzero without printing it again.
#[derive(Debug)]
pub struct AlreadyReported;

impl std::fmt::Display for AlreadyReported {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("reported to the parent process")
    }
}

impl std::error::Error for AlreadyReported {}

/// Tells the parent the mount is up, then points stdin, stdout and stderr
/// at /dev/null: the parent (and its terminal) go away, and a write to a
/// closed pipe or terminal must not fail later.
fn report_ready() -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "ready")?;
    out.flush()?;
    drop(out);
    let null = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")?;
    rustix::stdio::dup2_stdin(&null)?;
    rustix::stdio::dup2_stdout(&null)?;
    rustix::stdio::dup2_stderr(&null)?;
    Ok(())
}

/// Starts this program again with the same arguments plus `--daemon-child`
/// and waits for its one-line report: `ready` (return, the mount stays with
/// the child) or `error: MSG` / end of output (fail with that message).
fn spawn_background_mount() -> CmdResult {
    let exe = std::env::current_exe()?;
    let mut child = Command::new(exe)
        .args(std::env::args_os().skip(1))
        .arg("--daemon-child")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()?;
    let Some(stdout) = child.stdout.take() else {
        return Err("mount failed: no report channel to the mount process".into());
    };
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line)?;
    let line = line.trim_end();
    if line == "ready" {
        return Ok(());
    }
    let status = child.wait()?;
    match line.strip_prefix("error: ") {
        Some(msg) => Err(format!("mount failed: {msg}").into()),
        None => Err(format!("mount failed: the mount process died ({status})").into()),
    }
}

/// Runs `hipfs umount`: only hipfs mounts (type `fuse.hipfs` in the mount
/// table, or a plain `fuse` mount, as root makes without fusermount3, whose
/// root answers hipfs' statistics attribute), never another filesystem.
pub fn run_umount(args: &UmountArgs) -> CmdResult {
    let mp = &args.mountpoint;
    let entry = hipfs_fusefs::mount_at(mp).map_err(RemoteError::Io)?;
    let Some((fs_type, source)) = entry else {
        return Err(RemoteError::Config(format!("{} is not mounted", mp.display())).into());
    };
    let hipfs_mount =
        fs_type == hipfs_fusefs::HIPFS_FS_TYPE || (fs_type == "fuse" && mount_stats(mp).is_ok());
    if !hipfs_mount {
        return Err(RemoteError::Config(format!(
            "{} is not a hipfs mount (type {fs_type}, source {source}); use umount(8) for it",
            mp.display()
        ))
        .into());
    }
    hipfs_fusefs::unmount_path(mp).map_err(RemoteError::Io)?;
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
    /// The in-process server stages placed reads instead of sending them
    /// straight from the file (`hipfs serve --no-sendfile`).
    #[arg(long)]
    pub no_sendfile: bool,
    /// Bench userspace: also read through a second server and mount that
    /// use TLS (a throwaway certificate made for the run), in the same
    /// rounds as the plaintext rows.
    #[arg(long)]
    pub tls: bool,
    /// Bench userspace: two more loopback ceilings, a hot buffer sent into
    /// 64 MiB per receiver and the file's pages into a reused 4 MiB buffer,
    /// which tell the sending and the receiving side's memory costs apart.
    #[arg(long)]
    pub more_ceilings: bool,
}

fn bench_opts(args: &BenchRemoteArgs) -> hipfs::Result<crate::bench::remote::MountBenchOptions> {
    Ok(crate::bench::remote::MountBenchOptions {
        file: args.file.clone(),
        create_size: args.create,
        repeats: args.repeats,
        mount: MountOptions::parse(&args.options.join(","))?,
        server_sendfile: !args.no_sendfile,
        tls: args.tls,
        more_ceilings: args.more_ceilings,
    })
}

/// `hipfs bench mount`: sequential 1 MiB reads through a FUSE mount beside
/// the same reads through the remote client directly.
///
/// Example: hipfs bench mount /tmp/hipfs-1g.bin --create 1G
pub fn run_bench_mount(args: &BenchRemoteArgs) -> CmdResult {
    let rows = crate::bench::remote::bench_mount(&bench_opts(args)?)?;
    crate::bench::remote::print_mount_table(
        &format!(
            "hipfs bench mount {} (loopback, {}, server page cache warm, median of {})",
            args.file.display(),
            crate::bench::lanelike::loopback_congestion(),
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
pub fn run_bench_userspace(args: &BenchRemoteArgs) -> CmdResult {
    let request = usize::try_from(args.request)
        .ok()
        .filter(|r| *r > 0)
        .ok_or_else(|| RemoteError::Config("--request must be > 0".into()))?;
    use crate::bench::remote::BenchMemory;
    let memory = if args.gpu {
        let rt = hipfs::gpu::runtime();
        if rt.name() == "host" || rt.device_count() == 0 {
            return Err(RemoteError::Config(format!(
                "--gpu: no GPU runtime with a device ({})",
                hipfs::gpu::selection_message()
            ))
            .into());
        }
        BenchMemory::Gpu {
            device: args.device,
        }
    } else {
        BenchMemory::Host
    };
    let rows = crate::bench::remote::bench_userspace(&bench_opts(args)?, request, memory)?;
    let what = match memory {
        BenchMemory::Host => "host memory".to_string(),
        BenchMemory::Gpu { device } => {
            format!("GPU {device} memory via {}", hipfs::gpu::runtime().name())
        }
    };
    crate::bench::remote::print_mount_table(
        &format!(
            "hipfs bench userspace {} ({what}, loopback, {}, median of {}{})",
            args.file.display(),
            crate::bench::lanelike::loopback_congestion(),
            args.repeats,
            if args.no_sendfile {
                ", server staging (no sendfile)"
            } else {
                ""
            }
        ),
        &rows,
    );
    // With --tls the last row is UserspaceFs over TLS, the fourth the same
    // reads in plaintext, measured in the same rounds.
    if let (true, Some(plain), Some(tls)) = (args.tls, rows.get(3), rows.last()) {
        if plain.gib_per_s > 0.0 {
            println!(
                "TLS / plaintext UserspaceFs: {:.0}% ({:.2} vs {:.2} GiB/s)",
                tls.gib_per_s / plain.gib_per_s * 100.0,
                tls.gib_per_s,
                plain.gib_per_s
            );
        }
    }
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
    let mut buf = vec![0u8; 64 * 1024];
    let n = rustix::fs::getxattr(
        mountpoint,
        hipfs::remote::client::backend::STATS_XATTR,
        &mut buf[..],
    )
    .map_err(|e| {
        RemoteError::Config(format!(
            "{}: not a hipfs mount root, or its daemon does not answer ({})",
            mountpoint.display(),
            std::io::Error::from(e)
        ))
    })?;
    buf.truncate(n);
    Ok(String::from_utf8_lossy(&buf).into_owned())
}

/// Runs `hipfs stats [MOUNTPOINT]`.
pub fn run_stats(args: &StatsArgs) -> CmdResult {
    match &args.mountpoint {
        Some(m) => print!("{}", mount_stats(m)?),
        None => println!("{}", hipfs::stats::snapshot()),
    }
    Ok(())
}
