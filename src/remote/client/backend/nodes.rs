//! The inode table: which paths the kernel's inode numbers were seen under.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;

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
                    let mut nodes = self.nodes.write().unwrap_or_else(|p| p.into_inner());
                    if let Some(n) = nodes.get_mut(&ino) {
                        n.paths.retain(|p| *p != first);
                    }
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
        let mut nodes = self.nodes.write().unwrap_or_else(|p| p.into_inner());
        let n = nodes.entry(e.attr.ino).or_insert(Node {
            paths: Vec::new(),
            nlookup: 0,
            no_xattrs: None,
        });
        n.paths.retain(|p| *p != path);
        n.paths.insert(0, path);
        n.paths.truncate(MAX_PATHS);
        n.nlookup += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsStr;

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
