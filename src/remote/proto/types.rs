//! Field types shared by requests and replies.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hipfs_fusefs::{Attr, Entry, FileKind, StatFs};
use hipfs_rdma::RemoteDescriptor;

use super::{ProtoError, Reader, Writer, MAX_GROUPS, MAX_NAME, MAX_REL_PATH};

/// Who makes a request: the server acts as this user (after its squash and
/// map-all rules).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct WireCred {
    /// User id.
    pub uid: u32,
    /// Primary group id.
    pub gid: u32,
    /// Supplementary groups.
    pub groups: Vec<u32>,
}

impl WireCred {
    pub(crate) fn encode(&self, w: &mut Writer) {
        w.u32(self.uid).u32(self.gid).u32(self.groups.len() as u32);
        for g in &self.groups {
            w.u32(*g);
        }
    }
    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<WireCred, ProtoError> {
        let uid = r.u32("uid")?;
        let gid = r.u32("gid")?;
        let n = r.count("groups", MAX_GROUPS, 4)?;
        let mut groups = Vec::with_capacity(n);
        for _ in 0..n {
            groups.push(r.u32("group")?);
        }
        Ok(WireCred { uid, gid, groups })
    }
}

/// A point in time, or "the server's now" for setattr.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WireTime {
    /// The server's current time.
    Now,
    /// Seconds and nanoseconds since the epoch (seconds may be negative).
    At(i64, u32),
}

impl WireTime {
    /// A time as the wire carries it.
    pub fn from_system(t: SystemTime) -> WireTime {
        let (s, n) = split_time(t);
        WireTime::At(s, n)
    }
    fn encode(&self, w: &mut Writer) {
        match self {
            WireTime::Now => {
                w.u8(1);
            }
            WireTime::At(s, n) => {
                w.u8(2).i64(*s).u32(*n);
            }
        }
    }
    fn decode(r: &mut Reader<'_>) -> Result<Option<WireTime>, ProtoError> {
        match r.u8("time tag")? {
            0 => Ok(None),
            1 => Ok(Some(WireTime::Now)),
            2 => {
                let s = r.i64("seconds")?;
                let n = r.u32("nanoseconds")?;
                if n >= 1_000_000_000 {
                    return Err(ProtoError::BadValue("nanoseconds", u64::from(n)));
                }
                Ok(Some(WireTime::At(s, n)))
            }
            v => Err(ProtoError::BadValue("time tag", u64::from(v))),
        }
    }
}

fn encode_opt_time(w: &mut Writer, t: &Option<WireTime>) {
    match t {
        None => {
            w.u8(0);
        }
        Some(t) => t.encode(w),
    }
}

/// Which attributes a setattr changes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WireSetAttr {
    /// New permission bits.
    pub mode: Option<u32>,
    /// New owner.
    pub uid: Option<u32>,
    /// New group.
    pub gid: Option<u32>,
    /// New size.
    pub size: Option<u64>,
    /// New access time.
    pub atime: Option<WireTime>,
    /// New modification time.
    pub mtime: Option<WireTime>,
}

impl WireSetAttr {
    pub(crate) fn encode(&self, w: &mut Writer) {
        w.opt_u32(self.mode)
            .opt_u32(self.uid)
            .opt_u32(self.gid)
            .opt_u64(self.size);
        encode_opt_time(w, &self.atime);
        encode_opt_time(w, &self.mtime);
    }
    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<WireSetAttr, ProtoError> {
        Ok(WireSetAttr {
            mode: r.opt_u32("mode")?,
            uid: r.opt_u32("uid")?,
            gid: r.opt_u32("gid")?,
            size: r.opt_u64("size")?,
            atime: WireTime::decode(r)?,
            mtime: WireTime::decode(r)?,
        })
    }
}

/// Where the server places read data: a region the client registered on
/// this connection, at `offset` inside it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReadDest {
    /// The client's registered region.
    pub region: RemoteDescriptor,
    /// Offset inside it.
    pub offset: u64,
}

/// One directory entry with attributes, and the cookie that resumes after it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirItem {
    /// The name.
    pub name: Vec<u8>,
    /// Resumes the listing after this entry.
    pub cookie: u64,
    /// What the name refers to.
    pub entry: Entry,
    /// The server found no extended attributes on it, so the client can
    /// answer `ls -l`'s ACL and label queries without asking.
    pub no_xattrs: bool,
}

/// One small file's whole contents (`Payload::Heads`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeadItem {
    /// Its name in the directory.
    pub name: Vec<u8>,
    /// Its inode number (as in its attributes).
    pub ino: u64,
    /// The whole file.
    pub data: Vec<u8>,
}

pub(crate) fn split_time(t: SystemTime) -> (i64, u32) {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => (d.as_secs().min(i64::MAX as u64) as i64, d.subsec_nanos()),
        Err(e) => {
            let d = e.duration();
            // Before the epoch: floor the seconds so the nanoseconds stay
            // positive; times older than i64 seconds can say clamp to its minimum.
            let (s, n) = (d.as_secs(), d.subsec_nanos());
            if n == 0 {
                (0i64.checked_sub_unsigned(s).unwrap_or(i64::MIN), 0)
            } else {
                (
                    (-1i64).checked_sub_unsigned(s).unwrap_or(i64::MIN),
                    1_000_000_000 - n,
                )
            }
        }
    }
}

pub(crate) fn join_time(s: i64, n: u32) -> SystemTime {
    let n = n.min(999_999_999);
    if s >= 0 {
        UNIX_EPOCH + Duration::new(s as u64, n)
    } else {
        UNIX_EPOCH - Duration::from_secs(s.unsigned_abs()) + Duration::from_nanos(u64::from(n))
    }
}

fn kind_tag(k: FileKind) -> u8 {
    match k {
        FileKind::Regular => 1,
        FileKind::Directory => 2,
        FileKind::Symlink => 3,
        FileKind::Fifo => 4,
        FileKind::Socket => 5,
        FileKind::CharDevice => 6,
        FileKind::BlockDevice => 7,
    }
}

fn kind_from_tag(t: u8) -> Result<FileKind, ProtoError> {
    Ok(match t {
        1 => FileKind::Regular,
        2 => FileKind::Directory,
        3 => FileKind::Symlink,
        4 => FileKind::Fifo,
        5 => FileKind::Socket,
        6 => FileKind::CharDevice,
        7 => FileKind::BlockDevice,
        v => return Err(ProtoError::BadValue("file kind", u64::from(v))),
    })
}

pub(crate) fn encode_attr(w: &mut Writer, a: &Attr) {
    w.u64(a.ino).u64(a.size).u64(a.blocks);
    for t in [a.atime, a.mtime, a.ctime] {
        let (s, n) = split_time(t);
        w.i64(s).u32(n);
    }
    w.u8(kind_tag(a.kind))
        .u16(a.perm)
        .u32(a.nlink)
        .u32(a.uid)
        .u32(a.gid)
        .u32(a.rdev)
        .u32(a.blksize);
}

pub(crate) fn decode_attr(r: &mut Reader<'_>) -> Result<Attr, ProtoError> {
    let ino = r.u64("ino")?;
    let size = r.u64("size")?;
    let blocks = r.u64("blocks")?;
    let mut times = [UNIX_EPOCH; 3];
    for t in &mut times {
        let s = r.i64("time seconds")?;
        let n = r.u32("time nanoseconds")?;
        if n >= 1_000_000_000 {
            return Err(ProtoError::BadValue("time nanoseconds", u64::from(n)));
        }
        *t = join_time(s, n);
    }
    let kind = kind_from_tag(r.u8("file kind")?)?;
    let perm = r.u16("perm")?;
    if perm > 0o7777 {
        return Err(ProtoError::BadValue("perm", u64::from(perm)));
    }
    Ok(Attr {
        ino,
        size,
        blocks,
        atime: times[0],
        mtime: times[1],
        ctime: times[2],
        kind,
        perm,
        nlink: r.u32("nlink")?,
        uid: r.u32("uid")?,
        gid: r.u32("gid")?,
        rdev: r.u32("rdev")?,
        blksize: r.u32("blksize")?,
    })
}

pub(crate) fn encode_entry(w: &mut Writer, e: &Entry) {
    encode_attr(w, &e.attr);
    w.u64(e.generation);
}

pub(crate) fn decode_entry(r: &mut Reader<'_>) -> Result<Entry, ProtoError> {
    let attr = decode_attr(r)?;
    Ok(Entry {
        attr,
        generation: r.u64("generation")?,
    })
}

pub(crate) fn encode_statfs(w: &mut Writer, s: &StatFs) {
    w.u64(s.blocks)
        .u64(s.bfree)
        .u64(s.bavail)
        .u64(s.files)
        .u64(s.ffree)
        .u32(s.bsize)
        .u32(s.namelen)
        .u32(s.frsize);
}

pub(crate) fn decode_statfs(r: &mut Reader<'_>) -> Result<StatFs, ProtoError> {
    Ok(StatFs {
        blocks: r.u64("blocks")?,
        bfree: r.u64("bfree")?,
        bavail: r.u64("bavail")?,
        files: r.u64("files")?,
        ffree: r.u64("ffree")?,
        bsize: r.u32("bsize")?,
        namelen: r.u32("namelen")?,
        frsize: r.u32("frsize")?,
    })
}

/// Checks a path relative to the export root: empty (the root itself) or
/// names joined by single `/`, none empty, `.` or `..`, no NUL, each at most
/// NAME_MAX bytes. The server also resolves beneath the export with
/// `openat2(RESOLVE_BENEATH)`; this check turns crafted paths away earlier
/// and with a clear reason.
pub fn validate_rel_path(p: &[u8]) -> Result<(), ProtoError> {
    if p.len() > MAX_REL_PATH {
        return Err(ProtoError::TooLong {
            what: "path",
            len: p.len(),
            max: MAX_REL_PATH,
        });
    }
    if p.is_empty() {
        return Ok(());
    }
    if p.contains(&0) {
        return Err(ProtoError::BadPath("contains a NUL byte".into()));
    }
    for comp in p.split(|&b| b == b'/') {
        match comp {
            b"" => return Err(ProtoError::BadPath("empty component or leading '/'".into())),
            b"." | b".." => {
                return Err(ProtoError::BadPath(format!(
                    "component {:?} is not allowed",
                    String::from_utf8_lossy(comp)
                )))
            }
            c if c.len() > MAX_NAME => {
                return Err(ProtoError::TooLong {
                    what: "name",
                    len: c.len(),
                    max: MAX_NAME,
                })
            }
            _ => {}
        }
    }
    Ok(())
}

pub(crate) fn decode_path(r: &mut Reader<'_>, what: &'static str) -> Result<Vec<u8>, ProtoError> {
    let p = r.bytes(what, MAX_REL_PATH)?;
    validate_rel_path(p)?;
    Ok(p.to_vec())
}
