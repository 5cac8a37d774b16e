//! The mount's view of a server: `hipfs_fusefs::Backend` over the remote client.
//!
//! Requests name files by path relative to the export, so the server keeps
//! no per-inode state and a restarted server needs nothing from before. The
//! client keeps the inode → path table (from lookups, readdir and creates,
//! updated on rename) and the open files (path, flags, and the server handle
//! with the connection it belongs to). After a reconnect an open file is
//! reopened by path the first time it is used; the server checks the inode
//! it finds is still the one the kernel means (`ESTALE` otherwise).

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use hipfs_fusefs::{
    Attr, Backend, Credentials, DirEntryPlus, Entry, Errno, Ino, Result, SetAttr, StatFs,
    TimeOrNow, ROOT_INO,
};

use super::super::proto::{Op, Payload, ReadDest, WireCred, WireSetAttr, WireTime, MAX_NAME};
use super::{Link, RemoteClient};

/// An inode the kernel knows: the paths it was last seen under (several
/// for hard links, most recent first) and the kernel's lookup count.
struct Node {
    paths: Vec<Vec<u8>>,
    nlookup: u64,
}

/// Paths remembered per inode (hard links beyond this are found again by lookup).
const MAX_PATHS: usize = 8;

/// An open file: enough to reopen it on a new connection.
struct OpenFile {
    ino: Ino,
    path: Mutex<Vec<u8>>,
    flags: i32,
    /// (connection epoch, server handle)
    server: Mutex<(u64, u64)>,
}

/// The remote export as a FUSE backend.
pub struct RemoteFs {
    client: Arc<RemoteClient>,
    nodes: RwLock<HashMap<Ino, Node>>,
    files: RwLock<HashMap<u64, Arc<OpenFile>>>,
    next_fh: AtomicU64,
}

fn wire_cred(c: &Credentials) -> WireCred {
    WireCred {
        uid: c.uid,
        gid: c.gid,
        groups: c.groups.clone(),
    }
}

fn errno(e: i32) -> Errno {
    Errno::new(e)
}

fn join(dir: &[u8], name: &OsStr) -> Result<Vec<u8>> {
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

fn wire_time(t: TimeOrNow) -> WireTime {
    match t {
        TimeOrNow::Now => WireTime::Now,
        TimeOrNow::At(t) => WireTime::from_system(t),
    }
}

/// `path` with the prefix `from` replaced by `to`, if it starts with it.
fn moved(path: &[u8], from: &[u8], to: &[u8]) -> Option<Vec<u8>> {
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
    pub fn new(client: Arc<RemoteClient>) -> RemoteFs {
        let mut nodes = HashMap::new();
        nodes.insert(
            ROOT_INO,
            Node {
                paths: vec![Vec::new()],
                nlookup: 1,
            },
        );
        RemoteFs {
            client,
            nodes: RwLock::new(nodes),
            files: RwLock::new(HashMap::new()),
            next_fh: AtomicU64::new(1),
        }
    }

    /// The client this backend uses.
    pub fn client(&self) -> &Arc<RemoteClient> {
        &self.client
    }

    fn path_of(&self, ino: Ino) -> Result<Vec<u8>> {
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
    fn on_node<T>(&self, ino: Ino, f: impl Fn(Vec<u8>) -> Result<T>) -> Result<T> {
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

    fn child(&self, parent: Ino, name: &OsStr) -> Result<Vec<u8>> {
        join(&self.path_of(parent)?, name)
    }

    /// Records that the kernel now holds one more reference to `e` at `path`.
    fn remember(&self, path: Vec<u8>, e: &Entry) {
        let mut nodes = self.nodes.write().unwrap_or_else(|p| p.into_inner());
        let n = nodes.entry(e.attr.ino).or_insert(Node {
            paths: Vec::new(),
            nlookup: 0,
        });
        n.paths.retain(|p| *p != path);
        n.paths.insert(0, path);
        n.paths.truncate(MAX_PATHS);
        n.nlookup += 1;
    }

    fn call(&self, cred: &Credentials, op: Op) -> Result<Payload> {
        self.client.call(&wire_cred(cred), op).map_err(errno)
    }

    fn entry_call(&self, cred: &Credentials, path: Vec<u8>, op: Op) -> Result<Entry> {
        match self.call(cred, op)? {
            Payload::Entry(e) => {
                self.remember(path, &e);
                Ok(e)
            }
            _ => Err(Errno::EIO),
        }
    }

    fn file(&self, fh: u64) -> Result<Arc<OpenFile>> {
        self.files
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(&fh)
            .cloned()
            .ok_or(Errno::EBADF)
    }

    /// The server handle of `f` valid on `link`, reopening it there if the
    /// connection changed since it was opened.
    fn server_fh(
        &self,
        f: &OpenFile,
        link: &Arc<Link>,
        cred: &WireCred,
    ) -> std::result::Result<u64, i32> {
        let (epoch, fh) = *f.server.lock().unwrap_or_else(|p| p.into_inner());
        if epoch == link.epoch {
            return Ok(fh);
        }
        let path = f.path.lock().unwrap_or_else(|p| p.into_inner()).clone();
        // Reopened as root would bypass the permissions checked at open
        // time; reopen as the caller, without the one-time flags.
        let flags = f.flags & !(libc::O_CREAT | libc::O_EXCL | libc::O_TRUNC);
        let reply = self.client.call_with(
            cred,
            |_| {
                Ok(Op::Open {
                    path: path.clone(),
                    flags,
                })
            },
            |_, _| {},
        )?;
        let Payload::Opened { fh: new_fh } = reply else {
            return Err(libc::EIO);
        };
        // Make sure it is still the same file.
        let check = self.client.call(
            cred,
            Op::Getattr {
                path: path.clone(),
                fh: Some(new_fh),
            },
        )?;
        if let Payload::Attr(a) = check {
            if a.ino != f.ino {
                let _ = self.client.call(cred, Op::Release { fh: new_fh });
                return Err(libc::ESTALE);
            }
        }
        log::info!(
            "reopened {} after reconnect",
            String::from_utf8_lossy(&path)
        );
        *f.server.lock().unwrap_or_else(|p| p.into_inner()) = (link.epoch, new_fh);
        Ok(new_fh)
    }

    /// Runs an operation on open file `fh`.
    fn file_call(
        &self,
        fh: u64,
        cred: &Credentials,
        make: impl Fn(u64, &Arc<Link>) -> std::result::Result<Op, i32>,
    ) -> Result<Payload> {
        let f = self.file(fh)?;
        let wc = wire_cred(cred);
        self.client
            .call_with(
                &wc,
                |link| {
                    let sfh = self.server_fh(&f, link, &wc)?;
                    make(sfh, link)
                },
                |_, _| {},
            )
            .map_err(errno)
    }

    /// Some open handle of `ino`, if any.
    fn open_fh_of(&self, ino: Ino) -> Option<u64> {
        self.files
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .find(|(_, f)| f.ino == ino)
            .map(|(fh, _)| *fh)
    }

    fn add_file(&self, ino: Ino, path: Vec<u8>, flags: i32, epoch: u64, sfh: u64) -> u64 {
        let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
        self.files
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(
                fh,
                Arc::new(OpenFile {
                    ino,
                    path: Mutex::new(path),
                    flags,
                    server: Mutex::new((epoch, sfh)),
                }),
            );
        fh
    }

    /// Opens `path` on the server and returns (epoch, server fh).
    fn open_remote(&self, cred: &Credentials, op: Op) -> Result<(u64, Payload)> {
        let epoch = AtomicU64::new(0);
        let p = self
            .client
            .call_with(
                &wire_cred(cred),
                |_| Ok(op.clone()),
                |link, _| epoch.store(link.epoch, Ordering::SeqCst),
            )
            .map_err(errno)?;
        Ok((epoch.load(Ordering::SeqCst), p))
    }

    /// What [`Backend::identify`] answers for an open file.
    fn identify_payload(&self, ino: Ino, fh: u64) -> Option<Vec<u8>> {
        let f = self.file(fh).ok()?;
        let path = f.path.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let id = super::direct::FileIdentity {
            server: self.client.server().to_string(),
            export: self.client.export_name(),
            path,
            ino,
            token_file: self.client.cfg.token_file.clone(),
        };
        Some(id.encode())
    }
}

impl Backend for RemoteFs {
    fn lookup(&self, parent: Ino, name: &OsStr, cred: &Credentials) -> Result<Entry> {
        let path = self.child(parent, name)?;
        self.entry_call(cred, path.clone(), Op::Lookup { path })
    }

    fn forget(&self, ino: Ino, nlookup: u64) {
        if ino == ROOT_INO {
            return;
        }
        let mut nodes = self.nodes.write().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = nodes.get_mut(&ino) {
            n.nlookup = n.nlookup.saturating_sub(nlookup);
            if n.nlookup == 0 {
                nodes.remove(&ino);
            }
        }
    }

    fn getattr(&self, ino: Ino, fh: Option<u64>, cred: &Credentials) -> Result<Attr> {
        if let Some(fh) = fh.filter(|fh| self.file(*fh).is_ok()) {
            // Through the open file: works after unlink, and needs no path.
            let p = self.file_call(fh, cred, |sfh, _| {
                Ok(Op::Getattr {
                    path: Vec::new(),
                    fh: Some(sfh),
                })
            })?;
            return match p {
                Payload::Attr(a) => Ok(Attr { ino, ..a }),
                _ => Err(Errno::EIO),
            };
        }
        let by_path = self.on_node(ino, |path| {
            match self.call(cred, Op::Getattr { path, fh: None })? {
                Payload::Attr(a) if a.ino == ino => Ok(a),
                // The path now names another file (renamed or replaced behind our back).
                Payload::Attr(_) => Err(Errno::new(libc::ESTALE)),
                _ => Err(Errno::EIO),
            }
        });
        match by_path {
            // Unlinked but still open (fstat reaches us without the handle):
            // ask through any open file of that inode.
            Err(e) if e == Errno::ENOENT || e.code() == libc::ESTALE => {
                match self.open_fh_of(ino) {
                    Some(fh) => self.getattr(ino, Some(fh), cred),
                    None => Err(e),
                }
            }
            r => r,
        }
    }

    fn setattr(&self, ino: Ino, changes: &SetAttr, cred: &Credentials) -> Result<Attr> {
        let path = self.path_of(ino)?;
        let set = WireSetAttr {
            mode: changes.mode.map(|m| m & 0o7777),
            uid: changes.uid,
            gid: changes.gid,
            size: changes.size,
            atime: changes.atime.map(wire_time),
            mtime: changes.mtime.map(wire_time),
        };
        let p = match changes.fh.filter(|fh| self.file(*fh).is_ok()) {
            Some(fh) => self.file_call(fh, cred, |sfh, _| {
                Ok(Op::Setattr {
                    path: path.clone(),
                    fh: Some(sfh),
                    set,
                })
            })?,
            None => self.on_node(ino, |path| {
                self.call(
                    cred,
                    Op::Setattr {
                        path,
                        fh: None,
                        set,
                    },
                )
            })?,
        };
        match p {
            Payload::Attr(a) => Ok(a),
            _ => Err(Errno::EIO),
        }
    }

    fn readdir(
        &self,
        ino: Ino,
        _fh: u64,
        offset: u64,
        cred: &Credentials,
    ) -> Result<Vec<DirEntryPlus>> {
        let dir = self.path_of(ino)?;
        let p = self.call(
            cred,
            Op::Readdir {
                path: dir.clone(),
                cookie: offset,
                max: 1024,
            },
        )?;
        let Payload::Dir(items) = p else {
            return Err(Errno::EIO);
        };
        let mut out = Vec::with_capacity(items.len());
        for it in items {
            let name = OsString::from_vec(it.name);
            let mut entry = it.entry;
            if name != "." && name != ".." {
                self.remember(join(&dir, &name)?, &entry);
            } else {
                entry.attr.ino = ino;
            }
            out.push(DirEntryPlus {
                name,
                entry,
                offset: it.cookie.max(1),
            });
        }
        Ok(out)
    }

    fn open(&self, ino: Ino, flags: i32, cred: &Credentials) -> Result<u64> {
        self.on_node(ino, |path| {
            let (epoch, p) = self.open_remote(
                cred,
                Op::Open {
                    path: path.clone(),
                    flags,
                },
            )?;
            let Payload::Opened { fh } = p else {
                return Err(Errno::EIO);
            };
            Ok(self.add_file(ino, path, flags, epoch, fh))
        })
    }

    fn create(
        &self,
        parent: Ino,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        cred: &Credentials,
    ) -> Result<(Entry, u64)> {
        let path = self.child(parent, name)?;
        let (epoch, p) = self.open_remote(
            cred,
            Op::Create {
                path: path.clone(),
                mode: mode & !umask & 0o7777,
                flags,
            },
        )?;
        let Payload::Created { entry, fh } = p else {
            return Err(Errno::EIO);
        };
        self.remember(path.clone(), &entry);
        Ok((entry, self.add_file(entry.attr.ino, path, flags, epoch, fh)))
    }

    fn read(
        &self,
        _ino: Ino,
        fh: u64,
        offset: u64,
        size: u32,
        cred: &Credentials,
    ) -> Result<Vec<u8>> {
        let size = size.min(super::super::proto::MAX_IO as u32);
        let buf: Mutex<Option<(Arc<Link>, super::RecvBuf)>> = Mutex::new(None);
        let p = self.file_call(fh, cred, |sfh, link| {
            let mut slot = buf.lock().unwrap_or_else(|p| p.into_inner());
            if slot.as_ref().is_none_or(|(l, _)| !Arc::ptr_eq(l, link)) {
                let b = link.take_recv_buf().map_err(|_| libc::ENOMEM)?;
                *slot = Some((link.clone(), b));
            }
            let region = slot
                .as_ref()
                .map(|(_, b)| b.region.descriptor())
                .ok_or(libc::EIO)?;
            Ok(Op::Read {
                fh: sfh,
                offset,
                len: size,
                dest: Some(ReadDest { region, offset: 0 }),
            })
        });
        let slot = buf.into_inner().unwrap_or_else(|p| p.into_inner());
        match p {
            Ok(Payload::Read { n, data }) => {
                let out = if data.is_empty() {
                    slot.as_ref()
                        .map(|(_, b)| b.bytes(n as usize).to_vec())
                        .unwrap_or_default()
                } else {
                    data
                };
                if let Some((link, b)) = slot {
                    link.put_recv_buf(b);
                }
                Ok(out)
            }
            // On failure the buffer is dropped, not reused: a late placement
            // from the server must not land in another read's data.
            Ok(_) => Err(Errno::EIO),
            Err(e) => Err(e),
        }
    }

    fn write(
        &self,
        _ino: Ino,
        fh: u64,
        offset: u64,
        data: &[u8],
        cred: &Credentials,
    ) -> Result<usize> {
        let mut done = 0;
        while done < data.len() {
            let chunk = &data[done..(done + super::super::proto::MAX_IO).min(data.len())];
            let p = self.file_call(fh, cred, |sfh, _| {
                Ok(Op::Write {
                    fh: sfh,
                    offset: offset + done as u64,
                    data: chunk.to_vec(),
                })
            })?;
            let Payload::Written(n) = p else {
                return Err(Errno::EIO);
            };
            done += n as usize;
            if (n as usize) < chunk.len() {
                break;
            }
        }
        Ok(done)
    }

    fn flush(&self, _ino: Ino, fh: u64, _lock_owner: u64, _cred: &Credentials) -> Result<()> {
        // Writes are applied on the server before they are acknowledged, so
        // there is nothing to push; only check the handle is known.
        self.file(fh).map(|_| ())
    }

    fn fsync(&self, _ino: Ino, fh: u64, datasync: bool, cred: &Credentials) -> Result<()> {
        self.file_call(fh, cred, |sfh, _| Ok(Op::Fsync { fh: sfh, datasync }))
            .map(|_| ())
    }

    fn release(&self, _ino: Ino, fh: u64, _flags: i32, cred: &Credentials) -> Result<()> {
        let f = self
            .files
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&fh)
            .ok_or(Errno::EBADF)?;
        let (epoch, sfh) = *f.server.lock().unwrap_or_else(|p| p.into_inner());
        // Only the connection that opened it knows the handle; a new one
        // never saw it, and a dead one closed it.
        let _ = self.client.call_with(
            &wire_cred(cred),
            |link| {
                if link.epoch == epoch {
                    Ok(Op::Release { fh: sfh })
                } else {
                    Err(0)
                }
            },
            |_, _| {},
        );
        Ok(())
    }

    fn mkdir(
        &self,
        parent: Ino,
        name: &OsStr,
        mode: u32,
        umask: u32,
        cred: &Credentials,
    ) -> Result<Entry> {
        let path = self.child(parent, name)?;
        let mode = mode & !umask & 0o7777;
        self.entry_call(cred, path.clone(), Op::Mkdir { path, mode })
    }

    fn rmdir(&self, parent: Ino, name: &OsStr, cred: &Credentials) -> Result<()> {
        let path = self.child(parent, name)?;
        self.call(cred, Op::Rmdir { path }).map(|_| ())
    }

    fn unlink(&self, parent: Ino, name: &OsStr, cred: &Credentials) -> Result<()> {
        let path = self.child(parent, name)?;
        self.call(cred, Op::Unlink { path }).map(|_| ())
    }

    fn rename(
        &self,
        parent: Ino,
        name: &OsStr,
        newparent: Ino,
        newname: &OsStr,
        flags: u32,
        cred: &Credentials,
    ) -> Result<()> {
        let from = self.child(parent, name)?;
        let to = self.child(newparent, newname)?;
        self.call(
            cred,
            Op::Rename {
                from: from.clone(),
                to: to.clone(),
                flags,
            },
        )?;
        let exchange = flags & libc::RENAME_EXCHANGE != 0;
        let fix = |p: &[u8]| -> Option<Vec<u8>> {
            moved(p, &from, &to).or_else(|| if exchange { moved(p, &to, &from) } else { None })
        };
        for n in self
            .nodes
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .values_mut()
        {
            for path in n.paths.iter_mut() {
                if let Some(p) = fix(path) {
                    *path = p;
                }
            }
        }
        for f in self
            .files
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .values()
        {
            let mut p = f.path.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(np) = fix(&p) {
                *p = np;
            }
        }
        Ok(())
    }

    fn symlink(
        &self,
        parent: Ino,
        name: &OsStr,
        target: &Path,
        cred: &Credentials,
    ) -> Result<Entry> {
        let path = self.child(parent, name)?;
        let target = target.as_os_str().as_bytes().to_vec();
        self.entry_call(cred, path.clone(), Op::Symlink { path, target })
    }

    fn readlink(&self, ino: Ino, cred: &Credentials) -> Result<OsString> {
        self.on_node(ino, |path| {
            match self.call(cred, Op::Readlink { path })? {
                Payload::Bytes(b) => Ok(OsString::from_vec(b)),
                _ => Err(Errno::EIO),
            }
        })
    }

    fn link(&self, ino: Ino, newparent: Ino, newname: &OsStr, cred: &Credentials) -> Result<Entry> {
        let to = self.child(newparent, newname)?;
        self.on_node(ino, |from| {
            self.entry_call(
                cred,
                to.clone(),
                Op::Link {
                    from,
                    to: to.clone(),
                },
            )
        })
    }

    fn mknod(
        &self,
        parent: Ino,
        name: &OsStr,
        mode: u32,
        umask: u32,
        rdev: u32,
        cred: &Credentials,
    ) -> Result<Entry> {
        let path = self.child(parent, name)?;
        let mode = (mode & libc::S_IFMT) | (mode & !umask & 0o7777);
        self.entry_call(cred, path.clone(), Op::Mknod { path, mode, rdev })
    }

    fn statfs(&self, ino: Ino, cred: &Credentials) -> Result<StatFs> {
        let path = self.path_of(ino)?;
        match self.call(cred, Op::Statfs { path })? {
            Payload::Statfs(s) => Ok(s),
            _ => Err(Errno::EIO),
        }
    }

    fn getxattr(&self, ino: Ino, name: &OsStr, cred: &Credentials) -> Result<Vec<u8>> {
        let name = name.as_bytes().to_vec();
        self.on_node(ino, |path| {
            match self.call(
                cred,
                Op::Getxattr {
                    path,
                    name: name.clone(),
                },
            )? {
                Payload::Bytes(b) => Ok(b),
                _ => Err(Errno::EIO),
            }
        })
    }

    fn listxattr(&self, ino: Ino, cred: &Credentials) -> Result<Vec<OsString>> {
        self.on_node(ino, |path| {
            match self.call(cred, Op::Listxattr { path })? {
                Payload::Names(v) => Ok(v.into_iter().map(OsString::from_vec).collect()),
                _ => Err(Errno::EIO),
            }
        })
    }

    fn setxattr(
        &self,
        ino: Ino,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        cred: &Credentials,
    ) -> Result<()> {
        let name = name.as_bytes().to_vec();
        self.on_node(ino, |path| {
            self.call(
                cred,
                Op::Setxattr {
                    path,
                    name: name.clone(),
                    value: value.to_vec(),
                    flags,
                },
            )
            .map(|_| ())
        })
    }

    fn removexattr(&self, ino: Ino, name: &OsStr, cred: &Credentials) -> Result<()> {
        let name = name.as_bytes().to_vec();
        self.on_node(ino, |path| {
            self.call(
                cred,
                Op::Removexattr {
                    path,
                    name: name.clone(),
                },
            )
            .map(|_| ())
        })
    }

    fn identify(&self, ino: Ino, fh: u64) -> Option<Vec<u8>> {
        self.identify_payload(ino, fh)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
