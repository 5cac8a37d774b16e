//! Directory attributes this mount learned with its own changes.
//!
//! The kernel forgets a directory's attributes whenever it adds or removes
//! one of the directory's entries, and looks at them again (a GETATTR)
//! before the next lookup in it: one more round trip per file that `tar -x`
//! or `cp -r` creates. Servers of protocol version 4 send the directory's
//! attributes with the reply to every such change (`Payload::InDir`). They
//! are kept here and answer that GETATTR until a change notice names the
//! directory, or this mount changes the directory's own attributes: exactly
//! as long as the kernel would keep them had it not dropped them itself.
//!
//! Kept only on mounts with change notices. A reply that was on its way
//! while something was forgotten here is not kept: it may predate the change
//! that made this forget.

use std::collections::HashMap;
use std::sync::Mutex;

use hipfs_fusefs::{Attr, FileKind, Ino};

use super::ahead::ChangeGeneration;

/// Directories remembered at most (the table is emptied when full: a miss
/// costs only the round trip it would have cost anyway).
const MAX_DIRS: usize = 4096;

#[derive(Default)]
pub(super) struct DirAttrs {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    attrs: HashMap<Ino, Attr>,
    /// Counts the forgets: a reply is kept only if none came between its
    /// request and its arrival.
    generation: ChangeGeneration,
}

impl DirAttrs {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Read before sending a request whose reply may carry attributes.
    pub(super) fn generation(&self) -> u64 {
        self.lock().generation.current()
    }

    /// Keeps `attr` (a directory's attributes just after a change this
    /// mount made) unless something was forgotten since `since`.
    pub(super) fn offer(&self, since: u64, attr: Attr) {
        if attr.kind != FileKind::Directory {
            return;
        }
        let mut g = self.lock();
        if !g.generation.still(since) {
            return;
        }
        if g.attrs.len() >= MAX_DIRS && !g.attrs.contains_key(&attr.ino) {
            g.attrs.clear();
        }
        g.attrs.insert(attr.ino, attr);
    }

    /// The kept attributes of directory `ino`.
    pub(super) fn get(&self, ino: Ino) -> Option<Attr> {
        self.lock().attrs.get(&ino).copied()
    }

    /// `inos` changed (or may have): their attributes must come from the
    /// server again, and replies under way are not kept.
    pub(super) fn forget(&self, inos: impl IntoIterator<Item = Ino>) {
        let mut g = self.lock();
        g.generation.changed();
        for ino in inos {
            g.attrs.remove(&ino);
        }
    }

    /// Anything may have changed.
    pub(super) fn forget_all(&self) {
        let mut g = self.lock();
        g.generation.changed();
        g.attrs.clear();
    }

    /// The kernel no longer knows `ino`: nothing can ask for it.
    pub(super) fn drop_unknown(&self, ino: Ino) {
        self.lock().attrs.remove(&ino);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::UNIX_EPOCH;

    fn dir(ino: Ino, nlink: u32) -> Attr {
        Attr {
            ino,
            size: 4096,
            blocks: 8,
            atime: UNIX_EPOCH,
            mtime: UNIX_EPOCH,
            ctime: UNIX_EPOCH,
            kind: FileKind::Directory,
            perm: 0o755,
            nlink,
            uid: 0,
            gid: 0,
            rdev: 0,
            blksize: 4096,
        }
    }

    #[test]
    fn a_reply_is_kept_until_its_directory_is_forgotten() {
        let d = DirAttrs::default();
        let g = d.generation();
        d.offer(g, dir(7, 2));
        assert_eq!(d.get(7).map(|a| a.nlink), Some(2));
        d.offer(d.generation(), dir(7, 3));
        assert_eq!(d.get(7).map(|a| a.nlink), Some(3));
        d.forget([7]);
        assert_eq!(d.get(7), None);
    }

    #[test]
    fn a_reply_under_way_during_a_forget_is_not_kept() {
        let d = DirAttrs::default();
        let g = d.generation();
        // A notice names some directory while the request is out.
        d.forget([9]);
        d.offer(g, dir(7, 2));
        assert_eq!(d.get(7), None);
        d.offer(d.generation(), dir(7, 2));
        d.forget_all();
        assert_eq!(d.get(7), None);
    }

    #[test]
    fn only_directories_are_kept_and_the_table_stays_bounded() {
        let d = DirAttrs::default();
        let g = d.generation();
        let mut file = dir(3, 1);
        file.kind = FileKind::Regular;
        d.offer(g, file);
        assert_eq!(d.get(3), None);
        for i in 0..(MAX_DIRS as u64 + 10) {
            d.offer(g, dir(100 + i, 2));
        }
        assert!(d.lock().attrs.len() <= MAX_DIRS);
        assert!(d.get(100 + MAX_DIRS as u64 + 9).is_some());
    }
}
