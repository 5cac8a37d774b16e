//! Registered memory that owns its bytes: the safe way to get a
//! [`LocalRegion`] when the caller has no memory of its own to lend
//! (benchmarks, staging buffers), because the allocation cannot be freed
//! before the registration that the peer writes through.

use std::sync::Arc;

use crate::error::Result;
use crate::mem::PageBuffer;
use crate::region::LocalRegion;
use crate::Connection;

/// `len` page-aligned bytes registered with one connection. Dropping it
/// deregisters first and frees the memory after (field order).
pub struct OwnedRegion {
    region: Arc<LocalRegion>,
    _mem: PageBuffer,
}

impl OwnedRegion {
    /// Allocates `len` bytes, sets every byte to `fill` (so no page is the
    /// shared zero page, which would make reads of it look cheaper than
    /// real memory), and registers them with `conn`.
    pub fn new(conn: &dyn Connection, len: usize, fill: u8) -> Result<OwnedRegion> {
        let mem = PageBuffer::new(len)?;
        // SAFETY: `mem` owns `mem.len()` writable bytes and nothing else
        // refers to them yet.
        unsafe { std::ptr::write_bytes(mem.ptr(), fill, mem.len()) };
        // SAFETY: the memory stays allocated until `self` drops, and the
        // region (whose only `Arc` is ours: it is never handed out) is
        // dropped before it by field order.
        let region = unsafe { conn.register(mem.ptr(), len)? };
        Ok(OwnedRegion { region, _mem: mem })
    }

    /// The registration, to pass to `write_remote` / `read_remote` or to
    /// take a descriptor from.
    pub fn region(&self) -> &LocalRegion {
        &self.region
    }
}

impl std::fmt::Debug for OwnedRegion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OwnedRegion")
            .field("region", &self.region)
            .finish()
    }
}
