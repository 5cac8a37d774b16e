//! Building [`Credentials`] from a FUSE request.
//!
//! The request header carries uid, gid and pid only. The server needs the supplementary groups
//! too (a file readable by a secondary group must stay readable), so they are read from
//! `/proc/<pid>/status`. Reading that file on every request would double the syscalls of small
//! operations, so results are cached per pid for a short time; a pid reused within that window
//! by another process is the accepted risk (the kernel's own mode check still applies under
//! `default_permissions`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::Credentials;

const GROUPS_TTL: Duration = Duration::from_secs(1);
const GROUPS_CACHE_MAX: usize = 4096;

/// When a process's groups were read, and what they were.
type CachedGroups = (Instant, Arc<Vec<u32>>);

/// Caches the supplementary groups of recently seen processes.
#[derive(Debug, Default)]
pub(crate) struct GroupCache {
    by_pid: Mutex<HashMap<u32, CachedGroups>>,
}

impl GroupCache {
    /// Credentials for a request from `pid` running as `uid:gid`.
    pub(crate) fn credentials(&self, uid: u32, gid: u32, pid: u32) -> Credentials {
        Credentials {
            uid,
            gid,
            groups: self.groups(pid).as_ref().clone(),
            pid,
        }
    }

    fn groups(&self, pid: u32) -> Arc<Vec<u32>> {
        if pid == 0 {
            // Requests the kernel makes on its own (release, forget, writeback) have no process.
            return Arc::new(Vec::new());
        }
        let now = Instant::now();
        if let Ok(map) = self.by_pid.lock() {
            if let Some((at, groups)) = map.get(&pid) {
                if now.duration_since(*at) < GROUPS_TTL {
                    return groups.clone();
                }
            }
        }
        let groups = Arc::new(read_proc_groups(pid).unwrap_or_default());
        if let Ok(mut map) = self.by_pid.lock() {
            if map.len() >= GROUPS_CACHE_MAX {
                map.retain(|_, (at, _)| now.duration_since(*at) < GROUPS_TTL);
                if map.len() >= GROUPS_CACHE_MAX {
                    map.clear();
                }
            }
            map.insert(pid, (now, groups.clone()));
        }
        groups
    }
}

/// The `Groups:` line of `/proc/<pid>/status`; `None` when the process is gone or the line is
/// unreadable.
pub(crate) fn read_proc_groups(pid: u32) -> Option<Vec<u32>> {
    let status = read_proc_status(pid).ok()?;
    parse_groups_line(&status)
}

/// `/proc/<pid>/status` in one read (and one more that finds the end): it
/// says its size is 0, so `read_to_string` would stat it, seek, and read
/// it in small growing pieces, all on the path of a request.
pub(crate) fn read_proc_status(pid: u32) -> std::io::Result<String> {
    use std::io::Read;
    let mut f = std::fs::File::open(format!("/proc/{pid}/status"))?;
    let mut buf = vec![0u8; 4096];
    let mut n = 0;
    loop {
        if n == buf.len() {
            buf.resize(buf.len() * 2, 0);
        }
        match f.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    buf.truncate(n);
    String::from_utf8(buf).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
}

fn parse_groups_line(status: &str) -> Option<Vec<u32>> {
    let line = status.lines().find(|l| l.starts_with("Groups:"))?;
    line["Groups:".len()..]
        .split_whitespace()
        .map(|g| g.parse::<u32>().ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_line_is_parsed_and_garbage_is_refused() {
        let status = "Name:\tcat\nGroups:\t4 24 27 \nNgid:\t0\n";
        assert_eq!(parse_groups_line(status), Some(vec![4, 24, 27]));
        assert_eq!(parse_groups_line("Groups:\t\n"), Some(vec![]));
        assert_eq!(parse_groups_line("Groups:\t4 x\n"), None);
        assert_eq!(parse_groups_line("Name:\tcat\n"), None);
    }

    #[test]
    fn own_process_groups_match_getgroups() {
        let mut expected = hipfs_sys::process::getgroups().expect("getgroups");
        let mut from_proc = read_proc_groups(std::process::id()).expect("own status readable");
        from_proc.sort_unstable();
        expected.sort_unstable();
        assert_eq!(from_proc, expected);
        let cache = GroupCache::default();
        let cred = cache.credentials(1, 2, std::process::id());
        assert_eq!((cred.uid, cred.gid), (1, 2));
        assert!(cache.credentials(0, 0, 0).groups.is_empty());
    }
}
