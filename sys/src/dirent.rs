//! Directory entries from `getdents64(2)`, parsed without trusting the
//! record lengths.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

/// Bytes before the name in a `struct linux_dirent64`: `u64 d_ino`,
/// `i64 d_off`, `u16 d_reclen`, `u8 d_type`.
pub const HEADER_LEN: usize = 19;

/// Reads the next batch of entries of `dir` into `buf`; returns the bytes
/// filled (0 at the end of the directory). Parse them with [`Dirents`].
pub fn getdents64(dir: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<usize> {
    let n = crate::cvt_retry(|| {
        // SAFETY: the kernel writes at most `buf.len()` bytes into `buf`.
        unsafe {
            libc::syscall(
                libc::SYS_getdents64,
                dir.as_raw_fd(),
                buf.as_mut_ptr(),
                buf.len(),
            )
        }
    })?;
    Ok(n as usize)
}

/// One directory entry, borrowing its name from the buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dirent<'a> {
    /// Inode number.
    pub ino: u64,
    /// The cookie that resumes reading after this entry (`lseek` to it).
    pub off: i64,
    /// `DT_*` file type.
    pub kind: u8,
    /// The name, without its NUL padding.
    pub name: &'a [u8],
}

/// Iterator over the records `getdents64` wrote into a buffer. A record
/// whose length is shorter than its header, or that runs past the end of
/// the data, ends the iteration with an `InvalidData` error (the kernel
/// never writes one; a bad one must not become a panic).
pub struct Dirents<'a> {
    data: &'a [u8],
    pos: usize,
    failed: bool,
}

impl<'a> Dirents<'a> {
    /// Records in `data` (the first `n` bytes `getdents64` returned).
    pub fn new(data: &'a [u8]) -> Dirents<'a> {
        Dirents {
            data,
            pos: 0,
            failed: false,
        }
    }

    fn malformed(&mut self, what: &str) -> Option<io::Result<Dirent<'a>>> {
        self.failed = true;
        Some(Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("malformed dirent at byte {}: {what}", self.pos),
        )))
    }
}

impl<'a> Iterator for Dirents<'a> {
    type Item = io::Result<Dirent<'a>>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.pos >= self.data.len() {
            return None;
        }
        let rest = &self.data[self.pos..];
        let Some(header) = rest.get(..HEADER_LEN) else {
            return self.malformed("truncated header");
        };
        let word = |r: std::ops::Range<usize>| {
            let mut b = [0u8; 8];
            b[..r.len()].copy_from_slice(&header[r]);
            b
        };
        let ino = u64::from_ne_bytes(word(0..8));
        let off = i64::from_ne_bytes(word(8..16));
        let reclen = usize::from(u16::from_ne_bytes([header[16], header[17]]));
        let kind = header[18];
        if reclen < HEADER_LEN {
            return self.malformed("record shorter than its header");
        }
        let Some(record) = rest.get(..reclen) else {
            return self.malformed("record runs past the end of the data");
        };
        let name = &record[HEADER_LEN..];
        let name = &name[..name.iter().position(|&b| b == 0).unwrap_or(name.len())];
        self.pos += reclen;
        Some(Ok(Dirent {
            ino,
            off,
            kind,
            name,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(ino: u64, off: i64, kind: u8, name: &[u8], reclen: u16) -> Vec<u8> {
        let mut r = Vec::new();
        r.extend_from_slice(&ino.to_ne_bytes());
        r.extend_from_slice(&off.to_ne_bytes());
        r.extend_from_slice(&reclen.to_ne_bytes());
        r.push(kind);
        r.extend_from_slice(name);
        r.resize(usize::from(reclen).max(HEADER_LEN), 0);
        r
    }

    #[test]
    fn well_formed_records_are_parsed_in_order() {
        let mut buf = record(5, 1, libc::DT_DIR, b".", 24);
        buf.extend(record(7, 2, libc::DT_REG, b"file.txt", 32));
        let got: Vec<_> = Dirents::new(&buf).map(Result::unwrap).collect();
        assert_eq!(got.len(), 2);
        assert_eq!((got[0].ino, got[0].off, got[0].name), (5, 1, &b"."[..]));
        assert_eq!((got[1].kind, got[1].name), (libc::DT_REG, &b"file.txt"[..]));
    }

    #[test]
    fn a_record_shorter_than_its_header_is_an_error_not_a_panic() {
        for bad in [0u16, 1, 18] {
            let mut buf = record(5, 1, libc::DT_REG, b"a", 24);
            buf[16..18].copy_from_slice(&bad.to_ne_bytes());
            let mut it = Dirents::new(&buf);
            let e = it.next().unwrap().unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidData);
            assert!(it.next().is_none(), "iteration stops after an error");
        }
    }

    #[test]
    fn a_record_running_past_the_end_is_an_error() {
        let mut buf = record(5, 1, libc::DT_REG, b"a", 24);
        buf[16..18].copy_from_slice(&200u16.to_ne_bytes());
        assert!(Dirents::new(&buf).next().unwrap().is_err());
    }

    #[test]
    fn a_truncated_header_after_a_good_record_is_an_error() {
        let mut buf = record(5, 1, libc::DT_REG, b"a", 24);
        buf.extend_from_slice(&[0u8; 10]);
        let mut it = Dirents::new(&buf);
        assert!(it.next().unwrap().is_ok());
        assert!(it.next().unwrap().is_err());
    }

    #[test]
    fn a_name_filling_the_whole_record_has_no_nul_and_is_kept() {
        let buf = record(5, 1, libc::DT_REG, b"abcde", 24);
        let d = Dirents::new(&buf).next().unwrap().unwrap();
        assert_eq!(d.name, b"abcde");
    }

    #[test]
    fn the_real_directory_listing_contains_dot_and_dotdot() {
        let dir = std::fs::File::open("/").unwrap();
        let mut buf = vec![0u8; 64 * 1024];
        let n = getdents64(std::os::fd::AsFd::as_fd(&dir), &mut buf).unwrap();
        let names: Vec<Vec<u8>> = Dirents::new(&buf[..n])
            .map(|d| d.unwrap().name.to_vec())
            .collect();
        assert!(names.iter().any(|n| n == b"."));
        assert!(names.iter().any(|n| n == b".."));
    }
}
