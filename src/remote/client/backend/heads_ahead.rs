//! Small files fetched ahead. When a program reads a directory's small
//! files one after another (`cat dir/*`, `cp -r` or `tar -c` out of the
//! mount, a data loader), each open costs a server round trip even though
//! its contents come with it ([`super::head`]). After a few such opens in
//! one directory, the contents of the directory's other small files are
//! fetched in the background (`Op::ReadHeads`, many files per request),
//! and the opens that follow are answered here, without the server: the
//! handle gets its server side only if something needs it (the direct
//! path, a read the kept copy cannot answer), like a handle after a
//! reconnect.
//!
//! The rules are those of listings fetched ahead ([`super::prefetch`]):
//! only mounts with change notices fetch ahead, any notice drops every
//! copy and throws away fetches in flight ([`super::ahead`]), a copy is
//! used once, by the credentials it was read with (the server opened each
//! file as them), and only for the inode it was read from. An open
//! answered here returns the contents the file had after the last change
//! the mount was told of, which is what the kernel's cached pages of an
//! open file already rest on (docs/CONSISTENCY.md).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use hipfs_fusefs::Ino;

use super::super::super::proto::{Op, Payload, WireCred, MAX_HEAD, MAX_HEADS};
use super::super::RemoteClient;
use super::ahead::ChangeGeneration;
use super::nodes::join_bytes;

/// Opens of small files in one directory that went to the server, each
/// within [`OPEN_GAP`] of the one before, that start fetching the
/// directory's small files (again, when earlier copies were used up).
const TRIGGER_OPENS: u32 = 4;
const OPEN_GAP: Duration = Duration::from_secs(2);
/// Bytes of contents held, at most.
const MAX_BYTES: usize = 32 << 20;
/// Directories whose opens are counted, at most.
const MAX_COUNTED_DIRS: usize = 256;
/// How long a copy may wait for its open.
const COPY_TTL: Duration = Duration::from_secs(30);

type Key = (Vec<u8>, WireCred);

#[derive(Default)]
struct State {
    /// File path and credentials → (inode, contents, when fetched).
    files: HashMap<Key, (Ino, Vec<u8>, Instant)>,
    bytes: usize,
    /// A fetch that spans a change notice is thrown away.
    generation: ChangeGeneration,
    /// Directory → (small opens in a row, the last one).
    opens: HashMap<Key, (u32, Instant)>,
    /// Directories being fetched.
    fetching: HashSet<Key>,
    /// The server does not know `Op::ReadHeads`.
    unsupported: bool,
}

/// A mount's small files fetched ahead (see the module documentation).
pub(super) struct HeadsAhead {
    state: Arc<Mutex<State>>,
    client: Weak<RemoteClient>,
}

fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    state.lock().unwrap_or_else(|p| p.into_inner())
}

fn parent(path: &[u8]) -> &[u8] {
    match path.iter().rposition(|&b| b == b'/') {
        Some(i) => &path[..i],
        None => &[],
    }
}

impl HeadsAhead {
    pub(super) fn new(client: &Arc<RemoteClient>) -> HeadsAhead {
        HeadsAhead {
            state: Arc::new(Mutex::new(State::default())),
            client: Arc::downgrade(client),
        }
    }

    /// The contents of `path` (inode `ino`) for `cred`, if fetched ahead.
    pub(super) fn take(&self, path: &[u8], ino: Ino, cred: &WireCred) -> Option<Vec<u8>> {
        let mut st = lock(&self.state);
        let (got, data, at) = st.files.remove(&(path.to_vec(), cred.clone()))?;
        st.bytes -= data.len();
        (got == ino && at.elapsed() < COPY_TTL).then_some(data)
    }

    /// A small file at `path` was opened through the server by `cred`:
    /// after [`TRIGGER_OPENS`] in a row in its directory, the directory's
    /// small files are fetched in the background.
    pub(super) fn opened_small(&self, path: &[u8], cred: &WireCred) {
        let dir = (parent(path).to_vec(), cred.clone());
        let generation = {
            let mut st = lock(&self.state);
            if st.unsupported || st.fetching.contains(&dir) {
                return;
            }
            if st.opens.len() >= MAX_COUNTED_DIRS && !st.opens.contains_key(&dir) {
                st.opens.clear();
            }
            let now = Instant::now();
            let n = st.opens.entry(dir.clone()).or_insert((0, now));
            n.0 = if now.duration_since(n.1) < OPEN_GAP {
                n.0 + 1
            } else {
                1
            };
            n.1 = now;
            if n.0 < TRIGGER_OPENS {
                return;
            }
            // Copies nobody opened in time go.
            st.files.retain(|_, (_, _, at)| at.elapsed() < COPY_TTL);
            st.bytes = st.files.values().map(|(_, d, _)| d.len()).sum();
            if st.bytes >= MAX_BYTES {
                return;
            }
            st.opens.remove(&dir);
            st.fetching.insert(dir.clone());
            st.generation.current()
        };
        let state = Arc::clone(&self.state);
        let client = self.client.clone();
        let spawned = std::thread::Builder::new()
            .name("hipfs-heads".into())
            .spawn(move || {
                fetch_dir(&state, &client, &dir, generation);
                lock(&state).fetching.remove(&dir);
            });
        if let Err(e) = spawned {
            log::debug!("no small-file prefetch thread: {e}");
            lock(&self.state).fetching.clear();
        }
    }

    /// A change notice arrived: nothing fetched so far may be used.
    pub(super) fn changed(&self) {
        let mut st = lock(&self.state);
        st.generation.changed();
        st.files.clear();
        st.bytes = 0;
    }
}

/// Fetches directory `dir`'s small files, batch after batch, while no
/// notice arrives (the state is still at `generation`) and there is room.
fn fetch_dir(state: &Mutex<State>, client: &Weak<RemoteClient>, dir: &Key, generation: u64) {
    let mut cookie = 0;
    loop {
        let Some(c) = client.upgrade() else { return };
        let op = Op::ReadHeads {
            path: dir.0.clone(),
            cookie,
            max_each: MAX_HEAD as u32,
            max_total: MAX_HEADS as u32,
        };
        let got = c.call(&dir.1, op);
        drop(c);
        let (items, next) = match got {
            Ok(Payload::Heads { items, next }) => (items, next),
            // A server from before ReadHeads: its decoder refuses the opcode.
            Err(e) if e == libc::EPROTO => {
                lock(state).unsupported = true;
                return;
            }
            _ => return,
        };
        let mut st = lock(state);
        if !st.generation.still(generation) {
            return;
        }
        let now = Instant::now();
        for it in items {
            if st.bytes + it.data.len() > MAX_BYTES {
                return;
            }
            st.bytes += it.data.len();
            let key = (join_bytes(&dir.0, &it.name), dir.1.clone());
            if let Some(old) = st.files.insert(key, (it.ino, it.data, now)) {
                st.bytes -= old.1.len();
            }
        }
        if next == 0 {
            return;
        }
        cookie = next;
    }
}
