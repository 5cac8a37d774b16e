//! Bounds-checked little-endian encoding: every read says what it expected
//! when the bytes run out or a length exceeds its cap, so a hostile peer
//! gets an error, never a panic or a huge allocation.

use super::ProtoError;

/// Appends fields to a message.
#[derive(Default)]
pub struct Writer {
    buf: Vec<u8>,
}

impl Writer {
    /// An empty message with room for `n` bytes.
    pub fn with_capacity(n: usize) -> Writer {
        Writer {
            buf: Vec::with_capacity(n),
        }
    }
    /// Appends a byte.
    pub fn u8(&mut self, v: u8) -> &mut Self {
        self.buf.push(v);
        self
    }
    /// Appends a little-endian u16.
    pub fn u16(&mut self, v: u16) -> &mut Self {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }
    /// Appends a little-endian u32.
    pub fn u32(&mut self, v: u32) -> &mut Self {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }
    /// Appends a little-endian i32.
    pub fn i32(&mut self, v: i32) -> &mut Self {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }
    /// Appends a little-endian u64.
    pub fn u64(&mut self, v: u64) -> &mut Self {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }
    /// Appends a little-endian i64.
    pub fn i64(&mut self, v: i64) -> &mut Self {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }
    /// Appends a bool as one byte.
    pub fn bool(&mut self, v: bool) -> &mut Self {
        self.u8(v as u8)
    }
    /// A u32 length followed by the bytes.
    pub fn bytes(&mut self, v: &[u8]) -> &mut Self {
        self.u32(v.len() as u32);
        self.buf.extend_from_slice(v);
        self
    }
    /// Appends a presence byte and the value.
    pub fn opt_u32(&mut self, v: Option<u32>) -> &mut Self {
        match v {
            Some(x) => self.u8(1).u32(x),
            None => self.u8(0),
        }
    }
    /// Appends a presence byte and the value.
    pub fn opt_u64(&mut self, v: Option<u64>) -> &mut Self {
        match v {
            Some(x) => self.u8(1).u64(x),
            None => self.u8(0),
        }
    }
    /// The bytes written.
    pub fn finish(self) -> Vec<u8> {
        self.buf
    }
}

/// Reads fields from a received message.
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    /// Reads from the start of `buf`.
    pub fn new(buf: &'a [u8]) -> Reader<'a> {
        Reader { buf, pos: 0 }
    }

    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], ProtoError> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&e| e <= self.buf.len())
            .ok_or(ProtoError::Truncated(what))?;
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    fn array<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], ProtoError> {
        let s = self.take(N, what)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }

    /// The next byte (`what` names the field in errors).
    pub fn u8(&mut self, what: &'static str) -> Result<u8, ProtoError> {
        Ok(self.array::<1>(what)?[0])
    }
    /// The next little-endian u16.
    pub fn u16(&mut self, what: &'static str) -> Result<u16, ProtoError> {
        Ok(u16::from_le_bytes(self.array(what)?))
    }
    /// The next little-endian u32.
    pub fn u32(&mut self, what: &'static str) -> Result<u32, ProtoError> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }
    /// The next little-endian i32.
    pub fn i32(&mut self, what: &'static str) -> Result<i32, ProtoError> {
        Ok(i32::from_le_bytes(self.array(what)?))
    }
    /// The next little-endian u64.
    pub fn u64(&mut self, what: &'static str) -> Result<u64, ProtoError> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }
    /// The next little-endian i64.
    pub fn i64(&mut self, what: &'static str) -> Result<i64, ProtoError> {
        Ok(i64::from_le_bytes(self.array(what)?))
    }
    /// The next bool (0 or 1; anything else is an error).
    pub fn bool(&mut self, what: &'static str) -> Result<bool, ProtoError> {
        match self.u8(what)? {
            0 => Ok(false),
            1 => Ok(true),
            v => Err(ProtoError::BadValue(what, u64::from(v))),
        }
    }
    /// Length-prefixed bytes of at most `max`.
    pub fn bytes(&mut self, what: &'static str, max: usize) -> Result<&'a [u8], ProtoError> {
        let n = self.u32(what)? as usize;
        if n > max {
            return Err(ProtoError::TooLong { what, len: n, max });
        }
        self.take(n, what)
    }
    /// An optional u32 (presence byte, value).
    pub fn opt_u32(&mut self, what: &'static str) -> Result<Option<u32>, ProtoError> {
        Ok(if self.bool(what)? {
            Some(self.u32(what)?)
        } else {
            None
        })
    }
    /// An optional u64 (presence byte, value).
    pub fn opt_u64(&mut self, what: &'static str) -> Result<Option<u64>, ProtoError> {
        Ok(if self.bool(what)? {
            Some(self.u64(what)?)
        } else {
            None
        })
    }
    /// A count of items that follow, each at least `min_item` bytes: refused
    /// when it exceeds `max` or cannot fit in what is left (so a forged count
    /// never drives an allocation).
    pub fn count(
        &mut self,
        what: &'static str,
        max: usize,
        min_item: usize,
    ) -> Result<usize, ProtoError> {
        let n = self.u32(what)? as usize;
        if n > max {
            return Err(ProtoError::TooLong { what, len: n, max });
        }
        if n.saturating_mul(min_item.max(1)) > self.remaining() {
            return Err(ProtoError::Truncated(what));
        }
        Ok(n)
    }
    /// Bytes not read yet.
    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }
    /// Fails when bytes are left over: a message is exactly its fields.
    pub fn end(&self) -> Result<(), ProtoError> {
        if self.remaining() == 0 {
            Ok(())
        } else {
            Err(ProtoError::TrailingBytes(self.remaining()))
        }
    }
}
