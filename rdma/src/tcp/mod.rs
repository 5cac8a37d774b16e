//! The TCP transport.
use std::os::fd::RawFd;
use std::sync::Arc;
use std::time::Duration;

use crate::{
    Connection, Error, Listener, LocalRegion, RemoteDescriptor, Result, TransportConfig,
    TransportKind,
};

/// TCP listener (being written).
pub struct TcpListener;
/// TCP connection (being written).
pub struct TcpConnection;

impl TcpListener {
    pub(crate) fn bind(_addr: &str, _cfg: &TransportConfig) -> Result<Self> {
        Err(Error::Unsupported("tcp: not implemented yet".into()))
    }
}
impl TcpConnection {
    pub(crate) fn connect(_addr: &str, _cfg: &TransportConfig) -> Result<Self> {
        Err(Error::Unsupported("tcp: not implemented yet".into()))
    }
}
impl Listener for TcpListener {
    fn accept(&self) -> Result<Box<dyn Connection>> {
        Err(Error::Unsupported("tcp".into()))
    }
    fn local_addr(&self) -> String {
        String::new()
    }
    fn close(&self) {}
}
impl Connection for TcpConnection {
    fn kind(&self) -> TransportKind {
        TransportKind::Tcp
    }
    fn peer_addr(&self) -> String {
        String::new()
    }
    fn send(&self, _msg: &[u8]) -> Result<()> {
        Err(Error::Unsupported("tcp".into()))
    }
    fn recv(&self, _t: Duration) -> Result<Vec<u8>> {
        Err(Error::Unsupported("tcp".into()))
    }
    unsafe fn register(&self, _p: *mut u8, _l: usize) -> Result<Arc<LocalRegion>> {
        Err(Error::Unsupported("tcp".into()))
    }
    unsafe fn register_dmabuf(
        &self,
        _fd: RawFd,
        _o: u64,
        _l: usize,
        _i: u64,
    ) -> Result<Arc<LocalRegion>> {
        Err(Error::Unsupported("tcp".into()))
    }
    fn write_remote(
        &self,
        _l: &LocalRegion,
        _lo: usize,
        _n: usize,
        _r: &RemoteDescriptor,
        _ro: u64,
    ) -> Result<()> {
        Err(Error::Unsupported("tcp".into()))
    }
    fn read_remote(
        &self,
        _l: &LocalRegion,
        _lo: usize,
        _n: usize,
        _r: &RemoteDescriptor,
        _ro: u64,
    ) -> Result<()> {
        Err(Error::Unsupported("tcp".into()))
    }
    fn close(&self) {}
}
