//! The export's identity: what a multi-server mount compares to know that
//! its servers export the same namespace (`hipfs serve --export-id`).
//!
//! Without `--export-id` the server keeps an id in the export root itself,
//! as an extended attribute (invisible to clients), so that every server
//! exporting that directory of a shared filesystem finds the same one.
//! The first server to start creates it, holding the name [`LOCK_FILE`]
//! meanwhile (made with `O_EXCL`, which every shared filesystem serialises
//! where the name lives; gone again milliseconds later): servers starting
//! together wait for it and read the winner's id. (Setting the attribute
//! with `XATTR_CREATE` alone is not enough: GlusterFS keeps a directory's
//! attributes on every brick, and two servers that "created" one together
//! left the bricks disagreeing.) A filesystem without extended attributes,
//! or a read-only export that has none yet, gets a fingerprint of the
//! root's inode number and filesystem type instead, logged as weak.

use std::ffi::CString;
use std::path::Path;
use std::time::{Duration, Instant, SystemTime};

use super::super::auth::random_nonce;
use super::super::proto::MAX_EXPORT_ID;
use super::super::RemoteError;
use hipfs_sys::xattr;

/// Where the id is kept, in the order tried: `trusted.` needs
/// CAP_SYS_ADMIN (clients acting as users can neither see nor change it),
/// `user.` is the fallback for servers not run as root.
const XATTR_NAMES: [&str; 2] = ["trusted.hipfs.export_id", "user.hipfs.export_id"];

/// The name a server holds while it creates the id.
pub const LOCK_FILE: &str = ".hipfs-export-id.lock";
/// How long a server waits for another one to create the id.
const WAIT_FOR_CREATOR: Duration = Duration::from_secs(5);
/// A lock older than this was left by a server that died creating the id.
const STALE_LOCK: Duration = Duration::from_secs(30);

/// Checks an id given on the command line: printable, no blanks or commas
/// (it appears in messages and mount option lists), 1..=256 bytes.
pub fn validate(id: &str) -> Result<(), RemoteError> {
    let ok = !id.is_empty()
        && id.len() <= MAX_EXPORT_ID
        && id
            .bytes()
            .all(|b| b.is_ascii_graphic() && b != b',' && b != b'=');
    if ok {
        Ok(())
    } else {
        Err(RemoteError::Config(format!(
            "--export-id {id:?}: expected 1 to {MAX_EXPORT_ID} printable characters without blanks, ',' or '=' (e.g. --export-id datasets-2026)"
        )))
    }
}

fn read_id(path: &CString, name: &CString) -> Option<String> {
    let mut buf = [0u8; MAX_EXPORT_ID];
    let n = xattr::get(path, name, &mut buf).ok()?;
    let s = std::str::from_utf8(&buf[..n]).ok()?.to_string();
    validate(&s).is_ok().then_some(s)
}

/// Creates the id under [`LOCK_FILE`], or waits for the server that holds
/// it; `None` when no id can be kept here (no extended attributes).
fn create_locked(
    dir: &Path,
    path: &CString,
    names: &[CString],
    stored: &dyn Fn() -> Option<String>,
) -> Result<Option<String>, RemoteError> {
    let lock = dir.join(LOCK_FILE);
    let until = Instant::now() + WAIT_FOR_CREATOR;
    let mut waited = false;
    loop {
        match std::fs::File::create_new(&lock) {
            Ok(_) => break,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                waited = true;
                // Another server creates it: wait for its id.
                if let Some(id) = stored() {
                    return Ok(Some(id));
                }
                let stale = std::fs::metadata(&lock)
                    .and_then(|m| m.modified())
                    .ok()
                    .and_then(|t| SystemTime::now().duration_since(t).ok())
                    .is_some_and(|age| age > STALE_LOCK);
                if stale {
                    let _ = std::fs::remove_file(&lock);
                } else if Instant::now() >= until {
                    log::warn!(
                        "{}: another server holds {LOCK_FILE} and set no export id within {WAIT_FOR_CREATOR:?}",
                        dir.display()
                    );
                    return Ok(None);
                } else {
                    std::thread::sleep(Duration::from_millis(100));
                }
            }
            Err(e) => {
                log::debug!("cannot make {}: {e}", lock.display());
                return Ok(None);
            }
        }
    }
    // Holding the lock: one that held it before may have finished, and
    // its attribute may take a moment to show through this node's caches.
    if waited {
        let settle = Instant::now() + Duration::from_secs(2);
        while stored().is_none() && Instant::now() < settle {
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    let made = match stored() {
        Some(id) => Some(id),
        None => {
            let fresh: String = random_nonce()?[..16]
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect();
            names
                .iter()
                .find_map(|name| match xattr::set(path, name, fresh.as_bytes(), 0) {
                    Ok(()) => Some(fresh.clone()),
                    Err(e) => {
                        log::debug!(
                            "cannot keep an export id in {} ({}): {e}",
                            dir.display(),
                            name.to_string_lossy()
                        );
                        None
                    }
                })
        }
    };
    let _ = std::fs::remove_file(&lock);
    Ok(made)
}

/// The id of the export at `dir`: `given`, else the one kept in its root,
/// else a new one kept there (unless `read_only`), else a fingerprint.
pub fn resolve(dir: &Path, given: Option<&str>, read_only: bool) -> Result<String, RemoteError> {
    if let Some(id) = given {
        validate(id)?;
        return Ok(id.to_string());
    }
    let path = CString::new(dir.as_os_str().as_encoded_bytes())
        .map_err(|_| RemoteError::Config("export path contains NUL".into()))?;
    let names = XATTR_NAMES
        .iter()
        .map(|n| CString::new(*n).map_err(|_| RemoteError::Config("xattr name".into())))
        .collect::<Result<Vec<_>, _>>()?;
    let stored = || names.iter().find_map(|n| read_id(&path, n));
    if let Some(id) = stored() {
        return Ok(id);
    }
    if !read_only {
        if let Some(id) = create_locked(dir, &path, &names, &stored)? {
            return Ok(id);
        }
    }
    let st = std::fs::metadata(dir).map_err(RemoteError::Io)?;
    let fs_type = rustix::fs::statfs(dir)
        .map(|s| s.f_type as u64)
        .unwrap_or(0);
    use std::os::unix::fs::MetadataExt;
    let mut h = blake3::Hasher::new();
    h.update(b"hipfs export fingerprint");
    h.update(&st.ino().to_le_bytes());
    h.update(&fs_type.to_le_bytes());
    let id = format!("fp-{}", &h.finalize().to_hex()[..24]);
    log::warn!(
        "{}: no export id kept in the directory (extended attributes unavailable{}); using the weak fingerprint {id}. Servers exporting the same namespace should be given the same --export-id.",
        dir.display(),
        if read_only { " or read-only export" } else { "" }
    );
    Ok(id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_given_id_wins_and_bad_ones_are_refused() {
        let d = tempfile::tempdir().unwrap();
        assert_eq!(resolve(d.path(), Some("data-1"), false).unwrap(), "data-1");
        for bad in ["", "a b", "a,b", "k=v", &"x".repeat(300)] {
            assert!(resolve(d.path(), Some(bad), false).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn servers_starting_together_agree_and_a_stale_lock_is_taken_over() {
        let d = tempfile::tempdir().unwrap();
        let ids: Vec<String> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..8)
                .map(|_| s.spawn(|| resolve(d.path(), None, false).unwrap()))
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert!(ids.iter().all(|i| *i == ids[0]), "{ids:?}");
        assert!(
            !d.path().join(LOCK_FILE).exists(),
            "the lock is left behind"
        );
        // A lock left by a server that died creating the id.
        let e = tempfile::tempdir().unwrap();
        let lock = std::fs::File::create(e.path().join(LOCK_FILE)).unwrap();
        let old = SystemTime::now() - Duration::from_secs(120);
        lock.set_modified(old).unwrap();
        let id = resolve(e.path(), None, false).unwrap();
        assert!(!id.starts_with("fp-"), "{id}");
        assert_eq!(resolve(e.path(), None, false).unwrap(), id);
    }

    #[test]
    fn the_derived_id_is_the_same_for_every_server_of_one_directory() {
        let d = tempfile::tempdir().unwrap();
        let first = resolve(d.path(), None, false).unwrap();
        assert_eq!(resolve(d.path(), None, false).unwrap(), first);
        assert_eq!(resolve(d.path(), None, true).unwrap(), first);
        let other = tempfile::tempdir().unwrap();
        assert_ne!(resolve(other.path(), None, false).unwrap(), first);
    }
}
