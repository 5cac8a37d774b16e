//! Reading the mount table (`/proc/self/mountinfo`): is a path a mount point, and which
//! filesystem type holds a device.

use std::ffi::OsString;
use std::io;
use std::os::fd::RawFd;
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};

use crate::identify::identify_fd;

/// The filesystem type hipfs mounts show in the mount table (`fuse.` + subtype).
pub const HIPFS_FS_TYPE: &str = "fuse.hipfs";

/// `FUSE_SUPER_MAGIC`, the `f_type` statfs reports for every FUSE filesystem.
const FUSE_SUPER_MAGIC: i64 = 0x6573_5546;

/// One line of the mount table, the fields we use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MountEntry {
    pub(crate) major: u32,
    pub(crate) minor: u32,
    pub(crate) mount_point: PathBuf,
    pub(crate) fs_type: String,
    pub(crate) source: String,
}

/// Undoes the octal escapes (`\040` for a space) the kernel uses in mountinfo paths.
fn unescape(field: &str) -> OsString {
    let b = field.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 4 <= b.len() {
            let digits = &b[i + 1..i + 4];
            if digits.iter().all(|d| (b'0'..=b'7').contains(d)) {
                let v = (digits[0] - b'0') as u32 * 64
                    + (digits[1] - b'0') as u32 * 8
                    + (digits[2] - b'0') as u32;
                if let Ok(byte) = u8::try_from(v) {
                    out.push(byte);
                    i += 4;
                    continue;
                }
            }
        }
        out.push(b[i]);
        i += 1;
    }
    OsString::from_vec(out)
}

fn parse_line(line: &str) -> Option<MountEntry> {
    let mut fields = line.split(' ');
    let _id = fields.next()?;
    let _parent = fields.next()?;
    let (major, minor) = fields.next()?.split_once(':')?;
    let _root = fields.next()?;
    let mount_point = PathBuf::from(unescape(fields.next()?));
    // Optional fields end at a lone "-".
    let mut rest = fields.skip_while(|f| *f != "-");
    rest.next()?;
    let fs_type = rest.next()?.to_string();
    let source = unescape(rest.next()?).to_string_lossy().into_owned();
    Some(MountEntry {
        major: major.parse().ok()?,
        minor: minor.parse().ok()?,
        mount_point,
        fs_type,
        source,
    })
}

pub(crate) fn parse_mountinfo(text: &str) -> Vec<MountEntry> {
    text.lines().filter_map(parse_line).collect()
}

pub(crate) fn read_mountinfo() -> io::Result<Vec<MountEntry>> {
    Ok(parse_mountinfo(&std::fs::read_to_string(
        "/proc/self/mountinfo",
    )?))
}

/// The absolute form of `path` without following its last component, which may be a dead
/// FUSE mount that cannot be stat'ed.
pub(crate) fn absolute_mount_path(path: &Path) -> io::Result<PathBuf> {
    let abs = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir()?.join(path)
    };
    match (abs.parent(), abs.file_name()) {
        (Some(parent), Some(name)) => Ok(parent.canonicalize()?.join(name)),
        _ => Ok(abs),
    }
}

/// Whether something is mounted exactly at `path` (as listed in `/proc/self/mountinfo`).
pub fn is_mounted(path: &Path) -> io::Result<bool> {
    let target = absolute_mount_path(path)?;
    Ok(read_mountinfo()?.iter().any(|m| m.mount_point == target))
}

/// The filesystem type and source of the mount exactly at `path` (the last
/// one listed there, which is the one on top), or `None` when nothing is
/// mounted there.
pub fn mount_at(path: &Path) -> io::Result<Option<(String, String)>> {
    let target = absolute_mount_path(path)?;
    Ok(read_mountinfo()?
        .into_iter()
        .rfind(|m| m.mount_point == target)
        .map(|m| (m.fs_type, m.source)))
}

/// Whether `fd` is a file on a hipfs mount.
///
/// Decided in two steps: `fstatfs` must report FUSE (`FUSE_SUPER_MAGIC`); then the mount
/// table entry of the file's device must have type `fuse.hipfs` (mounts made through
/// fusermount3, the default with `auto_unmount`). A FUSE mount listed as plain `fuse` (root
/// mounting directly without `auto_unmount` cannot set a subtype) is asked the
/// identify ioctl instead: only the hipfs adapter answers it.
pub fn is_hipfs_fd(fd: RawFd) -> io::Result<bool> {
    let sfs = hipfs_sys::fs::fstatfs(fd)?;
    if sfs.f_type as i64 != FUSE_SUPER_MAGIC {
        return Ok(false);
    }
    let st = hipfs_sys::fs::fstat(fd)?;
    let (major, minor) = (libc::major(st.st_dev), libc::minor(st.st_dev));
    let fs_type = read_mountinfo()?
        .into_iter()
        .find(|m| m.major == major && m.minor == minor)
        .map(|m| m.fs_type);
    match fs_type.as_deref() {
        Some(HIPFS_FS_TYPE) => Ok(true),
        Some("fuse") => Ok(identify_fd(fd).is_ok()),
        _ => Ok(false),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_lines_with_optional_fields_and_escapes_parse() {
        let text = "36 35 98:0 /mnt1 /mnt/my\\040data rw,noatime master:1 - fuse.hipfs srv:/exp rw,user_id=0\n\
                    22 1 0:21 / /proc rw - proc proc rw\n\
                    garbage line\n";
        let m = parse_mountinfo(text);
        assert_eq!(m.len(), 2);
        assert_eq!(m[0].mount_point, PathBuf::from("/mnt/my data"));
        assert_eq!((m[0].major, m[0].minor), (98, 0));
        assert_eq!(m[0].fs_type, "fuse.hipfs");
        assert_eq!(m[0].source, "srv:/exp");
        assert_eq!(m[1].fs_type, "proc");
    }

    #[test]
    fn proc_is_mounted_and_a_plain_directory_is_not() {
        assert!(is_mounted(Path::new("/proc")).expect("mountinfo readable"));
        let dir = tempfile::tempdir().expect("tempdir");
        assert!(!is_mounted(dir.path()).expect("mountinfo readable"));
    }

    #[test]
    fn a_regular_local_file_is_not_hipfs() {
        let f = tempfile::tempfile().expect("tempfile");
        use std::os::fd::AsRawFd;
        assert!(!is_hipfs_fd(f.as_raw_fd()).expect("fstatfs works"));
    }
}
