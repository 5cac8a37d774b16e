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

/// `_IOR('H', 1, [u8; 4096])`: identify the open file.
pub const HIPFS_IOC_IDENTIFY: u32 = (IOC_READ << IOC_DIRSHIFT)
    | ((IDENTIFY_BUF_LEN as u32) << IOC_SIZESHIFT)
    | ((b'H' as u32) << IOC_TYPESHIFT)
    | 1;

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

/// The adapter's answer to ioctl `cmd` with an output buffer of `out_size` bytes: the reply
/// bytes, or the errno. Only [`HIPFS_IOC_IDENTIFY`] is known; `payload` asks the backend.
pub(crate) fn identify_reply(
    cmd: u32,
    out_size: u32,
    payload: impl FnOnce() -> Option<Vec<u8>>,
) -> Result<Vec<u8>, i32> {
    if cmd != HIPFS_IOC_IDENTIFY {
        return Err(libc::ENOTTY);
    }
    if (out_size as usize) < IDENTIFY_BUF_LEN {
        return Err(libc::EINVAL);
    }
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
    let mut buf = vec![0u8; IDENTIFY_BUF_LEN];
    // The command's encoded size is IDENTIFY_BUF_LEN, the length of `buf`.
    hipfs_sys::fs::ioctl_read(fd, HIPFS_IOC_IDENTIFY, &mut buf)?;
    decode_identify_reply(&buf)
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
    fn only_the_identify_command_is_answered_and_oversized_payloads_overflow() {
        let ok = identify_reply(HIPFS_IOC_IDENTIFY, 4096, || Some(b"x".to_vec()));
        assert_eq!(ok, Ok(vec![1, 0, 0, 0, b'x']));
        assert_eq!(
            identify_reply(0x5401, 4096, || Some(vec![])),
            Err(libc::ENOTTY)
        );
        assert_eq!(
            identify_reply(HIPFS_IOC_IDENTIFY, 8, || Some(vec![])),
            Err(libc::EINVAL)
        );
        assert_eq!(
            identify_reply(HIPFS_IOC_IDENTIFY, 4096, || None),
            Err(libc::ENOTTY)
        );
        let big = || Some(vec![0u8; IDENTIFY_MAX_PAYLOAD + 1]);
        assert_eq!(
            identify_reply(HIPFS_IOC_IDENTIFY, 4096, big),
            Err(libc::EOVERFLOW)
        );
    }
}
