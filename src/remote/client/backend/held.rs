//! Files this mount has just created, whose small writes and attribute
//! changes are held back and sent in one request when the file is closed.
//!
//! `tar -x` makes each file with a create, a write, then `fchown`, `fchmod`
//! and `utimensat`: five round trips to the server, most of the time a
//! small file costs. While the handle that created a file is open, and the
//! caller owns it, the changes the server cannot refuse (writes, and
//! changes of mode bits, times, and owner or group to what they already
//! are) are answered here with the attributes they will give, and sent as
//! one `Op::Apply` (protocol 6; older servers get them one by one) when
//! the file is flushed (every close), synced or released. Any other request
//! about the inode (an open, a read, a lookup's attributes excepted, an
//! xattr change, a link, the direct path) first sends what is held, so the
//! server has it before anything can observe the file there; a failure is
//! returned by that close, as NFS returns a failed write-behind.
//!
//! What is never held: setuid or setgid files (the server clears those bits
//! on a write by someone else), `O_APPEND` handles, truncation, changes by
//! anyone but the owner, multi-server mounts, and more than
//! [`PER_FILE`] bytes per file or [`ALL_FILES`] bytes in all; those go to
//! the server at once, after what the file already holds.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::SystemTime;

use hipfs_fusefs::{Attr, Credentials, Errno, FileKind, Ino, Result, SetAttr, TimeOrNow};

use super::super::super::proto::{Op, Payload, Step, APPLY_VERSION, MAX_STEPS};
use super::{errno, wire_set, RemoteFs};

/// Most bytes of writes one file holds back.
pub(super) const PER_FILE: usize = 256 * 1024;
/// Most bytes of writes all files together hold back.
pub(super) const ALL_FILES: usize = 64 << 20;

/// What one created file holds back.
struct Held {
    /// The handle that created it (the only one whose changes are held).
    fh: u64,
    /// Its attributes once the held steps are applied.
    attr: Attr,
    steps: Vec<Step>,
    bytes: usize,
    /// A failure of held steps sent before the close that reports it.
    failed: Option<Errno>,
    /// Nothing more is held (something the server applied changed the
    /// file's attributes in ways not foreseen here).
    stopped: bool,
    /// Taken while held steps are sent, so they reach the server in order.
    sending: std::sync::Arc<Mutex<()>>,
}

/// The created files whose changes are held, by inode.
#[derive(Default)]
pub(super) struct HeldFiles {
    by_ino: Mutex<HashMap<Ino, Held>>,
    bytes: AtomicUsize,
}

impl HeldFiles {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Ino, Held>> {
        self.by_ino.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The attributes `ino` will have once what it holds is applied.
    pub(super) fn attr(&self, ino: Ino) -> Option<Attr> {
        self.lock()
            .get(&ino)
            .filter(|h| !h.stopped && h.failed.is_none())
            .map(|h| h.attr)
    }

    /// Whether `fh` created a file that may hold changes (its closes must
    /// reach the mount).
    pub(super) fn holds_for(&self, fh: u64) -> bool {
        self.lock().values().any(|h| h.fh == fh)
    }
}

/// Whether `set` is a change the server applies for the owner without
/// fail, and what it makes of `attr`.
fn owner_change(attr: &Attr, set: &SetAttr, now: SystemTime) -> Option<Attr> {
    if set.size.is_some()
        || set.uid.is_some_and(|u| u != attr.uid)
        || set.gid.is_some_and(|g| g != attr.gid)
        || set.mode.is_some_and(|m| m & 0o6000 != 0)
    {
        return None;
    }
    let at = |t: TimeOrNow| match t {
        TimeOrNow::Now => now,
        TimeOrNow::At(t) => t,
    };
    let mut a = *attr;
    if let Some(m) = set.mode {
        a.perm = (m & 0o7777) as u16;
    }
    if let Some(t) = set.atime {
        a.atime = at(t);
    }
    if let Some(t) = set.mtime {
        a.mtime = at(t);
    }
    a.ctime = now;
    Some(a)
}

impl RemoteFs {
    /// Starts holding changes for `attr`'s file, just created through `fh`
    /// by `cred` with `flags`.
    pub(super) fn hold_created(&self, fh: u64, attr: &Attr, flags: i32, cred: &Credentials) {
        let eligible = !self.no_hold
            && self.cluster.is_none()
            && attr.kind == FileKind::Regular
            && attr.uid == cred.uid
            && attr.perm & 0o6000 == 0
            && flags & libc::O_ACCMODE != libc::O_RDONLY
            && flags & libc::O_APPEND == 0;
        if eligible {
            self.held.lock().insert(
                attr.ino,
                Held {
                    fh,
                    attr: *attr,
                    steps: Vec::new(),
                    bytes: 0,
                    failed: None,
                    stopped: false,
                    sending: Default::default(),
                },
            );
        }
    }

    /// Holds a write of `data` at `offset` through `fh`, if it may be held:
    /// the bytes it took.
    pub(super) fn hold_write(&self, ino: Ino, fh: u64, offset: u64, data: &[u8]) -> Option<usize> {
        let mut held = self.held.lock();
        let h = held.get_mut(&ino).filter(|h| h.fh == fh)?;
        let end = offset.checked_add(data.len() as u64)?;
        if h.failed.is_some()
            || h.stopped
            || h.steps.len() >= MAX_STEPS
            || h.bytes + data.len() > PER_FILE
            || self.held.bytes.load(Ordering::Relaxed) + data.len() > ALL_FILES
            || h.attr.perm & 0o6000 != 0
        {
            return None;
        }
        h.steps.push(Step::Write {
            offset,
            data: data.to_vec(),
        });
        h.bytes += data.len();
        self.held.bytes.fetch_add(data.len(), Ordering::Relaxed);
        let now = SystemTime::now();
        h.attr.size = h.attr.size.max(end);
        h.attr.blocks = h.attr.size.div_ceil(4096) * 8;
        h.attr.mtime = now;
        h.attr.ctime = now;
        Some(data.len())
    }

    /// Holds an attribute change of `ino` by `cred`, if it may be held:
    /// the attributes it gives.
    pub(super) fn hold_setattr(&self, ino: Ino, set: &SetAttr, cred: &Credentials) -> Option<Attr> {
        let mut held = self.held.lock();
        let h = held.get_mut(&ino)?;
        if h.failed.is_some()
            || h.stopped
            || h.steps.len() >= MAX_STEPS
            || cred.uid != h.attr.uid
            || set.fh.is_some_and(|fh| fh != h.fh)
        {
            return None;
        }
        let attr = owner_change(&h.attr, set, SystemTime::now())?;
        h.steps.push(Step::Setattr(wire_set(set)));
        h.attr = attr;
        Some(attr)
    }

    /// Sends what `ino` holds, if anything; its failure is kept for the
    /// close of the handle that made the changes.
    pub(super) fn send_held(&self, ino: Ino) {
        let Some(sending) = self.held.lock().get(&ino).map(|h| h.sending.clone()) else {
            return;
        };
        let _order = sending.lock().unwrap_or_else(|p| p.into_inner());
        let taken = {
            let mut held = self.held.lock();
            match held.get_mut(&ino) {
                Some(h) if !h.steps.is_empty() => {
                    self.held.bytes.fetch_sub(h.bytes, Ordering::Relaxed);
                    h.bytes = 0;
                    Some((h.fh, std::mem::take(&mut h.steps)))
                }
                _ => None,
            }
        };
        let Some((fh, steps)) = taken else { return };
        if let Err(e) = self.apply(fh, steps) {
            log::debug!("held changes of inode {ino} failed: {e:?}");
            if let Some(h) = self.held.lock().get_mut(&ino) {
                h.failed.get_or_insert(e);
            }
        }
    }

    /// Sends what `ino` holds and holds nothing more for it: a request that
    /// changes it in ways not foreseen here goes to the server next.
    pub(super) fn stop_holding(&self, ino: Ino) {
        // Marked first: nothing is held after what goes now.
        match self.held.lock().get_mut(&ino) {
            Some(h) => h.stopped = true,
            None => return,
        }
        self.send_held(ino);
    }

    /// Sends what `ino` holds and, when `fh` is the handle that made the
    /// changes, reports any failure of them (once). With `end`, `fh`'s
    /// file holds nothing from now on.
    pub(super) fn settle_handle(&self, ino: Ino, fh: u64, end: bool) -> Result<()> {
        self.send_held(ino);
        let mut held = self.held.lock();
        if held.get(&ino).is_none_or(|h| h.fh != fh) {
            return Ok(());
        }
        let failed = if end {
            held.remove(&ino).and_then(|h| h.failed)
        } else {
            held.get_mut(&ino).and_then(|h| h.failed.take())
        };
        failed.map_or(Ok(()), Err)
    }

    /// Applies `steps` through open file `fh`, as the one who opened it:
    /// one `Op::Apply`, or one request each on a server older than
    /// protocol 6.
    fn apply(&self, fh: u64, steps: Vec<Step>) -> Result<()> {
        let f = self.file(fh)?;
        let cred = f.cred.clone();
        let one = self.client.call_with(
            &cred,
            |link| {
                if link.version < APPLY_VERSION {
                    return Err(libc::ENOTSUP);
                }
                Ok(Op::Apply {
                    fh: self.server_fh(&f, link, &cred)?,
                    steps: steps.clone(),
                })
            },
            |_, _| {},
        );
        match one {
            Ok(Payload::Attr(_)) => return Ok(()),
            Ok(_) => return Err(Errno::EIO),
            Err(e) if e != libc::ENOTSUP => return Err(errno(e)),
            Err(_) => {}
        }
        let path = f.path.lock().unwrap_or_else(|p| p.into_inner()).clone();
        for step in steps {
            let op = |sfh| match &step {
                Step::Write { offset, data } => Op::Write {
                    fh: sfh,
                    offset: *offset,
                    data: data.clone(),
                },
                Step::Setattr(set) => Op::Setattr {
                    path: path.clone(),
                    fh: Some(sfh),
                    set: *set,
                },
            };
            let p = self
                .client
                .call_with(
                    &cred,
                    |link| Ok(op(self.server_fh(&f, link, &cred)?)),
                    |_, _| {},
                )
                .map_err(errno)?;
            if let (Step::Write { data, .. }, Payload::Written(n)) = (&step, &p) {
                if (*n as usize) < data.len() {
                    return Err(Errno::new(libc::ENOSPC));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    fn attr() -> Attr {
        let t = UNIX_EPOCH + Duration::from_secs(1000);
        Attr {
            ino: 5,
            size: 0,
            blocks: 0,
            atime: t,
            mtime: t,
            ctime: t,
            kind: FileKind::Regular,
            perm: 0o600,
            nlink: 1,
            uid: 1000,
            gid: 100,
            rdev: 0,
            blksize: 4096,
        }
    }

    fn set() -> SetAttr {
        SetAttr {
            mode: None,
            uid: None,
            gid: None,
            size: None,
            atime: None,
            mtime: None,
            fh: None,
        }
    }

    #[test]
    fn only_changes_the_server_cannot_refuse_the_owner_are_held() {
        let now = UNIX_EPOCH + Duration::from_secs(2000);
        let a = attr();
        let t = UNIX_EPOCH + Duration::from_secs(5);
        let held = owner_change(
            &a,
            &SetAttr {
                mode: Some(0o644),
                uid: Some(1000),
                gid: Some(100),
                mtime: Some(TimeOrNow::At(t)),
                atime: Some(TimeOrNow::Now),
                ..set()
            },
            now,
        )
        .expect("held");
        assert_eq!(
            (held.perm, held.uid, held.gid, held.mtime, held.atime, held.ctime),
            (0o644, 1000, 100, t, now, now)
        );
        for refused in [
            SetAttr {
                size: Some(0),
                ..set()
            },
            SetAttr {
                uid: Some(0),
                ..set()
            },
            SetAttr {
                gid: Some(0),
                ..set()
            },
            SetAttr {
                mode: Some(0o4755),
                ..set()
            },
            SetAttr {
                mode: Some(0o2755),
                ..set()
            },
        ] {
            assert_eq!(owner_change(&a, &refused, now), None, "{refused:?}");
        }
    }
}
