//! Requests: one operation each, with the caller's credentials.

use hipfs_rdma::RemoteDescriptor;

use super::types::{decode_path, WireCred, WireSetAttr};
use super::{
    expect_kind, Kind, ProtoError, ReadDest, Reader, Writer, MAX_IO, MAX_NAME, MAX_PATH, MAX_XATTR,
};

/// One filesystem operation. Paths are relative to the export root (see
/// [`super::validate_rel_path`]); `fh` are server file handles from `Open`
/// or `Create` on the same connection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    /// The entry of a name.
    Lookup {
        /// Path relative to the export.
        path: Vec<u8>,
    },
    /// Attributes, through an open handle when given.
    Getattr {
        /// Path relative to the export.
        path: Vec<u8>,
        /// Server file handle.
        fh: Option<u64>,
    },
    /// Changes attributes.
    Setattr {
        /// Path relative to the export.
        path: Vec<u8>,
        /// Server file handle.
        fh: Option<u64>,
        /// What to change.
        set: WireSetAttr,
    },
    /// Entries after `cookie` (0: from the start), at most `max` of them.
    Readdir {
        /// Path relative to the export.
        path: Vec<u8>,
        /// Where the previous batch ended.
        cookie: u64,
        /// Most entries wanted.
        max: u32,
    },
    /// Opens a file.
    Open {
        /// Path relative to the export.
        path: Vec<u8>,
        /// Flags as the syscall takes them.
        flags: i32,
    },
    /// `mode` has the client's umask applied already.
    Create {
        /// Path relative to the export.
        path: Vec<u8>,
        /// Permission bits (and file type for mknod).
        mode: u32,
        /// Flags as the syscall takes them.
        flags: i32,
    },
    /// Closes a handle.
    Release {
        /// Server file handle.
        fh: u64,
    },
    /// Reads `len` bytes; placed at `dest` when given, else returned inline.
    Read {
        /// Server file handle.
        fh: u64,
        /// Offset in the file.
        offset: u64,
        /// Bytes wanted.
        len: u32,
        /// Where to place the bytes (a registered region of the client).
        dest: Option<ReadDest>,
    },
    /// Writes `data` at `offset`.
    Write {
        /// Server file handle.
        fh: u64,
        /// Offset in the file.
        offset: u64,
        /// Bytes to write.
        data: Vec<u8>,
    },
    /// Flushes a file to stable storage.
    Fsync {
        /// Server file handle.
        fh: u64,
        /// Data only (`fdatasync`).
        datasync: bool,
    },
    /// Called on every close of a handle (no-op on the server).
    Flush {
        /// Server file handle.
        fh: u64,
    },
    /// Makes a directory.
    Mkdir {
        /// Path relative to the export.
        path: Vec<u8>,
        /// Permission bits (and file type for mknod).
        mode: u32,
    },
    /// Removes an empty directory.
    Rmdir {
        /// Path relative to the export.
        path: Vec<u8>,
    },
    /// Removes a name.
    Unlink {
        /// Path relative to the export.
        path: Vec<u8>,
    },
    /// Renames (`RENAME_*` flags).
    Rename {
        /// Existing path.
        from: Vec<u8>,
        /// New path.
        to: Vec<u8>,
        /// Flags as the syscall takes them.
        flags: u32,
    },
    /// Makes a symbolic link.
    Symlink {
        /// Path relative to the export.
        path: Vec<u8>,
        /// What the link points at.
        target: Vec<u8>,
    },
    /// Reads a symbolic link.
    Readlink {
        /// Path relative to the export.
        path: Vec<u8>,
    },
    /// Makes a hard link.
    Link {
        /// Existing path.
        from: Vec<u8>,
        /// New path.
        to: Vec<u8>,
    },
    /// Makes a FIFO, socket or regular file.
    Mknod {
        /// Path relative to the export.
        path: Vec<u8>,
        /// Permission bits (and file type for mknod).
        mode: u32,
        /// Device number (refused: no device nodes).
        rdev: u32,
    },
    /// Filesystem statistics.
    Statfs {
        /// Path relative to the export.
        path: Vec<u8>,
    },
    /// An extended attribute.
    Getxattr {
        /// Path relative to the export.
        path: Vec<u8>,
        /// Attribute name.
        name: Vec<u8>,
    },
    /// Names of the extended attributes.
    Listxattr {
        /// Path relative to the export.
        path: Vec<u8>,
    },
    /// Sets an extended attribute.
    Setxattr {
        /// Path relative to the export.
        path: Vec<u8>,
        /// Attribute name.
        name: Vec<u8>,
        /// Attribute value.
        value: Vec<u8>,
        /// Flags as the syscall takes them.
        flags: i32,
    },
    /// Removes an extended attribute.
    Removexattr {
        /// Path relative to the export.
        path: Vec<u8>,
        /// Attribute name.
        name: Vec<u8>,
    },
    /// Mints a capability for open file `fh` of this connection (the
    /// direct path's credential, see `docs/SECURITY.md`): read access, and
    /// write access when `write` is asked and the file was opened for
    /// writing. Answered with `Payload::Bytes` (the secret), revoked when
    /// `fh` is released or this connection ends.
    GrantFile {
        /// The open file (a handle of this connection).
        fh: u64,
        /// Whether writing is asked for too.
        write: bool,
    },
    /// Subscribes this connection to change notices: from the reply on,
    /// the server pushes [`super::Payload::Changed`] (request id
    /// [`super::NOTICE_ID`]) for every change in the export, whoever made
    /// it. A server that cannot watch its export answers `ENOSYS`; an
    /// older server does not know the opcode and answers an error too.
    Watch,
    /// Opens a file like `Open` and, when it is a regular file of at most
    /// `max` bytes (and at most [`super::MAX_HEAD`]), returns its contents
    /// with the handle (`Payload::OpenedHead`): reading a small file costs
    /// one round trip instead of two. An older server does not know the
    /// opcode and answers an error; the client then uses `Open`.
    OpenHead {
        /// Path relative to the export.
        path: Vec<u8>,
        /// Flags as the syscall takes them.
        flags: i32,
        /// Largest file whose contents come back.
        max: u32,
    },
    /// The whole contents of directory `path`'s small regular files, in
    /// listing order from `cookie`: each file of at most `max_each` bytes
    /// (and [`super::MAX_HEAD`]) that the caller may read, until the next
    /// would pass `max_total` bytes (and [`super::MAX_HEADS`]). Answered
    /// with `Payload::Heads`, whose `next` resumes the listing (0: it
    /// ended). A mount that sees a program read a directory's small files
    /// one after another fetches the rest this way, in the background. An
    /// older server does not know the opcode and answers an error.
    ReadHeads {
        /// The directory, relative to the export.
        path: Vec<u8>,
        /// Listing position to go on from (0: the start).
        cookie: u64,
        /// Largest file whose contents come back.
        max_each: u32,
        /// Most bytes of contents in the answer.
        max_total: u32,
    },
    /// Writes and attribute changes of one open file, applied in order
    /// through its handle until one fails (protocol 6: what a mount held
    /// back for a file it created, sent when the file is closed).
    Apply {
        /// Server file handle.
        fh: u64,
        /// The changes, in the order the application made them.
        steps: Vec<Step>,
    },
}

/// One change in [`Op::Apply`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// `pwrite` of `data` at `offset`.
    Write {
        /// Offset in the file.
        offset: u64,
        /// Bytes to write.
        data: Vec<u8>,
    },
    /// Attribute changes through the open file (no size change).
    Setattr(WireSetAttr),
}

impl Step {
    /// Bytes it writes.
    pub fn written(&self) -> usize {
        match self {
            Step::Write { data, .. } => data.len(),
            Step::Setattr(_) => 0,
        }
    }
}

/// Most steps one [`Op::Apply`] carries.
pub const MAX_STEPS: usize = 256;

impl Op {
    fn code(&self) -> u16 {
        match self {
            Op::Lookup { .. } => 1,
            Op::Getattr { .. } => 2,
            Op::Setattr { .. } => 3,
            Op::Readdir { .. } => 4,
            Op::Open { .. } => 5,
            Op::Create { .. } => 6,
            Op::Release { .. } => 7,
            Op::Read { .. } => 8,
            Op::Write { .. } => 9,
            Op::Fsync { .. } => 10,
            Op::Flush { .. } => 11,
            Op::Mkdir { .. } => 12,
            Op::Rmdir { .. } => 13,
            Op::Unlink { .. } => 14,
            Op::Rename { .. } => 15,
            Op::Symlink { .. } => 16,
            Op::Readlink { .. } => 17,
            Op::Link { .. } => 18,
            Op::Mknod { .. } => 19,
            Op::Statfs { .. } => 20,
            Op::Getxattr { .. } => 21,
            Op::Listxattr { .. } => 22,
            Op::Setxattr { .. } => 23,
            Op::Removexattr { .. } => 24,
            Op::GrantFile { .. } => 25,
            Op::Watch => 26,
            Op::OpenHead { .. } => 27,
            Op::ReadHeads { .. } => 28,
            Op::Apply { .. } => 29,
        }
    }

    /// Whether running it twice is harmless, so a client may resend it after
    /// a reconnect.
    pub fn is_idempotent(&self) -> bool {
        matches!(
            self,
            Op::Lookup { .. }
                | Op::Getattr { .. }
                | Op::Readdir { .. }
                | Op::Read { .. }
                | Op::Readlink { .. }
                | Op::Statfs { .. }
                | Op::Getxattr { .. }
                | Op::Listxattr { .. }
                | Op::Open { .. }
                | Op::OpenHead { .. }
                | Op::ReadHeads { .. }
        )
    }

    /// Whether it changes the export (refused on read-only exports).
    pub fn mutates(&self) -> bool {
        match self {
            Op::Setattr { .. }
            | Op::Create { .. }
            | Op::Write { .. }
            | Op::Mkdir { .. }
            | Op::Rmdir { .. }
            | Op::Unlink { .. }
            | Op::Rename { .. }
            | Op::Symlink { .. }
            | Op::Link { .. }
            | Op::Mknod { .. }
            | Op::Setxattr { .. }
            | Op::Removexattr { .. }
            | Op::Apply { .. } => true,
            Op::Open { flags, .. } | Op::OpenHead { flags, .. } => {
                flags & libc::O_ACCMODE != libc::O_RDONLY || flags & libc::O_TRUNC != 0
            }
            _ => false,
        }
    }
}

/// A request as sent: id, credentials, operation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    /// Matches the reply to the request.
    pub id: u64,
    /// Whose identity the operation runs as.
    pub cred: WireCred,
    /// The operation.
    pub op: Op,
}

fn encode_desc(w: &mut Writer, d: &RemoteDescriptor) {
    let enc = d.encode();
    w.bytes(&enc);
}

impl Request {
    /// The message as sent.
    pub fn encode(&self) -> Vec<u8> {
        let extra = match &self.op {
            Op::Write { data, .. } => data.len(),
            Op::Apply { steps, .. } => steps.iter().map(|s| s.written() + 64).sum(),
            _ => 0,
        };
        let mut w = Writer::with_capacity(128 + extra);
        w.u8(Kind::Request as u8).u64(self.id);
        self.cred.encode(&mut w);
        w.u16(self.op.code());
        match &self.op {
            Op::Lookup { path }
            | Op::Rmdir { path }
            | Op::Unlink { path }
            | Op::Readlink { path }
            | Op::Statfs { path }
            | Op::Listxattr { path } => {
                w.bytes(path);
            }
            Op::Getattr { path, fh } => {
                w.bytes(path).opt_u64(*fh);
            }
            Op::Setattr { path, fh, set } => {
                w.bytes(path).opt_u64(*fh);
                set.encode(&mut w);
            }
            Op::Readdir { path, cookie, max } => {
                w.bytes(path).u64(*cookie).u32(*max);
            }
            Op::Open { path, flags } => {
                w.bytes(path).i32(*flags);
            }
            Op::OpenHead { path, flags, max } => {
                w.bytes(path).i32(*flags).u32(*max);
            }
            Op::ReadHeads {
                path,
                cookie,
                max_each,
                max_total,
            } => {
                w.bytes(path).u64(*cookie).u32(*max_each).u32(*max_total);
            }
            Op::Create { path, mode, flags } => {
                w.bytes(path).u32(*mode).i32(*flags);
            }
            Op::Release { fh } | Op::Flush { fh } => {
                w.u64(*fh);
            }
            Op::Read {
                fh,
                offset,
                len,
                dest,
            } => {
                w.u64(*fh).u64(*offset).u32(*len);
                match dest {
                    None => {
                        w.u8(0);
                    }
                    Some(d) => {
                        w.u8(1);
                        encode_desc(&mut w, &d.region);
                        w.u64(d.offset);
                    }
                }
            }
            Op::Write { fh, offset, data } => {
                w.u64(*fh).u64(*offset).bytes(data);
            }
            Op::Fsync { fh, datasync } => {
                w.u64(*fh).bool(*datasync);
            }
            Op::Mkdir { path, mode } => {
                w.bytes(path).u32(*mode);
            }
            Op::Rename { from, to, flags } => {
                w.bytes(from).bytes(to).u32(*flags);
            }
            Op::Symlink { path, target } => {
                w.bytes(path).bytes(target);
            }
            Op::Link { from, to } => {
                w.bytes(from).bytes(to);
            }
            Op::Mknod { path, mode, rdev } => {
                w.bytes(path).u32(*mode).u32(*rdev);
            }
            Op::Getxattr { path, name } | Op::Removexattr { path, name } => {
                w.bytes(path).bytes(name);
            }
            Op::Setxattr {
                path,
                name,
                value,
                flags,
            } => {
                w.bytes(path).bytes(name).bytes(value).i32(*flags);
            }
            Op::GrantFile { fh, write } => {
                w.u64(*fh).bool(*write);
            }
            Op::Watch => {}
            Op::Apply { fh, steps } => {
                w.u64(*fh).u32(steps.len() as u32);
                for step in steps {
                    match step {
                        Step::Write { offset, data } => {
                            w.u8(1).u64(*offset).bytes(data);
                        }
                        Step::Setattr(set) => {
                            w.u8(2);
                            set.encode(&mut w);
                        }
                    }
                }
            }
        }
        w.finish()
    }

    /// The request id, if the message is long enough to carry one: lets a
    /// server answer a request whose body does not decode.
    pub fn peek_id(msg: &[u8]) -> Option<u64> {
        let mut r = Reader::new(msg);
        expect_kind(&mut r, Kind::Request).ok()?;
        r.u64("request id").ok()
    }

    /// Parses a request message.
    pub fn decode(msg: &[u8]) -> Result<Request, ProtoError> {
        let mut r = Reader::new(msg);
        expect_kind(&mut r, Kind::Request)?;
        let id = r.u64("request id")?;
        let cred = WireCred::decode(&mut r)?;
        let code = r.u16("opcode")?;
        let p = |r: &mut Reader<'_>| decode_path(r, "path");
        let op = match code {
            1 => Op::Lookup { path: p(&mut r)? },
            2 => Op::Getattr {
                path: p(&mut r)?,
                fh: r.opt_u64("fh")?,
            },
            3 => Op::Setattr {
                path: p(&mut r)?,
                fh: r.opt_u64("fh")?,
                set: WireSetAttr::decode(&mut r)?,
            },
            4 => Op::Readdir {
                path: p(&mut r)?,
                cookie: r.u64("cookie")?,
                max: r.u32("max entries")?,
            },
            5 => Op::Open {
                path: p(&mut r)?,
                flags: r.i32("flags")?,
            },
            6 => Op::Create {
                path: p(&mut r)?,
                mode: r.u32("mode")?,
                flags: r.i32("flags")?,
            },
            7 => Op::Release { fh: r.u64("fh")? },
            8 => {
                let fh = r.u64("fh")?;
                let offset = r.u64("offset")?;
                let len = r.u32("length")?;
                let dest = if r.bool("destination flag")? {
                    let d = r.bytes("descriptor", RemoteDescriptor::ENCODED_LEN)?;
                    let region = RemoteDescriptor::decode(d)
                        .map_err(|_| ProtoError::BadValue("remote descriptor", d.len() as u64))?;
                    Some(ReadDest {
                        region,
                        offset: r.u64("destination offset")?,
                    })
                } else {
                    None
                };
                let max = if dest.is_some() {
                    super::MAX_PLACED_READ
                } else {
                    MAX_IO
                };
                if len as usize > max {
                    return Err(ProtoError::TooLong {
                        what: "read length",
                        len: len as usize,
                        max,
                    });
                }
                Op::Read {
                    fh,
                    offset,
                    len,
                    dest,
                }
            }
            9 => Op::Write {
                fh: r.u64("fh")?,
                offset: r.u64("offset")?,
                data: r.bytes("write data", MAX_IO)?.to_vec(),
            },
            10 => Op::Fsync {
                fh: r.u64("fh")?,
                datasync: r.bool("datasync")?,
            },
            11 => Op::Flush { fh: r.u64("fh")? },
            12 => Op::Mkdir {
                path: p(&mut r)?,
                mode: r.u32("mode")?,
            },
            13 => Op::Rmdir { path: p(&mut r)? },
            14 => Op::Unlink { path: p(&mut r)? },
            15 => Op::Rename {
                from: p(&mut r)?,
                to: p(&mut r)?,
                flags: r.u32("rename flags")?,
            },
            16 => Op::Symlink {
                path: p(&mut r)?,
                target: r.bytes("symlink target", MAX_PATH)?.to_vec(),
            },
            17 => Op::Readlink { path: p(&mut r)? },
            18 => Op::Link {
                from: p(&mut r)?,
                to: p(&mut r)?,
            },
            19 => Op::Mknod {
                path: p(&mut r)?,
                mode: r.u32("mode")?,
                rdev: r.u32("rdev")?,
            },
            20 => Op::Statfs { path: p(&mut r)? },
            21 => Op::Getxattr {
                path: p(&mut r)?,
                name: r.bytes("xattr name", MAX_NAME)?.to_vec(),
            },
            22 => Op::Listxattr { path: p(&mut r)? },
            23 => Op::Setxattr {
                path: p(&mut r)?,
                name: r.bytes("xattr name", MAX_NAME)?.to_vec(),
                value: r.bytes("xattr value", MAX_XATTR)?.to_vec(),
                flags: r.i32("xattr flags")?,
            },
            24 => Op::Removexattr {
                path: p(&mut r)?,
                name: r.bytes("xattr name", MAX_NAME)?.to_vec(),
            },
            25 => Op::GrantFile {
                fh: r.u64("fh")?,
                write: r.bool("write flag")?,
            },
            26 => Op::Watch,
            27 => Op::OpenHead {
                path: p(&mut r)?,
                flags: r.i32("flags")?,
                max: r.u32("head size")?,
            },
            28 => Op::ReadHeads {
                path: p(&mut r)?,
                cookie: r.u64("cookie")?,
                max_each: r.u32("head size")?,
                max_total: r.u32("heads size")?,
            },
            29 => {
                let fh = r.u64("fh")?;
                let n = r.u32("step count")? as usize;
                if n > MAX_STEPS {
                    return Err(ProtoError::TooLong {
                        what: "steps",
                        len: n,
                        max: MAX_STEPS,
                    });
                }
                let mut steps = Vec::with_capacity(n);
                let mut bytes = 0usize;
                for _ in 0..n {
                    steps.push(match r.u8("step kind")? {
                        1 => {
                            let offset = r.u64("offset")?;
                            let data = r.bytes("write data", MAX_IO)?.to_vec();
                            bytes += data.len();
                            if bytes > MAX_IO {
                                return Err(ProtoError::TooLong {
                                    what: "written bytes",
                                    len: bytes,
                                    max: MAX_IO,
                                });
                            }
                            Step::Write { offset, data }
                        }
                        2 => Step::Setattr(WireSetAttr::decode(&mut r)?),
                        k => return Err(ProtoError::BadValue("step kind", u64::from(k))),
                    });
                }
                Op::Apply { fh, steps }
            }
            v => return Err(ProtoError::BadValue("opcode", u64::from(v))),
        };
        r.end()?;
        Ok(Request { id, cred, op })
    }
}
