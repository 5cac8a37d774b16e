//! The export's identity: what a multi-server mount compares to know that
//! its servers export the same namespace (`hipfs serve --export-id`).
//!
//! Without `--export-id` the server keeps an id in the export root itself,
//! as an extended attribute, so that every server exporting that directory
//! of a shared filesystem finds the same one: the first server to start
//! creates it (`XATTR_CREATE`: of servers starting together, one wins and
//! the others read its id; where the filesystem does not make that atomic
//! across nodes, the creator reads the id back after a pause and takes
//! what is stored). A filesystem without extended attributes, or
//! a read-only export that has none yet, gets a fingerprint of the root's
//! inode number and filesystem type instead, logged as weak.

use std::ffi::CString;
use std::path::Path;

use super::super::auth::random_nonce;
use super::super::proto::MAX_EXPORT_ID;
use super::super::RemoteError;
use hipfs_sys::xattr;

/// Where the id is kept, in the order tried: `trusted.` needs
/// CAP_SYS_ADMIN (clients acting as users can neither see nor change it),
/// `user.` is the fallback for servers not run as root.
const XATTR_NAMES: [&str; 2] = ["trusted.hipfs.export_id", "user.hipfs.export_id"];

/// How long a server that created the id waits before reading it back.
const CREATE_SETTLE: std::time::Duration = std::time::Duration::from_millis(1500);

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

/// The id of the export at `dir`: `given`, else the one kept in its root,
/// else a new one kept there (unless `read_only`), else a fingerprint.
pub fn resolve(dir: &Path, given: Option<&str>, read_only: bool) -> Result<String, RemoteError> {
    if let Some(id) = given {
        validate(id)?;
        return Ok(id.to_string());
    }
    let path = CString::new(dir.as_os_str().as_encoded_bytes())
        .map_err(|_| RemoteError::Config("export path contains NUL".into()))?;
    for name in XATTR_NAMES {
        let name = CString::new(name).map_err(|_| RemoteError::Config("xattr name".into()))?;
        if let Some(id) = read_id(&path, &name) {
            return Ok(id);
        }
        if read_only {
            continue;
        }
        let fresh: String = random_nonce()?[..16]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        match xattr::set(&path, &name, fresh.as_bytes(), libc::XATTR_CREATE) {
            Ok(()) => {
                // XATTR_CREATE is not atomic across the nodes of every
                // distributed filesystem (GlusterFS lets two servers that
                // start together both "create" it): let the racing writes
                // land, then take whatever the directory keeps.
                std::thread::sleep(CREATE_SETTLE);
                return Ok(read_id(&path, &name).unwrap_or(fresh));
            }
            // Another server created it first: take its id.
            Err(e) if e.raw_os_error() == Some(libc::EEXIST) => {
                if let Some(id) = read_id(&path, &name) {
                    return Ok(id);
                }
            }
            Err(e) => log::debug!(
                "cannot keep an export id in {} ({}): {e}",
                dir.display(),
                name.to_string_lossy()
            ),
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
    fn the_derived_id_is_the_same_for_every_server_of_one_directory() {
        let d = tempfile::tempdir().unwrap();
        let first = resolve(d.path(), None, false).unwrap();
        assert_eq!(resolve(d.path(), None, false).unwrap(), first);
        assert_eq!(resolve(d.path(), None, true).unwrap(), first);
        let other = tempfile::tempdir().unwrap();
        assert_ne!(resolve(other.path(), None, false).unwrap(), first);
    }
}
