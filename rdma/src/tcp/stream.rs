//! The byte stream of one lane, as its sender and reader threads see it:
//! a plain TCP socket, or a TLS session over one.
//!
//! Two enums (one per direction) rather than a trait object: the plain
//! arm calls the socket functions directly, so plain TCP pays one match
//! per call and no extra copy. The TLS arm shares one rustls session
//! between the lane's two threads under a mutex that is never held while
//! waiting on the socket: the sender encrypts and hands the socket what it
//! takes without waiting, then waits for room unlocked; the reader
//! receives ciphertext into its own buffer unlocked and decrypts after
//! locking. Holding the lock while blocked on the socket could deadlock
//! two peers whose senders both wait for room in the other side's receive
//! buffer while their readers wait for the lock.

use std::io::{self, BufRead, Write};
use std::os::fd::{AsRawFd, BorrowedFd, RawFd};
use std::sync::{Arc, Mutex};

use super::sock;

/// A rustls session shared by a lane's sender and reader.
pub(crate) type Session = Arc<Mutex<rustls::Connection>>;

/// Plaintext staged per encryption pass (and ciphertext read per pass):
/// large enough that the lock and the syscall are paid per 256 KiB, small
/// enough to keep per-lane memory modest.
const STAGE: usize = 256 * 1024;

/// The writing half of a lane (owned by its sender thread).
pub(crate) enum TxStream {
    Plain(RawFd),
    Tls(TlsTx),
}

/// The reading half of a lane (owned by its reader thread).
pub(crate) enum RxStream {
    Plain(PlainRx),
    Tls(TlsRx),
}

/// Bytes a plain lane's reader asks the socket for at once when what it
/// needs is small: a frame header and a small message behind it (or the
/// next frame's header) come in one `recv` instead of two.
const PLAIN_AHEAD: usize = 16 * 1024;

/// The reader's half of a plain lane: small reads go through a buffer,
/// large ones (payloads into registered memory) straight into place.
pub(crate) struct PlainRx {
    fd: RawFd,
    /// Received and not yet taken: `start..end`.
    buf: Box<[u8]>,
    start: usize,
    end: usize,
}

/// Splits a lane into its two halves.
pub(crate) fn halves(fd: RawFd, tls: Option<rustls::Connection>) -> (TxStream, RxStream) {
    match tls {
        None => (
            TxStream::Plain(fd),
            RxStream::Plain(PlainRx {
                fd,
                buf: vec![0u8; PLAIN_AHEAD].into_boxed_slice(),
                start: 0,
                end: 0,
            }),
        ),
        Some(conn) => {
            let s: Session = Arc::new(Mutex::new(conn));
            (
                TxStream::Tls(TlsTx {
                    fd,
                    session: s.clone(),
                    plain: Vec::with_capacity(STAGE),
                }),
                RxStream::Tls(TlsRx {
                    fd,
                    session: s,
                    wire: vec![0u8; STAGE],
                    start: 0,
                    end: 0,
                }),
            )
        }
    }
}

fn lock(s: &Session) -> std::sync::MutexGuard<'_, rustls::Connection> {
    s.lock().unwrap_or_else(|p| p.into_inner())
}

fn tls_io_error(e: rustls::Error) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("TLS: {e}"))
}

impl TxStream {
    /// Sends `len` bytes at `ptr`; `more`: more of the same frame follows
    /// at once (plain: MSG_MORE; TLS: kept for the same record).
    ///
    /// # Safety
    /// `[ptr, ptr+len)` must be readable for the duration of the call.
    pub(crate) unsafe fn send_raw(
        &mut self,
        ptr: *const u8,
        len: usize,
        more: bool,
    ) -> io::Result<()> {
        match self {
            // SAFETY: the caller's guarantee, passed on.
            TxStream::Plain(fd) => unsafe { sock::send_all(*fd, ptr, len, more) },
            TxStream::Tls(t) => {
                // SAFETY: the caller's guarantee, passed on.
                unsafe { t.stage_raw(ptr, len)? };
                if more {
                    Ok(())
                } else {
                    t.flush()
                }
            }
        }
    }

    /// Sends all of `b` (see [`TxStream::send_raw`]).
    pub(crate) fn send_bytes(&mut self, b: &[u8], more: bool) -> io::Result<()> {
        // SAFETY: `b` is readable for its length for the whole call.
        unsafe { self.send_raw(b.as_ptr(), b.len(), more) }
    }

    /// Sends up to `len` bytes of `file` from `at`; returns how many came
    /// from the file (see [`sock::send_file`]). Plain TCP hands the pages
    /// to the socket with sendfile(2); TLS must encrypt them in user space,
    /// so it reads them into its staging buffer first.
    pub(crate) fn send_file(
        &mut self,
        file: BorrowedFd<'_>,
        at: u64,
        len: usize,
    ) -> io::Result<usize> {
        match self {
            TxStream::Plain(fd) => match sock::send_file(*fd, file.as_raw_fd(), at, len) {
                Ok(n) => Ok(n),
                // A file system that cannot splice fails sendfile before
                // the first byte: copy through a buffer instead.
                Err(_) => sock::send_file_copied(*fd, file, at, len),
            },
            TxStream::Tls(t) => t.send_file(file, at, len),
        }
    }

    /// Sends `len` zero bytes (the rest of a payload whose source ran short).
    pub(crate) fn send_zeros(&mut self, len: u64) -> io::Result<()> {
        match self {
            TxStream::Plain(fd) => sock::send_zeros(*fd, len),
            TxStream::Tls(t) => {
                static ZEROS: [u8; 64 * 1024] = [0; 64 * 1024];
                let mut left = len;
                while left > 0 {
                    let n = left.min(ZEROS.len() as u64) as usize;
                    t.stage(&ZEROS[..n])?;
                    left -= n as u64;
                }
                t.flush()
            }
        }
    }
}

impl RxStream {
    /// Reads exactly `len` bytes into `ptr`.
    ///
    /// # Safety
    /// `[ptr, ptr+len)` must be writable for the duration of the call.
    pub(crate) unsafe fn recv_raw(&mut self, ptr: *mut u8, len: usize) -> io::Result<()> {
        match self {
            // SAFETY: the caller's guarantee, passed on.
            RxStream::Plain(p) => unsafe { p.recv_raw(ptr, len) },
            // SAFETY: the caller's guarantee, passed on.
            RxStream::Tls(t) => unsafe { t.recv_raw(ptr, len) },
        }
    }

    /// Fills all of `b`.
    pub(crate) fn recv_bytes(&mut self, b: &mut [u8]) -> io::Result<()> {
        // SAFETY: `b` is writable for its length for the whole call.
        unsafe { self.recv_raw(b.as_mut_ptr(), b.len()) }
    }

    /// Reads into a fixed-size array.
    pub(crate) fn recv_array<const N: usize>(&mut self) -> io::Result<[u8; N]> {
        let mut b = [0u8; N];
        self.recv_bytes(&mut b)?;
        Ok(b)
    }

    /// Reads and throws away `len` bytes (a refused frame's payload).
    pub(crate) fn discard(&mut self, len: u64) -> io::Result<()> {
        match self {
            RxStream::Plain(p) => p.discard(len),
            RxStream::Tls(t) => t.discard(len),
        }
    }
}

/// The sender's half of a TLS lane.
pub(crate) struct TlsTx {
    fd: RawFd,
    session: Session,
    /// Plaintext not yet encrypted (a frame header waits here for its
    /// payload, so both go out in one record).
    plain: Vec<u8>,
}

/// The socket as rustls writes ciphertext to it: whatever fits now.
struct SendNow(RawFd);

impl Write for SendNow {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        sock::send_vectored_now(self.0, &[io::IoSlice::new(b)])
    }

    fn write_vectored(&mut self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        sock::send_vectored_now(self.0, bufs)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl TlsTx {
    /// Stages `len` bytes at `ptr`, encrypting and sending whenever the
    /// stage fills.
    ///
    /// # Safety
    /// `[ptr, ptr+len)` must be readable for the duration of the call.
    unsafe fn stage_raw(&mut self, mut ptr: *const u8, mut len: usize) -> io::Result<()> {
        while len > 0 {
            let n = (STAGE - self.plain.len()).min(len);
            // SAFETY: n <= len bytes of the caller's readable range.
            unsafe { sock::append_raw(&mut self.plain, ptr, n) };
            // SAFETY: n <= len, so the pointer stays inside the range.
            ptr = unsafe { ptr.add(n) };
            len -= n;
            if self.plain.len() >= STAGE {
                self.flush()?;
            }
        }
        Ok(())
    }

    fn stage(&mut self, b: &[u8]) -> io::Result<()> {
        // SAFETY: `b` is readable for its length for the whole call.
        unsafe { self.stage_raw(b.as_ptr(), b.len()) }
    }

    /// Encrypts what is staged (and whatever the session queued itself,
    /// such as alerts or key updates) and sends it.
    fn flush(&mut self) -> io::Result<()> {
        let mut off = 0;
        loop {
            let socket_full = {
                let mut c = lock(&self.session);
                while off < self.plain.len() {
                    let n = c.writer().write(&self.plain[off..])?;
                    if n == 0 {
                        // The session's output buffer is full: send it first.
                        break;
                    }
                    off += n;
                }
                let mut full = false;
                while c.wants_write() {
                    match c.write_tls(&mut SendNow(self.fd)) {
                        Ok(0) => {
                            full = true;
                            break;
                        }
                        Ok(_) => {}
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                            full = true;
                            break;
                        }
                        Err(e) => return Err(e),
                    }
                }
                full
            };
            if socket_full {
                // Unlocked: the reader keeps decrypting meanwhile.
                sock::wait_writable(self.fd)?;
                continue;
            }
            if off >= self.plain.len() {
                break;
            }
        }
        self.plain.clear();
        Ok(())
    }

    fn send_file(&mut self, file: BorrowedFd<'_>, at: u64, len: usize) -> io::Result<usize> {
        let mut done = 0usize;
        while done < len {
            let want = (len - done).min(STAGE - self.plain.len()).max(1);
            let start = self.plain.len();
            self.plain.resize(start + want, 0);
            // A read error ends the file data (the caller sends zeros after it).
            let n = match hipfs_sys::io::pread(file, &mut self.plain[start..], at + done as u64) {
                Ok(0) | Err(_) => 0,
                Ok(n) => n,
            };
            self.plain.truncate(start + n);
            if n == 0 {
                break;
            }
            done += n;
            if self.plain.len() >= STAGE {
                self.flush()?;
            }
        }
        self.flush()?;
        Ok(done)
    }
}

impl PlainRx {
    /// Hands out up to `max` buffered bytes to `f`; returns how many.
    fn take(&mut self, max: usize, f: impl FnOnce(&[u8])) -> usize {
        let n = (self.end - self.start).min(max);
        f(&self.buf[self.start..self.start + n]);
        self.start += n;
        n
    }

    /// Receives what the socket has now (at least one byte) into the
    /// empty buffer.
    fn fill(&mut self) -> io::Result<()> {
        let n = sock::recv_some(self.fd, &mut self.buf)?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "peer closed the connection",
            ));
        }
        (self.start, self.end) = (0, n);
        Ok(())
    }

    /// # Safety
    /// `[ptr, ptr+len)` must be writable for the duration of the call.
    unsafe fn recv_raw(&mut self, mut ptr: *mut u8, mut len: usize) -> io::Result<()> {
        while len > 0 {
            if self.start == self.end {
                if len >= PLAIN_AHEAD / 2 {
                    // Large: straight into place, no copy.
                    // SAFETY: the caller's guarantee, passed on.
                    return unsafe { sock::recv_exact(self.fd, ptr, len) };
                }
                self.fill()?;
            }
            let got = self.take(len, |b| {
                // SAFETY: b.len() <= len bytes of the caller's writable range.
                unsafe { sock::copy_to_raw(ptr, b) }
            });
            // SAFETY: got <= len, so the pointer stays inside the range.
            ptr = unsafe { ptr.add(got) };
            len -= got;
        }
        Ok(())
    }

    fn discard(&mut self, len: u64) -> io::Result<()> {
        let max = usize::try_from(len).unwrap_or(usize::MAX);
        let got = self.take(max, |_| {}) as u64;
        sock::discard(self.fd, len - got)
    }
}

/// The reader's half of a TLS lane.
pub(crate) struct TlsRx {
    fd: RawFd,
    session: Session,
    /// Ciphertext received and not yet handed to the session: `start..end`.
    wire: Vec<u8>,
    start: usize,
    end: usize,
}

impl TlsRx {
    /// # Safety
    /// `[ptr, ptr+len)` must be writable for the duration of the call.
    unsafe fn recv_raw(&mut self, mut ptr: *mut u8, mut len: usize) -> io::Result<()> {
        while len > 0 {
            let got = self.take_plain(len, |b| {
                // SAFETY: b.len() <= len bytes of the caller's writable range.
                unsafe { sock::copy_to_raw(ptr, b) }
            })?;
            // SAFETY: got <= len, so the pointer stays inside the range.
            ptr = unsafe { ptr.add(got) };
            len -= got;
        }
        Ok(())
    }

    /// Hands up to `max` decrypted bytes to `f` and consumes them; when none
    /// are decrypted yet, feeds the session more ciphertext first. Returns
    /// how many bytes `f` got (at least one).
    fn take_plain(&mut self, max: usize, mut f: impl FnMut(&[u8])) -> io::Result<usize> {
        loop {
            let got = {
                let mut c = lock(&self.session);
                let mut r = c.reader();
                match r.fill_buf() {
                    Ok([]) => {
                        return Err(io::Error::new(
                            io::ErrorKind::UnexpectedEof,
                            "peer closed the TLS session",
                        ))
                    }
                    Ok(b) => {
                        let n = b.len().min(max);
                        f(&b[..n]);
                        r.consume(n);
                        n
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => 0,
                    Err(e) => return Err(e),
                }
            };
            if got > 0 {
                return Ok(got);
            }
            self.feed()?;
        }
    }

    /// Gives the session more ciphertext (receiving it first, unlocked, if
    /// none is buffered) and decrypts what it can.
    fn feed(&mut self) -> io::Result<()> {
        if self.start == self.end {
            let n = sock::recv_some(self.fd, &mut self.wire)?;
            if n == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "peer closed the connection",
                ));
            }
            (self.start, self.end) = (0, n);
        }
        let mut c = lock(&self.session);
        let mut src = &self.wire[self.start..self.end];
        let n = c.read_tls(&mut src)?;
        self.start += n;
        let state = c.process_new_packets().map_err(tls_io_error)?;
        if n == 0 && state.plaintext_bytes_to_read() == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "peer closed the TLS session",
            ));
        }
        Ok(())
    }

    fn discard(&mut self, mut len: u64) -> io::Result<()> {
        while len > 0 {
            let max = usize::try_from(len).unwrap_or(usize::MAX);
            len -= self.take_plain(max, |_| {})? as u64;
        }
        Ok(())
    }
}
