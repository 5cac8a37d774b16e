//! The Verbs transport.
use std::os::fd::RawFd;
use std::sync::Arc;
use std::time::Duration;

use crate::{
    Connection, Error, Listener, LocalRegion, RemoteDescriptor, Result, TransportConfig,
    TransportKind,
};

/// Verbs listener (being written).
pub struct VerbsListener;
/// Verbs connection (being written).
pub struct VerbsConnection;

impl VerbsListener {
    pub(crate) fn bind(_addr: &str, _cfg: &TransportConfig) -> Result<Self> {
        Err(Error::Unsupported("verbs: not implemented yet".into()))
    }
}
impl VerbsConnection {
    pub(crate) fn connect(_addr: &str, _cfg: &TransportConfig) -> Result<Self> {
        Err(Error::Unsupported("verbs: not implemented yet".into()))
    }
}
impl Listener for VerbsListener {
    fn accept(&self) -> Result<Box<dyn Connection>> {
        Err(Error::Unsupported("verbs".into()))
    }
    fn local_addr(&self) -> String {
        String::new()
    }
    fn close(&self) {}
}
impl Connection for VerbsConnection {
    fn kind(&self) -> TransportKind {
        TransportKind::Verbs
    }
    fn peer_addr(&self) -> String {
        String::new()
    }
    fn send(&self, _msg: &[u8]) -> Result<()> {
        Err(Error::Unsupported("verbs".into()))
    }
    fn recv(&self, _t: Duration) -> Result<Vec<u8>> {
        Err(Error::Unsupported("verbs".into()))
    }
    unsafe fn register(&self, _p: *mut u8, _l: usize) -> Result<Arc<LocalRegion>> {
        Err(Error::Unsupported("verbs".into()))
    }
    unsafe fn register_dmabuf(
        &self,
        _fd: RawFd,
        _o: u64,
        _l: usize,
        _i: u64,
    ) -> Result<Arc<LocalRegion>> {
        Err(Error::Unsupported("verbs".into()))
    }
    fn write_remote(
        &self,
        _l: &LocalRegion,
        _lo: usize,
        _n: usize,
        _r: &RemoteDescriptor,
        _ro: u64,
    ) -> Result<()> {
        Err(Error::Unsupported("verbs".into()))
    }
    fn read_remote(
        &self,
        _l: &LocalRegion,
        _lo: usize,
        _n: usize,
        _r: &RemoteDescriptor,
        _ro: u64,
    ) -> Result<()> {
        Err(Error::Unsupported("verbs".into()))
    }
    fn stats(&self) -> crate::ConnectionStats {
        crate::ConnectionStats::default()
    }
    fn close(&self) {}
}
/// Listener for `auto` on a host with a device (being written).
pub type DualListener = VerbsListener;
/// Devices (being written).
pub fn devices() -> Result<Vec<crate::DeviceInfo>> {
    Ok(Vec::new())
}
