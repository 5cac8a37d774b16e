//! The connection's poller: drains the completion queue (busy-polling
//! while there is work, sleeping on the completion and CM channels when
//! idle), routes completions, re-posts RECVs and returns credits.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use rdma_sys::*;

use super::super::resources::*;
use super::Inner;
use crate::error::{Error, Result};
use crate::verbs::cm;

impl Inner {
    pub(super) fn poll_loop(self: Arc<Self>) {
        // SAFETY: all-zero ibv_wc is valid output storage.
        let mut wcs: [ibv_wc; 32] = unsafe { std::mem::zeroed() };
        let failed = |me: &Self, e: Error| me.die(format!("{e}"));
        let mut idle = 0u32;
        let mut rounds = 0u32;
        while !self.dead.load(Ordering::SeqCst) {
            let done = match self.cq.poll(&mut wcs) {
                Ok(done) => done,
                Err(e) => return failed(&self, e),
            };
            let n = done.len();
            for wc in done {
                self.handle(wc);
            }
            rounds = rounds.wrapping_add(1);
            if n > 0 {
                idle = 0;
                if rounds.is_multiple_of(256) {
                    self.cm_events(Duration::ZERO);
                }
                continue;
            }
            idle += 1;
            if idle < 64 {
                std::thread::yield_now();
                continue;
            }
            // Idle: arm the completion channel and sleep on it and on the
            // CM channel (a peer's disconnect arrives there).
            if let Err(e) = self.cq.req_notify() {
                return failed(&self, e);
            }
            // Re-poll: closes the arm/arrive race.
            let done = match self.cq.poll(&mut wcs) {
                Ok(done) => done,
                Err(e) => return failed(&self, e),
            };
            if !done.is_empty() {
                for wc in done {
                    self.handle(wc);
                }
                idle = 0;
                continue;
            }
            let mut fds = [
                libc::pollfd {
                    fd: self.cc.fd(),
                    events: libc::POLLIN,
                    revents: 0,
                },
                libc::pollfd {
                    fd: self.ec.fd(),
                    events: libc::POLLIN,
                    revents: 0,
                },
            ];
            // SAFETY: fds valid for the call.
            unsafe { libc::poll(fds.as_mut_ptr(), 2, 100) };
            if fds[0].revents != 0 {
                self.cc.ack_event();
            }
            if fds[1].revents != 0 {
                self.cm_events(Duration::ZERO);
            }
            self.return_credits_if_owed();
            idle = 0;
        }
    }

    fn cm_events(&self, wait: Duration) {
        while let Ok(Some(ev)) = cm::next_event(&self.ec, wait) {
            match ev.kind {
                rdma_cm_event_type::RDMA_CM_EVENT_DISCONNECTED
                | rdma_cm_event_type::RDMA_CM_EVENT_DEVICE_REMOVAL
                | rdma_cm_event_type::RDMA_CM_EVENT_TIMEWAIT_EXIT => {
                    self.die(format!("peer {}: {}", self.peer, cm::event_name(ev.kind)));
                }
                _ => log::debug!("verbs: ignoring {}", cm::event_name(ev.kind)),
            }
        }
    }

    fn handle(&self, wc: &ibv_wc) {
        let ok = wc.status == ibv_wc_status::IBV_WC_SUCCESS;
        let status_str = || {
            // SAFETY: static string for any status.
            let p = unsafe { ibv_wc_status_str(wc.status) };
            if p.is_null() {
                format!("status {}", wc.status)
            } else {
                // SAFETY: NUL-terminated static string.
                unsafe { std::ffi::CStr::from_ptr(p) }
                    .to_string_lossy()
                    .into_owned()
            }
        };
        match wc.wr_id >> TAG_SHIFT {
            TAG_RECV => {
                if !ok {
                    self.die(format!("receive failed: {}", status_str()));
                    return;
                }
                let i = (wc.wr_id & OP_MASK) as usize;
                if let Err(e) = self.on_recv(i, wc.byte_len as usize) {
                    self.die(format!("bad message from peer: {e}"));
                }
            }
            TAG_SEND => {
                let i = (wc.wr_id & OP_MASK) as usize;
                self.free_slots
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(i);
                self.slot_cv.notify_one();
                self.lanes[0].sq.release(1);
                if !ok {
                    self.die(format!("send failed: {}", status_str()));
                    return;
                }
                // A credit-only message that found no free slot earlier
                // goes now: the peer may be waiting for those credits.
                self.return_credits_if_owed();
            }
            _ => {
                let lane = ((wc.wr_id >> OP_BITS) & 0x3fff) as usize;
                if let Some(l) = self.lanes.get(lane) {
                    l.sq.release(1);
                }
                let op = wc.wr_id & OP_MASK;
                let done = self
                    .pending
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .ops
                    .remove(&op);
                let r = if ok {
                    Ok(())
                } else {
                    Err(Error::Completion(format!(
                        "RDMA {} on lane {lane}: {} (the peer refused the key or range, or is gone)",
                        if wc.opcode == ibv_wc_opcode::IBV_WC_RDMA_READ { "READ" } else { "WRITE" },
                        status_str()
                    )))
                };
                if let Some(d) = done {
                    let _ = d.try_send(r);
                }
                if !ok {
                    self.die(format!("one-sided operation failed: {}", status_str()));
                }
            }
        }
    }

    fn on_recv(&self, i: usize, len: usize) -> Result<()> {
        if !(MSG_HDR..=self.own_max + MSG_HDR).contains(&len) {
            return Err(Error::Protocol(format!("message of {len} bytes")));
        }
        let p = self.recv.addr(i);
        let mut h = [0u8; MSG_HDR];
        // SAFETY: the slot holds len >= MSG_HDR received bytes and the NIC is
        // done with it (its completion is being handled).
        unsafe { std::ptr::copy_nonoverlapping(p, h.as_mut_ptr(), MSG_HDR) };
        let kind = u32::from_le_bytes([h[0], h[1], h[2], h[3]]);
        let back = u32::from_le_bytes([h[4], h[5], h[6], h[7]]);
        if back > 0 {
            self.credits.release(back);
        }
        match kind {
            MSG_DATA => {
                let mut m = vec![0u8; len - MSG_HDR];
                // SAFETY: as above, len - MSG_HDR payload bytes follow the header.
                unsafe { std::ptr::copy_nonoverlapping(p.add(MSG_HDR), m.as_mut_ptr(), m.len()) };
                let _ = self.msg_tx.send(m);
            }
            MSG_CREDIT => {}
            k => return Err(Error::Protocol(format!("unknown message kind {k}"))),
        }
        post_recv(self.lanes[0].id.qp(), &self.recv, i)?;
        let owed = self.owed.fetch_add(1, Ordering::SeqCst) + 1;
        if kind == MSG_DATA && owed >= self.own_credits / 2 {
            self.send_credit_only();
        }
        Ok(())
    }

    fn return_credits_if_owed(&self) {
        if self.owed.load(Ordering::SeqCst) >= self.own_credits / 2 {
            self.send_credit_only();
        }
    }

    /// Returns owed credits without waiting for anything; uses the credit
    /// that data messages never take.
    fn send_credit_only(&self) {
        if !self.credits.try_acquire(1) {
            return;
        }
        let Some(slot) = self
            .free_slots
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .pop()
        else {
            self.credits.release(1);
            return;
        };
        if !self.lanes[0].sq.try_acquire(1) {
            self.free_slots
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(slot);
            self.credits.release(1);
            return;
        }
        let owed = self.owed.swap(0, Ordering::SeqCst);
        if let Err(e) = self.post_message(slot, MSG_CREDIT, owed, &[]) {
            self.die(format!("credit message failed: {e}"));
        }
    }

    pub(super) fn post_message(
        &self,
        slot: usize,
        kind: u32,
        credits: u32,
        payload: &[u8],
    ) -> Result<()> {
        let p = self.send.addr(slot);
        let mut h = [0u8; MSG_HDR];
        h[0..4].copy_from_slice(&kind.to_le_bytes());
        h[4..8].copy_from_slice(&credits.to_le_bytes());
        // SAFETY: the slot is ours (taken from the free list) and holds
        // MSG_HDR + send_limit bytes; the NIC is not using it.
        unsafe {
            std::ptr::copy_nonoverlapping(h.as_ptr(), p, MSG_HDR);
            std::ptr::copy_nonoverlapping(payload.as_ptr(), p.add(MSG_HDR), payload.len());
        }
        let sge = ibv_sge {
            addr: p as u64,
            length: (MSG_HDR + payload.len()) as u32,
            lkey: self.send.mr.lkey(),
        };
        post_send(
            self.lanes[0].id.qp(),
            (TAG_SEND << TAG_SHIFT) | slot as u64,
            ibv_wr_opcode::IBV_WR_SEND,
            sge,
            None,
        )
    }
}
