//! The in-memory inode tree behind [`super::MemFs`].

use std::collections::{BTreeMap, HashMap};
use std::ffi::{OsStr, OsString};
use std::time::SystemTime;

use crate::{Attr, DirEntryPlus, Entry, Errno, FileKind, Ino, Result, ROOT_INO};

/// Longest file name accepted, as on most Linux filesystems.
pub(super) const NAME_MAX: usize = 255;
/// Largest file MemFs holds; bigger sizes answer `EFBIG` instead of exhausting memory.
pub(super) const MAX_FILE_SIZE: u64 = 1 << 30;
/// Entries handed out per readdir call; the kernel asks again from the last cookie.
const READDIR_BATCH: usize = 256;
/// Cookies 1 and 2 belong to `.` and `..`.
const FIRST_ENTRY_COOKIE: u64 = 3;

pub(super) enum Content {
    File(Vec<u8>),
    Dir(Dir),
    Symlink(OsString),
    /// Fifos, sockets and device nodes: only attributes.
    Special,
}

pub(super) struct Dir {
    pub(super) parent: Ino,
    /// name -> (inode, cookie). Cookies are never reused, so a listing resumes correctly even
    /// when entries are added or removed between calls.
    pub(super) entries: BTreeMap<OsString, (Ino, u64)>,
    pub(super) by_cookie: BTreeMap<u64, OsString>,
    next_cookie: u64,
}

impl Dir {
    pub(super) fn new(parent: Ino) -> Dir {
        Dir {
            parent,
            entries: BTreeMap::new(),
            by_cookie: BTreeMap::new(),
            next_cookie: FIRST_ENTRY_COOKIE,
        }
    }

    pub(super) fn insert(&mut self, name: &OsStr, ino: Ino) {
        let cookie = self.next_cookie;
        self.next_cookie += 1;
        if let Some((_, old)) = self.entries.insert(name.to_owned(), (ino, cookie)) {
            self.by_cookie.remove(&old);
        }
        self.by_cookie.insert(cookie, name.to_owned());
    }

    pub(super) fn remove(&mut self, name: &OsStr) -> Option<Ino> {
        let (ino, cookie) = self.entries.remove(name)?;
        self.by_cookie.remove(&cookie);
        Some(ino)
    }

    pub(super) fn get(&self, name: &OsStr) -> Option<Ino> {
        self.entries.get(name).map(|(ino, _)| *ino)
    }
}

pub(super) struct Node {
    pub(super) ino: Ino,
    pub(super) generation: u64,
    pub(super) kind: FileKind,
    pub(super) perm: u16,
    pub(super) uid: u32,
    pub(super) gid: u32,
    pub(super) rdev: u32,
    pub(super) nlink: u32,
    pub(super) atime: SystemTime,
    pub(super) mtime: SystemTime,
    pub(super) ctime: SystemTime,
    pub(super) xattrs: BTreeMap<OsString, Vec<u8>>,
    /// References the kernel holds (lookups minus forgets).
    pub(super) lookups: u64,
    /// Open file handles.
    pub(super) open: u32,
    pub(super) content: Content,
}

impl Node {
    pub(super) fn attr(&self) -> Attr {
        let size = match &self.content {
            Content::File(data) => data.len() as u64,
            Content::Symlink(target) => target.len() as u64,
            Content::Dir(d) => d.entries.len() as u64,
            Content::Special => 0,
        };
        Attr {
            ino: self.ino,
            size,
            blocks: size.div_ceil(512),
            atime: self.atime,
            mtime: self.mtime,
            ctime: self.ctime,
            kind: self.kind,
            perm: self.perm,
            nlink: self.nlink,
            uid: self.uid,
            gid: self.gid,
            rdev: self.rdev,
            blksize: 1 << 20,
        }
    }

    pub(super) fn entry(&self) -> Entry {
        Entry {
            attr: self.attr(),
            generation: self.generation,
        }
    }

    pub(super) fn dir(&self) -> Result<&Dir> {
        match &self.content {
            Content::Dir(d) => Ok(d),
            _ => Err(Errno::ENOTDIR),
        }
    }

    pub(super) fn dir_mut(&mut self) -> Result<&mut Dir> {
        match &mut self.content {
            Content::Dir(d) => Ok(d),
            _ => Err(Errno::ENOTDIR),
        }
    }

    pub(super) fn touch_modified(&mut self) {
        let now = SystemTime::now();
        self.mtime = now;
        self.ctime = now;
    }
}

/// All inodes and open handles.
pub(super) struct Tree {
    pub(super) nodes: HashMap<Ino, Node>,
    pub(super) handles: HashMap<u64, Ino>,
    next_ino: Ino,
    next_generation: u64,
    next_fh: u64,
}

impl Tree {
    pub(super) fn new() -> Tree {
        let mut tree = Tree {
            nodes: HashMap::new(),
            handles: HashMap::new(),
            next_ino: ROOT_INO,
            next_generation: 1,
            next_fh: 1,
        };
        let root = tree.alloc(
            FileKind::Directory,
            0o755,
            0,
            0,
            Content::Dir(Dir::new(ROOT_INO)),
        );
        if let Some(n) = tree.nodes.get_mut(&root) {
            // The root's own "." plus its ".." pointing at itself.
            n.nlink = 2;
        }
        tree
    }

    pub(super) fn alloc(
        &mut self,
        kind: FileKind,
        perm: u16,
        uid: u32,
        gid: u32,
        content: Content,
    ) -> Ino {
        let ino = self.next_ino;
        self.next_ino += 1;
        let generation = self.next_generation;
        self.next_generation += 1;
        let now = SystemTime::now();
        self.nodes.insert(
            ino,
            Node {
                ino,
                generation,
                kind,
                perm,
                uid,
                gid,
                rdev: 0,
                nlink: 1,
                atime: now,
                mtime: now,
                ctime: now,
                xattrs: BTreeMap::new(),
                lookups: 0,
                open: 0,
                content,
            },
        );
        ino
    }

    pub(super) fn node(&self, ino: Ino) -> Result<&Node> {
        self.nodes.get(&ino).ok_or(Errno::ENOENT)
    }

    pub(super) fn node_mut(&mut self, ino: Ino) -> Result<&mut Node> {
        self.nodes.get_mut(&ino).ok_or(Errno::ENOENT)
    }

    /// `name` in directory `parent`, if present.
    pub(super) fn child(&self, parent: Ino, name: &OsStr) -> Result<Option<Ino>> {
        Ok(self.node(parent)?.dir()?.get(name))
    }

    /// Hands out an entry for `ino`, counting the kernel's new reference.
    pub(super) fn lookup_entry(&mut self, ino: Ino) -> Result<Entry> {
        let node = self.node_mut(ino)?;
        node.lookups += 1;
        Ok(node.entry())
    }

    pub(super) fn new_fh(&mut self, ino: Ino) -> Result<u64> {
        let fh = self.next_fh;
        self.next_fh += 1;
        self.node_mut(ino)?.open += 1;
        self.handles.insert(fh, ino);
        Ok(fh)
    }

    /// Drops an inode nobody can reach any more: no names, no kernel references, no opens.
    pub(super) fn maybe_free(&mut self, ino: Ino) {
        if ino == ROOT_INO {
            return;
        }
        if let Some(n) = self.nodes.get(&ino) {
            if n.nlink == 0 && n.lookups == 0 && n.open == 0 {
                self.nodes.remove(&ino);
            }
        }
    }

    /// Whether `ancestor` is `ino` or one of its parent directories.
    pub(super) fn is_ancestor(&self, ancestor: Ino, mut ino: Ino) -> Result<bool> {
        loop {
            if ino == ancestor {
                return Ok(true);
            }
            if ino == ROOT_INO {
                return Ok(false);
            }
            ino = self.node(ino)?.dir()?.parent;
        }
    }

    /// Up to one batch of entries of directory `ino` after cookie `offset`.
    pub(super) fn list(&mut self, ino: Ino, offset: u64) -> Result<Vec<DirEntryPlus>> {
        let dir = self.node(ino)?.dir()?;
        let mut out = Vec::new();
        if offset < 1 {
            out.push(dot(self.node(ino)?, ".", 1));
        }
        if offset < 2 {
            out.push(dot(self.node(dir.parent)?, "..", 2));
        }
        let start = offset.max(FIRST_ENTRY_COOKIE - 1) + 1;
        let names: Vec<(u64, OsString)> = dir
            .by_cookie
            .range(start..)
            .take(READDIR_BATCH)
            .map(|(c, n)| (*c, n.clone()))
            .collect();
        for (cookie, name) in names {
            let Some(child) = self.child(ino, &name)? else {
                continue;
            };
            out.push(DirEntryPlus {
                name,
                entry: self.lookup_entry(child)?,
                offset: cookie,
            });
        }
        Ok(out)
    }
}

fn dot(node: &Node, name: &str, cookie: u64) -> DirEntryPlus {
    DirEntryPlus {
        name: name.into(),
        entry: node.entry(),
        offset: cookie,
    }
}

/// Refuses names no directory entry may have.
pub(super) fn check_name(name: &OsStr) -> Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let b = name.as_bytes();
    if b.is_empty() || b.contains(&b'/') || b.contains(&0) || name == "." || name == ".." {
        return Err(Errno::EINVAL);
    }
    if b.len() > NAME_MAX {
        return Err(Errno::ENAMETOOLONG);
    }
    Ok(())
}
