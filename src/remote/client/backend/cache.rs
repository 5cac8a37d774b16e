//! Caches that save round trips: the current batch of each open directory,
//! and recent "no such extended attribute" answers.

use std::time::Instant;

use std::sync::atomic::Ordering;

use hipfs_fusefs::{Credentials, Errno, FileKind, Ino, Result};

use super::super::super::proto::{DirItem, Op, Payload};
use super::nodes::join_bytes;
use super::{wire_cred, RemoteFs};

fn is_dot(name: &[u8]) -> bool {
    name == b"." || name == b".."
}

/// One open directory: the last batch fetched from the server, so that the
/// kernel's small readdir buffers are filled from memory instead of a
/// server round trip (and a re-listing) per few dozen entries.
#[derive(Default)]
pub(super) struct DirListing {
    /// Cookie the batch starts after.
    pub(super) from: u64,
    pub(super) items: Vec<DirItem>,
    /// The server returned fewer than asked: nothing follows the batch.
    pub(super) eof: bool,
}

/// Entries asked from the server per batch.
pub(super) const DIR_BATCH: u32 = 1024;
/// Entries handed to the adapter per readdir call. The kernel's buffer is
/// the caller's `getdents` size (32 KiB from glibc): about 190 readdirplus
/// entries of short names. Every entry handed out is counted as a lookup
/// and the ones that did not fit are forgotten again, so handing out the
/// whole batch each time cost more than the kernel's side of `find`.
const DIR_HANDOUT: usize = 256;
/// Key in the missing-xattr cache meaning "no attribute at all" (not a
/// valid attribute name, which always has a namespace prefix and a dot).
pub(super) const ANY_XATTR: &[u8] = b"*";
/// Missing-xattr answers kept at most.
const MAX_MISSING_XATTRS: usize = 65536;

impl RemoteFs {
    pub(super) fn missing_xattr(&self, ino: Ino, name: &[u8]) -> Option<Errno> {
        let map = self
            .missing_xattrs
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let fresh = |k: (Ino, Vec<u8>)| {
            map.get(&k)
                .filter(|(at, _)| at.elapsed() < self.xattr_ttl)
                .map(|(_, e)| *e)
        };
        let none_at_all = self
            .nodes
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(&ino)
            .and_then(|n| n.no_xattrs)
            .is_some_and(|at| at.elapsed() < self.xattr_ttl);
        if none_at_all {
            return Some(Errno::ENODATA);
        }
        fresh((ino, name.to_vec())).or_else(|| fresh((ino, ANY_XATTR.to_vec())))
    }

    pub(super) fn note_missing_xattr(&self, ino: Ino, name: &[u8], e: Errno) {
        if self.xattr_ttl.is_zero() {
            return;
        }
        let mut map = self
            .missing_xattrs
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if map.len() >= MAX_MISSING_XATTRS {
            map.clear();
        }
        map.insert((ino, name.to_vec()), (Instant::now(), e));
    }

    /// Records that `ino` has no extended attributes at all (as of now).
    pub(super) fn note_no_xattrs(&self, ino: Ino) {
        if self.xattr_ttl.is_zero() {
            return;
        }
        let known = self
            .nodes
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .set_no_xattrs(ino, Some(Instant::now()));
        if !known {
            self.note_missing_xattr(ino, ANY_XATTR, Errno::ENODATA);
        }
    }

    pub(super) fn forget_xattrs(&self, ino: Ino) {
        self.nodes
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .set_no_xattrs(ino, None);
        self.missing_xattrs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|(i, _), _| *i != ino);
    }

    /// The entries after `offset`, from the directory's cached batch when it
    /// covers that cookie, else from a new batch fetched from the server.
    pub(super) fn dir_items(
        &self,
        ino: Ino,
        fh: u64,
        offset: u64,
        cred: &Credentials,
    ) -> Result<Vec<DirItem>> {
        let listing = self
            .dirs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&fh)
            .cloned();
        let Some(listing) = listing else {
            // No handle of ours (opendir not seen): fetch directly.
            return self.fetch_dir(ino, offset, cred).map(|(v, _)| v);
        };
        let mut l = listing.lock().unwrap_or_else(|p| p.into_inner());
        let start = if offset == l.from {
            Some(0)
        } else {
            l.items
                .iter()
                .position(|it| it.cookie == offset)
                .map(|i| i + 1)
        };
        if let Some(i) = start.filter(|&i| i < l.items.len() || l.eof) {
            let i = i.min(l.items.len());
            return Ok(l.items[i..].iter().take(DIR_HANDOUT).cloned().collect());
        }
        let (items, eof) = self.fetch_dir_ahead(ino, offset, cred)?;
        *l = DirListing {
            from: offset,
            items,
            eof,
        };
        Ok(l.items.iter().take(DIR_HANDOUT).cloned().collect())
    }

    /// A batch of `ino`'s listing from `offset`: the first one fetched
    /// ahead if it was ([`super::prefetch`]), else from the server; told
    /// to the prefetcher, which fetches ahead when a walk goes down.
    fn fetch_dir_ahead(
        &self,
        ino: Ino,
        offset: u64,
        cred: &Credentials,
    ) -> Result<(Vec<DirItem>, bool)> {
        // Only change notices keep what was fetched ahead honest.
        if !self.tracks_fresh_dirs.load(Ordering::Relaxed)
            || std::env::var_os("HIPFS_AB_NOPREFETCH").is_some()
        {
            return self.fetch_dir(ino, offset, cred);
        }
        let dir = self.path_of(ino)?;
        let wire = wire_cred(cred);
        let ahead = (offset == 0)
            .then(|| self.prefetch.take(&dir, &wire))
            .flatten();
        let (items, eof) = match ahead {
            Some(got) => got,
            None => self.fetch_dir(ino, offset, cred)?,
        };
        let subdirs = items
            .iter()
            .filter(|it| it.entry.attr.kind == FileKind::Directory && !is_dot(&it.name))
            .map(|it| join_bytes(&dir, &it.name))
            .collect();
        self.prefetch.listed(&dir, subdirs, &wire);
        Ok((items, eof))
    }

    pub(super) fn fetch_dir(
        &self,
        ino: Ino,
        offset: u64,
        cred: &Credentials,
    ) -> Result<(Vec<DirItem>, bool)> {
        let dir = self.path_of(ino)?;
        let p = self.call(
            cred,
            Op::Readdir {
                path: dir,
                cookie: offset,
                max: DIR_BATCH,
            },
        )?;
        let Payload::Dir(items) = p else {
            return Err(Errno::EIO);
        };
        let eof = items.len() < DIR_BATCH as usize;
        Ok((items, eof))
    }
}
