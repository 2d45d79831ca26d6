//! Reading a frame stream from any `std::io::Read`: file or socket.
//!
//! Owns the policy for damaged input. In [`ReadMode::Salvage`] (files) a cut-off tail
//! or a corrupt frame is recorded as [`Damage`] and reading goes on from the next valid
//! frame, so a capture cut off by a crash yields everything up to its last whole frame.
//! In [`ReadMode::Strict`] (sockets) the first damaged frame is an error, so the caller
//! can close that connection. It does not interpret records (see the analysis crate).

use std::io::Read;

use crate::event::Event;
use crate::frame::{
    decode_payload_reusing, decode_preamble, frame_type, payload_fits, Record, FRAME_OVERHEAD,
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
    /// An events buffer handed back with [`FrameReader::recycle`]: the next events frame
    /// is decoded into it.
    spare_events: Vec<Event>,
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
            spare_events: Vec::new(),
        };
        if !r.fill(PREAMBLE_LEN)? {
            return Err(WireError::ShortPreamble { got: r.available() });
        }
        decode_preamble(&r.buf[r.start..r.start + PREAMBLE_LEN])?;
        r.consume(PREAMBLE_LEN);
        Ok(r)
    }

    /// Hands back a record the caller is done with: an events frame's buffer is kept
    /// (the larger one) and the next events frame is decoded into it, so a reader of
    /// many large frames does not allocate, and have the kernel zero, a buffer for each.
    pub fn recycle(&mut self, record: Record) {
        if let Record::Events(mut events) = record {
            if events.capacity() > self.spare_events.capacity() {
                events.clear();
                self.spare_events = events;
            }
        }
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
    /// The damaged bytes are consumed as the scan goes, so however long the damage
    /// (a capture followed by gigabytes of zeros), the buffer holds at most one candidate
    /// frame: memory stays fixed, and only offsets whose type byte names a known frame
    /// type are checked as candidates.
    fn resync(&mut self, kind: DamageKind) -> Result<(), WireError> {
        let offset = self.offset;
        let mut skipped = 0u64;
        loop {
            skipped += self.skip_to_candidate()?;
            if !self.fill(5)? {
                let rest = self.available();
                self.consume(rest);
                skipped += rest as u64;
                break;
            }
            if self.valid_frame_at(0)? {
                break;
            }
        }
        self.damage.push(Damage {
            offset,
            kind,
            bytes_skipped: skipped,
        });
        Ok(())
    }

    /// Steps over the byte at the current position (it starts no valid frame) and over
    /// every following one that cannot start a frame of a known type (its type byte, 4
    /// bytes on, is not one); returns the bytes consumed. Stops at the next candidate or
    /// when fewer than 5 bytes are left.
    fn skip_to_candidate(&mut self) -> Result<u64, WireError> {
        self.consume(1);
        let mut skipped = 1u64;
        while self.fill(5)? {
            let avail = &self.buf[self.start..];
            match avail[4..].iter().position(|&t| frame_type::is_known(t)) {
                Some(r) => {
                    self.consume(r);
                    return Ok(skipped + r as u64);
                }
                None => {
                    let r = avail.len() - 4;
                    self.consume(r);
                    skipped += r as u64;
                }
            }
        }
        Ok(skipped)
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
            let decoded =
                decode_payload_reusing(ty, &frame[5..5 + len as usize - 1], &mut self.spare_events);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::{encode_preamble, encode_record};
    use crate::records::Dropped;

    fn dropped(i: u64) -> Record {
        Record::Dropped(Dropped {
            pid: 1,
            ts_ns: i,
            dropped_total: i,
        })
    }

    /// A capture, 64 MiB of zeros, then more frames: every frame is read, the zeros are
    /// one damaged region, and the reader's buffer never holds them (fixed memory, where
    /// it used to grow by the whole damaged region).
    #[test]
    fn a_long_damaged_region_is_scanned_in_fixed_memory() {
        let mut head = encode_preamble().to_vec();
        for i in 0..3 {
            encode_record(&dropped(i), &mut head).unwrap();
        }
        let mut tail = Vec::new();
        for i in 3..6 {
            encode_record(&dropped(i), &mut tail).unwrap();
        }
        let zeros = 64u64 << 20;
        let src = std::io::Cursor::new(head.clone())
            .chain(std::io::repeat(0).take(zeros))
            .chain(std::io::Cursor::new(tail));
        let mut r = FrameReader::new(src, ReadMode::Salvage).unwrap();
        let mut got = Vec::new();
        while let Some(rec) = r.next_record().unwrap() {
            got.push(rec);
        }
        assert_eq!(got, (0..6).map(dropped).collect::<Vec<_>>());
        assert_eq!(r.damage().len(), 1);
        assert_eq!(r.damage()[0].offset, head.len() as u64);
        assert_eq!(r.damage()[0].bytes_skipped, zeros);
        // The buffer's capacity never shrinks: this is the most it ever held.
        let most = r.buf.capacity();
        assert!(
            most <= 2 * READ_CHUNK,
            "the buffer grew to {most} bytes over {zeros} damaged bytes"
        );
    }

    /// Damage that ends in a frame whose type byte looks known but whose checksum is
    /// wrong, then a good frame: the scan checks that candidate and goes on past it.
    #[test]
    fn the_scan_goes_on_past_a_false_candidate() {
        let mut bytes = encode_preamble().to_vec();
        encode_record(&dropped(1), &mut bytes).unwrap();
        let at = bytes.len() as u64;
        let mut bad = Vec::new();
        encode_record(&dropped(2), &mut bad).unwrap();
        let n = bad.len();
        bad[n - 1] ^= 0xff; // checksum broken
        bytes.extend_from_slice(&[0u8; 1000]);
        bytes.extend_from_slice(&bad);
        bytes.extend_from_slice(&[7u8; 33]);
        encode_record(&dropped(3), &mut bytes).unwrap();
        let mut r = FrameReader::new(&bytes[..], ReadMode::Salvage).unwrap();
        let mut got = Vec::new();
        while let Some(rec) = r.next_record().unwrap() {
            got.push(rec);
        }
        assert_eq!(got, vec![dropped(1), dropped(3)]);
        assert_eq!(r.damage().len(), 1);
        assert_eq!(r.damage()[0].offset, at);
        assert_eq!(r.damage()[0].bytes_skipped, 1000 + n as u64 + 33);
    }
}
