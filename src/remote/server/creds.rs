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
use super::trust::Principal;
use hipfs_sys::process::{set_thread_groups, setfsgid, setfsuid};

/// How an export rewrites callers (as NFS exports do).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IdentityPolicy {
    /// root becomes nobody (65534) for every client, local root daemons
    /// too (`--squash-root`). Token-authenticated hosts are squashed
    /// anyway unless `no_root_squash`.
    pub squash_root: bool,
    /// Let root of token-authenticated hosts act as root (`--no-root-squash`).
    pub no_root_squash: bool,
    /// Every caller becomes this uid:gid.
    pub map_all: Option<(u32, u32)>,
    /// The uids a client may claim (`--allow-uids 1000-1999,0`); `None`: any.
    /// A root claim that is squashed to nobody is always allowed.
    pub allow_uids: Option<Vec<(u32, u32)>>,
}

/// The uid and gid of "nobody".
pub const NOBODY: u32 = 65534;

/// Parses `1000-1999,0` into inclusive ranges.
pub fn parse_uid_ranges(s: &str) -> Result<Vec<(u32, u32)>, String> {
    let bad = || format!("{s}: expected uid ranges such as 1000-1999,0");
    s.split(',')
        .map(|part| {
            let part = part.trim();
            let (a, b) = part.split_once('-').unwrap_or((part, part));
            let (a, b): (u32, u32) = (
                a.trim().parse().map_err(|_| bad())?,
                b.trim().parse().map_err(|_| bad())?,
            );
            if a > b {
                return Err(bad());
            }
            Ok((a, b))
        })
        .collect()
}

impl IdentityPolicy {
    /// The identity the server acts with for `cred` (policy only, for a
    /// trusted host daemon that is not squashed).
    pub fn apply(&self, cred: &WireCred) -> WireCred {
        self.rewrite(cred, self.squash_root)
    }

    fn rewrite(&self, cred: &WireCred, squash: bool) -> WireCred {
        if let Some((uid, gid)) = self.map_all {
            return WireCred {
                uid,
                gid,
                groups: Vec::new(),
            };
        }
        if squash && cred.uid == 0 {
            return WireCred {
                uid: NOBODY,
                gid: NOBODY,
                groups: Vec::new(),
            };
        }
        let mut c = cred.clone();
        if squash && c.gid == 0 {
            c.gid = NOBODY;
        }
        if squash {
            c.groups.retain(|&g| g != 0);
        }
        c
    }

    /// The identity the server acts with for a request claiming `cred` on a
    /// connection authenticated as `who`, or EPERM when `who` may not
    /// claim it.
    pub(crate) fn authorize(&self, cred: &WireCred, who: &Principal) -> Result<WireCred, Errno> {
        let squash = match who {
            // The file was opened as this identity; the claim is ignored.
            Principal::File(g) => return Ok(g.cred.clone()),
            Principal::User(own) => {
                let groups_ok = cred.groups.iter().all(|g| own.groups.contains(g));
                if cred.uid != own.uid || cred.gid != own.gid || !groups_ok {
                    return Err(libc::EPERM);
                }
                self.squash_root
            }
            Principal::Host { token } => self.squash_root || (*token && !self.no_root_squash),
        };
        let squashed_root = squash && cred.uid == 0;
        if let Some(allowed) = &self.allow_uids {
            let ok = allowed.iter().any(|&(a, b)| (a..=b).contains(&cred.uid));
            if !ok && !squashed_root && self.map_all.is_none() {
                return Err(libc::EPERM);
            }
        }
        Ok(self.rewrite(cred, squash))
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
        // Switching needs CAP_SETUID/CAP_SETGID, which a non-root identity
        // dropped: take the permitted set back first.
        set_effective_caps(true)?;
        // The raw syscall changes only this thread's credentials.
        set_thread_groups(&cred.groups).errno()?;
        // setfsuid/setfsgid report the previous id, never an error; check by
        // reading the id back (an invalid id leaves it unchanged).
        setfsgid(cred.gid);
        setfsuid(cred.uid);
        if setfsgid(u32::MAX) != cred.gid || setfsuid(u32::MAX) != cred.uid {
            return Err(libc::EPERM);
        }
        // setfsuid drops only the filesystem capabilities; a non-root
        // caller must not keep CAP_SETFCAP, CAP_SYS_ADMIN (trusted.*
        // xattrs) or any other, so the effective set is emptied.
        if cred.uid != 0 {
            set_effective_caps(false)?;
        }
        *cur.borrow_mut() = Some(cred.clone());
        Ok(())
    })
}

/// Sets this thread's effective capabilities to its permitted set (`on`)
/// or to none. `capset` changes only the calling thread.
fn set_effective_caps(on: bool) -> Result<(), Errno> {
    use rustix::thread::{capabilities, set_capabilities, CapabilitySet};
    let errno = |e: rustix::io::Errno| e.raw_os_error();
    let mut sets = capabilities(None).map_err(errno)?;
    let want = if on {
        sets.permitted
    } else {
        CapabilitySet::empty()
    };
    if sets.effective == want {
        return Ok(());
    }
    sets.effective = want;
    set_capabilities(None, sets).map_err(errno)
}

/// Whether xattr `name` is one only root may change: `security.*` (file
/// capabilities, LSM labels) and `trusted.*`. Refused for everyone else
/// whatever capabilities the worker holds.
pub(crate) fn privileged_xattr(name: &[u8]) -> bool {
    name.starts_with(b"security.") || name.starts_with(b"trusted.")
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
            ..IdentityPolicy::default()
        };
        assert_eq!(squash.apply(&root).uid, NOBODY);
        assert_eq!(squash.apply(&user), user);
        let all = IdentityPolicy {
            map_all: Some((7, 8)),
            ..IdentityPolicy::default()
        };
        assert_eq!((all.apply(&user).uid, all.apply(&user).gid), (7, 8));
        assert!(all.apply(&root).groups.is_empty());
        assert_eq!(IdentityPolicy::default().apply(&root), root);
    }

    #[test]
    #[cfg_attr(not(hipfs_root), ignore = "needs root (capabilities to drop)")]
    fn a_worker_acting_for_a_user_has_no_effective_capabilities_and_gets_them_back_for_root() {
        use rustix::thread::capabilities;
        assert!(rustix::process::geteuid().is_root(), "needs root");
        // A thread of its own: credentials and capabilities are per thread.
        std::thread::spawn(|| {
            let full = capabilities(None).unwrap();
            let user = WireCred {
                uid: 4242,
                gid: 4242,
                groups: vec![],
            };
            become_user(&user).unwrap();
            assert!(capabilities(None).unwrap().effective.is_empty());
            become_user(&WireCred::default()).unwrap();
            assert_eq!(capabilities(None).unwrap().effective, full.permitted);
        })
        .join()
        .unwrap();
    }

    #[test]
    fn token_hosts_are_squashed_by_default_and_users_may_claim_only_themselves() {
        let root = WireCred {
            uid: 0,
            gid: 0,
            groups: vec![0],
        };
        let user = WireCred {
            uid: 1000,
            gid: 1000,
            groups: vec![27],
        };
        let p = IdentityPolicy::default();
        let host = Principal::Host { token: true };
        assert_eq!(p.authorize(&root, &host).unwrap().uid, NOBODY);
        let local_root = Principal::Host { token: false };
        assert_eq!(p.authorize(&root, &local_root).unwrap(), root);
        let open = IdentityPolicy {
            no_root_squash: true,
            ..IdentityPolicy::default()
        };
        assert_eq!(open.authorize(&root, &host).unwrap(), root);
        let me = Principal::User(user.clone());
        assert_eq!(p.authorize(&user, &me).unwrap(), user);
        assert_eq!(p.authorize(&root, &me), Err(libc::EPERM));
        let more_groups = WireCred {
            groups: vec![27, 0],
            ..user.clone()
        };
        assert_eq!(p.authorize(&more_groups, &me), Err(libc::EPERM));
        let some = IdentityPolicy {
            allow_uids: Some(parse_uid_ranges("1000-1999,5").unwrap()),
            ..IdentityPolicy::default()
        };
        assert_eq!(some.authorize(&user, &host).unwrap(), user);
        let other = WireCred {
            uid: 2000,
            ..user.clone()
        };
        assert_eq!(some.authorize(&other, &host), Err(libc::EPERM));
        assert_eq!(some.authorize(&root, &host).unwrap().uid, NOBODY);
        assert!(parse_uid_ranges("9-1").is_err());
    }
}
