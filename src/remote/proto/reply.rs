//! Replies: the request id and either an errno or the operation's result.

use hipfs_fusefs::{Attr, Entry, StatFs};

use super::types::{
    decode_attr, decode_entry, decode_statfs, encode_attr, encode_entry, encode_statfs,
};
use super::{
    expect_kind, DirItem, HeadItem, Kind, ProtoError, Reader, Writer, MAX_DIR_ITEMS, MAX_IO,
    MAX_NAME, MAX_XATTR,
};

/// One changed name of a change notice.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChangedName {
    /// The directory, below the export root.
    pub dir: Vec<u8>,
    /// The name in it; empty: the directory itself.
    pub name: Vec<u8>,
    /// The inode the name means now (0: nothing).
    pub ino: u64,
    /// Only the named inode changed (its attributes or contents: chmod,
    /// utimes, a write), not the directory's entries: the directory's
    /// attributes and cached listing still hold. Carried by
    /// [`Payload::ChangedKinds`]; [`Payload::Changed`] decodes it `false`.
    pub inode_only: bool,
}

/// Most names one change notice carries (the server sends more notices).
pub const MAX_CHANGED: usize = 1024;

/// What a successful operation returns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Payload {
    /// Nothing (success).
    Empty,
    /// Attributes.
    Attr(Attr),
    /// An entry.
    Entry(Entry),
    /// Directory entries.
    Dir(Vec<DirItem>),
    /// An opened file.
    Opened {
        /// Its server handle.
        fh: u64,
    },
    /// An opened file (`Op::OpenHead`) and, when it is small enough, its
    /// whole contents.
    OpenedHead {
        /// Its server handle.
        fh: u64,
        /// The whole file (`Some`, possibly empty) or nothing (`None`: not a
        /// small regular file).
        data: Option<Vec<u8>>,
    },
    /// Small files' contents (`Op::ReadHeads`), and the cookie that
    /// resumes the listing (0: it ended).
    Heads {
        /// The files.
        items: Vec<HeadItem>,
        /// Where to go on.
        next: u64,
    },
    /// A created and opened file.
    Created {
        /// Its entry.
        entry: Entry,
        /// Its server handle.
        fh: u64,
        /// It had no extended attributes at all just after the create
        /// (none inherited, e.g. a default ACL): the client need not ask
        /// for the file capability the kernel checks before the first
        /// write. Only version 5 peers are told (tag 18); `false` says
        /// nothing.
        no_xattrs: bool,
    },
    /// `n` bytes read; `data` is empty when they were placed remotely.
    Read {
        /// Bytes read.
        n: u32,
        /// The bytes, when not placed in the client's region.
        data: Vec<u8>,
    },
    /// `n` bytes placed in the client's memory on an authenticated TCP
    /// connection, with their BLAKE3 hash: the reply is authenticated, so
    /// the client can check that the placed bytes are the server's.
    Placed {
        /// Bytes placed.
        n: u32,
        /// BLAKE3 hash of the placed bytes.
        digest: [u8; 32],
    },
    /// Bytes written.
    Written(u32),
    /// Bytes (readlink, getxattr).
    Bytes(Vec<u8>),
    /// Names (listxattr).
    Names(Vec<Vec<u8>>),
    /// Filesystem statistics.
    Statfs(StatFs),
    /// Pushed to watching connections (id [`super::NOTICE_ID`]): names
    /// that changed, as (directory, name, inode) below the export root; an
    /// empty name means the directory itself; the inode is what the name
    /// is now (0: nothing), so a client whose cached name still means that
    /// inode keeps the name and drops only the inode's attributes. `everything` means notices were
    /// lost (the watch queue overflowed): every cached name and attribute
    /// may be stale.
    Changed {
        /// What changed (`inode_only` is not sent).
        names: Vec<ChangedName>,
        /// Drop every cache.
        everything: bool,
    },
    /// [`Payload::Changed`] with each name's `inode_only` (version 5
    /// peers; older ones get `Changed`, see [`Payload::notice`]).
    ChangedKinds {
        /// What changed.
        names: Vec<ChangedName>,
        /// Drop every cache.
        everything: bool,
    },
    /// The result of a change to a directory's entries (create, mkdir,
    /// mknod, symlink, link, unlink, rmdir, rename; version 4 peers) and
    /// that directory's attributes just after it, so the client can answer
    /// the kernel's next look at the directory without asking again. The
    /// inner payload is never itself `InDir`.
    InDir {
        /// The directory's attributes after the change (`ino` says which).
        parent: Attr,
        /// The operation's own result.
        inner: Box<Payload>,
    },
}

impl Payload {
    /// The operation's own result and, for [`Payload::InDir`], the
    /// directory attributes that came with it.
    pub fn split_parent(self) -> (Payload, Option<Attr>) {
        match self {
            Payload::InDir { parent, inner } => (*inner, Some(parent)),
            p => (p, None),
        }
    }

    /// A change notice as a peer speaking protocol `version` reads it.
    pub fn notice(names: Vec<ChangedName>, everything: bool, version: u16) -> Payload {
        if version >= super::NOTICE_KIND_VERSION {
            Payload::ChangedKinds { names, everything }
        } else {
            Payload::Changed { names, everything }
        }
    }

    /// The names and `everything` flag of a change notice of either form.
    pub fn into_changes(self) -> Option<(Vec<ChangedName>, bool)> {
        match self {
            Payload::Changed { names, everything }
            | Payload::ChangedKinds { names, everything } => Some((names, everything)),
            _ => None,
        }
    }
}

/// A reply to request `id`: `Err(errno)` or a payload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reply {
    /// The request this answers.
    pub id: u64,
    /// The payload or an errno.
    pub result: Result<Payload, i32>,
}

impl Reply {
    /// The message as sent.
    pub fn encode(&self) -> Vec<u8> {
        let extra = match &self.result {
            Ok(Payload::Read { data, .. }) => data.len(),
            _ => 0,
        };
        let mut w = Writer::with_capacity(128 + extra);
        w.u8(Kind::Reply as u8).u64(self.id);
        match &self.result {
            Err(errno) => {
                w.u8(0).i32(*errno);
            }
            Ok(p) => encode_payload(&mut w, p),
        }
        w.finish()
    }

    /// Parses a reply message.
    pub fn decode(msg: &[u8]) -> Result<Reply, ProtoError> {
        let mut r = Reader::new(msg);
        expect_kind(&mut r, Kind::Reply)?;
        let id = r.u64("request id")?;
        let tag = r.u8("payload tag")?;
        let result = if tag == 0 {
            let e = r.i32("errno")?;
            if e <= 0 || e > 4095 {
                return Err(ProtoError::BadValue("errno", e as u64));
            }
            Err(e)
        } else {
            Ok(decode_payload(&mut r, tag)?)
        };
        r.end()?;
        Ok(Reply { id, result })
    }
}

fn encode_payload(w: &mut Writer, p: &Payload) {
    match p {
        Payload::Empty => {
            w.u8(1);
        }
        Payload::Attr(a) => {
            w.u8(2);
            encode_attr(w, a);
        }
        Payload::Entry(e) => {
            w.u8(3);
            encode_entry(w, e);
        }
        Payload::Dir(items) => {
            w.u8(4).u32(items.len() as u32);
            for it in items {
                w.bytes(&it.name).u64(it.cookie);
                encode_entry(w, &it.entry);
                w.bool(it.no_xattrs);
            }
        }
        Payload::Opened { fh } => {
            w.u8(5).u64(*fh);
        }
        Payload::Created {
            entry,
            fh,
            no_xattrs,
        } => {
            w.u8(if *no_xattrs { 18 } else { 6 });
            encode_entry(w, entry);
            w.u64(*fh);
        }
        Payload::Read { n, data } => {
            w.u8(7).u32(*n).bytes(data);
        }
        Payload::Written(n) => {
            w.u8(8).u32(*n);
        }
        Payload::Bytes(b) => {
            w.u8(9).bytes(b);
        }
        Payload::Names(names) => {
            w.u8(10).u32(names.len() as u32);
            for n in names {
                w.bytes(n);
            }
        }
        Payload::Statfs(s) => {
            w.u8(11);
            encode_statfs(w, s);
        }
        Payload::Placed { n, digest } => {
            w.u8(12).u32(*n).bytes(digest);
        }
        Payload::OpenedHead { fh, data } => {
            w.u8(14).u64(*fh).bool(data.is_some());
            w.bytes(data.as_deref().unwrap_or_default());
        }
        Payload::Heads { items, next } => {
            w.u8(15).u64(*next).u32(items.len() as u32);
            for it in items {
                w.bytes(&it.name).u64(it.ino).bytes(&it.data);
            }
        }
        Payload::Changed { names, everything } => {
            w.u8(13).bool(*everything).u32(names.len() as u32);
            for n in names {
                w.bytes(&n.dir).bytes(&n.name).u64(n.ino);
            }
        }
        Payload::ChangedKinds { names, everything } => {
            w.u8(17).bool(*everything).u32(names.len() as u32);
            for n in names {
                w.bytes(&n.dir).bytes(&n.name).u64(n.ino).bool(n.inode_only);
            }
        }
        Payload::InDir { parent, inner } => {
            w.u8(16);
            encode_attr(w, parent);
            encode_payload(w, inner);
        }
    }
}

/// The body of a change notice; `kinds`: each name carries `inode_only`.
fn decode_changed(r: &mut Reader<'_>, kinds: bool) -> Result<(Vec<ChangedName>, bool), ProtoError> {
    let everything = r.bool("everything flag")?;
    let n = r.count("changed names", MAX_CHANGED, 16)?;
    let mut names = Vec::with_capacity(n);
    for _ in 0..n {
        let dir = r.bytes("changed directory", super::MAX_REL_PATH)?;
        super::validate_rel_path(dir)?;
        let name = r.bytes("changed name", MAX_NAME)?;
        if name.contains(&b'/') || name.contains(&0) || name == b"." || name == b".." {
            return Err(ProtoError::BadPath("changed name".into()));
        }
        let ino = r.u64("changed inode")?;
        let inode_only = kinds && r.bool("inode-only flag")?;
        names.push(ChangedName {
            dir: dir.to_vec(),
            name: name.to_vec(),
            ino,
            inode_only,
        });
    }
    Ok((names, everything))
}

fn decode_payload(r: &mut Reader<'_>, tag: u8) -> Result<Payload, ProtoError> {
    Ok(match tag {
        1 => Payload::Empty,
        2 => Payload::Attr(decode_attr(r)?),
        3 => Payload::Entry(decode_entry(r)?),
        4 => {
            // name length + cookie + entry: at least 4 + 8 + 100 bytes each.
            let n = r.count("directory entries", MAX_DIR_ITEMS, 100)?;
            let mut items = Vec::with_capacity(n);
            for _ in 0..n {
                let name = r.bytes("entry name", MAX_NAME)?;
                if name.is_empty() || name.contains(&b'/') || name.contains(&0) {
                    return Err(ProtoError::BadPath("directory entry name".into()));
                }
                items.push(DirItem {
                    name: name.to_vec(),
                    cookie: r.u64("cookie")?,
                    entry: decode_entry(r)?,
                    no_xattrs: r.bool("no-xattrs flag")?,
                });
            }
            Payload::Dir(items)
        }
        5 => Payload::Opened { fh: r.u64("fh")? },
        6 | 18 => Payload::Created {
            entry: decode_entry(r)?,
            fh: r.u64("fh")?,
            no_xattrs: tag == 18,
        },
        7 => {
            let n = r.u32("bytes read")?;
            let data = r.bytes("read data", MAX_IO)?.to_vec();
            if n as usize > super::MAX_PLACED_READ || (!data.is_empty() && data.len() != n as usize)
            {
                return Err(ProtoError::BadValue("bytes read", u64::from(n)));
            }
            Payload::Read { n, data }
        }
        8 => Payload::Written(r.u32("bytes written")?),
        9 => Payload::Bytes(r.bytes("value", MAX_XATTR.max(4096))?.to_vec()),
        10 => {
            let n = r.count("names", MAX_XATTR, 4)?;
            let mut names = Vec::with_capacity(n);
            for _ in 0..n {
                names.push(r.bytes("name", MAX_NAME)?.to_vec());
            }
            Payload::Names(names)
        }
        11 => Payload::Statfs(decode_statfs(r)?),
        12 => {
            let n = r.u32("bytes placed")?;
            if n as usize > super::MAX_PLACED_READ {
                return Err(ProtoError::BadValue("bytes placed", u64::from(n)));
            }
            let d = r.bytes("placed digest", 32)?;
            Payload::Placed {
                n,
                digest: d
                    .try_into()
                    .map_err(|_| ProtoError::BadValue("placed digest", d.len() as u64))?,
            }
        }
        13 => {
            let (names, everything) = decode_changed(r, false)?;
            Payload::Changed { names, everything }
        }
        17 => {
            let (names, everything) = decode_changed(r, true)?;
            Payload::ChangedKinds { names, everything }
        }
        14 => {
            let fh = r.u64("fh")?;
            let whole = r.bool("contents flag")?;
            let data = r.bytes("file contents", super::MAX_HEAD)?.to_vec();
            Payload::OpenedHead {
                fh,
                data: whole.then_some(data),
            }
        }
        15 => {
            let next = r.u64("cookie")?;
            // name length + inode + data length: at least 16 bytes each.
            let n = r.count("small files", MAX_DIR_ITEMS, 16)?;
            let mut items = Vec::with_capacity(n);
            let mut total = 0usize;
            for _ in 0..n {
                let name = r.bytes("file name", MAX_NAME)?;
                if name.is_empty() || name.contains(&b'/') || name.contains(&0) {
                    return Err(ProtoError::BadPath("small file name".into()));
                }
                let ino = r.u64("inode")?;
                let data = r.bytes("file contents", super::MAX_HEAD)?;
                total += data.len();
                if total > super::MAX_HEADS {
                    return Err(ProtoError::BadValue("small files' bytes", total as u64));
                }
                items.push(HeadItem {
                    name: name.to_vec(),
                    ino,
                    data: data.to_vec(),
                });
            }
            Payload::Heads { items, next }
        }
        16 => {
            let parent = decode_attr(r)?;
            match r.u8("payload tag")? {
                16 => return Err(ProtoError::BadValue("nested directory attributes", 16)),
                t => Payload::InDir {
                    parent,
                    inner: Box::new(decode_payload(r, t)?),
                },
            }
        }
        v => return Err(ProtoError::BadValue("payload tag", u64::from(v))),
    })
}
