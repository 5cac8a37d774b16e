//! The connection handshake: version agreement, then challenge and response.

use super::{expect_kind, Kind, ProtoError, Reader, Writer, PROTO_VERSION, PROTO_VERSION_MIN};

/// Bytes of each side's random nonce (and of each proof).
pub const NONCE_LEN: usize = 32;
const MAGIC: &[u8; 5] = b"HIPFS";

fn nonce(r: &mut Reader<'_>, what: &'static str) -> Result<[u8; NONCE_LEN], ProtoError> {
    let b = r.bytes(what, NONCE_LEN)?;
    b.try_into()
        .map_err(|_| ProtoError::BadValue(what, b.len() as u64))
}

/// Client's first message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hello {
    /// Oldest protocol version the client speaks.
    pub min_version: u16,
    /// Newest protocol version the client speaks.
    pub max_version: u16,
    /// The client's random nonce.
    pub nonce: [u8; NONCE_LEN],
}

impl Hello {
    /// A hello for every version this build speaks.
    pub fn new(nonce: [u8; NONCE_LEN]) -> Hello {
        Hello {
            min_version: PROTO_VERSION_MIN,
            max_version: PROTO_VERSION,
            nonce,
        }
    }
    /// The message as sent.
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::default();
        w.u8(Kind::Hello as u8);
        for b in MAGIC {
            w.u8(*b);
        }
        w.u16(self.min_version)
            .u16(self.max_version)
            .bytes(&self.nonce);
        w.finish()
    }
    /// Parses a hello.
    pub fn decode(msg: &[u8]) -> Result<Hello, ProtoError> {
        let mut r = Reader::new(msg);
        expect_kind(&mut r, Kind::Hello)?;
        for b in MAGIC {
            if r.u8("magic")? != *b {
                return Err(ProtoError::BadMagic);
            }
        }
        let h = Hello {
            min_version: r.u16("min version")?,
            max_version: r.u16("max version")?,
            nonce: nonce(&mut r, "client nonce")?,
        };
        r.end()?;
        Ok(h)
    }
    /// The version both sides speak, or why there is none.
    pub fn negotiate(&self) -> Result<u16, String> {
        let hi = self.max_version.min(PROTO_VERSION);
        let lo = self.min_version.max(PROTO_VERSION_MIN);
        if lo > hi || self.min_version > self.max_version {
            return Err(format!(
                "incompatible hipfs protocol: the client speaks versions {}..={}, this server speaks {}..={}; run the same hipfs release on both sides",
                self.min_version, self.max_version, PROTO_VERSION_MIN, PROTO_VERSION
            ));
        }
        Ok(hi)
    }
}

/// Server's answer to `Hello`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Challenge {
    /// The version chosen.
    pub version: u16,
    /// The server's random nonce.
    pub nonce: [u8; NONCE_LEN],
    /// Whether a token proof must follow.
    pub auth_required: bool,
}

impl Challenge {
    /// The message as sent.
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::default();
        w.u8(Kind::Challenge as u8)
            .u16(self.version)
            .bytes(&self.nonce)
            .bool(self.auth_required);
        w.finish()
    }
    /// Parses a challenge.
    pub fn decode(msg: &[u8]) -> Result<Challenge, ProtoError> {
        let mut r = Reader::new(msg);
        expect_kind(&mut r, Kind::Challenge)?;
        let c = Challenge {
            version: r.u16("version")?,
            nonce: nonce(&mut r, "server nonce")?,
            auth_required: r.bool("auth flag")?,
        };
        r.end()?;
        Ok(c)
    }
}

/// What a client authenticates with (see `docs/SECURITY.md`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum CredKind {
    /// The shared token of a trusted client host.
    Token = 1,
    /// A single-use ticket from the server's local socket, bound to the
    /// local user who asked for it.
    Ticket = 2,
    /// A capability for one open file (the direct path).
    FileCap = 3,
}

/// `Proof::flags`: the client asks for no message authentication after the
/// handshake (honoured only where the server allows it, for benchmarks).
pub const FLAG_NO_MAC: u8 = 1;

/// Client's proof: which credential, its public id (zero for the token),
/// flags, and HMAC-SHA256 of the transcript with the credential's secret.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Proof {
    /// Which credential the proof is made with.
    pub kind: CredKind,
    /// Proof flags (e.g. `FLAG_NO_MAC`).
    pub flags: u8,
    /// The credential's public id (never its secret).
    pub id: [u8; NONCE_LEN],
    /// HMAC over the handshake transcript under the credential's secret.
    pub mac: [u8; NONCE_LEN],
}

impl Proof {
    /// The message as sent.
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::default();
        w.u8(Kind::Proof as u8)
            .u8(self.kind as u8)
            .u8(self.flags)
            .bytes(&self.id)
            .bytes(&self.mac);
        w.finish()
    }
    /// Parses a proof.
    pub fn decode(msg: &[u8]) -> Result<Proof, ProtoError> {
        let mut r = Reader::new(msg);
        expect_kind(&mut r, Kind::Proof)?;
        let kind = match r.u8("credential kind")? {
            1 => CredKind::Token,
            2 => CredKind::Ticket,
            3 => CredKind::FileCap,
            v => return Err(ProtoError::BadValue("credential kind", u64::from(v))),
        };
        let p = Proof {
            kind,
            flags: r.u8("flags")?,
            id: nonce(&mut r, "credential id")?,
            mac: nonce(&mut r, "proof")?,
        };
        r.end()?;
        Ok(p)
    }
}

/// The server accepts: what it exports, and its own proof of the token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Welcome {
    /// The exported directory, for logs and identify.
    pub export: String,
    /// Whether the export refuses writes.
    pub read_only: bool,
    /// The server's HMAC of both nonces (mutual proof); from version 3 on
    /// over the export id too ([`export_id_transcript`]).
    pub mac: [u8; NONCE_LEN],
    /// Version 3: the export's identity (`hipfs serve --export-id`, or the
    /// id the server keeps for the export). Servers exporting the same
    /// namespace say the same id; a multi-server mount refuses servers
    /// that disagree. `None` from version 2 servers (the field is absent).
    pub export_id: Option<String>,
}

/// Longest export id (`hipfs serve --export-id`).
pub const MAX_EXPORT_ID: usize = 256;

/// What the server's proof covers from version 3 on: the handshake
/// transcript and the export id, so that an export id altered on the path
/// fails the proof like a forged welcome.
pub fn export_id_transcript(transcript: &[u8], export_id: &str) -> Vec<u8> {
    let mut t = transcript.to_vec();
    t.extend_from_slice(b"hipfs export id:");
    t.extend_from_slice(export_id.as_bytes());
    t
}

impl Welcome {
    /// The message as sent.
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::default();
        w.u8(Kind::Welcome as u8)
            .bytes(self.export.as_bytes())
            .bool(self.read_only)
            .bytes(&self.mac);
        if let Some(id) = &self.export_id {
            w.bytes(id.as_bytes());
        }
        w.finish()
    }
    /// Parses a welcome (of version 2, without an export id, or of 3).
    pub fn decode(msg: &[u8]) -> Result<Welcome, ProtoError> {
        let mut r = Reader::new(msg);
        expect_kind(&mut r, Kind::Welcome)?;
        let export = String::from_utf8_lossy(r.bytes("export name", 4096)?).into_owned();
        let read_only = r.bool("read-only flag")?;
        let mac = nonce(&mut r, "server proof")?;
        // Version 2 ends here; version 3 adds the export id.
        let export_id = if r.remaining() > 0 {
            let b = r.bytes("export id", MAX_EXPORT_ID)?;
            Some(String::from_utf8(b.to_vec()).map_err(|_| ProtoError::BadValue("export id", 0))?)
        } else {
            None
        };
        let w = Welcome {
            export,
            read_only,
            mac,
            export_id,
        };
        r.end()?;
        Ok(w)
    }
}

/// The server refuses the connection and says why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refused {
    /// Why the server refused.
    pub reason: String,
}

impl Refused {
    /// The message as sent.
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::default();
        w.u8(Kind::Refused as u8).bytes(self.reason.as_bytes());
        w.finish()
    }
    /// Parses a refusal.
    pub fn decode(msg: &[u8]) -> Result<Refused, ProtoError> {
        let mut r = Reader::new(msg);
        expect_kind(&mut r, Kind::Refused)?;
        let reason = String::from_utf8_lossy(r.bytes("reason", 4096)?).into_owned();
        r.end()?;
        Ok(Refused { reason })
    }
}
