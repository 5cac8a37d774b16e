//! Helpers shared by the end-to-end tests.
#![allow(dead_code)]

use std::io::Write;
use std::path::{Path, PathBuf};

/// Deterministic pseudo-random bytes (never all zeros; 8 per step, so
/// large ones are quick even in debug builds). The one `pattern` of the
/// tests: seed first, then length.
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e3779b97f4a7c15) | 1;
    let mut v = Vec::with_capacity(len + 8);
    while v.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.extend_from_slice(&x.to_le_bytes());
    }
    v.truncate(len);
    v
}

/// A temp dir on a filesystem that supports O_DIRECT (not tmpfs-only /tmp).
pub fn scratch_dir(tag: &str) -> tempfile::TempDir {
    let base = std::env::var_os("HIPFS_TEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_TARGET_TMPDIR")));
    std::fs::create_dir_all(&base).unwrap();
    tempfile::Builder::new()
        .prefix(tag)
        .tempdir_in(base)
        .unwrap()
}

/// Writes `data` to `dir/name` and returns the path.
pub fn write_file(dir: &Path, name: &str, data: &[u8]) -> PathBuf {
    let p = dir.join(name);
    let mut f = std::fs::File::create(&p).unwrap();
    f.write_all(data).unwrap();
    f.sync_all().unwrap();
    p
}

/// A heap allocation with a chosen alignment and misalignment, so tests can
/// hand the library both DMA-aligned and deliberately unaligned memory.
pub struct TestMem {
    raw: Vec<u8>,
    start: usize,
    len: usize,
}

impl TestMem {
    pub fn new(len: usize, misalign: usize) -> TestMem {
        let raw = vec![0u8; len + 8192 + misalign];
        let addr = raw.as_ptr() as usize;
        let start = (4096 - addr % 4096) % 4096 + misalign;
        TestMem { raw, start, len }
    }
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        &mut self.raw[self.start..self.start + self.len]
    }
}

/// The driver's open count and parameters are process-wide, and every test
/// of this binary shares them: a test that closes the driver to zero or
/// changes parameters takes this exclusively, a test that needs its
/// driver to stay open takes it shared.
static DRIVER_STATE: std::sync::RwLock<()> = std::sync::RwLock::new(());

/// For a test that needs the driver it opened to stay open.
#[allow(dead_code)]
pub fn driver_shared() -> std::sync::RwLockReadGuard<'static, ()> {
    DRIVER_STATE.read().unwrap_or_else(|p| p.into_inner())
}

/// For a test that closes the driver to zero, counts its opens, or
/// changes parameters.
#[allow(dead_code)]
pub fn driver_exclusive() -> std::sync::RwLockWriteGuard<'static, ()> {
    DRIVER_STATE.write().unwrap_or_else(|p| p.into_inner())
}
