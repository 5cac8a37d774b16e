//! Host settings of the kernel's FUSE module that change how fast a mount
//! answers, read for `hipfs check` and the benchmarks' headers.

use std::path::Path;

/// Where kernels that have it expose the FUSE wake-up placement knob.
const WAKE_HERE: &str = "/sys/module/fuse/parameters/wake_here";

/// The kernel's `fuse.wake_here` setting, where the running kernel has that
/// parameter (it is not in every kernel): `Some(true)` when a request wakes
/// the daemon thread on the CPU of the process that made it.
///
/// Why it matters: every FUSE request is one wake-up of a daemon thread and
/// one of the caller. On a small virtual machine a wake-up on the other
/// vCPU costs tens of microseconds, several times the request itself
/// (measured on a 2-vCPU machine with the in-memory filesystem: 30-60 µs a
/// round trip with the default placement, 11 µs woken on the caller's CPU).
pub fn wake_here() -> Option<bool> {
    parse_flag(&std::fs::read_to_string(Path::new(WAKE_HERE)).ok()?)
}

/// A module parameter's boolean as sysfs prints it (`Y`/`N`, `1`/`0`).
fn parse_flag(s: &str) -> Option<bool> {
    match s.trim() {
        "Y" | "y" | "1" => Some(true),
        "N" | "n" | "0" => Some(false),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sysfs_booleans_parse_and_anything_else_is_unknown() {
        assert_eq!(parse_flag("Y\n"), Some(true));
        assert_eq!(parse_flag("1"), Some(true));
        assert_eq!(parse_flag("N\n"), Some(false));
        assert_eq!(parse_flag("0"), Some(false));
        assert_eq!(parse_flag(""), None);
        assert_eq!(parse_flag("maybe"), None);
    }
}
