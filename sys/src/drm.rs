//! DRM dumb buffers: memory a DRM device allocates (`vgem`, the virtual
//! GEM driver, makes them on any machine), exported as a dmabuf through
//! PRIME and, when asked, mapped into the process.
//!
//! A mapped dumb buffer is memory that a NIC sees the way it sees a GPU's:
//! it has a real dmabuf exporter, and its mapping is a driver's (on
//! `drm_gem_shmem` drivers such as vgem, `VM_PFNMAP`), which
//! `pin_user_pages` refuses, as it refuses a GPU BAR without a peer-memory
//! client. The test-only GPU runtime of the core crate is built on it.

use crate::mem::SharedMap;
use std::io;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};

#[repr(C)]
#[derive(Default)]
struct CreateDumb {
    height: u32,
    width: u32,
    bpp: u32,
    flags: u32,
    handle: u32,
    pitch: u32,
    size: u64,
}

#[repr(C)]
#[derive(Default)]
struct MapDumb {
    handle: u32,
    pad: u32,
    offset: u64,
}

#[repr(C)]
#[derive(Default)]
struct PrimeHandle {
    handle: u32,
    flags: u32,
    fd: i32,
}

const fn iowr(nr: u32, size: u32) -> u32 {
    (3 << 30) | (size << 16) | ((b'd' as u32) << 8) | nr
}
/// `DRM_IOCTL_MODE_CREATE_DUMB`.
const CREATE_DUMB: u32 = iowr(0xB2, std::mem::size_of::<CreateDumb>() as u32);
/// `DRM_IOCTL_MODE_MAP_DUMB`.
const MAP_DUMB: u32 = iowr(0xB3, std::mem::size_of::<MapDumb>() as u32);
/// `DRM_IOCTL_MODE_DESTROY_DUMB` (its argument is the handle alone).
const DESTROY_DUMB: u32 = iowr(0xB4, 4);
/// `DRM_IOCTL_PRIME_HANDLE_TO_FD`.
const PRIME_HANDLE_TO_FD: u32 = iowr(0x2D, std::mem::size_of::<PrimeHandle>() as u32);

/// A dumb buffer of a DRM device: destroyed (and unmapped) on drop. A
/// dmabuf exported from it keeps the memory alive on its own.
pub struct DumbBuffer {
    card: OwnedFd,
    handle: u32,
    size: usize,
    map: Option<SharedMap>,
}

impl DumbBuffer {
    /// A dumb buffer of at least `len` bytes (whole 4 KiB pages) from the
    /// first `/dev/dri/card*` that makes one; with `mapped`, mapped
    /// read-write into this process. The error is the last card's.
    pub fn new(len: usize, mapped: bool) -> io::Result<DumbBuffer> {
        let mut last = io::Error::new(io::ErrorKind::NotFound, "no /dev/dri/card* device");
        let mut cards: Vec<_> = std::fs::read_dir("/dev/dri")
            .map_err(|e| io::Error::new(e.kind(), format!("/dev/dri: {e}")))?
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().starts_with("card"))
            .map(|e| e.path())
            .collect();
        cards.sort();
        for card in cards {
            let r = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open(&card)
                .and_then(|f| DumbBuffer::on_card(f.into(), len, mapped));
            match r {
                Ok(b) => return Ok(b),
                Err(e) => last = io::Error::new(e.kind(), format!("{}: {e}", card.display())),
            }
        }
        Err(last)
    }

    fn on_card(card: OwnedFd, len: usize, mapped: bool) -> io::Result<DumbBuffer> {
        // One row of 4-byte pixels per 4 KiB page, 1024 pixels wide.
        let rows = u32::try_from(len.div_ceil(4096).max(1))
            .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
        let mut dumb = CreateDumb {
            height: rows,
            width: 1024,
            bpp: 32,
            ..Default::default()
        };
        // SAFETY: the request's encoded size is that of `dumb`, which the
        // kernel reads and writes; it lives across the call.
        crate::cvt(unsafe {
            libc::ioctl(
                card.as_raw_fd(),
                CREATE_DUMB as _,
                &mut dumb as *mut CreateDumb,
            )
        })?;
        // Until `buf` exists an error drops `card`, which frees the handle.
        let size = usize::try_from(dumb.size)
            .map_err(|_| io::Error::from_raw_os_error(libc::EOVERFLOW))?;
        let mut buf = DumbBuffer {
            card,
            handle: dumb.handle,
            size,
            map: None,
        };
        if buf.size < len {
            return Err(io::Error::other(format!(
                "the device made a dumb buffer of {} bytes for {len}",
                buf.size
            )));
        }
        if mapped {
            buf.map()?;
        }
        Ok(buf)
    }

    fn map(&mut self) -> io::Result<()> {
        let mut arg = MapDumb {
            handle: self.handle,
            ..Default::default()
        };
        // SAFETY: the request's encoded size is that of `arg`, which the
        // kernel reads and writes; it lives across the call.
        crate::cvt(unsafe {
            libc::ioctl(
                self.card.as_raw_fd(),
                MAP_DUMB as _,
                &mut arg as *mut MapDumb,
            )
        })?;
        let offset = libc::off_t::try_from(arg.offset)
            .map_err(|_| io::Error::from_raw_os_error(libc::EOVERFLOW))?;
        self.map = Some(SharedMap::of_fd(self.card.as_fd(), self.size, offset)?);
        Ok(())
    }

    /// Bytes the buffer holds (whole pages).
    pub fn len(&self) -> usize {
        self.size
    }

    /// Whether it holds no bytes (never: at least one page).
    pub fn is_empty(&self) -> bool {
        self.size == 0
    }

    /// The mapping (`None` when not mapped).
    pub fn mapping(&self) -> Option<&SharedMap> {
        self.map.as_ref()
    }

    /// The mapping, to write through (`None` when not mapped).
    pub fn mapping_mut(&mut self) -> Option<&mut SharedMap> {
        self.map.as_mut()
    }

    /// The whole buffer as a new dmabuf (read-write, close-on-exec).
    pub fn export_dmabuf(&self) -> io::Result<OwnedFd> {
        let mut prime = PrimeHandle {
            handle: self.handle,
            flags: (libc::O_CLOEXEC | libc::O_RDWR) as u32,
            fd: -1,
        };
        // SAFETY: the request's encoded size is that of `prime`, which the
        // kernel reads and writes; it lives across the call.
        crate::cvt(unsafe {
            libc::ioctl(
                self.card.as_raw_fd(),
                PRIME_HANDLE_TO_FD as _,
                &mut prime as *mut PrimeHandle,
            )
        })?;
        if prime.fd < 0 {
            return Err(io::Error::from_raw_os_error(libc::EIO));
        }
        // SAFETY: the kernel returned a new dmabuf fd nobody else owns.
        Ok(unsafe { OwnedFd::from_raw_fd(prime.fd) })
    }
}

impl Drop for DumbBuffer {
    fn drop(&mut self) {
        // Unmapped before the handle goes.
        self.map = None;
        let mut handle = self.handle;
        // SAFETY: the argument is the 4-byte handle the request encodes;
        // the memory lives on while a dmabuf of it is open.
        unsafe {
            libc::ioctl(
                self.card.as_raw_fd(),
                DESTROY_DUMB as _,
                &mut handle as *mut u32,
            )
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_dumb_buffer_ioctls_encode_the_kernels_numbers() {
        // The numbers of include/uapi/drm/drm.h (_IOWR('d', nr, struct)).
        assert_eq!(CREATE_DUMB, 0xC020_64B2);
        assert_eq!(MAP_DUMB, 0xC010_64B3);
        assert_eq!(DESTROY_DUMB, 0xC004_64B4);
        assert_eq!(PRIME_HANDLE_TO_FD, 0xC00C_642D);
    }
}
