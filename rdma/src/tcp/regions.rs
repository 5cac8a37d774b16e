//! The TCP transport's key table: which regions the peer may touch.
//!
//! Each registration gets a fresh 32-bit key, never reused on the
//! connection (so a stale key cannot reach a later region). A slot's range
//! is guarded by a read-write lock: the reader threads hold it shared while
//! they move bytes in or out, and deregistration takes it exclusively, so
//! once a region is dropped no byte moves through it any more.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard};

use crate::region::RegionHandle;
use crate::DeviceSink;

/// A registered range (address as an integer: the slot never dereferences
/// it itself).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Range {
    pub start: usize,
    pub len: usize,
}

impl Range {
    /// Pointer to `addr..addr+len` if that lies inside the range.
    pub fn sub(&self, addr: u64, len: u64) -> Option<*mut u8> {
        let off = addr.checked_sub(self.start as u64)?;
        let end = off.checked_add(len)?;
        (end <= self.len as u64).then_some((self.start + off as usize) as *mut u8)
    }
}

pub struct Slot {
    range: RwLock<Option<Range>>,
    /// Device memory (`Connection::register_device`): the range is a
    /// device address range, only a peer's WRITE may target it, and its
    /// bytes go through this sink's staging. `None`: host memory.
    device: Option<Arc<dyn DeviceSink>>,
}

impl Slot {
    /// The live range, held for as long as the guard lives.
    pub fn lock(&self) -> SlotGuard<'_> {
        SlotGuard {
            range: self.range.read().unwrap_or_else(|p| p.into_inner()),
            device: self.device.as_ref(),
        }
    }
}

/// A slot's range, held (deregistration waits) while the guard lives, and
/// handed out by what memory it is: a host path can never reach a device
/// range, nor a device path a host one.
pub struct SlotGuard<'a> {
    range: RwLockReadGuard<'a, Option<Range>>,
    device: Option<&'a Arc<dyn DeviceSink>>,
}

impl SlotGuard<'_> {
    /// A live host range (`None`: deregistered, or device memory, which
    /// the CPU must not touch).
    pub fn host(&self) -> Option<Range> {
        self.device.is_none().then_some(*self.range).flatten()
    }

    /// A live device range and the sink its bytes go through (`None`:
    /// deregistered, or host memory).
    pub fn device(&self) -> Option<(Range, &Arc<dyn DeviceSink>)> {
        Some(((*self.range)?, self.device?))
    }
}

pub struct KeyTable {
    next: AtomicU32,
    slots: Mutex<HashMap<u32, Arc<Slot>>>,
}

impl KeyTable {
    pub fn new(seed: u32) -> Self {
        KeyTable {
            next: AtomicU32::new(seed | 1),
            slots: Mutex::new(HashMap::new()),
        }
    }

    pub fn insert(self: &Arc<Self>, range: Range) -> (u32, Box<dyn RegionHandle>) {
        self.insert_slot(range, None)
    }

    /// Registers a device range whose bytes go through `sink`.
    pub fn insert_device(
        self: &Arc<Self>,
        range: Range,
        sink: Arc<dyn DeviceSink>,
    ) -> (u32, Box<dyn RegionHandle>) {
        self.insert_slot(range, Some(sink))
    }

    fn insert_slot(
        self: &Arc<Self>,
        range: Range,
        device: Option<Arc<dyn DeviceSink>>,
    ) -> (u32, Box<dyn RegionHandle>) {
        let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        // A stride that is odd walks all 2^32 keys before repeating.
        let key = loop {
            let k = self.next.fetch_add(0x9e37_79b9, Ordering::Relaxed);
            if k != 0 && !slots.contains_key(&k) {
                break k;
            }
        };
        let slot = Arc::new(Slot {
            range: RwLock::new(Some(range)),
            device,
        });
        slots.insert(key, slot.clone());
        (
            key,
            Box::new(Registration {
                table: self.clone(),
                key,
                slot,
            }),
        )
    }

    pub fn get(&self, key: u32) -> Option<Arc<Slot>> {
        self.slots
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&key)
            .cloned()
    }
}

/// Kept inside the `LocalRegion`; dropping it deregisters.
struct Registration {
    table: Arc<KeyTable>,
    key: u32,
    slot: Arc<Slot>,
}

impl RegionHandle for Registration {}

impl Drop for Registration {
    fn drop(&mut self) {
        self.table
            .slots
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&self.key);
        // Waits for any transfer in progress on this region to finish.
        *self.slot.range.write().unwrap_or_else(|p| p.into_inner()) = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dropped_registration_makes_its_key_unknown_and_its_slot_empty() {
        let t = Arc::new(KeyTable::new(5));
        let (k, h) = t.insert(Range {
            start: 4096,
            len: 100,
        });
        let slot = t.get(k).unwrap();
        assert!(slot.lock().host().is_some());
        drop(h);
        assert!(t.get(k).is_none());
        assert!(slot.lock().host().is_none());
    }

    #[test]
    fn sub_ranges_outside_the_registration_are_refused() {
        let r = Range {
            start: 4096,
            len: 100,
        };
        assert_eq!(r.sub(4096, 100), Some(4096 as *mut u8));
        assert_eq!(r.sub(4196, 0), Some(4196 as *mut u8));
        assert!(r.sub(4095, 1).is_none());
        assert!(r.sub(4100, 97).is_none());
        assert!(r.sub(u64::MAX, 2).is_none());
    }

    #[test]
    fn keys_are_not_reused_for_later_registrations() {
        let t = Arc::new(KeyTable::new(0));
        let mut seen = std::collections::HashSet::new();
        for _ in 0..1000 {
            let (k, _h) = t.insert(Range { start: 1, len: 1 });
            assert!(seen.insert(k));
        }
    }
}
