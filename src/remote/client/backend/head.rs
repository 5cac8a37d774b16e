//! Small files read with their open: the server returns the whole contents
//! of a small regular file with the handle (`Op::OpenHead`), and the
//! kernel's first read is answered from that copy. Reading a small file
//! costs one round trip instead of two (`cat`, `cp -r` out of the mount,
//! `tar -c`).
//!
//! The copy is what the file held at open, which is what a read right
//! after the open would have returned: close-to-open holds. It is used for
//! reads of that handle only, dropped at release, on any write or size
//! change through the mount, and on a change notice naming the file, so a
//! reader sees later writes exactly when it would without it (see
//! docs/CONSISTENCY.md).

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use hipfs_fusefs::{Credentials, Errno, Ino, Result};

use super::super::super::proto::{Op, Payload, MAX_HEAD};
use super::RemoteFs;

/// The contents a handle was opened with.
pub(super) struct Head {
    ino: Ino,
    data: Arc<Vec<u8>>,
}

/// Open handles' contents, and their total size.
#[derive(Default)]
pub(super) struct Heads {
    by_fh: HashMap<u64, Head>,
    bytes: usize,
}

impl Heads {
    fn remove(&mut self, fh: u64) {
        if let Some(h) = self.by_fh.remove(&fh) {
            self.bytes -= h.data.len();
        }
    }
}

/// Most bytes of contents kept for all open handles together: a process
/// holding many small files open does not make the mount hold them all
/// (past this, opens keep nothing and reads ask the server).
const MAX_KEPT_BYTES: usize = 64 << 20;

impl RemoteFs {
    /// Opens `path` on the server; for a read-only open, with the whole
    /// contents when the file is small. Returns (epoch, server fh,
    /// contents). Falls back to `Op::Open` for good on a server that does
    /// not know `Op::OpenHead`.
    pub(super) fn open_with_head(
        &self,
        cred: &Credentials,
        path: Vec<u8>,
        flags: i32,
    ) -> Result<(u64, u64, Option<Vec<u8>>)> {
        let wants_head =
            flags & libc::O_ACCMODE == libc::O_RDONLY && !self.no_open_head.load(Ordering::Relaxed);
        if wants_head {
            let op = Op::OpenHead {
                path: path.clone(),
                flags,
                max: MAX_HEAD as u32,
            };
            match self.open_remote(cred, op) {
                Ok((epoch, Payload::OpenedHead { fh, data })) => return Ok((epoch, fh, data)),
                Ok(_) => return Err(Errno::EIO),
                // A server from before OpenHead: its decoder refuses the opcode.
                Err(e) if e.code() == libc::EPROTO => {
                    log::info!("{}: no OpenHead; plain opens", self.client.server());
                    self.no_open_head.store(true, Ordering::Relaxed);
                }
                Err(e) => return Err(e),
            }
        }
        let (epoch, p) = self.open_remote(cred, Op::Open { path, flags })?;
        let Payload::Opened { fh } = p else {
            return Err(Errno::EIO);
        };
        Ok((epoch, fh, None))
    }

    /// Keeps the contents `fh` was opened with (unless too much is kept).
    pub(super) fn keep_head(&self, fh: u64, ino: Ino, data: Vec<u8>) {
        let mut heads = self.heads.lock().unwrap_or_else(|p| p.into_inner());
        if heads.bytes + data.len() > MAX_KEPT_BYTES {
            return;
        }
        heads.bytes += data.len();
        heads.by_fh.insert(
            fh,
            Head {
                ino,
                data: Arc::new(data),
            },
        );
    }

    /// A read of `fh` answered from the contents it was opened with, if it
    /// has them (they are the whole file, so any offset is answered).
    pub(super) fn read_head(&self, fh: u64, offset: u64, size: u32) -> Option<Vec<u8>> {
        let data = self
            .heads
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .by_fh
            .get(&fh)
            .map(|h| h.data.clone())?;
        let start = (offset.min(data.len() as u64)) as usize;
        let end = (start + size as usize).min(data.len());
        let out = data[start..end].to_vec();
        self.bytes_read
            .fetch_add(out.len() as u64, Ordering::Relaxed);
        Some(out)
    }

    /// Drops the contents of `fh` (released).
    pub(super) fn drop_head(&self, fh: u64) {
        self.heads
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(fh);
    }

    /// Drops every kept contents of `ino` (written, truncated, or changed
    /// elsewhere).
    pub(super) fn drop_heads_of(&self, ino: Ino) {
        let mut heads = self.heads.lock().unwrap_or_else(|p| p.into_inner());
        let of_ino: Vec<u64> = heads
            .by_fh
            .iter()
            .filter(|(_, h)| h.ino == ino)
            .map(|(fh, _)| *fh)
            .collect();
        for fh in of_ino {
            heads.remove(fh);
        }
    }
}
