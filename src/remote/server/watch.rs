//! Watching the export for changes and pushing them to the clients that
//! asked (`Op::Watch`), so their kernels can cache names and attributes for
//! long and still see every change at once: made through hipfs, by another
//! client, or by a process on the server.
//!
//! inotify, one watch per directory (fanotify would need file handles mapped
//! back to paths). The thread starts with the server (before any worker
//! switches its credentials, so it keeps root's), walks the export adding
//! watches, then turns each batch of events into `(directory, name)` pairs
//! below the export root. New directories are watched as they appear and
//! their entries reported (they may have been made before the watch was).
//! A full event queue, or a directory that could not be watched, is
//! reported as `everything`: clients then drop all they cached.

use std::collections::HashMap;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use rustix::fs::inotify::{self, CreateFlags, ReadFlags, WatchFlags};

use super::super::proto::{ChangedName, Payload, Reply, MAX_CHANGED, NOTICE_ID};
use super::resolve::{open_node, proc_path, stat_at};
use super::ServerShared;
use hipfs_sys::dirent::{getdents64, Dirents};

/// Whether the export is watched (clients asking `Watch` wait for the
/// initial walk, then get the answer).
#[derive(Default)]
pub(crate) struct WatchState {
    state: Mutex<Option<bool>>,
    settled: Condvar,
}

impl WatchState {
    /// Whether change notices can be promised, once the initial walk has
    /// ended (at most `wait`; `false` if it has not).
    pub(crate) fn watching(&self, wait: Duration) -> bool {
        let g = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let (g, _) = self
            .settled
            .wait_timeout_while(g, wait, |s| s.is_none())
            .unwrap_or_else(|p| p.into_inner());
        g.unwrap_or(false)
    }

    fn settle(&self, ok: bool) {
        *self.state.lock().unwrap_or_else(|p| p.into_inner()) = Some(ok);
        self.settled.notify_all();
    }
}

const MASK: WatchFlags = WatchFlags::CREATE
    .union(WatchFlags::DELETE)
    .union(WatchFlags::MOVED_FROM)
    .union(WatchFlags::MOVED_TO)
    .union(WatchFlags::ATTRIB)
    .union(WatchFlags::MODIFY)
    .union(WatchFlags::CLOSE_WRITE)
    .union(WatchFlags::ONLYDIR)
    .union(WatchFlags::EXCL_UNLINK);

/// How long the thread waits for an event before it looks whether the
/// server stops (a burst of events gathers for `ServeConfig::notice_gather`
/// before it is sent).
const IDLE: Duration = Duration::from_millis(200);

/// Events that change the named inode only, never the entries of the
/// directory reporting them (whose attributes stay as they were).
const INODE_ONLY: ReadFlags = ReadFlags::ATTRIB
    .union(ReadFlags::MODIFY)
    .union(ReadFlags::CLOSE_WRITE)
    .union(ReadFlags::ISDIR);

/// The `(directory, name)` pairs of one batch of events, each once, in
/// the order first seen, with whether every event about it changed only
/// the inode (one entry change anywhere in the batch makes it an entry
/// change).
#[derive(Default)]
struct Gathered {
    order: Vec<(DirName, bool)>,
    at: HashMap<DirName, usize>,
}

/// A directory below the export root and a name in it.
type DirName = (Vec<u8>, Vec<u8>);

impl Gathered {
    fn add(&mut self, dir: Vec<u8>, name: Vec<u8>, inode_only: bool) {
        let key = (dir, name);
        match self.at.get(&key) {
            Some(&i) => self.order[i].1 &= inode_only,
            None => {
                self.at.insert(key.clone(), self.order.len());
                self.order.push((key, inode_only));
            }
        }
    }
}

struct Tree {
    fd: OwnedFd,
    /// Watch descriptor → directory below the export root.
    dirs: HashMap<i32, Vec<u8>>,
}

fn join(dir: &[u8], name: &[u8]) -> Vec<u8> {
    if dir.is_empty() {
        return name.to_vec();
    }
    let mut p = Vec::with_capacity(dir.len() + 1 + name.len());
    p.extend_from_slice(dir);
    p.push(b'/');
    p.extend_from_slice(name);
    p
}

impl Tree {
    /// Watches `rel` and every directory below it; the entries found are
    /// added to `found` (they may have changed before the watch existed).
    /// `false` if some directory could not be watched.
    fn add(
        &mut self,
        shared: &ServerShared,
        rel: Vec<u8>,
        found: &mut Vec<(Vec<u8>, Vec<u8>)>,
    ) -> bool {
        let root = shared.export.root_fd();
        let mut ok = true;
        let mut todo = vec![rel];
        let mut buf = vec![0u8; 64 * 1024];
        while let Some(dir) = todo.pop() {
            let Ok(node) = open_node(root, &dir, libc::O_PATH | libc::O_DIRECTORY) else {
                continue; // gone again: its parent's event says so
            };
            match inotify::add_watch(&self.fd, proc_path(&node).as_c_str(), MASK) {
                Ok(wd) => {
                    self.dirs.insert(wd, dir.clone());
                }
                Err(e) => {
                    log::warn!(
                        "cannot watch {}/{} ({e}); clients are told to drop their caches \
                         (raise fs.inotify.max_user_watches for large exports)",
                        shared.export.path.display(),
                        String::from_utf8_lossy(&dir)
                    );
                    ok = false;
                    continue;
                }
            }
            let Ok(d) = open_node(root, &dir, libc::O_RDONLY | libc::O_DIRECTORY) else {
                continue;
            };
            loop {
                let n = match getdents64(d.as_fd(), &mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => n,
                };
                for e in Dirents::new(&buf[..n]).flatten() {
                    if e.name == b"." || e.name == b".." {
                        continue;
                    }
                    found.push((dir.clone(), e.name.to_vec()));
                    let is_dir = match e.kind {
                        libc::DT_DIR => true,
                        libc::DT_UNKNOWN => {
                            open_node(root, &join(&dir, e.name), libc::O_PATH | libc::O_DIRECTORY)
                                .is_ok()
                        }
                        _ => false,
                    };
                    if is_dir {
                        todo.push(join(&dir, e.name));
                    }
                }
            }
        }
        ok
    }

    /// Forgets the watches of `rel` and below (moved out of the export).
    fn remove(&mut self, rel: &[u8]) {
        let gone: Vec<i32> = self
            .dirs
            .iter()
            .filter(|(_, p)| below(p, rel))
            .map(|(wd, _)| *wd)
            .collect();
        for wd in gone {
            self.dirs.remove(&wd);
            let _ = inotify::remove_watch(&self.fd, wd);
        }
    }

    /// `from` (and below) is now called `to`.
    fn rename(&mut self, from: &[u8], to: &[u8]) {
        for p in self.dirs.values_mut() {
            if below(p, from) {
                let mut n = to.to_vec();
                n.extend_from_slice(&p[from.len()..]);
                *p = n;
            }
        }
    }
}

fn below(p: &[u8], dir: &[u8]) -> bool {
    p == dir || (p.len() > dir.len() && p.starts_with(dir) && p[dir.len()] == b'/')
}

/// Starts the watching thread of `shared`'s export.
pub(crate) fn start(shared: Arc<ServerShared>) {
    let spawned = std::thread::Builder::new()
        .name("hipfs-watch".into())
        .spawn(move || run(&shared));
    if let Err(e) = spawned {
        log::warn!("cannot start the export watcher: {e}");
    }
}

fn run(shared: &Arc<ServerShared>) {
    let fd = match inotify::init(CreateFlags::CLOEXEC | CreateFlags::NONBLOCK) {
        Ok(fd) => fd,
        Err(e) => {
            log::warn!("inotify: {e}; clients keep short cache lifetimes");
            shared.watch.settle(false);
            return;
        }
    };
    let mut tree = Tree {
        fd,
        dirs: HashMap::new(),
    };
    let mut ignore = Vec::new();
    if !tree.add(shared, Vec::new(), &mut ignore) {
        // Not every directory is watched: promising notices would be a lie.
        shared.watch.settle(false);
        return;
    }
    shared.watch.settle(true);
    let mut buf = vec![MaybeUninit::<u8>::uninit(); 64 * 1024];
    // Moved-from directories awaiting their moved-to half (by cookie).
    let mut moving: HashMap<u32, Vec<u8>> = HashMap::new();
    loop {
        if shared.is_stopping() {
            return;
        }
        let mut names = Gathered::default();
        let mut everything = false;
        let mut got = false;
        for round in 0..2 {
            let mut reader = inotify::Reader::new(tree.fd.as_fd(), &mut buf);
            let mut events = Vec::new();
            // Until WOULDBLOCK: drained.
            while let Ok(ev) = reader.next() {
                events.push((
                    ev.wd(),
                    ev.events(),
                    ev.cookie(),
                    ev.file_name().map(|n| n.to_bytes().to_vec()),
                ));
            }
            got |= !events.is_empty();
            for (wd, flags, cookie, name) in events {
                if flags.contains(ReadFlags::QUEUE_OVERFLOW) {
                    everything = true;
                    continue;
                }
                if flags.contains(ReadFlags::IGNORED) {
                    tree.dirs.remove(&wd);
                    continue;
                }
                let Some(dir) = tree.dirs.get(&wd).cloned() else {
                    continue;
                };
                let Some(name) = name else {
                    names.add(dir, Vec::new(), false);
                    continue;
                };
                let path = join(&dir, &name);
                let mut found = Vec::new();
                if flags.contains(ReadFlags::ISDIR) {
                    if flags.contains(ReadFlags::MOVED_FROM) {
                        moving.insert(cookie, path.clone());
                    } else if flags.contains(ReadFlags::MOVED_TO) {
                        match moving.remove(&cookie) {
                            Some(from) => tree.rename(&from, &path),
                            None => everything |= !tree.add(shared, path.clone(), &mut found),
                        }
                    } else if flags.contains(ReadFlags::CREATE) {
                        everything |= !tree.add(shared, path.clone(), &mut found);
                    }
                }
                for (d, n) in found {
                    names.add(d, n, false);
                }
                names.add(dir, name, INODE_ONLY.contains(flags));
            }
            if round == 0 && got {
                std::thread::sleep(shared.notice_gather);
            }
        }
        // A directory moved out of the export: its watches now report
        // outside it.
        for (_, from) in moving.drain() {
            tree.remove(&from);
        }
        if !got {
            // Woken by an event, or now and then to see whether the server stops.
            let _ = hipfs_sys::process::poll_readable(tree.fd.as_fd(), IDLE.as_millis() as i32);
            continue;
        }
        let names = names
            .order
            .into_iter()
            .map(|((dir, name), inode_only)| {
                let (ino, linked) = if name.is_empty() {
                    (0, false)
                } else {
                    ino_now(shared, &dir, &name)
                };
                ChangedName {
                    dir,
                    name,
                    ino,
                    // A file with other names: their directories' events
                    // about it (a link made or removed there changes its
                    // link count) may never name this one, and a listing
                    // fetched again is what refreshes it here.
                    inode_only: inode_only && !linked,
                }
            })
            .collect();
        push(shared, names, everything);
    }
}

/// The inode number clients know `dir/name` by now (0: no such name), and
/// whether it is a file with other names (hard links).
fn ino_now(shared: &ServerShared, dir: &[u8], name: &[u8]) -> (u64, bool) {
    let Ok(d) = open_node(
        shared.export.root_fd(),
        dir,
        libc::O_PATH | libc::O_DIRECTORY,
    ) else {
        return (0, false);
    };
    let Ok(n) = super::resolve::cstr(name) else {
        return (0, false);
    };
    stat_at(d.as_fd(), &n).map_or((0, false), |st| {
        let linked = st.st_mode & libc::S_IFMT != libc::S_IFDIR && st.st_nlink > 1;
        (shared.export.wire_ino(&st), linked)
    })
}

/// Sends the notice to every watching session.
fn push(shared: &ServerShared, names: Vec<ChangedName>, everything: bool) {
    let sessions = shared.watching_sessions();
    if sessions.is_empty() {
        return;
    }
    // Well inside one message, however long the paths.
    const MAX_BYTES: usize = 256 * 1024;
    let mut chunks: Vec<Vec<ChangedName>> = vec![Vec::new()];
    let mut bytes = 0;
    for n in names {
        let len = n.dir.len() + n.name.len() + 17;
        let full = chunks
            .last()
            .is_some_and(|c| c.len() >= MAX_CHANGED || bytes + len > MAX_BYTES);
        if full {
            chunks.push(Vec::new());
            bytes = 0;
        }
        bytes += len;
        if let Some(c) = chunks.last_mut() {
            c.push(n);
        }
    }
    // Each form once: what each protocol version reads.
    let mut by_version: HashMap<u16, Vec<Vec<u8>>> = HashMap::new();
    for s in sessions {
        let msgs = by_version.entry(s.version()).or_insert_with(|| {
            chunks
                .iter()
                .map(|names| {
                    Reply {
                        id: NOTICE_ID,
                        result: Ok(Payload::notice(names.clone(), everything, s.version())),
                    }
                    .encode()
                })
                .collect()
        });
        for m in msgs.iter() {
            if let Err(e) = s.send(m.clone()) {
                log::info!("change notice not delivered: {e}");
                break;
            }
        }
    }
}
