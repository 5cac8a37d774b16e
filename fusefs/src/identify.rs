//! The identification ioctl: lets a process ask the mount what an open file descriptor is.
//!
//! The UserspaceFs data path opens a file through the mount (so the kernel checks permissions
//! and resolves the name), then issues [`HIPFS_IOC_IDENTIFY`] on the fd; the adapter answers with
//! [`crate::Backend::identify`] for that inode and file handle. The library then talks to the
//! server directly.
//!
//! FUSE only forwards "restricted" ioctls from unprivileged callers: the kernel takes the
//! direction and size from the command number and copies exactly that many bytes, so the
//! command encodes a fixed 4 KiB buffer. The reply is laid out as a little-endian `u32` payload
//! length followed by the payload.

use std::io;
use std::os::fd::RawFd;

/// Bytes the ioctl transfers (the size encoded in [`HIPFS_IOC_IDENTIFY`]).
pub const IDENTIFY_BUF_LEN: usize = 4096;

/// The longest payload [`crate::Backend::identify`] may return.
pub const IDENTIFY_MAX_PAYLOAD: usize = IDENTIFY_BUF_LEN - 4;

const IOC_READ: u32 = 2;
const IOC_DIRSHIFT: u32 = 30;
const IOC_SIZESHIFT: u32 = 16;
const IOC_TYPESHIFT: u32 = 8;

const IOC_WRITE: u32 = 1;

/// `_IOR('H', 1, [u8; 4096])`: identify the open file for a UserspaceFs handle.
pub const HIPFS_IOC_IDENTIFY: u32 = (IOC_READ << IOC_DIRSHIFT)
    | ((IDENTIFY_BUF_LEN as u32) << IOC_SIZESHIFT)
    | ((b'H' as u32) << IOC_TYPESHIFT)
    | 1;

/// `_IOW('H', 2, [u64; 2])`: the caller wrote `[offset, len)` of the open file
/// behind the mount's back (the direct path); drop the kernel's cached pages
/// of that range and the file's attributes. `len` 0 means to the end.
pub const HIPFS_IOC_INVALIDATE: u32 = (IOC_WRITE << IOC_DIRSHIFT)
    | ((INVALIDATE_ARG_LEN as u32) << IOC_SIZESHIFT)
    | ((b'H' as u32) << IOC_TYPESHIFT)
    | 2;

/// `_IOR('H', 3, [u8; 4096])`: as [`HIPFS_IOC_IDENTIFY`], for an OPAQUE_FD handle
/// that the library binds to the direct path (the mount counts the two apart).
pub const HIPFS_IOC_IDENTIFY_OPAQUE: u32 = (IOC_READ << IOC_DIRSHIFT)
    | ((IDENTIFY_BUF_LEN as u32) << IOC_SIZESHIFT)
    | ((b'H' as u32) << IOC_TYPESHIFT)
    | 3;

const INVALIDATE_ARG_LEN: usize = 16;

/// Which kind of handle asks a mount to identify a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdentifyPurpose {
    /// A `UserspaceFs` handle (or the renewal of its capability).
    UserspaceFs,
    /// An `OpaqueFd` handle the library takes past FUSE.
    OpaqueFd,
}

/// What the adapter is asked through an ioctl on a hipfs file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum IoctlRequest {
    /// Identify the file (answer with [`crate::Backend::identify`]).
    Identify(IdentifyPurpose),
    /// Invalidate cached pages `[offset, offset + len)` and attributes.
    Invalidate { offset: i64, len: i64 },
}

/// Decodes an ioctl the adapter received: the errno for anything else.
pub(crate) fn ioctl_request(cmd: u32, in_data: &[u8], out_size: u32) -> Result<IoctlRequest, i32> {
    let identify = |purpose| {
        if (out_size as usize) < IDENTIFY_BUF_LEN {
            Err(libc::EINVAL)
        } else {
            Ok(IoctlRequest::Identify(purpose))
        }
    };
    match cmd {
        HIPFS_IOC_IDENTIFY => identify(IdentifyPurpose::UserspaceFs),
        HIPFS_IOC_IDENTIFY_OPAQUE => identify(IdentifyPurpose::OpaqueFd),
        HIPFS_IOC_INVALIDATE => {
            let arg: &[u8; INVALIDATE_ARG_LEN] = in_data
                .get(..INVALIDATE_ARG_LEN)
                .and_then(|b| b.try_into().ok())
                .ok_or(libc::EINVAL)?;
            let word = |i: usize| {
                let mut w = [0u8; 8];
                w.copy_from_slice(&arg[i * 8..i * 8 + 8]);
                u64::from_le_bytes(w)
            };
            let (offset, len) = (word(0), word(1));
            let offset = i64::try_from(offset).map_err(|_| libc::EINVAL)?;
            // Past i64::MAX means "to the end" to the kernel as well.
            let len = i64::try_from(len).unwrap_or(0);
            Ok(IoctlRequest::Invalidate { offset, len })
        }
        _ => Err(libc::ENOTTY),
    }
}

/// Packs an identify payload into the ioctl reply buffer. `None` when it is too long.
fn encode_identify_reply(payload: &[u8]) -> Option<Vec<u8>> {
    if payload.len() > IDENTIFY_MAX_PAYLOAD {
        return None;
    }
    let mut buf = Vec::with_capacity(4 + payload.len());
    buf.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    buf.extend_from_slice(payload);
    Some(buf)
}

/// The adapter's answer to an identify request: the reply bytes, or the
/// errno. `payload` asks the backend.
pub(crate) fn identify_reply(payload: impl FnOnce() -> Option<Vec<u8>>) -> Result<Vec<u8>, i32> {
    let payload = payload().ok_or(libc::ENOTTY)?;
    encode_identify_reply(&payload).ok_or_else(|| {
        log::warn!("identify payload of {} bytes is too long", payload.len());
        libc::EOVERFLOW
    })
}

fn decode_identify_reply(buf: &[u8]) -> io::Result<Vec<u8>> {
    let bad = || io::Error::new(io::ErrorKind::InvalidData, "malformed hipfs identify reply");
    let len_bytes: [u8; 4] = buf
        .get(..4)
        .ok_or_else(bad)?
        .try_into()
        .map_err(|_| bad())?;
    let len = u32::from_le_bytes(len_bytes) as usize;
    let payload = buf.get(4..4 + len).ok_or_else(bad)?;
    Ok(payload.to_vec())
}

/// Asks the hipfs mount what `fd` is; returns the backend's identification payload.
///
/// Errors: `ENOTTY` when `fd` is not on a hipfs mount (or the backend cannot identify it),
/// `EBADF` for a bad descriptor.
pub fn identify_fd(fd: RawFd) -> io::Result<Vec<u8>> {
    identify_fd_for(fd, IdentifyPurpose::UserspaceFs)
}

/// [`identify_fd`] saying which kind of handle asks.
pub fn identify_fd_for(fd: RawFd, purpose: IdentifyPurpose) -> io::Result<Vec<u8>> {
    let cmd = match purpose {
        IdentifyPurpose::UserspaceFs => HIPFS_IOC_IDENTIFY,
        IdentifyPurpose::OpaqueFd => HIPFS_IOC_IDENTIFY_OPAQUE,
    };
    let mut buf = vec![0u8; IDENTIFY_BUF_LEN];
    // The command's encoded size is IDENTIFY_BUF_LEN, the length of `buf`.
    hipfs_sys::fs::ioctl_read(fd, cmd, &mut buf)?;
    decode_identify_reply(&buf)
}

/// Tells the mount that `[offset, offset + len)` of the file open as `fd`
/// was written past it (the direct path), so the kernel forgets the cached
/// pages of that range and the file's attributes before this returns.
pub fn invalidate_fd(fd: RawFd, offset: u64, len: u64) -> io::Result<()> {
    let mut arg = [0u8; INVALIDATE_ARG_LEN];
    arg[..8].copy_from_slice(&offset.to_le_bytes());
    arg[8..].copy_from_slice(&len.to_le_bytes());
    hipfs_sys::fs::ioctl_write(fd, HIPFS_IOC_INVALIDATE, &arg).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identify_command_matches_the_linux_ior_encoding() {
        // _IOR('H', 1, char[4096]) computed by hand: dir=2, size=0x1000, type=0x48, nr=1.
        assert_eq!(HIPFS_IOC_IDENTIFY, 0x9000_4801);
    }

    #[test]
    fn identify_reply_round_trips_and_refuses_oversized_payloads() {
        let buf = encode_identify_reply(b"server:1/export/42").expect("fits");
        assert_eq!(
            decode_identify_reply(&buf).expect("decodes"),
            b"server:1/export/42"
        );
        assert!(encode_identify_reply(&[0u8; IDENTIFY_MAX_PAYLOAD]).is_some());
        assert!(encode_identify_reply(&[0u8; IDENTIFY_MAX_PAYLOAD + 1]).is_none());
        assert!(decode_identify_reply(&[9, 0, 0, 0, 1]).is_err());
        assert!(decode_identify_reply(&[1, 0]).is_err());
    }

    #[test]
    fn commands_decode_to_requests_and_others_are_not_tty() {
        assert_eq!(HIPFS_IOC_INVALIDATE, 0x4010_4802);
        assert_eq!(HIPFS_IOC_IDENTIFY_OPAQUE, 0x9000_4803);
        assert_eq!(
            ioctl_request(HIPFS_IOC_IDENTIFY, &[], 4096),
            Ok(IoctlRequest::Identify(IdentifyPurpose::UserspaceFs))
        );
        assert_eq!(
            ioctl_request(HIPFS_IOC_IDENTIFY_OPAQUE, &[], 4096),
            Ok(IoctlRequest::Identify(IdentifyPurpose::OpaqueFd))
        );
        assert_eq!(ioctl_request(HIPFS_IOC_IDENTIFY, &[], 8), Err(libc::EINVAL));
        assert_eq!(ioctl_request(0x5401, &[], 4096), Err(libc::ENOTTY));
        let mut arg = [0u8; 16];
        arg[..8].copy_from_slice(&4096u64.to_le_bytes());
        arg[8..].copy_from_slice(&u64::MAX.to_le_bytes());
        assert_eq!(
            ioctl_request(HIPFS_IOC_INVALIDATE, &arg, 0),
            Ok(IoctlRequest::Invalidate {
                offset: 4096,
                len: 0
            })
        );
        assert_eq!(
            ioctl_request(HIPFS_IOC_INVALIDATE, &arg[..8], 0),
            Err(libc::EINVAL)
        );
        arg[..8].copy_from_slice(&u64::MAX.to_le_bytes());
        assert_eq!(
            ioctl_request(HIPFS_IOC_INVALIDATE, &arg, 0),
            Err(libc::EINVAL)
        );
    }

    #[test]
    fn identify_answers_the_payload_and_oversized_payloads_overflow() {
        assert_eq!(
            identify_reply(|| Some(b"x".to_vec())),
            Ok(vec![1, 0, 0, 0, b'x'])
        );
        assert_eq!(identify_reply(|| None), Err(libc::ENOTTY));
        let big = || Some(vec![0u8; IDENTIFY_MAX_PAYLOAD + 1]);
        assert_eq!(identify_reply(big), Err(libc::EOVERFLOW));
    }
}
