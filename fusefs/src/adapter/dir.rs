//! Filling the kernel's directory buffers from backend entries.

use std::time::Duration;

use fuser::{Generation, INodeNo, ReplyDirectory, ReplyDirectoryPlus};

use super::convert::{to_fuse_attr, to_fuse_kind};
use crate::DirEntryPlus;

/// Adds entries until the kernel's buffer is full; returns how many went in.
pub(super) fn fill_readdir(reply: &mut ReplyDirectory, entries: &[DirEntryPlus]) -> usize {
    for (i, e) in entries.iter().enumerate() {
        let kind = to_fuse_kind(e.entry.attr.kind);
        if reply.add(INodeNo(e.entry.attr.ino), e.offset, kind, &e.name) {
            return i;
        }
    }
    entries.len()
}

/// Adds entries with attributes until the kernel's buffer is full; returns how many went in
/// (the kernel holds a reference to each of those except `.` and `..`).
pub(super) fn fill_readdirplus(
    reply: &mut ReplyDirectoryPlus,
    entries: &[DirEntryPlus],
    ttl: Duration,
) -> usize {
    for (i, e) in entries.iter().enumerate() {
        let full = reply.add(
            INodeNo(e.entry.attr.ino),
            e.offset,
            &e.name,
            &ttl,
            &to_fuse_attr(&e.entry.attr),
            Generation(e.entry.generation),
        );
        if full {
            return i;
        }
    }
    entries.len()
}
