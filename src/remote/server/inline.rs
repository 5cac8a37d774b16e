//! Small requests answered on the connection's receiving thread.
//!
//! A request handed to the worker pool costs two thread wake-ups on the
//! server (transport reader, then connection thread, then worker); on a
//! small or virtual machine each is tens of microseconds, several times
//! what a metadata operation itself costs. Where the transport allows it
//! (`Connection::set_message_hook`: TCP), the reader runs cheap requests
//! itself, as the calling user, and sends their reply. Everything that may
//! take long, or that waits on the connection, goes to the connection
//! thread and the pool as before: large reads and writes, fsync, the watch
//! subscription, and reads placed in the client's memory (they wait for
//! the client's acknowledgment, which this very thread receives).

use std::cell::Cell;
use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use hipfs_rdma::MessageHook;

use super::super::proto::{Kind, Op, Step};
use super::super::seal::Opener;
use super::session::Session;
use super::ServerShared;

/// Largest read or write run inline: a copy of this size through the page
/// cache takes microseconds; larger ones are bulk transfers, kept off the
/// thread that receives every other request of the connection.
pub(super) const INLINE_MAX_IO: usize = 64 * 1024;

/// Messages longer than this are never decoded here (the pool's path
/// decodes them anyway): a write of `INLINE_MAX_IO` bytes, its path and
/// credentials fit well within it.
const INLINE_MAX_MESSAGE: usize = INLINE_MAX_IO + 8 * 1024;

/// Whether `op` is cheap enough to run on the thread that receives the
/// connection's messages.
pub(super) fn runs_inline(op: &Op) -> bool {
    match op {
        // A placed read waits for the client's acknowledgment, received
        // by the thread that would be waiting for it.
        Op::Read { len, dest, .. } => dest.is_none() && *len as usize <= INLINE_MAX_IO,
        Op::Write { data, .. } => data.len() <= INLINE_MAX_IO,
        Op::Apply { steps, .. } => steps.iter().map(Step::written).sum::<usize>() <= INLINE_MAX_IO,
        // May wait on the disk, or (watch) for the export's initial walk;
        // ReadHeads opens and reads many files.
        Op::Fsync { .. }
        | Op::Watch
        | Op::GrantFile { .. }
        | Op::Readdir { .. }
        | Op::ReadHeads { .. } => false,
        Op::Lookup { .. }
        | Op::Getattr { .. }
        | Op::Setattr { .. }
        | Op::Open { .. }
        | Op::OpenHead { .. }
        | Op::Create { .. }
        | Op::Release { .. }
        | Op::Flush { .. }
        | Op::Mkdir { .. }
        | Op::Rmdir { .. }
        | Op::Unlink { .. }
        | Op::Rename { .. }
        | Op::Symlink { .. }
        | Op::Readlink { .. }
        | Op::Link { .. }
        | Op::Mknod { .. }
        | Op::Statfs { .. }
        | Op::Getxattr { .. }
        | Op::Listxattr { .. }
        | Op::Setxattr { .. }
        | Op::Removexattr { .. } => true,
    }
}

/// How the hook left each message to the connection thread, in the order
/// it left them: `None` opened, `Some(seq)` still sealed, to be opened as
/// message number `seq` (a large one: its tag is checked there, while this
/// thread reads the next).
pub(super) type Deferred = Arc<Mutex<VecDeque<Option<u64>>>>;

/// The hook that answers `session`'s cheap requests on the transport's
/// reader. Messages are numbered here, in the order they arrive (their
/// tags cover the number); those it does not run are left to the
/// connection thread, said in `deferred`.
pub(super) fn hook(
    shared: Arc<ServerShared>,
    session: Arc<Session>,
    open: Arc<Opener>,
    deferred: Deferred,
) -> MessageHook {
    let defer = move |seq: Option<u64>, msg: Vec<u8>| {
        deferred
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push_back(seq);
        Some(msg)
    };
    Box::new(move |msg| {
        if msg.len() > INLINE_MAX_MESSAGE {
            return defer(Some(open.reserve()), msg);
        }
        let msg = match open.open(msg) {
            Ok(m) => m,
            Err(e) => {
                log::warn!("{}: {e}; closing", session.conn.peer_addr());
                session.conn.close();
                return None;
            }
        };
        if shared.is_stopping() || Kind::of(&msg) != Ok(Kind::Request) {
            return defer(None, msg);
        }
        let (request, cost) = super::decode_request(&msg);
        let cheap = request.as_ref().map_or(true, |r| runs_inline(&r.op));
        // At its limits the connection thread waits for room, not this one.
        if !cheap || !session.in_flight.try_add(cost) {
            return defer(None, msg);
        }
        shared.in_flight.fetch_add(1, Ordering::SeqCst);
        prepare_thread();
        super::answer(&shared, &session, request);
        session.in_flight.done(cost);
        shared.in_flight.fetch_sub(1, Ordering::SeqCst);
        None
    })
}

thread_local! {
    static PREPARED: Cell<bool> = const { Cell::new(false) };
}

/// What a worker does before its first request (see `worker`), once per
/// receiving thread. Its credentials are then switched per request like a
/// worker's: on TCP the reader only reads its socket and copies into
/// registered memory, which the filesystem identity does not affect.
fn prepare_thread() {
    if PREPARED.with(|p| p.replace(true)) {
        return;
    }
    super::own_umask();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::remote::proto::ReadDest;
    use hipfs_rdma::{DescriptorTransport, RemoteDescriptor};

    fn read(len: u32, placed: bool) -> Op {
        Op::Read {
            fh: 1,
            offset: 0,
            len,
            dest: placed.then_some(ReadDest {
                region: RemoteDescriptor {
                    transport: DescriptorTransport::Tcp,
                    addr: 0,
                    len: 1 << 20,
                    rkey: 1,
                },
                offset: 0,
            }),
        }
    }

    #[test]
    fn small_metadata_reads_and_writes_run_inline() {
        let path = b"a/b".to_vec();
        for op in [
            Op::Getattr {
                path: path.clone(),
                fh: None,
            },
            Op::Lookup { path: path.clone() },
            Op::Release { fh: 3 },
            Op::Unlink { path },
            read(4096, false),
            Op::Write {
                fh: 1,
                offset: 0,
                data: vec![0; 48],
            },
        ] {
            assert!(runs_inline(&op), "{op:?}");
        }
    }

    #[test]
    fn large_and_placed_transfers_and_long_waits_go_to_the_pool() {
        for op in [
            read(INLINE_MAX_IO as u32 + 1, false),
            read(4096, true),
            Op::Write {
                fh: 1,
                offset: 0,
                data: vec![0; INLINE_MAX_IO + 1],
            },
            Op::Fsync {
                fh: 1,
                datasync: false,
            },
            Op::Watch,
            Op::Readdir {
                path: Vec::new(),
                cookie: 0,
                max: 100,
            },
        ] {
            assert!(!runs_inline(&op), "{op:?}");
        }
    }
}
