//! Acting as the calling user, per request, per thread.
//!
//! The server runs as root; before each operation the worker thread sets its
//! filesystem uid and gid (`setfsuid`/`setfsgid`) and its supplementary groups
//! to the caller's. The kernel then checks every access with the caller's
//! identity and drops root's filesystem capabilities (DAC override, chown,
//! fowner) while the fsuid is not 0. `setgroups` goes through the raw system
//! call because glibc's wrapper changes every thread of the process; the raw
//! call changes only the calling thread, which is what a per-request identity
//! needs. This is the design libfuse's passthrough examples and NFS servers
//! use, chosen over checking mode bits ourselves because the kernel also
//! applies ACLs, sticky bits and every filesystem's own rules.

use std::cell::RefCell;

use super::super::proto::WireCred;
use super::resolve::{Errno, ToErrno};
use hipfs_sys::process::{set_thread_groups, setfsgid, setfsuid};

/// How an export rewrites callers (as NFS exports do).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IdentityPolicy {
    /// root on a client becomes nobody (65534).
    pub squash_root: bool,
    /// Every caller becomes this uid:gid.
    pub map_all: Option<(u32, u32)>,
}

/// The uid and gid of "nobody".
pub const NOBODY: u32 = 65534;

impl IdentityPolicy {
    /// The identity the server acts with for `cred`.
    pub fn apply(&self, cred: &WireCred) -> WireCred {
        if let Some((uid, gid)) = self.map_all {
            return WireCred {
                uid,
                gid,
                groups: Vec::new(),
            };
        }
        if self.squash_root && cred.uid == 0 {
            return WireCred {
                uid: NOBODY,
                gid: NOBODY,
                groups: Vec::new(),
            };
        }
        let mut c = cred.clone();
        if self.squash_root && c.gid == 0 {
            c.gid = NOBODY;
        }
        if self.squash_root {
            c.groups.retain(|&g| g != 0);
        }
        c
    }
}

thread_local! {
    static CURRENT: RefCell<Option<WireCred>> = const { RefCell::new(None) };
}

/// Switches the calling thread to `cred` (a no-op when it already is).
pub fn become_user(cred: &WireCred) -> Result<(), Errno> {
    CURRENT.with(|cur| {
        if cur.borrow().as_ref() == Some(cred) {
            return Ok(());
        }
        // Forget the cached identity until the switch is complete, so a
        // failure half way is retried next time.
        *cur.borrow_mut() = None;
        // The raw syscall changes only this thread's credentials.
        set_thread_groups(&cred.groups).errno()?;
        // setfsuid/setfsgid report the previous id, never an error; check by
        // reading the id back (an invalid id leaves it unchanged).
        setfsgid(cred.gid);
        setfsuid(cred.uid);
        if setfsgid(u32::MAX) != cred.gid || setfsuid(u32::MAX) != cred.uid {
            return Err(libc::EPERM);
        }
        *cur.borrow_mut() = Some(cred.clone());
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn squash_root_maps_root_to_nobody_and_map_all_maps_everyone() {
        let root = WireCred {
            uid: 0,
            gid: 0,
            groups: vec![0, 5],
        };
        let user = WireCred {
            uid: 1000,
            gid: 1000,
            groups: vec![27],
        };
        let squash = IdentityPolicy {
            squash_root: true,
            map_all: None,
        };
        assert_eq!(squash.apply(&root).uid, NOBODY);
        assert_eq!(squash.apply(&user), user);
        let all = IdentityPolicy {
            squash_root: false,
            map_all: Some((7, 8)),
        };
        assert_eq!((all.apply(&user).uid, all.apply(&user).gid), (7, 8));
        assert!(all.apply(&root).groups.is_empty());
        assert_eq!(IdentityPolicy::default().apply(&root), root);
    }
}
