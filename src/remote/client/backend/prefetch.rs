//! Listings fetched ahead. When a tree walk (`ls -lR`, `find`, `du`,
//! `cp -r`) goes down into a directory just listed, the first batches of
//! that directory's other subdirectories are asked for in the background,
//! so the walk finds each next listing ready instead of waiting while the
//! server stats its entries: the server's work (most of a cold listing's
//! cost) runs beside the kernel's and the tool's instead of between them.
//! A listing no one goes down from (a plain `ls`) fetches nothing ahead.
//!
//! Only mounts that receive change notices fetch ahead, and any notice
//! drops every listing fetched ahead (and makes those in flight be thrown
//! away): a listing taken from here is never older than the last change
//! the mount was told of, which is the promise the kernel's own cached
//! listings already rest on (docs/CONSISTENCY.md). A listing is used once,
//! by the credentials it was fetched with, and not after [`READY_TTL`].

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use super::super::super::proto::{DirItem, Op, Payload, WireCred};
use super::super::RemoteClient;
use super::ahead::ChangeGeneration;

/// Listings queued, in flight or ready, at most.
const MAX_SLOTS: usize = 256;
/// Entries held by ready listings, at most (about 100 bytes each).
const MAX_HELD_ITEMS: usize = 256 * 1024;
/// How long a ready listing may wait for its directory to be listed.
const READY_TTL: Duration = Duration::from_secs(10);
/// How long the fetching thread waits for work before it ends.
const IDLE_EXIT: Duration = Duration::from_secs(5);
/// How long a listing waits for the same directory's fetch in flight.
const IN_FLIGHT_WAIT: Duration = Duration::from_secs(30);
/// Directories whose subdirectories are remembered, at most.
const MAX_RECENT: usize = 64;
/// How long after its listing a directory counts as being walked.
const RECENT_TTL: Duration = Duration::from_secs(30);

type Key = (Vec<u8>, WireCred);

enum Slot {
    Queued,
    InFlight,
    Ready {
        items: Vec<DirItem>,
        eof: bool,
        at: Instant,
    },
}

#[derive(Default)]
struct State {
    queue: VecDeque<Key>,
    slots: HashMap<Key, Slot>,
    /// A fetch that started before the latest change notice is thrown
    /// away.
    generation: ChangeGeneration,
    held_items: usize,
    fetching: bool,
    /// Directories listed lately → their subdirectories, until a walk
    /// goes down into one of them.
    recent: HashMap<Key, (Instant, Vec<Vec<u8>>)>,
}

struct Shared {
    state: Mutex<State>,
    changed: Condvar,
    /// Weak: the fetching thread must not keep a dropped mount's
    /// connection open.
    client: Weak<RemoteClient>,
    batch: u32,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A mount's listings fetched ahead (see the module documentation).
pub(super) struct Prefetch {
    shared: Arc<Shared>,
}

impl Prefetch {
    /// Fetches with `client`, `batch` entries per listing.
    pub(super) fn new(client: &Arc<RemoteClient>, batch: u32) -> Prefetch {
        Prefetch {
            shared: Arc::new(Shared {
                state: Mutex::new(State::default()),
                changed: Condvar::new(),
                client: Arc::downgrade(client),
                batch,
            }),
        }
    }

    /// A batch of `dir`'s listing showing the subdirectories `subdirs`
    /// was handed out to `cred`. When `dir`'s parent was listed lately, a
    /// walk is going down the tree: its other subdirectories are fetched.
    pub(super) fn listed(&self, dir: &[u8], subdirs: Vec<Vec<u8>>, cred: &WireCred) {
        let mut st = self.shared.lock();
        let parent = match dir.iter().rposition(|&b| b == b'/') {
            Some(i) => dir[..i].to_vec(),
            None => Vec::new(),
        };
        let walked = (!dir.is_empty())
            .then(|| st.recent.remove(&(parent, cred.clone())))
            .flatten()
            .filter(|(at, _)| at.elapsed() < RECENT_TTL);
        if !subdirs.is_empty() {
            if st.recent.len() >= MAX_RECENT {
                st.recent.retain(|_, (at, _)| at.elapsed() < RECENT_TTL);
                if st.recent.len() >= MAX_RECENT {
                    st.recent.clear();
                }
            }
            st.recent
                .entry((dir.to_vec(), cred.clone()))
                .or_insert_with(|| (Instant::now(), Vec::new()))
                .1
                .extend(subdirs);
        }
        if let Some((_, siblings)) = walked {
            let ahead = siblings.into_iter().filter(|p| p.as_slice() != dir);
            self.queue(st, ahead, cred);
        }
    }

    /// Queues the first batches of the directories at `paths`, as `cred`.
    fn queue(
        &self,
        mut st: MutexGuard<'_, State>,
        paths: impl IntoIterator<Item = Vec<u8>>,
        cred: &WireCred,
    ) {
        let before = st.queue.len();
        for path in paths {
            if st.slots.len() >= MAX_SLOTS {
                break;
            }
            let key = (path, cred.clone());
            if st.slots.contains_key(&key) {
                continue;
            }
            st.slots.insert(key.clone(), Slot::Queued);
            st.queue.push_back(key);
        }
        if st.queue.len() == before {
            return;
        }
        if !st.fetching {
            let shared = Arc::clone(&self.shared);
            let spawned = std::thread::Builder::new()
                .name("hipfs-prefetch".into())
                .spawn(move || fetch_loop(&shared));
            match spawned {
                Ok(_) => st.fetching = true,
                Err(e) => {
                    log::debug!("no listing prefetch thread: {e}");
                    st.queue.clear();
                    st.slots.retain(|_, s| !matches!(s, Slot::Queued));
                }
            }
        } else {
            self.shared.changed.notify_all();
        }
    }

    /// The first batch of `path`'s listing for `cred` if it was fetched
    /// ahead (waiting for it when its fetch is under way), and whether it
    /// is the whole listing. `None`: ask the server.
    pub(super) fn take(&self, path: &[u8], cred: &WireCred) -> Option<(Vec<DirItem>, bool)> {
        let key = (path.to_vec(), cred.clone());
        let deadline = Instant::now() + IN_FLIGHT_WAIT;
        let mut st = self.shared.lock();
        loop {
            match st.slots.get(&key)? {
                Slot::InFlight => {
                    let left = deadline.checked_duration_since(Instant::now())?;
                    st = self
                        .shared
                        .changed
                        .wait_timeout(st, left)
                        .unwrap_or_else(|p| p.into_inner())
                        .0;
                }
                // Not started: the caller asks now rather than wait its turn.
                Slot::Queued => {
                    st.slots.remove(&key);
                    return None;
                }
                Slot::Ready { .. } => {
                    let Some(Slot::Ready { items, eof, at }) = st.slots.remove(&key) else {
                        return None;
                    };
                    st.held_items -= items.len();
                    return (at.elapsed() < READY_TTL).then_some((items, eof));
                }
            }
        }
    }

    /// A change notice arrived: nothing fetched so far may be used.
    pub(super) fn changed(&self) {
        let mut st = self.shared.lock();
        st.generation.changed();
        st.slots.retain(|_, s| !matches!(s, Slot::Ready { .. }));
        st.held_items = 0;
        self.shared.changed.notify_all();
    }
}

fn fetch_loop(shared: &Shared) {
    let mut st = shared.lock();
    loop {
        let Some(key) = st.queue.pop_front() else {
            let (next, timeout) = shared
                .changed
                .wait_timeout(st, IDLE_EXIT)
                .unwrap_or_else(|p| p.into_inner());
            st = next;
            if timeout.timed_out() && st.queue.is_empty() {
                st.fetching = false;
                return;
            }
            continue;
        };
        // Taken by a listing meanwhile, or dropped.
        if !matches!(st.slots.get(&key), Some(Slot::Queued)) {
            continue;
        }
        if st.held_items >= MAX_HELD_ITEMS {
            st.slots.remove(&key);
            continue;
        }
        st.slots.insert(key.clone(), Slot::InFlight);
        let generation = st.generation.current();
        drop(st);
        let op = Op::Readdir {
            path: key.0.clone(),
            cookie: 0,
            max: shared.batch,
        };
        let Some(client) = shared.client.upgrade() else {
            let mut st = shared.lock();
            st.queue.clear();
            st.slots.clear();
            st.fetching = false;
            shared.changed.notify_all();
            return;
        };
        let got = client.call(&key.1, op);
        drop(client);
        st = shared.lock();
        let fresh =
            st.generation.still(generation) && matches!(st.slots.get(&key), Some(Slot::InFlight));
        match got {
            Ok(Payload::Dir(items)) if fresh => {
                let eof = items.len() < shared.batch as usize;
                st.held_items += items.len();
                st.slots.insert(
                    key,
                    Slot::Ready {
                        items,
                        eof,
                        at: Instant::now(),
                    },
                );
            }
            _ => {
                st.slots.remove(&key);
            }
        }
        shared.changed.notify_all();
    }
}
