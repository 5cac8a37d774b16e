//! The inode table: which paths the kernel's inode numbers were seen under.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::ops::Deref;
use std::os::unix::ffi::OsStrExt;
use std::time::Instant;

use hipfs_fusefs::{Entry, Errno, Ino, Result};

use super::super::super::proto::MAX_NAME;
use super::RemoteFs;

/// An inode the kernel knows: the paths it was last seen under (several
/// for hard links, most recent first) and the kernel's lookup count.
pub(super) struct Node {
    pub(super) paths: Vec<Vec<u8>>,
    pub(super) nlookup: u64,
    /// When the server last said this inode has no extended attributes
    /// (readdir): kept here, with the inode, so that the answer for every
    /// file of a large tree stays as long as the kernel knows the file.
    pub(super) no_xattrs: Option<std::time::Instant>,
}

/// The inode table, indexed both ways: by inode (every request) and by
/// path (each change notice names paths; scanning every known inode per
/// notice cost milliseconds per batch once `ls -lR` had shown the kernel
/// 100,000 files, and a notice comes with every file created).
/// Reads go through `Deref` to the by-inode map; every change of a path
/// goes through a method, which keeps the two in step.
#[derive(Default)]
pub(super) struct NodeTable {
    by_ino: HashMap<Ino, Node>,
    by_path: HashMap<Vec<u8>, Vec<Ino>>,
}

impl Deref for NodeTable {
    type Target = HashMap<Ino, Node>;
    fn deref(&self) -> &Self::Target {
        &self.by_ino
    }
}

impl NodeTable {
    fn index(&mut self, path: &[u8], ino: Ino) {
        let v = self.by_path.entry(path.to_vec()).or_default();
        if !v.contains(&ino) {
            v.push(ino);
        }
    }

    fn unindex(&mut self, path: &[u8], ino: Ino) {
        if let Some(v) = self.by_path.get_mut(path) {
            v.retain(|i| *i != ino);
            if v.is_empty() {
                self.by_path.remove(path);
            }
        }
    }

    /// Adds `ino` (with no path yet) if it is not known.
    pub(super) fn insert_root(&mut self, ino: Ino) {
        self.by_ino.entry(ino).or_insert(Node {
            paths: vec![Vec::new()],
            nlookup: 1,
            no_xattrs: None,
        });
        self.index(b"", ino);
    }

    /// One more kernel reference to `ino`, seen at `path` (now its first path).
    pub(super) fn remember(&mut self, path: Vec<u8>, ino: Ino) {
        let n = self.by_ino.entry(ino).or_insert(Node {
            paths: Vec::new(),
            nlookup: 0,
            no_xattrs: None,
        });
        n.paths.retain(|p| *p != path);
        n.paths.insert(0, path.clone());
        let dropped = n.paths.split_off(n.paths.len().min(MAX_PATHS));
        n.nlookup += 1;
        for d in dropped {
            self.unindex(&d, ino);
        }
        self.index(&path, ino);
    }

    /// The kernel gave back `nlookup` references; the inode goes at zero.
    pub(super) fn forget(&mut self, ino: Ino, nlookup: u64) {
        let Some(n) = self.by_ino.get_mut(&ino) else {
            return;
        };
        n.nlookup = n.nlookup.saturating_sub(nlookup);
        if n.nlookup == 0 {
            if let Some(n) = self.by_ino.remove(&ino) {
                for p in &n.paths {
                    self.unindex(p, ino);
                }
            }
        }
    }

    /// `ino` is no longer found at `path`.
    pub(super) fn drop_path(&mut self, ino: Ino, path: &[u8]) {
        if let Some(n) = self.by_ino.get_mut(&ino) {
            n.paths.retain(|p| p != path);
            self.unindex(path, ino);
        }
    }

    /// Rewrites every path `fix` maps to a new one (a rename).
    pub(super) fn rename(&mut self, fix: impl Fn(&[u8]) -> Option<Vec<u8>>) {
        let mut moves = Vec::new();
        for (ino, n) in self.by_ino.iter_mut() {
            for path in n.paths.iter_mut() {
                if let Some(p) = fix(path) {
                    moves.push((*ino, std::mem::replace(path, p.clone()), p));
                }
            }
        }
        // All removals first: an exchange moves names onto each other.
        for (ino, old, _) in &moves {
            self.unindex(old, *ino);
        }
        for (ino, _, new) in &moves {
            self.index(new, *ino);
        }
    }

    /// Inodes the kernel knows at `path`.
    pub(super) fn at(&self, path: &[u8]) -> &[Ino] {
        self.by_path
            .get(path)
            .map(Vec::as_slice)
            .unwrap_or_default()
    }

    /// Sets when the server last said `ino` has no extended attributes.
    pub(super) fn set_no_xattrs(&mut self, ino: Ino, at: Option<Instant>) -> bool {
        match self.by_ino.get_mut(&ino) {
            Some(n) => {
                n.no_xattrs = at;
                true
            }
            None => false,
        }
    }

    /// Forgets every "no extended attributes" answer.
    pub(super) fn clear_no_xattrs(&mut self) {
        for n in self.by_ino.values_mut() {
            n.no_xattrs = None;
        }
    }
}

/// Paths remembered per inode (hard links beyond this are found again by lookup).
const MAX_PATHS: usize = 8;

pub(super) fn join(dir: &[u8], name: &OsStr) -> Result<Vec<u8>> {
    let n = name.as_bytes();
    if n.len() > MAX_NAME {
        return Err(Errno::ENAMETOOLONG);
    }
    if n.is_empty() || n == b"." || n == b".." || n.contains(&b'/') || n.contains(&0) {
        return Err(Errno::EINVAL);
    }
    let mut p = Vec::with_capacity(dir.len() + 1 + n.len());
    if !dir.is_empty() {
        p.extend_from_slice(dir);
        p.push(b'/');
    }
    p.extend_from_slice(n);
    Ok(p)
}

/// `dir/name` (or `name` in the root), for names already checked.
pub(super) fn join_bytes(dir: &[u8], name: &[u8]) -> Vec<u8> {
    let mut p = Vec::with_capacity(dir.len() + 1 + name.len());
    if !dir.is_empty() {
        p.extend_from_slice(dir);
        p.push(b'/');
    }
    p.extend_from_slice(name);
    p
}

/// `path` with the prefix `from` replaced by `to`, if it starts with it.
pub(super) fn moved(path: &[u8], from: &[u8], to: &[u8]) -> Option<Vec<u8>> {
    if path == from {
        return Some(to.to_vec());
    }
    if path.len() > from.len() && path.starts_with(from) && path[from.len()] == b'/' {
        let mut p = to.to_vec();
        p.extend_from_slice(&path[from.len()..]);
        return Some(p);
    }
    None
}

impl RemoteFs {
    /// The inodes the kernel knows under `path`.
    pub(super) fn inos_at(&self, path: &[u8]) -> Vec<Ino> {
        self.nodes
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .at(path)
            .to_vec()
    }

    pub(super) fn path_of(&self, ino: Ino) -> Result<Vec<u8>> {
        self.nodes
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(&ino)
            .and_then(|n| n.paths.first().cloned())
            .ok_or(Errno::new(libc::ESTALE))
    }

    /// Runs `f` with a path of `ino`; when that name is gone (`ENOENT`, or
    /// `ESTALE` for a name now naming another file) and the inode has other
    /// names (hard links), forgets it and tries the next.
    pub(super) fn on_node<T>(&self, ino: Ino, f: impl Fn(Vec<u8>) -> Result<T>) -> Result<T> {
        loop {
            let paths = self
                .nodes
                .read()
                .unwrap_or_else(|p| p.into_inner())
                .get(&ino)
                .map(|n| n.paths.clone())
                .ok_or(Errno::new(libc::ESTALE))?;
            let Some(first) = paths.first().cloned() else {
                return Err(Errno::new(libc::ESTALE));
            };
            match f(first.clone()) {
                Err(e) if paths.len() > 1 && (e == Errno::ENOENT || e.code() == libc::ESTALE) => {
                    self.nodes
                        .write()
                        .unwrap_or_else(|p| p.into_inner())
                        .drop_path(ino, &first);
                }
                r => return r,
            }
        }
    }

    pub(super) fn child(&self, parent: Ino, name: &OsStr) -> Result<Vec<u8>> {
        join(&self.path_of(parent)?, name)
    }

    /// Records that the kernel now holds one more reference to `e` at `path`.
    pub(super) fn remember(&self, path: Vec<u8>, e: &Entry) {
        self.nodes
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .remember(path, e.attr.ino);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsStr;

    #[test]
    fn the_path_index_follows_remember_rename_exchange_and_forget() {
        let mut t = NodeTable::default();
        t.insert_root(1);
        t.remember(b"a".to_vec(), 2);
        t.remember(b"a/f".to_vec(), 3);
        t.remember(b"b".to_vec(), 4);
        assert_eq!(t.at(b"a/f"), &[3]);
        t.rename(|p| moved(p, b"a", b"c"));
        assert_eq!(t.at(b"a/f"), &[] as &[Ino]);
        assert_eq!(t.at(b"c/f"), &[3]);
        // An exchange: each name now means the other's inode.
        t.rename(|p| moved(p, b"c", b"b").or_else(|| moved(p, b"b", b"c")));
        assert_eq!(t.at(b"b"), &[2]);
        assert_eq!(t.at(b"c"), &[4]);
        assert_eq!(t.at(b"b/f"), &[3]);
        t.remember(b"b/f".to_vec(), 3);
        t.forget(3, 1);
        assert_eq!(t.at(b"b/f"), &[3]);
        t.forget(3, 1);
        assert_eq!(t.at(b"b/f"), &[] as &[Ino]);
        assert!(!t.contains_key(&3));
        t.drop_path(4, b"c");
        assert_eq!(t.at(b"c"), &[] as &[Ino]);
        assert_eq!(t.at(b""), &[1]);
    }

    #[test]
    fn renamed_prefixes_move_whole_subtrees_and_nothing_else() {
        assert_eq!(moved(b"a/b", b"a", b"x").as_deref(), Some(&b"x/b"[..]));
        assert_eq!(moved(b"a", b"a", b"x").as_deref(), Some(&b"x"[..]));
        assert_eq!(moved(b"ab/c", b"a", b"x"), None);
        assert_eq!(join(b"", OsStr::new("f")).unwrap(), b"f");
        assert_eq!(join(b"d", OsStr::new("f")).unwrap(), b"d/f");
        assert_eq!(
            join(b"d", OsStr::new(&"n".repeat(256))),
            Err(Errno::ENAMETOOLONG)
        );
    }
}
