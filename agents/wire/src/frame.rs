//! Byte layout of the memwatch wire format (`.mwcap` files and socket streams alike).
//!
//! Owns encoding and decoding of the stream preamble, frames and records. It does not
//! own I/O policy (see `reader`) or the meaning of event fields (see `event`).
//!
//! # Layout (all integers little-endian)
//!
//! ```text
//! stream   := preamble frame*
//! preamble := magic[8] = "MWCAP\0\r\n"  version:u16 (=1)  flags:u16 (=0)  reserved:u32 (=0)
//! frame    := len:u32  type:u8  payload[len-1]  crc:u32
//!             len counts type+payload; crc = CRC-32/ISO-HDLC (zlib) of type+payload.
//!             len is at least 1 and at most MAX_FRAME_LEN.
//! str      := n:u16  utf8[n]
//!
//! type 1  process_start := pid:u32 ppid:u32 mono_anchor_ns:u64 wall_anchor_unix_ns:u64
//!                          shim_version:str hostname:str argc:u16 argv:str[argc]
//! type 2  events        := count:u32 event[count]            (event = 72 bytes, below)
//! type 3  device_info   := pid:u32 device:i32 vendor:u8 total_bytes:u64 name:str
//! type 4  marker        := pid:u32 tid:u32 ts_ns:u64 device:i32 text:str
//! type 5  dropped       := pid:u32 ts_ns:u64 dropped_total:u64   (cumulative per process)
//! type 6  process_end   := pid:u32 ts_ns:u64 exit_code:i32       (-1: unknown)
//! type 7  device_sample := ts_ns:u64 device:i32 memory:u8 used_bytes:u64 total_bytes:u64
//!                          source:str                             (memory: 0 vram, 1 gtt)
//! other types: skipped by readers (counted), so the format can grow without a version bump.
//!
//! event (72 bytes):
//!   0 ts_ns:u64   8 ptr:u64   16 size:u64   24 stream:u64   32 aux:u64
//!  40 duration_ns:u64   48 pid:u32   52 tid:u32   56 result:i32   60 device:i32
//!  64 api:u16   66 kind:u8   67 mem_kind:u8   68 reserved:u32 (=0)
//! ```
//!
//! Appended values (no format version change; older readers map unknown `api` numbers to
//! `Api::Unknown`): `api` 2009 = cudaSetDevice (event kind `set_device`, added with the
//! LD_PRELOAD shim).
//!
//! Timestamps are CLOCK_MONOTONIC nanoseconds; each `process_start` carries the
//! monotonic and wall-clock anchors taken at the same moment, so readers convert to
//! "ns since the capture's start" (the earliest anchor) and to wall time.

use crate::event::Event;
use crate::WireError;

/// First 8 bytes of every stream.
pub const MAGIC: [u8; 8] = *b"MWCAP\0\r\n";
/// Format version written by this crate. Readers accept exactly this version.
pub const FORMAT_VERSION: u16 = 1;
/// Size of the stream preamble in bytes.
pub const PREAMBLE_LEN: usize = 16;
/// Size of one encoded [`Event`].
pub const EVENT_SIZE: usize = 72;
/// Frame overhead: len (4) + type (1) + crc (4).
pub const FRAME_OVERHEAD: usize = 9;
/// Largest accepted `len` field (type + payload), 16 MiB.
pub const MAX_FRAME_LEN: u32 = 16 << 20;

/// Frame type numbers (see the layout above).
pub mod frame_type {
    pub const PROCESS_START: u8 = 1;
    pub const EVENTS: u8 = 2;
    pub const DEVICE_INFO: u8 = 3;
    pub const MARKER: u8 = 4;
    pub const DROPPED: u8 = 5;
    pub const PROCESS_END: u8 = 6;
    pub const DEVICE_SAMPLE: u8 = 7;
}

/// The header of one process in a capture.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ProcessStart {
    pub pid: u32,
    pub ppid: u32,
    pub mono_anchor_ns: u64,
    pub wall_anchor_unix_ns: u64,
    pub shim_version: String,
    pub hostname: String,
    pub argv: Vec<String>,
}

/// A device the process uses.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DeviceInfo {
    pub pid: u32,
    pub device: i32,
    pub vendor: u8,
    pub total_bytes: u64,
    pub name: String,
}

/// A user or tool annotation at a point in time.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Marker {
    pub pid: u32,
    pub tid: u32,
    pub ts_ns: u64,
    pub device: i32,
    pub text: String,
}

/// The cumulative count of events a process had to drop (buffers full).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Dropped {
    pub pid: u32,
    pub ts_ns: u64,
    pub dropped_total: u64,
}

/// A process left the capture.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ProcessEnd {
    pub pid: u32,
    pub ts_ns: u64,
    pub exit_code: i32,
}

/// A device-level memory reading taken outside the process (rocm-smi, NVML, sysfs).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DeviceSample {
    pub ts_ns: u64,
    pub device: i32,
    /// 0: VRAM (dedicated or carve-out), 1: GTT (system memory mapped for the GPU).
    pub memory: u8,
    pub used_bytes: u64,
    pub total_bytes: u64,
    pub source: String,
}

/// One decoded frame.
#[derive(Debug, Clone, PartialEq)]
pub enum Record {
    ProcessStart(ProcessStart),
    Events(Vec<Event>),
    DeviceInfo(DeviceInfo),
    Marker(Marker),
    Dropped(Dropped),
    ProcessEnd(ProcessEnd),
    DeviceSample(DeviceSample),
    /// A frame type this version does not know; skipped.
    Unknown {
        frame_type: u8,
        len: u32,
    },
}

/// Writes the 16-byte stream preamble.
pub fn encode_preamble() -> [u8; PREAMBLE_LEN] {
    let mut out = [0u8; PREAMBLE_LEN];
    out[..8].copy_from_slice(&MAGIC);
    out[8..10].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
    out
}

/// Checks a preamble; returns the version on success.
pub fn decode_preamble(bytes: &[u8]) -> Result<u16, WireError> {
    if bytes.len() < PREAMBLE_LEN {
        return Err(WireError::ShortPreamble { got: bytes.len() });
    }
    if bytes[..8] != MAGIC {
        return Err(WireError::BadMagic);
    }
    let version = u16::from_le_bytes([bytes[8], bytes[9]]);
    if version != FORMAT_VERSION {
        return Err(WireError::UnsupportedVersion {
            found: version,
            supported: FORMAT_VERSION,
        });
    }
    Ok(version)
}

/// Encodes one event into exactly [`EVENT_SIZE`] bytes. Never allocates.
pub fn encode_event(e: &Event, out: &mut [u8; EVENT_SIZE]) {
    out[0..8].copy_from_slice(&e.ts_ns.to_le_bytes());
    out[8..16].copy_from_slice(&e.ptr.to_le_bytes());
    out[16..24].copy_from_slice(&e.size.to_le_bytes());
    out[24..32].copy_from_slice(&e.stream.to_le_bytes());
    out[32..40].copy_from_slice(&e.aux.to_le_bytes());
    out[40..48].copy_from_slice(&e.duration_ns.to_le_bytes());
    out[48..52].copy_from_slice(&e.pid.to_le_bytes());
    out[52..56].copy_from_slice(&e.tid.to_le_bytes());
    out[56..60].copy_from_slice(&e.result.to_le_bytes());
    out[60..64].copy_from_slice(&e.device.to_le_bytes());
    out[64..66].copy_from_slice(&e.api.to_le_bytes());
    out[66] = e.kind;
    out[67] = e.mem_kind;
    out[68..72].copy_from_slice(&0u32.to_le_bytes());
}

/// Decodes one event from exactly [`EVENT_SIZE`] bytes.
pub fn decode_event(b: &[u8; EVENT_SIZE]) -> Event {
    let u64_at = |i: usize| {
        let mut a = [0u8; 8];
        a.copy_from_slice(&b[i..i + 8]);
        u64::from_le_bytes(a)
    };
    let u32_at = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
    Event {
        ts_ns: u64_at(0),
        ptr: u64_at(8),
        size: u64_at(16),
        stream: u64_at(24),
        aux: u64_at(32),
        duration_ns: u64_at(40),
        pid: u32_at(48),
        tid: u32_at(52),
        result: u32_at(56) as i32,
        device: u32_at(60) as i32,
        api: u16::from_le_bytes([b[64], b[65]]),
        kind: b[66],
        mem_kind: b[67],
    }
}

/// Writes an events frame for `events` into `out` without allocating. Returns the
/// number of bytes written, or `None` when `out` is too small. This is the shim's path.
pub fn encode_events_frame_into(events: &[Event], out: &mut [u8]) -> Option<usize> {
    let payload_len = 4 + events.len().checked_mul(EVENT_SIZE)?;
    let total = FRAME_OVERHEAD + payload_len;
    if out.len() < total || payload_len + 1 > MAX_FRAME_LEN as usize {
        return None;
    }
    let len = (payload_len + 1) as u32;
    out[0..4].copy_from_slice(&len.to_le_bytes());
    out[4] = frame_type::EVENTS;
    out[5..9].copy_from_slice(&(events.len() as u32).to_le_bytes());
    let mut pos = 9;
    for e in events {
        let slot: &mut [u8; EVENT_SIZE] = (&mut out[pos..pos + EVENT_SIZE]).try_into().ok()?;
        encode_event(e, slot);
        pos += EVENT_SIZE;
    }
    let crc = crc32fast::hash(&out[4..pos]);
    out[pos..pos + 4].copy_from_slice(&crc.to_le_bytes());
    Some(pos + 4)
}

/// Growable payload builder used for the variable-length frames.
#[derive(Default)]
struct Payload(Vec<u8>);

impl Payload {
    fn u8(&mut self, v: u8) -> &mut Self {
        self.0.push(v);
        self
    }
    fn u16(&mut self, v: u16) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn u32(&mut self, v: u32) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn i32(&mut self, v: i32) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn u64(&mut self, v: u64) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    /// Strings longer than u16::MAX bytes are cut at a char boundary.
    fn str(&mut self, s: &str) -> &mut Self {
        let mut end = s.len().min(u16::MAX as usize);
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        self.u16(end as u16);
        self.0.extend_from_slice(&s.as_bytes()[..end]);
        self
    }
}

/// Appends one framed record to `out`.
pub fn encode_record(record: &Record, out: &mut Vec<u8>) -> Result<(), WireError> {
    let mut p = Payload::default();
    let ty = match record {
        Record::ProcessStart(h) => {
            p.u32(h.pid)
                .u32(h.ppid)
                .u64(h.mono_anchor_ns)
                .u64(h.wall_anchor_unix_ns)
                .str(&h.shim_version)
                .str(&h.hostname);
            let argc = h.argv.len().min(u16::MAX as usize);
            p.u16(argc as u16);
            for a in &h.argv[..argc] {
                p.str(a);
            }
            frame_type::PROCESS_START
        }
        Record::Events(events) => {
            p.u32(events.len() as u32);
            let mut slot = [0u8; EVENT_SIZE];
            for e in events {
                encode_event(e, &mut slot);
                p.0.extend_from_slice(&slot);
            }
            frame_type::EVENTS
        }
        Record::DeviceInfo(d) => {
            p.u32(d.pid)
                .i32(d.device)
                .u8(d.vendor)
                .u64(d.total_bytes)
                .str(&d.name);
            frame_type::DEVICE_INFO
        }
        Record::Marker(m) => {
            p.u32(m.pid)
                .u32(m.tid)
                .u64(m.ts_ns)
                .i32(m.device)
                .str(&m.text);
            frame_type::MARKER
        }
        Record::Dropped(d) => {
            p.u32(d.pid).u64(d.ts_ns).u64(d.dropped_total);
            frame_type::DROPPED
        }
        Record::ProcessEnd(e) => {
            p.u32(e.pid).u64(e.ts_ns).i32(e.exit_code);
            frame_type::PROCESS_END
        }
        Record::DeviceSample(s) => {
            p.u64(s.ts_ns)
                .i32(s.device)
                .u8(s.memory)
                .u64(s.used_bytes)
                .u64(s.total_bytes)
                .str(&s.source);
            frame_type::DEVICE_SAMPLE
        }
        Record::Unknown { frame_type, .. } => {
            return Err(WireError::CannotEncodeUnknown {
                frame_type: *frame_type,
            })
        }
    };
    let len = p.0.len() + 1;
    if len > MAX_FRAME_LEN as usize {
        return Err(WireError::FrameTooLarge { len: len as u64 });
    }
    let start = out.len();
    out.extend_from_slice(&(len as u32).to_le_bytes());
    out.push(ty);
    out.extend_from_slice(&p.0);
    let crc = crc32fast::hash(&out[start + 4..]);
    out.extend_from_slice(&crc.to_le_bytes());
    Ok(())
}

/// Cursor over a frame payload; every read is bounds-checked.
struct Cursor<'a> {
    b: &'a [u8],
    pos: usize,
    frame_type: u8,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], WireError> {
        if self.b.len() - self.pos < n {
            return Err(WireError::ShortPayload {
                frame_type: self.frame_type,
                need: self.pos + n,
                got: self.b.len(),
            });
        }
        let s = &self.b[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }
    fn u8(&mut self) -> Result<u8, WireError> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> Result<u16, WireError> {
        let s = self.take(2)?;
        Ok(u16::from_le_bytes([s[0], s[1]]))
    }
    fn u32(&mut self) -> Result<u32, WireError> {
        let s = self.take(4)?;
        Ok(u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
    }
    fn i32(&mut self) -> Result<i32, WireError> {
        Ok(self.u32()? as i32)
    }
    fn u64(&mut self) -> Result<u64, WireError> {
        let s = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(s);
        Ok(u64::from_le_bytes(a))
    }
    fn str(&mut self) -> Result<String, WireError> {
        let n = self.u16()? as usize;
        Ok(String::from_utf8_lossy(self.take(n)?).into_owned())
    }
}

/// Decodes the payload of a frame whose type byte is `ty` (CRC already checked).
pub fn decode_payload(ty: u8, payload: &[u8]) -> Result<Record, WireError> {
    let mut c = Cursor {
        b: payload,
        pos: 0,
        frame_type: ty,
    };
    let record =
        match ty {
            frame_type::PROCESS_START => {
                let pid = c.u32()?;
                let ppid = c.u32()?;
                let mono_anchor_ns = c.u64()?;
                let wall_anchor_unix_ns = c.u64()?;
                let shim_version = c.str()?;
                let hostname = c.str()?;
                let argc = c.u16()?;
                let mut argv = Vec::with_capacity(argc as usize);
                for _ in 0..argc {
                    argv.push(c.str()?);
                }
                Record::ProcessStart(ProcessStart {
                    pid,
                    ppid,
                    mono_anchor_ns,
                    wall_anchor_unix_ns,
                    shim_version,
                    hostname,
                    argv,
                })
            }
            frame_type::EVENTS => {
                let count = c.u32()? as usize;
                let body = c.take(count.checked_mul(EVENT_SIZE).ok_or(
                    WireError::ShortPayload {
                        frame_type: ty,
                        need: usize::MAX,
                        got: payload.len(),
                    },
                )?)?;
                let events = body
                    .chunks_exact(EVENT_SIZE)
                    .map(|chunk| {
                        let mut slot = [0u8; EVENT_SIZE];
                        slot.copy_from_slice(chunk);
                        decode_event(&slot)
                    })
                    .collect();
                Record::Events(events)
            }
            frame_type::DEVICE_INFO => Record::DeviceInfo(DeviceInfo {
                pid: c.u32()?,
                device: c.i32()?,
                vendor: c.u8()?,
                total_bytes: c.u64()?,
                name: c.str()?,
            }),
            frame_type::MARKER => Record::Marker(Marker {
                pid: c.u32()?,
                tid: c.u32()?,
                ts_ns: c.u64()?,
                device: c.i32()?,
                text: c.str()?,
            }),
            frame_type::DROPPED => Record::Dropped(Dropped {
                pid: c.u32()?,
                ts_ns: c.u64()?,
                dropped_total: c.u64()?,
            }),
            frame_type::PROCESS_END => Record::ProcessEnd(ProcessEnd {
                pid: c.u32()?,
                ts_ns: c.u64()?,
                exit_code: c.i32()?,
            }),
            frame_type::DEVICE_SAMPLE => Record::DeviceSample(DeviceSample {
                ts_ns: c.u64()?,
                device: c.i32()?,
                memory: c.u8()?,
                used_bytes: c.u64()?,
                total_bytes: c.u64()?,
                source: c.str()?,
            }),
            other => {
                return Ok(Record::Unknown {
                    frame_type: other,
                    len: payload.len() as u32 + 1,
                })
            }
        };
    if c.pos != payload.len() {
        return Err(WireError::TrailingBytes {
            frame_type: ty,
            extra: payload.len() - c.pos,
        });
    }
    Ok(record)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_round_trips() {
        let e = Event {
            ts_ns: 1,
            ptr: 0xdead_beef,
            size: 1 << 40,
            stream: 7,
            aux: 9,
            duration_ns: 11,
            pid: 12,
            tid: 13,
            result: -2,
            device: 7,
            kind: 3,
            mem_kind: 1,
            api: 1001,
        };
        let mut b = [0u8; EVENT_SIZE];
        encode_event(&e, &mut b);
        assert_eq!(decode_event(&b), e);
    }

    #[test]
    fn no_alloc_events_frame_equals_record_encoding() {
        let events = vec![
            Event::default(),
            Event {
                size: 5,
                ..Event::default()
            },
        ];
        let mut a = Vec::new();
        encode_record(&Record::Events(events.clone()), &mut a).unwrap();
        let mut b = vec![0u8; 512];
        let n = encode_events_frame_into(&events, &mut b).unwrap();
        assert_eq!(&a[..], &b[..n]);
        assert!(encode_events_frame_into(&events, &mut [0u8; 20]).is_none());
    }

    #[test]
    fn preamble_checks() {
        let p = encode_preamble();
        assert_eq!(decode_preamble(&p).unwrap(), FORMAT_VERSION);
        let mut bad = p;
        bad[0] = b'X';
        assert!(matches!(decode_preamble(&bad), Err(WireError::BadMagic)));
        let mut v2 = p;
        v2[8] = 2;
        assert!(matches!(
            decode_preamble(&v2),
            Err(WireError::UnsupportedVersion { found: 2, .. })
        ));
    }
}
