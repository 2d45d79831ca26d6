//! Reading a frame stream from any `std::io::Read`: file or socket.
//!
//! Owns the policy for damaged input. In [`ReadMode::Salvage`] (files) a cut-off tail
//! or a corrupt frame is recorded as [`Damage`] and reading goes on from the next valid
//! frame, so a capture cut off by a crash yields everything up to its last whole frame.
//! In [`ReadMode::Strict`] (sockets) the first damaged frame is an error, so the caller
//! can close that connection. It does not interpret records (see the analysis crate).

use std::io::Read;

use crate::frame::{
    decode_payload, decode_preamble, frame_type, payload_fits, Record, FRAME_OVERHEAD,
    MAX_FRAME_LEN, PREAMBLE_LEN,
};
use crate::WireError;

/// How to treat damaged frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadMode {
    /// Record damage, skip to the next valid frame, keep going.
    Salvage,
    /// Return an error at the first damaged frame.
    Strict,
}

/// What was wrong at one place in the stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DamageKind {
    /// The stream ended inside a frame (a crash or a cut-off copy).
    Truncated,
    /// A length field of 0 or above the maximum.
    BadLength(u32),
    /// The frame's CRC did not match its bytes.
    ChecksumMismatch,
    /// The frame's CRC matched but its payload did not decode.
    Malformed(String),
}

impl std::fmt::Display for DamageKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Truncated => write!(f, "stream ends inside a frame (cut off)"),
            Self::BadLength(n) => write!(f, "impossible frame length {n}"),
            Self::ChecksumMismatch => write!(f, "checksum mismatch"),
            Self::Malformed(why) => write!(f, "malformed frame: {why}"),
        }
    }
}

/// One damaged region: where it starts and how many bytes were skipped because of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Damage {
    /// Byte offset from the start of the stream (preamble included).
    pub offset: u64,
    pub kind: DamageKind,
    pub bytes_skipped: u64,
}

/// Streaming frame reader. Create with [`FrameReader::new`], then call
/// [`FrameReader::next_record`] until it returns `Ok(None)`.
pub struct FrameReader<R> {
    src: R,
    buf: Vec<u8>,
    start: usize,
    eof: bool,
    /// Stream offset of `buf[start]`.
    offset: u64,
    mode: ReadMode,
    damage: Vec<Damage>,
    unknown_frames: u64,
    frames_read: u64,
}

const READ_CHUNK: usize = 256 * 1024;

impl<R: Read> FrameReader<R> {
    /// Reads and checks the preamble.
    pub fn new(src: R, mode: ReadMode) -> Result<Self, WireError> {
        let mut r = Self {
            src,
            buf: Vec::with_capacity(READ_CHUNK),
            start: 0,
            eof: false,
            offset: 0,
            mode,
            damage: Vec::new(),
            unknown_frames: 0,
            frames_read: 0,
        };
        if !r.fill(PREAMBLE_LEN)? {
            return Err(WireError::ShortPreamble { got: r.available() });
        }
        decode_preamble(&r.buf[r.start..r.start + PREAMBLE_LEN])?;
        r.consume(PREAMBLE_LEN);
        Ok(r)
    }

    /// Damage found so far (salvage mode).
    pub fn damage(&self) -> &[Damage] {
        &self.damage
    }

    /// Frames of unknown type that were skipped.
    pub fn unknown_frames(&self) -> u64 {
        self.unknown_frames
    }

    /// Whole, valid frames read so far.
    pub fn frames_read(&self) -> u64 {
        self.frames_read
    }

    /// Bytes of the stream consumed so far.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    fn available(&self) -> usize {
        self.buf.len() - self.start
    }

    fn consume(&mut self, n: usize) {
        self.start += n;
        self.offset += n as u64;
    }

    /// Makes sure `need` bytes are buffered from `start`; false at end of stream.
    fn fill(&mut self, need: usize) -> Result<bool, WireError> {
        while self.available() < need {
            if self.eof {
                return Ok(false);
            }
            if self.start > 0 {
                self.buf.drain(..self.start);
                self.start = 0;
            }
            let old = self.buf.len();
            let want = (need - self.available()).max(READ_CHUNK);
            self.buf.resize(old + want, 0);
            let n = loop {
                match self.src.read(&mut self.buf[old..]) {
                    Ok(n) => break n,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(e) => {
                        self.buf.truncate(old);
                        return Err(WireError::Io(e));
                    }
                }
            };
            self.buf.truncate(old + n);
            if n == 0 {
                self.eof = true;
            }
        }
        Ok(true)
    }

    fn frame_len_at(&self, pos: usize) -> u32 {
        let b = &self.buf[pos..pos + 4];
        u32::from_le_bytes([b[0], b[1], b[2], b[3]])
    }

    /// Whether a whole, checksum-valid frame of a known type, with the size its layout
    /// gives it, starts at `start + rel` (needs it buffered). Unknown types are not taken
    /// as resync points: their size cannot be checked, and checksumming every offset that
    /// passes the length check makes resync over a long damaged stretch slow.
    fn valid_frame_at(&mut self, rel: usize) -> Result<bool, WireError> {
        if !self.fill(rel + 5)? {
            return Ok(false);
        }
        let pos = self.start + rel;
        let len = self.frame_len_at(pos);
        let ty = self.buf[pos + 4];
        if len == 0 || len > MAX_FRAME_LEN || !frame_type::is_known(ty) {
            return Ok(false);
        }
        let total = len as usize + 8;
        if !self.fill(rel + total)? {
            return Ok(false);
        }
        let pos = self.start + rel;
        let frame = &self.buf[pos..pos + total];
        // The layout check first: it rejects nearly every false candidate without reading
        // its bytes, where the checksum would read all of them.
        Ok(payload_fits(ty, &frame[5..total - 4]) && crc_ok(frame))
    }

    /// After damage at the current position: skip to the next valid frame (or the end).
    fn resync(&mut self, kind: DamageKind) -> Result<(), WireError> {
        let offset = self.offset;
        let mut skipped = 1usize;
        loop {
            if !self.fill(skipped + 1)? {
                skipped = self.available();
                break;
            }
            if self.valid_frame_at(skipped)? {
                break;
            }
            skipped += 1;
        }
        self.consume(skipped);
        self.damage.push(Damage {
            offset,
            kind,
            bytes_skipped: skipped as u64,
        });
        Ok(())
    }

    fn damaged(&mut self, kind: DamageKind) -> Result<(), WireError> {
        match self.mode {
            ReadMode::Strict => Err(WireError::Damaged {
                offset: self.offset,
                what: kind.to_string(),
            }),
            ReadMode::Salvage => self.resync(kind),
        }
    }

    /// The next record, `Ok(None)` at the end of the stream.
    pub fn next_record(&mut self) -> Result<Option<Record>, WireError> {
        loop {
            if !self.fill(4)? {
                let rest = self.available();
                if rest == 0 {
                    return Ok(None);
                }
                return self.truncated_tail(rest);
            }
            let len = self.frame_len_at(self.start);
            if len == 0 || len > MAX_FRAME_LEN {
                self.damaged(DamageKind::BadLength(len))?;
                continue;
            }
            let total = len as usize + 8;
            if !self.fill(total)? {
                let rest = self.available();
                return self.truncated_tail(rest);
            }
            let frame = &self.buf[self.start..self.start + total];
            if !crc_ok(frame) {
                self.damaged(DamageKind::ChecksumMismatch)?;
                continue;
            }
            let ty = frame[4];
            let decoded = decode_payload(ty, &frame[5..5 + len as usize - 1]);
            match decoded {
                Ok(record) => {
                    self.consume(total);
                    self.frames_read += 1;
                    if matches!(record, Record::Unknown { .. }) {
                        self.unknown_frames += 1;
                        continue;
                    }
                    return Ok(Some(record));
                }
                Err(e) => {
                    let kind = DamageKind::Malformed(e.to_string());
                    match self.mode {
                        ReadMode::Strict => {
                            return Err(WireError::Damaged {
                                offset: self.offset,
                                what: kind.to_string(),
                            })
                        }
                        ReadMode::Salvage => {
                            let offset = self.offset;
                            self.consume(total);
                            self.damage.push(Damage {
                                offset,
                                kind,
                                bytes_skipped: total as u64,
                            });
                        }
                    }
                }
            }
        }
    }

    fn truncated_tail(&mut self, rest: usize) -> Result<Option<Record>, WireError> {
        match self.mode {
            ReadMode::Strict => Err(WireError::Damaged {
                offset: self.offset,
                what: DamageKind::Truncated.to_string(),
            }),
            ReadMode::Salvage => {
                self.damage.push(Damage {
                    offset: self.offset,
                    kind: DamageKind::Truncated,
                    bytes_skipped: rest as u64,
                });
                self.consume(rest);
                Ok(None)
            }
        }
    }
}

/// `frame` is len + type + payload + crc; checks the CRC.
fn crc_ok(frame: &[u8]) -> bool {
    let n = frame.len();
    if n < FRAME_OVERHEAD {
        return false;
    }
    let stored = u32::from_le_bytes([frame[n - 4], frame[n - 3], frame[n - 2], frame[n - 1]]);
    crc32fast::hash(&frame[4..n - 4]) == stored
}
