//! A read of a remote file placed by the server straight into a receive
//! buffer of the client's connection, handed to the caller without a copy
//! (what the FUSE adapter does over verbs; `hipfs bench mount` uses it as
//! the reference the mount is compared with).

use super::client::RemoteClient;
use super::proto::{Op, Payload, ReadDest, WireCred};
use super::RemoteError;

impl RemoteClient {
    /// Reads up to `len` bytes (at most [`MAX_IO`](super::proto::MAX_IO))
    /// of the open file `fh` at `offset` as `cred`, placed by the server
    /// into one of the connection's receive buffers, and returns what `f`
    /// makes of the bytes that arrived (empty at end of file).
    ///
    /// Errors: a setup failure as [`RemoteError`]; the server's errno as
    /// `RemoteError::Io`.
    pub fn read_placed<R>(
        &self,
        cred: &WireCred,
        fh: u64,
        offset: u64,
        len: u32,
        f: impl FnOnce(&[u8]) -> R,
    ) -> Result<R, RemoteError> {
        let link = self.link()?;
        let buf = link.take_recv_buf()?;
        let reply = self.call(
            cred,
            Op::Read {
                fh,
                offset,
                len,
                dest: Some(ReadDest {
                    region: buf.region().descriptor(),
                    offset: 0,
                }),
            },
        );
        let out = match reply {
            Ok(Payload::Read { n, .. }) => Ok(f(buf.bytes(n as usize))),
            // An authenticated TCP link: the reply carries the placed bytes' hash.
            Ok(Payload::Placed { n, digest }) => {
                match self.check_placed(buf.bytes(n as usize), &digest) {
                    Ok(()) => Ok(f(buf.bytes(n as usize))),
                    Err(e) => Err(RemoteError::Io(std::io::Error::from_raw_os_error(e))),
                }
            }
            Ok(_) => Err(RemoteError::Config("unexpected reply to read".into())),
            Err(e) => Err(RemoteError::Io(std::io::Error::from_raw_os_error(e))),
        };
        link.put_recv_buf(buf);
        out
    }
}
