//! Batch I/O: many reads and writes submitted at once, executed in the
//! background, their outcomes collected as events.
//!
//! A batch is kept in a process-wide table keyed by an id, because the C ABI
//! hands out `hipFileBatchHandle_t` pointers; [`BatchIo`] is the RAII face
//! over the same table.
//!
//! Rules (the C ABI relies on these):
//! - A batch holds at most `max` operations (1..=128, fixed at set-up). An
//!   operation holds its slot from submit until its event has been returned
//!   by [`BatchIo::get_status`]; a submit that would pass `max` fails with
//!   `BatchFull` and queues nothing.
//! - Submit is all-or-nothing: every operation is checked first (handle
//!   registered, non-null buffer, non-negative offsets, no overflow); one bad
//!   operation fails the whole call and nothing is queued.
//! - Every submitted operation produces exactly one event: `Complete` (ret =
//!   bytes), `Failed` (ret = `-errno` for a system error, else the negative
//!   `OpError` code) or `Canceled` (ret = 0).
//! - [`BatchIo::cancel`] turns operations that have not started into
//!   `Canceled` events and waits for the running ones; their events stay to
//!   be collected (which frees the slots).
//! - Destroying a batch cancels what has not started, waits for what is
//!   running (so the caller may free the buffers right after) and drops any
//!   uncollected events.
//!
//! ```no_run
//! use hipfs::batch::{BatchIo, IoParams, Opcode};
//! use hipfs::{FileHandle, FileHandleType};
//! let mut fh = FileHandle::new("/data/x", libc::O_RDONLY, 0, FileHandleType::OpaqueFd);
//! fh.open()?;
//! let mut mem = vec![0u8; 8192];
//! let batch = BatchIo::setup(2)?;
//! let ops: Vec<IoParams> = (0..2)
//!     .map(|i| IoParams {
//!         handle: fh.handle().unwrap(),
//!         opcode: Opcode::Read,
//!         buf_base: mem.as_mut_ptr() as usize,
//!         buf_offset: i * 4096,
//!         file_offset: i * 4096,
//!         size: 4096,
//!         cookie: i as usize,
//!     })
//!     .collect();
//! // SAFETY: `mem` outlives the batch's I/O: get_status waits for both events.
//! unsafe { batch.submit(&ops, 0)? };
//! let events = batch.get_status(2, 2, None)?;
//! assert_eq!(events.len(), 2);
//! # Ok::<(), hipfs::Error>(())
//! ```

use crate::config::MAX_BATCH_IO_COUNT;
use crate::error::{Error, OpError, Result};
use crate::handle::RegisteredFile;
use crate::job_pool::JobPool;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, LazyLock, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// `hipFileOpcode_t`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum Opcode {
    /// `hipFileBatchRead`.
    Read = 0,
    /// `hipFileBatchWrite`.
    Write = 1,
}

impl Opcode {
    /// The opcode for a C value; anything else is `InvalidValue`.
    pub fn from_raw(v: u32) -> Result<Opcode> {
        match v {
            0 => Ok(Opcode::Read),
            1 => Ok(Opcode::Write),
            _ => Err(Error::new(
                OpError::InvalidValue,
                format!("batch opcode {v} is neither read (0) nor write (1)"),
            )),
        }
    }
}

/// `hipFileStatus_t`: the state of one batch operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum Status {
    /// Not yet accepted.
    Waiting = 1,
    /// Accepted and queued.
    Pending = 2,
    /// Rejected (never produced: submit is all-or-nothing instead).
    Invalid = 4,
    /// Canceled before it started.
    Canceled = 8,
    /// Finished; `ret` holds the bytes moved.
    Complete = 16,
    /// Timed out (never produced: get_status returns fewer events instead).
    Timeout = 32,
    /// Finished with an error; `ret` holds the negative error.
    Failed = 64,
}

/// `hipFileIOParams_t` (batch mode): one read or write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IoParams {
    /// A registered file handle id.
    pub handle: u64,
    /// Read or write.
    pub opcode: Opcode,
    /// Start of the buffer (`devPtr_base`); registered or not.
    pub buf_base: usize,
    /// Offset into the buffer (`devPtr_offset`).
    pub buf_offset: i64,
    /// Offset in the file.
    pub file_offset: i64,
    /// Bytes to move.
    pub size: usize,
    /// Returned untouched in the operation's event.
    pub cookie: usize,
}

/// `hipFileIOEvents_t`: the outcome of one operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IoEvent {
    /// The operation's cookie.
    pub cookie: usize,
    /// How it ended.
    pub status: Status,
    /// Bytes moved when `Complete`; `-errno` or `-OpError` when `Failed`; 0 when `Canceled`.
    pub ret: isize,
}

/// The negative value an I/O error is reported as (in batch events and as
/// the async byte count): `-errno` for a system error, else `-OpError`.
pub fn error_value(e: &Error) -> isize {
    -(e.errno().unwrap_or_else(|| e.op().code()) as isize)
}

enum OpState {
    Queued,
    Running,
}

struct Op {
    params: IoParams,
    file: Arc<RegisteredFile>,
    state: OpState,
}

#[derive(Default)]
struct BatchState {
    /// Operations not yet finished, by sequence number.
    ops: HashMap<u64, Op>,
    next_seq: u64,
    /// Finished operations whose events have not been collected.
    done: VecDeque<IoEvent>,
    running: usize,
    closed: bool,
}

impl BatchState {
    /// Slots in use: unfinished operations plus uncollected events.
    fn held(&self) -> usize {
        self.ops.len() + self.done.len()
    }
}

struct Batch {
    max: usize,
    state: Mutex<BatchState>,
    changed: Condvar,
}

impl Batch {
    fn lock(&self) -> MutexGuard<'_, BatchState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn wait_idle<'a>(&self, mut st: MutexGuard<'a, BatchState>) -> MutexGuard<'a, BatchState> {
        while st.running > 0 {
            st = self.changed.wait(st).unwrap_or_else(|p| p.into_inner());
        }
        st
    }

    /// Runs operation `seq` if it is still queued (cancel may have taken it).
    fn run(&self, seq: u64) {
        let (params, file) = {
            let mut st = self.lock();
            let Some(op) = st.ops.get_mut(&seq) else {
                return;
            };
            if !matches!(op.state, OpState::Queued) {
                return;
            }
            op.state = OpState::Running;
            let taken = (op.params, Arc::clone(&op.file));
            st.running += 1;
            taken
        };
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let dir = match params.opcode {
                Opcode::Read => crate::io::Dir::Read,
                Opcode::Write => crate::io::Dir::Write,
            };
            crate::handle::transfer_vouched(
                dir,
                &file,
                params.buf_base,
                params.size,
                params.file_offset,
                params.buf_offset,
            )
        }))
        .unwrap_or_else(|_| {
            Err(Error::new(
                OpError::InternalError,
                "a batch I/O operation panicked",
            ))
        });
        let event = match outcome {
            Ok(n) => IoEvent {
                cookie: params.cookie,
                status: Status::Complete,
                ret: n as isize,
            },
            Err(e) => {
                log::debug!("batch operation (cookie {:#x}) failed: {e}", params.cookie);
                IoEvent {
                    cookie: params.cookie,
                    status: Status::Failed,
                    ret: error_value(&e),
                }
            }
        };
        let mut st = self.lock();
        st.ops.remove(&seq);
        st.running -= 1;
        st.done.push_back(event);
        drop(st);
        self.changed.notify_all();
    }

    /// Turns queued operations into `Canceled` events; waits for running ones.
    fn cancel(&self) {
        let mut st = self.lock();
        let queued: Vec<u64> = st
            .ops
            .iter()
            .filter(|(_, op)| matches!(op.state, OpState::Queued))
            .map(|(seq, _)| *seq)
            .collect();
        for seq in queued {
            if let Some(op) = st.ops.remove(&seq) {
                st.done.push_back(IoEvent {
                    cookie: op.params.cookie,
                    status: Status::Canceled,
                    ret: 0,
                });
            }
        }
        let st = self.wait_idle(st);
        drop(st);
        self.changed.notify_all();
    }
}

/// The background threads that run batch operations. A pool of their own,
/// not the request worker pool or the readahead fetchers: one operation may
/// split across the worker pool or wait for readahead fetches, and a shared
/// pool full of batch operations would leave no thread for what they wait on.
static RUNNERS: JobPool = JobPool::new(|n| format!("hipfs-batch-{n}"));

static TABLE: LazyLock<Mutex<HashMap<u64, Arc<Batch>>>> = LazyLock::new(Default::default);
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

fn table() -> MutexGuard<'static, HashMap<u64, Arc<Batch>>> {
    TABLE.lock().unwrap_or_else(|p| p.into_inner())
}

fn batch(id: u64) -> Result<Arc<Batch>> {
    table().get(&id).cloned().ok_or_else(|| {
        Error::new(
            OpError::InvalidValue,
            format!("batch {id} does not exist (never set up, or destroyed)"),
        )
    })
}

/// Creates a batch of at most `max` operations (1..=128); the driver must be open.
pub fn batch_setup(max: u32) -> Result<u64> {
    if max == 0 || max > MAX_BATCH_IO_COUNT {
        return Err(Error::new(
            OpError::InvalidValue,
            format!("batch size {max} is outside 1..={MAX_BATCH_IO_COUNT}"),
        ));
    }
    if crate::driver::use_count() <= 0 {
        return Err(Error::new(
            OpError::DriverNotInitialized,
            "open the driver before setting up a batch",
        ));
    }
    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    let b = Arc::new(Batch {
        max: max as usize,
        state: Mutex::new(BatchState::default()),
        changed: Condvar::new(),
    });
    table().insert(id, b);
    Ok(id)
}

/// Checks one operation; returns the file it targets.
fn check_op(i: usize, p: &IoParams) -> Result<Arc<RegisteredFile>> {
    let bad = |what: String| {
        Error::new(
            OpError::InvalidValue,
            format!("batch operation {i}: {what}"),
        )
    };
    if p.buf_base == 0 {
        return Err(bad("buffer pointer is null".into()));
    }
    let foff = u64::try_from(p.file_offset)
        .map_err(|_| bad(format!("file offset {} is negative", p.file_offset)))?;
    let boff = usize::try_from(p.buf_offset)
        .map_err(|_| bad(format!("buffer offset {} is negative", p.buf_offset)))?;
    if foff
        .checked_add(p.size as u64)
        .is_none_or(|end| end > i64::MAX as u64)
    {
        return Err(bad("file offset + size overflows".into()));
    }
    if p.buf_base
        .checked_add(boff)
        .and_then(|m| m.checked_add(p.size))
        .is_none()
    {
        return Err(bad("buffer address + offset + size overflows".into()));
    }
    if let Some(reg) = crate::buffer::lookup(p.buf_base) {
        if boff.checked_add(p.size).is_none_or(|end| end > reg.len) {
            return Err(bad(format!(
                "{} bytes at buffer offset {boff} pass the end of the {}-byte registered buffer",
                p.size, reg.len
            )));
        }
    }
    crate::handle::lookup(p.handle).map_err(|e| e.with_context(format!("batch operation {i}")))
}

/// Queues `ops` on batch `id`, all or nothing. `flags` is reserved and must be 0.
///
/// # Safety
/// Each operation's memory, `buf_base + buf_offset` for `size` bytes, must
/// stay valid (and, for reads, unused by anyone else) until its event has
/// been returned, or until the batch is canceled or destroyed.
pub unsafe fn batch_submit(id: u64, ops: &[IoParams], flags: u32) -> Result<()> {
    submit(id, ops, flags)
}

/// [`batch_submit`]'s work. Private: its callers are the two `unsafe fn`
/// faces, whose callers made the memory promise.
fn submit(id: u64, ops: &[IoParams], flags: u32) -> Result<()> {
    let b = batch(id)?;
    if flags != 0 {
        return Err(Error::new(
            OpError::InvalidValue,
            format!("batch submit flags {flags:#x} are reserved and must be 0"),
        ));
    }
    if ops.len() > b.max {
        return Err(Error::new(
            OpError::BatchFull,
            format!("{} operations do not fit a batch of {}", ops.len(), b.max),
        ));
    }
    let files = ops
        .iter()
        .enumerate()
        .map(|(i, p)| check_op(i, p))
        .collect::<Result<Vec<_>>>()?;
    if ops.is_empty() {
        return Ok(());
    }
    let max_threads = crate::driver::current_config().io_threads().clamp(2, 16);
    let mut st = b.lock();
    if st.closed {
        return Err(Error::new(
            OpError::InvalidValue,
            format!("batch {id} is destroyed"),
        ));
    }
    if st.held() + ops.len() > b.max {
        return Err(Error::new(
            OpError::BatchFull,
            format!(
                "batch {id} holds {} of {} operations (uncollected events count); {} more do not fit",
                st.held(),
                b.max,
                ops.len()
            ),
        ));
    }
    // The jobs go first, under the lock: none can run before the operations
    // are in, and if the pool cannot take them nothing is queued (a job
    // whose operation never went in finds nothing and returns; its number
    // is not reused).
    let first = st.next_seq;
    st.next_seq += ops.len() as u64;
    for seq in first..st.next_seq {
        let b = Arc::clone(&b);
        if RUNNERS
            .submit(Box::new(move || b.run(seq)), max_threads)
            .is_err()
        {
            return Err(Error::new(
                OpError::BatchSubmitFailed,
                "cannot start a batch I/O thread: the system refused a new thread",
            ));
        }
    }
    for (seq, (params, file)) in (first..).zip(ops.iter().zip(files)) {
        st.ops.insert(
            seq,
            Op {
                params: *params,
                file,
                state: OpState::Queued,
            },
        );
    }
    Ok(())
}

/// Collects up to `max_nr` finished events, waiting until at least `min_nr`
/// are there or `timeout` passes (`None`: no limit). Never waits for more
/// events than the batch can still produce. Each event is returned once.
pub fn batch_get_status(
    id: u64,
    min_nr: usize,
    max_nr: usize,
    timeout: Option<Duration>,
) -> Result<Vec<IoEvent>> {
    let b = batch(id)?;
    if min_nr > max_nr {
        return Err(Error::new(
            OpError::InvalidValue,
            format!("min_nr {min_nr} is larger than max_nr {max_nr}"),
        ));
    }
    let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
    let mut st = b.lock();
    loop {
        let reachable = st.held();
        if st.done.len() >= min_nr.min(reachable) {
            break;
        }
        match (timeout, deadline) {
            (Some(_), Some(d)) => {
                let now = Instant::now();
                if now >= d {
                    break;
                }
                st = b
                    .changed
                    .wait_timeout(st, d - now)
                    .unwrap_or_else(|p| p.into_inner())
                    .0;
            }
            // No timeout, or one too large to represent: wait as long as it takes.
            _ => st = b.changed.wait(st).unwrap_or_else(|p| p.into_inner()),
        }
    }
    let n = st.done.len().min(max_nr);
    Ok(st.done.drain(..n).collect())
}

/// Cancels the operations of batch `id` that have not started and waits for
/// the running ones. Their events (`Canceled`, or how the running ones
/// ended) are then collected with [`batch_get_status`].
pub fn batch_cancel(id: u64) -> Result<()> {
    batch(id)?.cancel();
    Ok(())
}

/// Destroys batch `id`: cancels what has not started, waits for what runs,
/// drops uncollected events. An unknown id is `InvalidValue`.
pub fn batch_destroy(id: u64) -> Result<()> {
    let b = table()
        .remove(&id)
        .ok_or_else(|| Error::new(OpError::InvalidValue, format!("batch {id} does not exist")))?;
    // Closed first, so a submit racing with destroy cannot queue behind the cancel.
    b.lock().closed = true;
    b.cancel();
    b.lock().done.clear();
    Ok(())
}

/// A batch that is destroyed when dropped.
#[derive(Debug)]
pub struct BatchIo {
    id: u64,
}

impl BatchIo {
    /// Sets up a batch of at most `max` operations (1..=128).
    pub fn setup(max: u32) -> Result<BatchIo> {
        Ok(BatchIo {
            id: batch_setup(max)?,
        })
    }

    /// The batch's id in the process-wide table.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Queues `ops`, all or nothing; `flags` must be 0.
    ///
    /// # Safety
    /// See [`batch_submit`]: the memory of each operation must stay valid
    /// until its event is collected or the batch is canceled or dropped.
    pub unsafe fn submit(&self, ops: &[IoParams], flags: u32) -> Result<()> {
        // The caller's promise is batch_submit's, made for these ops.
        submit(self.id, ops, flags)
    }

    /// Collects finished events: see [`batch_get_status`].
    pub fn get_status(
        &self,
        min_nr: usize,
        max_nr: usize,
        timeout: Option<Duration>,
    ) -> Result<Vec<IoEvent>> {
        batch_get_status(self.id, min_nr, max_nr, timeout)
    }

    /// Cancels what has not started: see [`batch_cancel`].
    pub fn cancel(&self) -> Result<()> {
        batch_cancel(self.id)
    }
}

impl Drop for BatchIo {
    fn drop(&mut self) {
        if let Err(e) = batch_destroy(self.id) {
            log::warn!("destroying batch {}: {e}", self.id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_become_negative_errno_or_negative_op_code() {
        assert_eq!(error_value(&Error::system(libc::EBADF, "pread")), -9);
        assert_eq!(
            error_value(&Error::new(OpError::HandleNotRegistered, "x")),
            -5027
        );
    }

    #[test]
    fn opcodes_and_statuses_have_the_c_numbers() {
        assert_eq!(Opcode::from_raw(0).unwrap(), Opcode::Read);
        assert_eq!(Opcode::from_raw(1).unwrap(), Opcode::Write);
        assert_eq!(Opcode::from_raw(2).unwrap_err().op(), OpError::InvalidValue);
        let s = [
            Status::Waiting,
            Status::Pending,
            Status::Invalid,
            Status::Canceled,
            Status::Complete,
            Status::Timeout,
            Status::Failed,
        ];
        let v: Vec<u32> = s.iter().map(|s| *s as u32).collect();
        assert_eq!(v, [1, 2, 4, 8, 16, 32, 64]);
    }

    #[test]
    fn sizes_outside_one_to_128_are_invalid() {
        assert_eq!(batch_setup(0).unwrap_err().op(), OpError::InvalidValue);
        assert_eq!(batch_setup(129).unwrap_err().op(), OpError::InvalidValue);
    }
}
