//! The server's change notices turned into the kernel's invalidations.
//!
//! A notice names `(directory, name)` pairs below the export root; the
//! inode table says which inode numbers the kernel knows under those paths.
//! For each pair the kernel forgets the name in the directory (positive or
//! negative entry), the directory's attributes and cached listing, and the
//! named inode's attributes and pages. This runs on a thread of its own:
//! an invalidation waits while a request holds the directory or inode, and
//! that request may be waiting for a reply.

use std::collections::{HashMap, HashSet};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::sync::mpsc::{channel, Receiver};
use std::sync::{Arc, Weak};

use hipfs_fusefs::{Ino, Invalidator};

use super::super::super::proto::ChangedName;
use super::super::link::Notice;
use super::nodes::join_bytes;
use super::RemoteFs;

/// Change notices subscribed to, waiting for the mount that applies them
/// ([`RemoteFs::subscribe`], then [`RemoteFs::apply_changes`]).
pub struct ChangeFeed(Receiver<Notice>);

impl RemoteFs {
    /// Asks the server for change notices. `None` when it cannot promise
    /// them: the mount must then keep short cache lifetimes.
    pub fn subscribe(&self) -> Option<ChangeFeed> {
        let (tx, rx) = channel();
        let watching = self.client.watch(tx);
        self.tracks_fresh_dirs
            .store(watching, std::sync::atomic::Ordering::Relaxed);
        watching.then_some(ChangeFeed(rx))
    }

    /// Applies `feed`'s notices to the mount behind `inv` until this
    /// filesystem is dropped.
    pub fn apply_changes(self: &Arc<Self>, feed: ChangeFeed, inv: Invalidator) {
        let fs = Arc::downgrade(self);
        let spawned = std::thread::Builder::new()
            .name("hipfs-invalidate".into())
            .spawn(move || apply_loop(&fs, &feed.0, &inv));
        if let Err(e) = spawned {
            log::warn!("cannot start the invalidation thread: {e}; cached names may stay stale");
        }
    }

    /// Inode numbers the kernel knows under any of `paths`.
    fn inos_of(&self, paths: &HashSet<Vec<u8>>) -> HashMap<Vec<u8>, Vec<Ino>> {
        let nodes = self.nodes.read().unwrap_or_else(|p| p.into_inner());
        paths
            .iter()
            .filter(|p| !nodes.at(p).is_empty())
            .map(|p| (p.clone(), nodes.at(p).to_vec()))
            .collect()
    }

    fn forget_missing_xattrs(&self, inos: &HashSet<Ino>) {
        {
            let mut nodes = self.nodes.write().unwrap_or_else(|p| p.into_inner());
            for ino in inos {
                nodes.set_no_xattrs(*ino, None);
            }
        }
        self.missing_xattrs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|(ino, _), _| !inos.contains(ino));
    }
}

fn apply_loop(fs: &Weak<RemoteFs>, rx: &Receiver<Notice>, inv: &Invalidator) {
    while let Ok(first) = rx.recv() {
        let Some(fs) = fs.upgrade() else { return };
        // Listings fetched ahead may predate these changes.
        fs.prefetch.changed();
        fs.heads_ahead.changed();
        // Everything queued is applied together: one pass over the table.
        let mut names = Vec::new();
        let mut everything = false;
        for n in std::iter::once(first).chain(rx.try_iter()) {
            match n {
                Notice::Changed(v) => names.extend(v),
                Notice::Everything => everything = true,
            }
        }
        if everything {
            fs.dir_attrs.forget_all();
            apply_everything(&fs, inv);
        } else {
            apply_names(&fs, names, inv);
        }
    }
}

fn apply_names(fs: &RemoteFs, names: Vec<ChangedName>, inv: &Invalidator) {
    let mut wanted = HashSet::new();
    for n in &names {
        wanted.insert(n.dir.clone());
        if !n.name.is_empty() {
            wanted.insert(join_bytes(&n.dir, &n.name));
        }
    }
    let inos = fs.inos_of(&wanted);
    // A name that now means an inode the kernel knows (by another name: a
    // new hard link, a link moved here): that inode's link count and ctime
    // changed, which inotify reports for this name only.
    let mut changed: HashSet<Ino> = {
        let nodes = fs.nodes.read().unwrap_or_else(|p| p.into_inner());
        names
            .iter()
            .filter(|n| !n.inode_only && n.ino != 0 && nodes.get(&n.ino).is_some())
            .map(|n| n.ino)
            .collect()
    };
    for ChangedName {
        dir,
        name,
        ino: now,
        inode_only,
    } in &names
    {
        let dirs = inos.get(dir).map(Vec::as_slice).unwrap_or_default();
        let known = (!name.is_empty())
            .then(|| inos.get(&join_bytes(dir, name)))
            .flatten();
        // Only the inode changed, and the kernel's name still means it: the
        // directory's entries, attributes and listing are as they were.
        if *inode_only && *now != 0 && known.is_some_and(|v| v.contains(now)) {
            changed.insert(*now);
            continue;
        }
        changed.extend(dirs);
        if name.is_empty() {
            continue;
        }
        // Someone may have made this name: ask the server from now on.
        dirs.iter().for_each(|d| fs.note_name_in(*d, name));
        // A name that no longer means a directory made here: that inode
        // number may come back as another directory.
        known
            .into_iter()
            .flatten()
            .filter(|i| **i != *now)
            .for_each(|i| fs.untrack_dir(*i));
        match known {
            // The kernel's name still means that inode: keep the name (a
            // dropped directory entry would cut off every process whose
            // working directory it is), drop only the inode's attributes.
            Some(v) if *now != 0 && v.contains(now) => changed.insert(*now),
            _ => {
                // A new name (a negative entry may be cached), a name gone
                // or now meaning another inode.
                for d in dirs {
                    inv.entry(*d, OsStr::from_bytes(name));
                }
                changed.extend(known.into_iter().flatten());
                true
            }
        };
    }
    fs.forget_missing_xattrs(&changed);
    fs.dir_attrs.forget(changed.iter().copied());
    for ino in changed {
        fs.drop_heads_of(ino);
        inv.inode(ino, true);
    }
}

fn apply_everything(fs: &RemoteFs, inv: &Invalidator) {
    fs.untrack_all_dirs();
    let all: Vec<(Ino, Vec<Vec<u8>>)> = fs
        .nodes
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .map(|(ino, n)| (*ino, n.paths.clone()))
        .collect();
    fs.missing_xattrs
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clear();
    fs.nodes
        .write()
        .unwrap_or_else(|p| p.into_inner())
        .clear_no_xattrs();
    // Names of directories (those with known children) are left to
    // expire: dropping them would cut off the processes working inside.
    // Their attributes and listings go.
    let split = |p: &[u8]| -> (Vec<u8>, Vec<u8>) {
        match p.iter().rposition(|&b| b == b'/') {
            Some(i) => (p[..i].to_vec(), p[i + 1..].to_vec()),
            None => (Vec::new(), p.to_vec()),
        }
    };
    let mut by_path: HashMap<Vec<u8>, Ino> = HashMap::new();
    let mut parents: HashSet<Vec<u8>> = HashSet::new();
    for (ino, paths) in &all {
        for p in paths {
            by_path.insert(p.clone(), *ino);
            parents.insert(split(p).0);
        }
    }
    for (ino, paths) in &all {
        for p in paths {
            let (dir, name) = split(p);
            if name.is_empty() || parents.contains(p) {
                continue;
            }
            if let Some(d) = by_path.get(&dir) {
                inv.entry(*d, OsStr::from_bytes(&name));
            }
        }
        fs.drop_heads_of(*ino);
        inv.inode(*ino, true);
    }
}
