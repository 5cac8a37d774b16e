//! `hipfs bench meta`: the POSIX tools people run on datasets (`ls -lR`,
//! `find`, `cat`, `cp -r`, `tar -x`) on a local directory and, in the same
//! run, through a hipfs mount of it (an in-process server on loopback,
//! default mount options), plus any peer mounts of the same directory
//! (`--peer sshfs=/mnt/sshfs`). Prints seconds and each mount's ratio to
//! the local directory.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use std::os::unix::fs::PermissionsExt;
use std::sync::Arc;

use hipfs::remote::mount::{mount_local, MountOptions};
use hipfs_fusefs::{Backend, Credentials, Ino, MemFs, ROOT_INO};

/// What to run.
#[derive(Debug, Clone)]
pub struct MetaBenchOptions {
    /// Where the data set and the mount point go (a fresh directory below it).
    pub dir: PathBuf,
    /// Files of the `ls -lR` / `find` tree (1,000 per directory).
    pub tree_files: usize,
    /// Small files for `cat`, `cp -r` and `tar -x`.
    pub small_files: usize,
    /// `-o` options of the hipfs mount.
    pub mount_options: String,
    /// Other mounts of the same data directory: (label, mount point).
    pub peers: Vec<(String, PathBuf)>,
    /// Use this data directory (made by an earlier run with the same
    /// counts) instead of generating one; peers must export it.
    pub data: Option<PathBuf>,
    /// Repetitions of each step (median).
    pub repeats: usize,
    /// Also time the steps on an in-memory FUSE filesystem (the project's
    /// own adapter over [`MemFs`], mounted with the FUSE settings of a
    /// hipfs mount): the fastest any FUSE mount can be on this kernel and
    /// machine, so the table shows how much of hipfs' cost is FUSE's.
    pub floor: bool,
}

/// The run's directory, removed at the end whatever happens.
struct Work(PathBuf);

impl Work {
    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Work {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

struct Target {
    label: String,
    root: PathBuf,
}

/// Runs `sh -c script` and returns the seconds it took; fails on a failure.
fn timed(script: &str) -> Result<f64, String> {
    let t = Instant::now();
    let out = Command::new("sh")
        .arg("-c")
        .arg(script)
        .output()
        .map_err(|e| format!("sh: {e}"))?;
    let secs = t.elapsed().as_secs_f64();
    if !out.status.success() {
        return Err(format!(
            "`{script}` failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(secs)
}

fn sh(script: &str) -> Result<(), String> {
    timed(script).map(|_| ())
}

fn q(p: &Path) -> String {
    format!("'{}'", p.display().to_string().replace('\'', "'\\''"))
}

/// Empties the kernel's page, dentry and inode caches (root only); `false`
/// when it cannot.
fn drop_caches() -> bool {
    let _ = Command::new("sync").status();
    std::fs::write("/proc/sys/vm/drop_caches", b"3").is_ok()
}

pub fn generate(data: &Path, tree_files: usize, small_files: usize) -> std::io::Result<()> {
    for i in 0..tree_files {
        let d = data.join("tree").join(format!("d{:03}", i / 1000));
        if i % 1000 == 0 {
            std::fs::create_dir_all(&d)?;
        }
        std::fs::write(d.join(format!("f{i:06}")), b"")?;
    }
    let small = data.join("small");
    std::fs::create_dir_all(&small)?;
    for i in 0..small_files {
        std::fs::write(
            small.join(format!("s{i:05}")),
            format!("small file {i}\n").repeat(3),
        )?;
    }
    Ok(())
}

/// Copies the directory tree at `from` into `fs` below `parent` through
/// its backend calls (in memory, without a mount: fast, and untimed).
fn populate(fs: &MemFs, parent: Ino, from: &Path) -> std::io::Result<()> {
    let cred = Credentials::root();
    let err = |e: hipfs_fusefs::Errno| std::io::Error::from_raw_os_error(e.code());
    for d in std::fs::read_dir(from)? {
        let d = d?;
        let name = d.file_name();
        let meta = d.metadata()?;
        let mode = meta.permissions().mode() & 0o7777;
        if meta.is_dir() {
            let e = fs.mkdir(parent, &name, mode, 0, &cred).map_err(err)?;
            populate(fs, e.attr.ino, &d.path())?;
            fs.forget(e.attr.ino, 1);
        } else if meta.is_file() {
            let (e, fh) = fs
                .create(parent, &name, mode, 0, libc::O_WRONLY, &cred)
                .map_err(err)?;
            let data = std::fs::read(d.path())?;
            if !data.is_empty() {
                fs.write(e.attr.ino, fh, 0, &data, &cred).map_err(err)?;
            }
            fs.release(e.attr.ino, fh, 0, &cred).map_err(err)?;
            fs.forget(e.attr.ino, 1);
        }
    }
    Ok(())
}

/// Mounts an in-memory copy of `data` at `mnt` with the FUSE settings of
/// a hipfs mount whose server sends change notices (the default).
fn mount_floor(
    data: &Path,
    mnt: &Path,
    opts: &MountOptions,
) -> Result<hipfs_fusefs::MountHandle, Box<dyn std::error::Error>> {
    let fs = MemFs::new();
    populate(&fs, ROOT_INO, data)?;
    let config = opts.mount_config(mnt, "hipfs-fuse-floor", false, true);
    Ok(hipfs_fusefs::mount(Arc::new(fs), config)?)
}

/// One step: a name, whether caches are dropped first, and the script for
/// a target root (`{T}`), the local copy of the small files (`{S}`), the
/// tar of them (`{A}`), a local scratch directory (`{O}`) and a name part
/// unique to the target and repetition (`{N}`).
struct Step {
    name: &'static str,
    cold: bool,
    /// Untimed, before the step.
    prepare: &'static str,
    script: &'static str,
}

const STEPS: &[Step] = &[
    Step {
        name: "ls -lR tree, cold",
        cold: true,
        prepare: "",
        script: "ls -lR {T}/tree > /dev/null",
    },
    Step {
        name: "ls -lR tree, repeated",
        cold: false,
        // The other targets' cold steps dropped this one's caches.
        prepare: "ls -lR {T}/tree > /dev/null",
        script: "ls -lR {T}/tree > /dev/null",
    },
    Step {
        name: "find tree -type f, cold",
        cold: true,
        prepare: "",
        script: "find {T}/tree -type f > /dev/null",
    },
    Step {
        name: "cat every small file, cold",
        cold: true,
        prepare: "",
        script: "find {T}/small -type f -exec cat {} + > /dev/null",
    },
    Step {
        name: "cp -r small files out",
        cold: true,
        prepare: "rm -rf {O}/out",
        script: "cp -r {T}/small {O}/out",
    },
    Step {
        name: "cp -r small files in",
        cold: false,
        // A new directory each run: files just deleted in the same ext4
        // directory make the next creates there slower (inode reuse checks),
        // which would land on whichever target ran second.
        prepare: "",
        script: "cp -r {S} {T}/cpin.{N}",
    },
    Step {
        name: "tar -x small files in",
        cold: false,
        prepare: "mkdir {T}/untar.{N}",
        script: "tar -xf {A} -C {T}/untar.{N}",
    },
    // One metadata request per call (utimensat: a SETATTR), so the time of
    // a request's round trip: seconds x 100 = microseconds per call.
    Step {
        name: "touch -c one file x10,000",
        cold: false,
        prepare: "touch {T}/one && yes {T}/one | head -n 10000 > {O}/one.list",
        script: "xargs -d '\\n' -a {O}/one.list touch -c -d @1",
    },
];

/// Runs the benchmark and prints its table.
pub fn run_meta_bench(o: &MetaBenchOptions) -> Result<(), Box<dyn std::error::Error>> {
    let work = Work(
        o.dir
            .join(format!("hipfs-bench-meta.{}", std::process::id())),
    );
    std::fs::create_dir(work.path())?;
    let data = match &o.data {
        Some(d) => d.clone(),
        None => {
            let d = work.path().join("data");
            std::fs::create_dir(&d)?;
            eprintln!(
                "bench meta: generating {} tree files and {} small files in {}",
                o.tree_files,
                o.small_files,
                d.display()
            );
            generate(&d, o.tree_files, o.small_files)?;
            d
        }
    };
    let scratch = work.path().join("scratch");
    std::fs::create_dir(&scratch)?;
    let src = scratch.join("src");
    sh(&format!("cp -r {} {}", q(&data.join("small")), q(&src)))?;
    let tar = scratch.join("small.tar");
    sh(&format!("tar -cf {} -C {} small", q(&tar), q(&data)))?;

    let mnt = work.path().join("mnt");
    std::fs::create_dir(&mnt)?;
    let opts = MountOptions::parse(&o.mount_options)?;
    let mount = mount_local(&data, &mnt, &opts)?;

    let mut targets = vec![
        Target {
            label: "local".into(),
            root: data.clone(),
        },
        Target {
            label: "hipfs".into(),
            root: mnt.clone(),
        },
    ];
    let floor_mnt = work.path().join("floor");
    let floor = if o.floor {
        std::fs::create_dir(&floor_mnt)?;
        eprintln!(
            "bench meta: copying the data set into an in-memory FUSE filesystem (the FUSE floor)"
        );
        let m = mount_floor(&data, &floor_mnt, &opts)?;
        targets.push(Target {
            label: "memfs".into(),
            root: floor_mnt.clone(),
        });
        Some(m)
    } else {
        None
    };
    for (label, root) in &o.peers {
        targets.push(Target {
            label: label.clone(),
            root: root.clone(),
        });
    }
    let can_drop = drop_caches();
    let result = run_steps(o, &targets, &src, &tar, &scratch, can_drop);
    for t in &targets[1..] {
        let r = q(&t.root);
        let _ = sh(&format!("rm -rf {r}/cpin.* {r}/untar.* {r}/one"));
    }
    mount.unmount()?;
    if let Some(m) = floor {
        m.unmount()?;
    }
    let table = result?;
    println!(
        "hipfs bench meta: {} tree files (1,000 per directory), {} small files; loopback, same run; hipfs -o {}; {}{}median of {}",
        o.tree_files,
        o.small_files,
        if o.mount_options.is_empty() { "defaults" } else { &o.mount_options },
        if can_drop { "cold = after drop_caches; " } else { "NOT root: cold steps ran with warm caches; " },
        match hipfs_fusefs::wake_here() {
            Some(true) => "fuse.wake_here=Y; ",
            Some(false) => "fuse.wake_here=N; ",
            None => "",
        },
        o.repeats.max(1)
    );
    print!("{:<30} {:>9}", "operation", "local s");
    for t in &targets[1..] {
        print!(" {:>12} {:>8}", format!("{} s", t.label), "ratio");
    }
    println!();
    for (name, secs) in table {
        print!("{name:<30} {:>9.2}", secs[0]);
        for s in &secs[1..] {
            print!(" {s:>12.2} {:>7.1}x", s / secs[0].max(1e-6));
        }
        println!();
    }
    if o.floor {
        println!(
            "memfs: the same steps on an in-memory filesystem behind the same FUSE adapter and mount settings, no server: what the kernel's FUSE requests alone cost on this machine"
        );
    }
    Ok(())
}

type Table = Vec<(&'static str, Vec<f64>)>;

fn run_steps(
    o: &MetaBenchOptions,
    targets: &[Target],
    src: &Path,
    tar: &Path,
    scratch: &Path,
    can_drop: bool,
) -> Result<Table, Box<dyn std::error::Error>> {
    let mut table = Vec::new();
    for step in STEPS {
        let mut row = Vec::new();
        for (ti, t) in targets.iter().enumerate() {
            let mut runs = Vec::new();
            for rep in 0..o.repeats.max(1) {
                let fill = |s: &str| {
                    s.replace("{T}", &q(&t.root))
                        .replace("{S}", &q(src))
                        .replace("{A}", &q(tar))
                        .replace("{O}", &q(scratch))
                        .replace("{N}", &format!("{ti}-{rep}"))
                };
                if !step.prepare.is_empty() {
                    sh(&fill(step.prepare))?;
                }
                if step.cold && can_drop {
                    drop_caches();
                }
                runs.push(timed(&fill(step.script))?);
            }
            row.push(super::median(runs));
        }
        table.push((step.name, row));
    }
    Ok(table)
}
