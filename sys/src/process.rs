//! Credentials, groups and other per-process or per-thread state.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

use crate::cvt;

/// The effective user id.
pub fn euid() -> u32 {
    // SAFETY: geteuid cannot fail and touches no memory.
    unsafe { libc::geteuid() }
}

/// The effective group id.
pub fn egid() -> u32 {
    // SAFETY: getegid cannot fail and touches no memory.
    unsafe { libc::getegid() }
}

/// The supplementary groups of the calling thread.
pub fn getgroups() -> io::Result<Vec<libc::gid_t>> {
    loop {
        // SAFETY: a NULL list of size 0 only asks the count.
        let n = cvt(unsafe { libc::getgroups(0, std::ptr::null_mut()) })?;
        let mut groups = vec![0; n as usize];
        // SAFETY: `groups` has room for `n` entries.
        match cvt(unsafe { libc::getgroups(n, groups.as_mut_ptr()) }) {
            Ok(got) => {
                groups.truncate(got as usize);
                return Ok(groups);
            }
            // The list grew between the two calls: ask again.
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => continue,
            Err(e) => return Err(e),
        }
    }
}

/// Sets the supplementary groups of the calling *thread* only (the raw
/// syscall; glibc's `setgroups` changes every thread of the process).
pub fn set_thread_groups(groups: &[libc::gid_t]) -> io::Result<()> {
    // SAFETY: the kernel reads `groups.len()` entries from `groups`.
    cvt(unsafe { libc::syscall(libc::SYS_setgroups, groups.len(), groups.as_ptr()) }).map(drop)
}

/// `setfsuid(2)` for the calling thread; returns the previous id (the call
/// reports no error: read the id back with `u32::MAX` to check).
pub fn setfsuid(uid: u32) -> u32 {
    // SAFETY: a plain syscall on this thread's credentials.
    unsafe { libc::setfsuid(uid) as u32 }
}

/// `setfsgid(2)`; see [`setfsuid`].
pub fn setfsgid(gid: u32) -> u32 {
    // SAFETY: a plain syscall on this thread's credentials.
    unsafe { libc::setfsgid(gid) as u32 }
}

/// `unshare(CLONE_FS)`: this thread gets its own umask, cwd and root.
pub fn unshare_fs() -> io::Result<()> {
    // SAFETY: a plain syscall on this thread's attributes.
    cvt(unsafe { libc::unshare(libc::CLONE_FS) }).map(drop)
}

/// `umask(2)`; returns the previous mask.
pub fn umask(mask: u32) -> u32 {
    // SAFETY: umask cannot fail and touches no memory.
    unsafe { libc::umask(mask) }
}

/// Waits up to `timeout_ms` for `fd` to become readable (`poll(2)`);
/// `EINTR` counts as not ready.
pub fn poll_readable(fd: BorrowedFd<'_>, timeout_ms: i32) -> io::Result<bool> {
    let mut pfd = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: `pfd` is one valid pollfd, borrowed for the call.
    match cvt(unsafe { libc::poll(&mut pfd, 1, timeout_ms) }) {
        Ok(n) => Ok(n > 0),
        Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(false),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn getgroups_answers_without_error() {
        assert!(super::getgroups().is_ok());
    }
}
