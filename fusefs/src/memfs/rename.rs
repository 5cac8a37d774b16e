//! rename(2) and renameat2(2) for MemFs: the checks POSIX requires and the kernel leaves to
//! the filesystem (type compatibility, non-empty targets, moving a directory below itself).

use std::ffi::OsStr;
use std::time::SystemTime;

use super::tree::Tree;
use crate::{Errno, FileKind, Ino, Result};

/// rename(2) / renameat2(2) on the tree, with the POSIX checks the kernel leaves to us.
pub(super) fn rename_in(
    t: &mut Tree,
    parent: Ino,
    name: &OsStr,
    newparent: Ino,
    newname: &OsStr,
    flags: u32,
) -> Result<()> {
    let noreplace = libc::RENAME_NOREPLACE;
    let exchange = libc::RENAME_EXCHANGE;
    if flags & !(noreplace | exchange) != 0 || flags == noreplace | exchange {
        return Err(Errno::EINVAL);
    }
    let src = t.child(parent, name)?.ok_or(Errno::ENOENT)?;
    let dst = t.child(newparent, newname)?;
    let src_is_dir = t.node(src)?.kind == FileKind::Directory;
    // A directory cannot move below itself.
    if src_is_dir && t.is_ancestor(src, newparent)? {
        return Err(Errno::EINVAL);
    }
    if flags & exchange != 0 {
        let dst = dst.ok_or(Errno::ENOENT)?;
        let dst_is_dir = t.node(dst)?.kind == FileKind::Directory;
        if dst_is_dir && t.is_ancestor(dst, parent)? {
            return Err(Errno::EINVAL);
        }
        t.node_mut(parent)?.dir_mut()?.insert(name, dst);
        t.node_mut(newparent)?.dir_mut()?.insert(newname, src);
        reparent(t, src, src_is_dir, parent, newparent)?;
        reparent(t, dst, dst_is_dir, newparent, parent)?;
        return Ok(());
    }
    if let Some(dst) = dst {
        if dst == src {
            return Ok(());
        }
        if flags & noreplace != 0 {
            return Err(Errno::EEXIST);
        }
        let d = t.node(dst)?;
        match (src_is_dir, d.kind == FileKind::Directory) {
            (true, false) => return Err(Errno::ENOTDIR),
            (false, true) => return Err(Errno::EISDIR),
            (true, true) if !d.dir()?.entries.is_empty() => return Err(Errno::ENOTEMPTY),
            _ => {}
        }
        let dst_is_dir = d.kind == FileKind::Directory;
        t.node_mut(newparent)?.dir_mut()?.remove(newname);
        let dn = t.node_mut(dst)?;
        dn.nlink = if dst_is_dir {
            0
        } else {
            dn.nlink.saturating_sub(1)
        };
        dn.ctime = SystemTime::now();
        if dst_is_dir {
            t.node_mut(newparent)?.nlink -= 1;
        }
        t.maybe_free(dst);
    }
    t.node_mut(parent)?.dir_mut()?.remove(name);
    t.node_mut(newparent)?.dir_mut()?.insert(newname, src);
    reparent(t, src, src_is_dir, parent, newparent)
}

/// Fixes `..` and the parents' link counts after `ino` moved from `from` to `to`.
fn reparent(t: &mut Tree, ino: Ino, is_dir: bool, from: Ino, to: Ino) -> Result<()> {
    for p in [from, to] {
        t.node_mut(p)?.touch_modified();
    }
    t.node_mut(ino)?.ctime = SystemTime::now();
    if is_dir && from != to {
        t.node_mut(ino)?.dir_mut()?.parent = to;
        t.node_mut(from)?.nlink -= 1;
        t.node_mut(to)?.nlink += 1;
    }
    Ok(())
}
