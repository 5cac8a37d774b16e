//! Registered local memory and the per-connection registration cache.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex, Weak};

use crate::descriptor::{DescriptorTransport, RemoteDescriptor};
use crate::error::{Error, Result};

/// Whatever a transport must keep alive for a region and undo when it goes
/// (an ibverbs MR, an entry in the TCP key table). Dropping it deregisters.
pub(crate) trait RegionHandle: Send + Sync {}

/// Memory registered with a connection: the peer may READ/WRITE it through
/// [`LocalRegion::descriptor`], and this side may use it as the local end of
/// `write_remote` / `read_remote`.
///
/// Deregistered when the last `Arc` goes (RAII); the memory must stay valid
/// until then (that is the promise made to the unsafe `register`).
pub struct LocalRegion {
    // The CPU address as an integer: a region describes memory and never
    // dereferences it (the transports move its bytes through
    // `mem::RegisteredSpan` or the NIC), so it is Send + Sync like any
    // other plain data, with no `unsafe impl` needed.
    ptr: usize,
    len: usize,
    addr: u64,
    lkey: u32,
    rkey: u32,
    transport: DescriptorTransport,
    /// Which registry (connection) made it: a region is only a valid local
    /// side on the connection that registered it (checked by verbs).
    #[cfg_attr(not(feature = "verbs"), allow(dead_code))]
    owner: u64,
    // Dropped after the fields above are no longer used; deregisters.
    _handle: Box<dyn RegionHandle>,
}

impl std::fmt::Debug for LocalRegion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalRegion")
            .field("ptr", &format_args!("{:#x}", self.ptr))
            .field("len", &self.len)
            .field("addr", &format_args!("{:#x}", self.addr))
            .field("lkey", &self.lkey)
            .field("rkey", &self.rkey)
            .field("transport", &self.transport)
            .finish()
    }
}

impl LocalRegion {
    // Eight plain facts about one registration; a builder would add nothing.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        ptr: *mut u8,
        len: usize,
        addr: u64,
        lkey: u32,
        rkey: u32,
        transport: DescriptorTransport,
        owner: u64,
        handle: Box<dyn RegionHandle>,
    ) -> Self {
        LocalRegion {
            ptr: ptr as usize,
            len,
            addr,
            lkey,
            rkey,
            transport,
            owner,
            _handle: handle,
        }
    }

    /// CPU pointer to the first byte; null for dmabuf regions, which have
    /// no CPU mapping here.
    pub fn ptr(&self) -> *mut u8 {
        self.ptr as *mut u8
    }
    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }
    /// True for a zero-length region (never produced by `register`).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// The address the transport uses for the first byte (the virtual
    /// address, or the iova of a dmabuf region).
    pub fn addr(&self) -> u64 {
        self.addr
    }
    /// Local key (ibverbs lkey; equal to the rkey over TCP).
    pub fn lkey(&self) -> u32 {
        self.lkey
    }
    /// What the peer needs to access this region.
    pub fn descriptor(&self) -> RemoteDescriptor {
        RemoteDescriptor {
            addr: self.addr,
            len: self.len as u64,
            rkey: self.rkey,
            transport: self.transport,
        }
    }
    #[cfg_attr(not(feature = "verbs"), allow(dead_code))]
    pub(crate) fn owner(&self) -> u64 {
        self.owner
    }

    /// Checks `[off, off+len)` against the region.
    pub fn check_range(&self, off: usize, len: usize) -> Result<()> {
        match off.checked_add(len) {
            Some(end) if end <= self.len => Ok(()),
            _ => Err(Error::OutOfRange {
                offset: off as u64,
                len: len as u64,
                region_len: self.len as u64,
            }),
        }
    }
}

/// Cache so that registering the same range twice gives the same region.
/// Holds weak references: a region the caller dropped is deregistered and
/// forgotten, never kept alive by the cache.
/// A fresh id for a registry (a connection's key table or PD).
#[cfg_attr(not(feature = "verbs"), allow(dead_code))]
pub(crate) fn next_owner_id() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

pub(crate) struct RegionCache<K> {
    map: Mutex<HashMap<K, Weak<LocalRegion>>>,
}

impl<K: Eq + Hash + Clone> RegionCache<K> {
    pub(crate) fn new() -> Self {
        RegionCache {
            map: Mutex::new(HashMap::new()),
        }
    }

    /// Returns the live region for `key`, or registers one with `make`.
    /// `make` runs under the cache lock, so two threads registering the same
    /// range at once get one region.
    pub(crate) fn get_or_register(
        &self,
        key: K,
        make: impl FnOnce() -> Result<LocalRegion>,
    ) -> Result<Arc<LocalRegion>> {
        let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(r) = map.get(&key).and_then(Weak::upgrade) {
            return Ok(r);
        }
        let region = Arc::new(make()?);
        map.retain(|_, w| w.strong_count() > 0);
        map.insert(key, Arc::downgrade(&region));
        Ok(region)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    struct Counted(Arc<AtomicUsize>);
    impl RegionHandle for Counted {}
    impl Drop for Counted {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn region(drops: &Arc<AtomicUsize>) -> LocalRegion {
        LocalRegion::new(
            std::ptr::null_mut(),
            10,
            0,
            1,
            1,
            DescriptorTransport::Tcp,
            0,
            Box::new(Counted(drops.clone())),
        )
    }

    #[test]
    fn same_key_gives_same_region_while_alive_and_a_new_one_after_drop() {
        let drops = Arc::new(AtomicUsize::new(0));
        let cache = RegionCache::new();
        let a = cache.get_or_register(1u32, || Ok(region(&drops))).unwrap();
        let b = cache
            .get_or_register(1u32, || panic!("must be cached"))
            .unwrap();
        assert!(Arc::ptr_eq(&a, &b));
        drop((a, b));
        assert_eq!(drops.load(Ordering::SeqCst), 1, "dropping deregisters");
        let _c = cache.get_or_register(1u32, || Ok(region(&drops))).unwrap();
    }

    #[test]
    fn check_range_rejects_overflowing_and_out_of_bounds_ranges() {
        let drops = Arc::new(AtomicUsize::new(0));
        let r = region(&drops);
        assert!(r.check_range(0, 10).is_ok());
        assert!(r.check_range(10, 0).is_ok());
        assert!(r.check_range(5, 6).is_err());
        assert!(r.check_range(usize::MAX, 2).is_err());
    }
}
