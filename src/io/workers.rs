//! The I/O worker pool: [`run_parallel`] runs one closure on `n` workers
//! (the calling thread is one of them) and returns when all have finished,
//! so the closure may borrow from the caller's stack. The pool itself (and
//! the lifetime erasure a persistent scoped pool needs) is
//! `hipfs_sys::pool`; this face turns a worker's panic into an error.

use crate::error::{Error, OpError, Result};

/// Runs `f(worker_index)` on `n` workers and waits for all of them; a
/// panicking worker is an `InternalError` (after every worker finished).
pub fn run_parallel(n: usize, f: &(dyn Fn(usize) + Sync)) -> Result<()> {
    hipfs_sys::pool::run_parallel(n, f)
        .map_err(|_| Error::new(OpError::InternalError, "an I/O worker panicked"))
}

#[cfg(test)]
mod tests {
    use super::*;

    // The pool's own behaviour (every worker once, borrows, panics) is
    // tested in hipfs_sys::pool; this face only maps the error.
    #[test]
    fn a_panicking_worker_becomes_an_internal_error() {
        let r = run_parallel(3, &|i| {
            if i == 2 {
                panic!("boom");
            }
        });
        assert_eq!(r.unwrap_err().op(), OpError::InternalError);
    }
}
