//! The "result" layer: libibverbs / librdmacm status conventions turned
//! into `Result`. Calls return -1 or NULL and leave the cause in errno
//! (ibv_* calls that return a positive errno directly use `check_errno`).

use crate::error::{Error, Result};

fn last(call: &'static str) -> Error {
    Error::Verbs {
        call,
        source: std::io::Error::last_os_error(),
    }
}

/// For calls returning 0 / -1 with errno.
pub(super) fn check(call: &'static str, rc: i32) -> Result<()> {
    if rc == 0 {
        Ok(())
    } else if rc > 0 {
        check_errno(call, rc)
    } else {
        Err(last(call))
    }
}

/// For calls returning 0 or a positive errno (ibv_post_send, ibv_modify_qp).
pub(super) fn check_errno(call: &'static str, rc: i32) -> Result<()> {
    if rc == 0 {
        Ok(())
    } else {
        Err(Error::Verbs {
            call,
            source: std::io::Error::from_raw_os_error(rc.abs()),
        })
    }
}

/// For calls returning an object pointer or NULL with errno.
pub(super) fn non_null<T>(call: &'static str, p: *mut T) -> Result<*mut T> {
    if p.is_null() {
        Err(last(call))
    } else {
        Ok(p)
    }
}
