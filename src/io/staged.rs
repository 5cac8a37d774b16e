//! Device-memory destinations: file bytes are staged through host bounce
//! buffers and copied to the GPU by the runtime, one bounce per worker.

use super::host_path::{read_range, with_bounce, write_range};
use super::posix::PosixFile;
use super::{run_chunks, Dir, Request};
use crate::config::Config;
use crate::error::{Error, OpError, Result};
use crate::gpu;
use crate::stats::{self, IoPath};
use crate::userspace::{UserspaceBuf, UserspaceFs};

/// Moves one request between device memory and a local file.
pub(crate) fn transfer(pf: &PosixFile, req: &Request, config: &Config) -> Result<usize> {
    let rt = gpu::runtime();
    let chunk = config.chunk_bytes().div_ceil(pf.offset_align) * pf.offset_align;
    run_chunks(
        req.file_offset,
        req.size,
        chunk,
        config.io_threads(),
        true,
        &|_, off, len, m| {
            let dev = req.mem + m;
            with_bounce(chunk, pf.offset_align, |bounce| {
                // SAFETY: the bounce buffer holds at least `len` bytes.
                let host = unsafe { std::slice::from_raw_parts_mut(bounce.as_mut_ptr(), len) };
                match req.dir {
                    Dir::Read => {
                        // SAFETY: host is len writable bytes.
                        let n = unsafe { read_range(pf, host.as_mut_ptr(), len, off)? };
                        rt.copy_to_device(dev, &host[..n])?;
                        stats::record_read(IoPath::Staged, n);
                        Ok(n)
                    }
                    Dir::Write => {
                        rt.copy_from_device(host, dev)?;
                        // SAFETY: host holds len initialised bytes.
                        let n = unsafe { write_range(pf, host.as_ptr(), len, off)? };
                        stats::record_write(IoPath::Staged, n);
                        Ok(n)
                    }
                }
            })?
        },
    )
}

/// A userspace filesystem with device memory and no RDMA registration:
/// stage through host memory.
pub(crate) fn userspace_transfer(fs: &dyn UserspaceFs, req: &Request) -> Result<usize> {
    let rt = gpu::runtime();
    let chunk = 8 << 20;
    run_chunks(
        req.file_offset,
        req.size,
        chunk,
        4,
        true,
        &|_, off, len, m| {
            let dev = req.mem + m;
            with_bounce(chunk, 4096, |bounce| {
                // SAFETY: the bounce holds at least len bytes.
                let host = unsafe { std::slice::from_raw_parts_mut(bounce.as_mut_ptr(), len) };
                let buf = UserspaceBuf::Host {
                    ptr: host.as_mut_ptr(),
                    len,
                };
                match req.dir {
                    Dir::Read => {
                        let n = fs.read(buf, off)?;
                        if n > len {
                            return Err(Error::new(
                                OpError::InternalError,
                                "filesystem over-reported a read",
                            ));
                        }
                        rt.copy_to_device(dev, &host[..n])?;
                        stats::record_read(IoPath::Remote, n);
                        Ok(n)
                    }
                    Dir::Write => {
                        rt.copy_from_device(host, dev)?;
                        let n = fs.write(buf, off)?;
                        stats::record_write(IoPath::Remote, n);
                        Ok(n)
                    }
                }
            })?
        },
    )
}
