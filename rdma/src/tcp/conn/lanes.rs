//! The two threads of each lane: the sender (sole writer of the stream)
//! and the reader (applies WRITE frames straight into registered memory,
//! completes READ answers, queues control messages; never writes).

use std::os::fd::AsFd;
use std::sync::atomic::Ordering;

use crossbeam_channel::{select, Receiver};

use super::super::frame::{FrameKind, Header, Status, HEADER_LEN};
use super::super::gate::cost;
use super::super::stream::{RxStream, TxStream};
use super::{io_to_disconnect, send_header, Job, Pending, Shared};
use crate::mem::{DeviceSpan, RegisteredSpan};
use crate::{DeviceSink, Error, Result, Stager};
use std::sync::Arc;

static REFUSED_LOG: crate::RateLimitedLog =
    crate::RateLimitedLog::new(std::time::Duration::from_secs(5));
static DEVICE_LOG: crate::RateLimitedLog =
    crate::RateLimitedLog::new(std::time::Duration::from_secs(5));

/// A reader thread's stagers, one per device sink it received for (a
/// process has one sink per GPU, so this stays a handful).
#[derive(Default)]
struct Stagers(Vec<(Arc<dyn DeviceSink>, Box<dyn Stager>)>);

impl Stagers {
    /// `sink`'s stager, made on first use; `None` if it cannot be made
    /// (logged).
    fn get(&mut self, sink: &Arc<dyn DeviceSink>) -> Option<&mut dyn Stager> {
        let i = match self.0.iter().position(|(s, _)| Arc::ptr_eq(s, sink)) {
            Some(i) => i,
            None => match sink.stager() {
                Ok(st) => {
                    self.0.push((sink.clone(), st));
                    self.0.len() - 1
                }
                Err(e) => {
                    DEVICE_LOG.warn(|| format!("no staging for device memory on this lane: {e}"));
                    return None;
                }
            },
        };
        Some(&mut *self.0[i].1)
    }

    fn forget(&mut self, sink: &Arc<dyn DeviceSink>) {
        self.0.retain(|(s, _)| !Arc::ptr_eq(s, sink));
    }
}

impl Shared {
    /// Writes the lane's jobs, urgent ones before bulk ones (see
    /// `Lane::urgent`), until the connection dies.
    pub(super) fn sender_loop(
        &self,
        lane: usize,
        jobs: Receiver<Job>,
        urgent: Receiver<Job>,
    ) -> Result<()> {
        let l = &self.lanes[lane];
        loop {
            let job = match urgent.try_recv() {
                Ok(j) => j,
                Err(_) => select! {
                    recv(urgent) -> j => match j { Ok(j) => j, Err(_) => return Ok(()) },
                    recv(jobs) -> j => match j { Ok(j) => j, Err(_) => return Ok(()) },
                    recv(self.dead_rx) -> _ => return Ok(()),
                },
            };
            let was_urgent = job.is_urgent();
            let mut guard = l.tx.lock().unwrap_or_else(|p| p.into_inner());
            let r = self.send_job(&mut guard, job);
            drop(guard);
            if was_urgent {
                // Only now may a message skip the queue: this job is on the wire.
                l.queued.fetch_sub(1, Ordering::SeqCst);
            }
            r?;
        }
    }

    /// Writes one job on `tx`.
    fn send_job(&self, tx: &mut TxStream, job: Job) -> Result<()> {
        match job {
            Job::Msg(m) => {
                let mut h = Header::new(FrameKind::Msg);
                h.len = m.len() as u64;
                send_header(tx, &h, !m.is_empty())?;
                tx.send_bytes(&m, false)?;
                self.out_gate.release(cost(m.len()));
            }
            Job::Write { hdr, slot, local } => {
                let guard = slot.lock();
                // The slot lock (held by `guard`) keeps the region registered.
                match guard
                    .host()
                    .and_then(|r| RegisteredSpan::within(&r, local, hdr.len))
                {
                    Some(span) => {
                        send_header(tx, &hdr, true)?;
                        span.send(tx, false)?;
                    }
                    None => {
                        if let Some(op) = self.complete(hdr.op_id) {
                            op.done().report(Err(Error::InvalidArgument(
                                "local region was deregistered during the write".into(),
                            )));
                        }
                    }
                }
            }
            Job::WriteFile { hdr, src, off } => {
                send_header(tx, &hdr, true)?;
                let (at, len) = (src.start + off, hdr.len as usize);
                // sendfile over plain TCP; staged and encrypted with TLS.
                let sent = tx.send_file(src.fd.as_fd(), at, len)?;
                if sent < len {
                    // Tell the caller where the file data ends before
                    // the frame's last byte goes out (the peer's ack
                    // may release the caller right after it). The
                    // header promised len bytes: pad, keeping the
                    // stream in step.
                    src.valid.fetch_min(off + sent as u64, Ordering::AcqRel);
                    tx.send_zeros((len - sent) as u64)?;
                }
            }
            Job::Header(h) => send_header(tx, &h, false)?,
            Job::ReadResp(req) => {
                let mut h = Header::new(FrameKind::ReadResp);
                h.op_id = req.op_id;
                h.rkey = req.rkey;
                h.addr = req.addr;
                h.len = req.len;
                let slot = self.keys.get(req.rkey);
                let guard = slot.as_ref().map(|s| s.lock());
                // Host regions only: a device region is a WRITE target.
                let src = match guard.as_ref().map(|g| g.host()) {
                    Some(Some(r)) => match RegisteredSpan::within(&r, req.addr, req.len) {
                        Some(span) => Some(span),
                        None => {
                            h.status = Status::OutOfRange;
                            None
                        }
                    },
                    _ => {
                        h.status = Status::UnknownKey;
                        None
                    }
                };
                if h.status != Status::Ok {
                    self.refused("READ", &req, h.status);
                }
                send_header(tx, &h, src.is_some())?;
                if let Some(span) = src {
                    // Under the slot lock (`guard`), so still registered.
                    span.send(tx, false)?;
                }
            }
        }
        Ok(())
    }

    /// Acknowledges the WRITE `h` with `status`.
    fn ack(&self, lane: usize, h: &Header, status: Status) -> Result<()> {
        let mut ack = Header::new(FrameKind::WriteAck);
        ack.op_id = h.op_id;
        ack.rkey = h.rkey;
        ack.addr = h.addr;
        ack.status = status;
        self.enqueue(lane, Job::Header(ack))
    }

    fn refused(&self, what: &str, h: &Header, st: Status) {
        self.rejected.fetch_add(1, Ordering::Relaxed);
        // A peer can send refused frames at will (before authentication
        // too): one line per interval, not one per frame.
        REFUSED_LOG.warn(|| {
            format!(
                "tcp peer {}: refused remote {what} rkey={:#x} addr={:#x} len={}: {st:?}",
                self.peer, h.rkey, h.addr, h.len
            )
        });
    }

    /// Gives a received control message to the hook, if one is set, and
    /// queues for `recv` what the hook leaves.
    fn deliver(&self, m: Vec<u8>) {
        let mut slot = self.hook.lock().unwrap_or_else(|p| p.into_inner());
        let Some(hook) = slot.as_mut() else {
            let _ = self.msg_tx.send(m);
            return;
        };
        let len = m.len();
        let left = hook(m);
        drop(slot);
        self.in_gate.release(cost(len));
        if let Some(m) = left {
            self.in_gate.admit(cost(m.len()));
            let _ = self.msg_tx.send(m);
        }
    }

    /// Runs until the stream fails; returns why.
    pub(super) fn reader_loop(&self, lane: usize, mut rx: RxStream) -> Error {
        let mut stagers = Stagers::default();
        loop {
            if let Err(e) = self.read_frame(lane, &mut rx, &mut stagers) {
                return e;
            }
        }
    }

    /// Receives a WRITE's bytes into a device region through the lane's
    /// stager for `sink`: `Ok` once copied, `NotApplied` (bytes read off
    /// the stream, logged) if the stager could not be had or failed.
    fn write_device(
        &self,
        span: DeviceSpan,
        sink: &Arc<dyn DeviceSink>,
        h: &Header,
        rx: &mut RxStream,
        stagers: &mut Stagers,
    ) -> Result<Status> {
        let Some(stager) = stagers.get(sink) else {
            rx.discard(h.len).map_err(io_to_disconnect)?;
            return Ok(Status::NotApplied);
        };
        match span.recv(stager, rx).map_err(io_to_disconnect)? {
            Ok(()) => Ok(Status::Ok),
            Err(e) => {
                DEVICE_LOG.warn(|| {
                    format!(
                        "tcp peer {}: {} bytes into device memory at {:#x} not applied: {e}",
                        self.peer, h.len, h.addr
                    )
                });
                // A stager that failed once may hold a broken stream.
                stagers.forget(sink);
                Ok(Status::NotApplied)
            }
        }
    }

    fn read_frame(&self, lane: usize, rx: &mut RxStream, stagers: &mut Stagers) -> Result<()> {
        let raw = rx.recv_array::<HEADER_LEN>().map_err(io_to_disconnect)?;
        let h = Header::decode(&raw, self.max_message)?;
        match h.kind {
            FrameKind::Msg => {
                // Wait for room before reading the body: while `recv`'s
                // queue is full this stream is not read, and the peer's
                // sends back up into TCP.
                if self.in_gate.acquire(cost(h.len as usize), None).is_err() {
                    return Err(self.disconnected());
                }
                let mut m = vec![0u8; h.len as usize];
                rx.recv_bytes(&mut m).map_err(io_to_disconnect)?;
                self.deliver(m);
            }
            FrameKind::Write => {
                let slot = self.keys.get(h.rkey);
                let guard = slot.as_ref().map(|s| s.lock());
                let (host, device) = match &guard {
                    Some(g) => (g.host(), g.device()),
                    None => (None, None),
                };
                // Under the slot lock (`guard`), so still registered.
                let status = if let Some(r) = host {
                    match RegisteredSpan::within(&r, h.addr, h.len) {
                        Some(span) => {
                            span.recv(rx).map_err(io_to_disconnect)?;
                            Status::Ok
                        }
                        None => Status::OutOfRange,
                    }
                } else if let Some((r, sink)) = device {
                    match DeviceSpan::within(&r, h.addr, h.len) {
                        Some(span) => self.write_device(span, sink, &h, rx, stagers)?,
                        None => Status::OutOfRange,
                    }
                } else {
                    Status::UnknownKey
                };
                drop(guard);
                if matches!(status, Status::OutOfRange | Status::UnknownKey) {
                    self.refused("WRITE", &h, status);
                    rx.discard(h.len).map_err(io_to_disconnect)?;
                }
                self.ack(lane, &h, status)?;
            }
            FrameKind::ReadReq => self.enqueue(lane, Job::ReadResp(h))?,
            FrameKind::WriteAck => {
                if let Some(op) = self.complete(h.op_id) {
                    op.done()
                        .report(h.status.into_result(h.rkey, h.addr, h.len));
                }
            }
            FrameKind::ReadResp => match self.complete(h.op_id) {
                Some(Pending::Read {
                    done,
                    slot,
                    local,
                    len,
                }) => {
                    let r = if h.status != Status::Ok {
                        h.status.into_result(h.rkey, h.addr, h.len)
                    } else if h.len != len {
                        return Err(Error::Protocol(format!(
                            "READ answer of {} bytes for a request of {len}",
                            h.len
                        )));
                    } else {
                        let guard = slot.lock();
                        match guard
                            .host()
                            .and_then(|r| RegisteredSpan::within(&r, local, len))
                        {
                            Some(span) => {
                                // Under the slot lock (`guard`), so still registered.
                                span.recv(rx).map_err(io_to_disconnect)?;
                                Ok(())
                            }
                            None => {
                                drop(guard);
                                rx.discard(len).map_err(io_to_disconnect)?;
                                Err(Error::InvalidArgument(
                                    "local region was deregistered during the read".into(),
                                ))
                            }
                        }
                    };
                    done.report(r);
                }
                Some(Pending::Write { .. }) => {
                    return Err(Error::Protocol("READ answer for a write".into()))
                }
                // The caller gave up (timeout): drop the bytes.
                None => rx.discard(h.payload_len()).map_err(io_to_disconnect)?,
            },
        }
        Ok(())
    }
}
