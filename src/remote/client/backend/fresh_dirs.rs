//! Directories this mount made, whose every name it knows: a lookup of any
//! other name in one is answered "no such name" without asking the server.
//!
//! `tar -x` and `cp -r` into the mount make a directory, then look up each
//! name before creating it; every one of those lookups missed, and each cost
//! a round trip. A directory made by this mount's `mkdir` starts empty;
//! every name this mount then makes in it, and every name a change notice
//! names in it (a change by anyone else), is recorded as "may exist" and
//! asked of the server as before. So the local answer can only be wrong
//! for a change whose notice has not arrived yet, which is exactly what the
//! kernel's cached "no such name" entries already accept (see
//! docs/CONSISTENCY.md). Without notices nothing is tracked.
//!
//! A directory stops being tracked when a notice names it (renamed,
//! removed, its attributes changed: its inode number could then come back
//! as another directory), when the kernel forgets it, when notices were
//! lost, and when it holds more names than [`MAX_NAMES`].

use std::collections::{HashMap, HashSet};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::Ordering;

use hipfs_fusefs::Ino;

use super::RemoteFs;

/// Names recorded per directory before it stops being tracked.
const MAX_NAMES: usize = 100_000;
/// Directories tracked at once (the oldest are not evicted: all go).
const MAX_DIRS: usize = 4096;

/// Directory inode → the names that may exist in it.
#[derive(Default)]
pub(super) struct FreshDirs {
    dirs: HashMap<Ino, HashSet<Vec<u8>>>,
}

impl RemoteFs {
    /// `dir` was just made by this mount: empty, and known to be.
    pub(super) fn track_new_dir(&self, dir: Ino) {
        if !self.tracks_fresh_dirs.load(Ordering::Relaxed) {
            return;
        }
        let mut f = self.fresh_dirs.lock().unwrap_or_else(|p| p.into_inner());
        if f.dirs.len() >= MAX_DIRS {
            f.dirs.clear();
        }
        f.dirs.insert(dir, HashSet::new());
    }

    /// `name` in `dir` may exist now (made here, or named by a notice).
    pub(super) fn note_name_in(&self, dir: Ino, name: &[u8]) {
        let mut f = self.fresh_dirs.lock().unwrap_or_else(|p| p.into_inner());
        let Some(names) = f.dirs.get_mut(&dir) else {
            return;
        };
        if names.len() >= MAX_NAMES {
            f.dirs.remove(&dir);
        } else {
            names.insert(name.to_vec());
        }
    }

    /// Stops tracking `dir`.
    pub(super) fn untrack_dir(&self, dir: Ino) {
        let mut f = self.fresh_dirs.lock().unwrap_or_else(|p| p.into_inner());
        if !f.dirs.is_empty() {
            f.dirs.remove(&dir);
        }
    }

    /// Stops tracking every directory (notices were lost).
    pub(super) fn untrack_all_dirs(&self) {
        self.fresh_dirs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .dirs
            .clear();
    }

    /// Whether `name` surely does not exist in `dir`.
    pub(super) fn surely_absent(&self, dir: Ino, name: &OsStr) -> bool {
        let f = self.fresh_dirs.lock().unwrap_or_else(|p| p.into_inner());
        f.dirs
            .get(&dir)
            .is_some_and(|names| !names.contains(name.as_bytes()))
    }
}
