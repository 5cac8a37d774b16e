//! Random bytes from the kernel.

use std::io;

/// Fills `buf` from `getrandom(2)`, retrying `EINTR` and short reads.
///
/// There is no fallback: keys and tokens that enforce access come from the
/// OS random source or the caller gets the error.
pub fn fill(buf: &mut [u8]) -> io::Result<()> {
    let mut got = 0;
    while got < buf.len() {
        let tail = &mut buf[got..];
        // SAFETY: the pointer and length describe `tail`, which the kernel
        // writes at most `tail.len()` bytes into.
        let n = crate::cvt_retry(|| unsafe {
            libc::getrandom(tail.as_mut_ptr().cast(), tail.len(), 0)
        })?;
        got += n as usize;
    }
    Ok(())
}

/// 64 random bits from the kernel (see [`fill`]).
pub fn u64() -> io::Result<u64> {
    let mut b = [0u8; 8];
    fill(&mut b)?;
    Ok(u64::from_ne_bytes(b))
}

#[cfg(test)]
mod tests {
    #[test]
    fn two_draws_of_64_bits_differ() {
        let (a, b) = (super::u64().unwrap(), super::u64().unwrap());
        assert_ne!(a, b);
    }

    #[test]
    fn a_large_buffer_is_filled_completely() {
        let mut b = vec![0u8; 1 << 20];
        super::fill(&mut b).unwrap();
        assert!(b[b.len() - 64..].iter().any(|&x| x != 0));
    }
}
