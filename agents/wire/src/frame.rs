//! Framing of the memwatch wire format (`.mwcap` files and socket streams alike).
//!
//! Owns the stream preamble, the frame envelope (length, type, checksum), the [`Record`]
//! enum over the record types of `records`, and dispatch by frame type: encoding,
//! decoding, the size check salvage reading makes, and the layout table. The layout of
//! each record is its definition in `records` (and `event` for [`Event`]); the table in
//! the crate README is generated from those definitions and checked by a test
//! ([`layout_table`]). It does not own I/O policy (see `reader`) or the meaning of event
//! fields (see `event`).
//!
//! ```text
//! stream   := preamble frame*
//! preamble := magic[8] = "MWCAP\0\r\n"  version:u16 (=1)  flags:u16 (=0)  reserved:u32 (=0)
//! frame    := len:u32  type:u8  payload[len-1]  crc:u32
//!             len counts type+payload; crc = CRC-32/ISO-HDLC (zlib) of type+payload.
//!             len is at least 1 and at most MAX_FRAME_LEN.
//! ```
//!
//! All integers are little-endian. Frame types this version does not know are skipped by
//! readers (counted), so the format can grow without a version bump; after damage, a
//! salvaging reader resumes at the next valid frame of a type it knows. Appended values
//! (no format version change; older readers map unknown `api` numbers to `Api::Unknown`):
//! `api` 2009 = cudaSetDevice (event kind `set_device`, added with the LD_PRELOAD shim).
//!
//! Timestamps are CLOCK_MONOTONIC nanoseconds; each `process_start` carries the
//! monotonic and wall-clock anchors taken at the same moment.

use crate::codec::{Cursor, Field, FieldLayout, Put, SliceWriter, WireStruct};
use crate::event::Event;
use crate::identity::DeviceIdentity;
use crate::WireError;

pub use crate::records::{
    encode_events, Backtrace, CompiledMemoryStats, DeviceInfo, DeviceReading, DeviceSample,
    Dropped, Marker, Module, ModuleMap, PjrtExecutable, PjrtMemoryStats, ProcessEnd, ProcessStart,
    ProcessUse, WireRecord, EVENT_SIZE,
};

/// First 8 bytes of every stream.
pub const MAGIC: [u8; 8] = *b"MWCAP\0\r\n";
/// Format version written by this crate. Readers accept exactly this version.
pub const FORMAT_VERSION: u16 = 1;
/// Size of the stream preamble in bytes.
pub const PREAMBLE_LEN: usize = 16;
/// Frame overhead: len (4) + type (1) + crc (4).
pub const FRAME_OVERHEAD: usize = 9;
/// Largest accepted `len` field (type + payload), 16 MiB.
pub const MAX_FRAME_LEN: u32 = 16 << 20;

const _: () = assert!(EVENT_SIZE == 72, "the event layout is part of the format");

/// Declares the record types a frame can carry, once, and derives from the list the
/// [`Record`] enum, the `frame_type` numbers and every dispatch by frame type.
macro_rules! records {
    ($( $(#[$meta:meta])* $variant:ident($ty:ty) = $konst:ident, )*) => {
        /// One decoded frame.
        #[derive(Debug, Clone, PartialEq)]
        pub enum Record {
            $( $(#[$meta])* $variant($ty), )*
            /// A frame type this version does not know; skipped.
            Unknown { frame_type: u8, len: u32 },
        }

        /// Frame type numbers (each defined with its record in `records`).
        pub mod frame_type {
            use super::*;
            $( pub const $konst: u8 = <$ty as WireRecord>::FRAME_TYPE; )*

            /// Whether this version knows frame type `ty`. Salvage reading resumes after
            /// damage only at a frame of a known type.
            pub fn is_known(ty: u8) -> bool {
                matches!(ty, $($konst)|*)
            }
        }

        impl Record {
            /// The frame type this record is written with.
            pub fn frame_type(&self) -> u8 {
                match self {
                    $( Record::$variant(_) => <$ty as WireRecord>::FRAME_TYPE, )*
                    Record::Unknown { frame_type, .. } => *frame_type,
                }
            }

            /// Whether every record of this type has the same size (those can be encoded
            /// into a small stack buffer: [`encode_small_record_into`]).
            pub fn has_fixed_size(&self) -> bool {
                match self {
                    $( Record::$variant(_) => <$ty as WireRecord>::FIXED_SIZE.is_some(), )*
                    Record::Unknown { .. } => false,
                }
            }

            fn encode_payload(&self, w: &mut impl Put) -> Result<(), WireError> {
                match self {
                    $( Record::$variant(r) => r.encode(w), )*
                    Record::Unknown { frame_type, .. } => {
                        return Err(WireError::CannotEncodeUnknown {
                            frame_type: *frame_type,
                        })
                    }
                }
                Ok(())
            }
        }

        /// Decodes the payload of a frame whose type byte is `ty` (CRC already checked).
        pub fn decode_payload(ty: u8, payload: &[u8]) -> Result<Record, WireError> {
            let mut c = Cursor::new(payload, ty);
            let record = match ty {
                $( frame_type::$konst => Record::$variant(<$ty as WireRecord>::decode(&mut c)?), )*
                other => {
                    return Ok(Record::Unknown {
                        frame_type: other,
                        len: payload.len() as u32 + 1,
                    })
                }
            };
            whole_payload(&c, ty, record)
        }

        /// [`decode_payload`], decoding an `events` frame into `spare` (taken: the
        /// record owns it) instead of a fresh buffer. Same result, same errors.
        pub fn decode_payload_reusing(
            ty: u8,
            payload: &[u8],
            spare: &mut Vec<Event>,
        ) -> Result<Record, WireError> {
            if ty != frame_type::EVENTS {
                return decode_payload(ty, payload);
            }
            let mut c = Cursor::new(payload, ty);
            let mut events = std::mem::take(spare);
            crate::records::decode_events_into(&mut c, &mut events)?;
            whole_payload(&c, ty, Record::Events(events))
        }

        /// `record`, decoded from a frame of type `ty`, when the decoding took the whole
        /// payload (`c` at its end); bytes left over are an error.
        fn whole_payload(c: &Cursor<'_>, ty: u8, record: Record) -> Result<Record, WireError> {
            match c.remaining() {
                0 => Ok(record),
                extra => Err(WireError::TrailingBytes { frame_type: ty, extra }),
            }
        }

        /// Whether `payload` is exactly as long as the layout of frame type `ty` says,
        /// reading only its counts and string lengths: true exactly when
        /// [`decode_payload`] would accept it, without decoding or copying anything.
        /// Salvage reading asks this of a candidate frame before checksumming it, so
        /// resync over a damaged stretch does not checksum megabytes at every offset whose
        /// bytes merely look like a frame header. Unknown types fit at any size.
        pub fn payload_fits(ty: u8, payload: &[u8]) -> bool {
            let mut c = Cursor::new(payload, ty);
            let walked = match ty {
                $( frame_type::$konst => <$ty as WireRecord>::skip(&mut c), )*
                _ => return true,
            };
            walked.is_ok() && c.remaining() == 0
        }

        /// The layout of every frame type and of the structs inside them, as the crate
        /// README's table shows it (generated from the record definitions).
        pub fn layout_table() -> String {
            let mut out = String::from("| type | record | payload (fields in order) |\n|---|---|---|\n");
            $(
                out.push_str(&format!(
                    "| {} | `{}` | {} |\n",
                    <$ty as WireRecord>::FRAME_TYPE,
                    <$ty as WireRecord>::NAME,
                    fields_text(&<$ty as WireRecord>::fields(), false),
                ));
            )*
            out.push_str("\n| struct | size | fields in order |\n|---|---|---|\n");
            for (name, size, fields) in [
                ("Event", <Event as Field>::FIXED_SIZE, <Event as WireStruct>::fields()),
                ("CompiledMemoryStats", <CompiledMemoryStats as Field>::FIXED_SIZE,
                    <CompiledMemoryStats as WireStruct>::fields()),
                ("Module", <Module as Field>::FIXED_SIZE, <Module as WireStruct>::fields()),
                ("ProcessUse", <ProcessUse as Field>::FIXED_SIZE, <ProcessUse as WireStruct>::fields()),
                ("DeviceIdentity", <DeviceIdentity as Field>::FIXED_SIZE,
                    <DeviceIdentity as WireStruct>::fields()),
            ] {
                let size = size.map_or("variable".to_string(), |n| format!("{n} bytes"));
                out.push_str(&format!("| `{name}` | {size} | {} |\n", fields_text(&fields, true)));
            }
            out
        }
    };
}

records! {
    ProcessStart(ProcessStart) = PROCESS_START,
    Events(Vec<Event>) = EVENTS,
    DeviceInfo(DeviceInfo) = DEVICE_INFO,
    Marker(Marker) = MARKER,
    Dropped(Dropped) = DROPPED,
    ProcessEnd(ProcessEnd) = PROCESS_END,
    DeviceSample(DeviceSample) = DEVICE_SAMPLE,
    PjrtExecutable(PjrtExecutable) = PJRT_EXECUTABLE,
    PjrtMemoryStats(PjrtMemoryStats) = PJRT_MEMORY_STATS,
    Backtrace(Backtrace) = BACKTRACE,
    ModuleMap(ModuleMap) = MODULE_MAP,
    DeviceReading(DeviceReading) = DEVICE_READING,
}

/// `name:layout` pairs in backquotes, space-separated; with `offsets`, each prefixed by its byte
/// offset while the fields before it have fixed sizes.
fn fields_text(fields: &[FieldLayout], offsets: bool) -> String {
    let mut at = Some(0usize);
    let mut parts = Vec::with_capacity(fields.len());
    for f in fields {
        parts.push(match at.filter(|_| offsets) {
            Some(off) => format!("`@{off} {}:{}`", f.name, f.layout),
            None => format!("`{}:{}`", f.name, f.layout),
        });
        at = at.zip(f.size).map(|(a, n)| a + n);
    }
    parts.join(" ")
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
#[inline]
pub fn encode_event(e: &Event, out: &mut [u8; EVENT_SIZE]) {
    e.put_fixed(out);
}

/// Decodes one event from exactly [`EVENT_SIZE`] bytes.
#[inline]
pub fn decode_event(b: &[u8; EVENT_SIZE]) -> Event {
    Event::get_fixed(b)
}

/// Wraps the payload `body` writes in a frame (length, type, checksum) appended to `w`;
/// the length is patched in afterwards. `start` is where the frame begins in `w`'s bytes.
fn frame_around<W: Put + FrameBytes>(
    w: &mut W,
    ty: u8,
    body: impl FnOnce(&mut W) -> Result<(), WireError>,
) -> Result<(), WireError> {
    let start = w.written();
    w.put(&[0, 0, 0, 0, ty]);
    body(w)?;
    let len = w.written().saturating_sub(start + 4);
    if len > MAX_FRAME_LEN as usize {
        w.truncate_to(start);
        return Err(WireError::FrameTooLarge { len: len as u64 });
    }
    let bytes = w.bytes_mut(start);
    // Shorter only when a fixed buffer ran out (its writer then reports the overflow).
    if let Some(len_field) = bytes.get_mut(..4) {
        len_field.copy_from_slice(&(len as u32).to_le_bytes());
        let crc = crc32fast::hash(bytes.get(4..).unwrap_or_default());
        w.put(&crc.to_le_bytes());
    }
    Ok(())
}

/// What [`frame_around`] needs besides [`Put`]: the bytes written so far.
trait FrameBytes {
    fn written(&self) -> usize;
    fn bytes_mut(&mut self, from: usize) -> &mut [u8];
    fn truncate_to(&mut self, len: usize);
}

impl FrameBytes for Vec<u8> {
    fn written(&self) -> usize {
        self.len()
    }
    fn bytes_mut(&mut self, from: usize) -> &mut [u8] {
        &mut self[from..]
    }
    fn truncate_to(&mut self, len: usize) {
        self.truncate(len);
    }
}

impl FrameBytes for SliceWriter<'_> {
    fn written(&self) -> usize {
        self.len()
    }
    fn bytes_mut(&mut self, from: usize) -> &mut [u8] {
        &mut self.written_mut()[from..]
    }
    fn truncate_to(&mut self, _len: usize) {}
}

/// Appends one framed record to `out`.
pub fn encode_record(record: &Record, out: &mut Vec<u8>) -> Result<(), WireError> {
    frame_around(out, record.frame_type(), |w| record.encode_payload(w))
}

/// Writes one framed record into `out` without allocating (the shim's last pass may run
/// while the program's allocator is locked). Returns the number of bytes written; `None`
/// when `out` is too small or the record cannot be encoded. Same bytes as
/// [`encode_record`].
pub fn encode_record_into(record: &Record, out: &mut [u8]) -> Option<usize> {
    let mut w = SliceWriter::new(out);
    frame_around(&mut w, record.frame_type(), |w| record.encode_payload(w)).ok()?;
    w.finish()
}

/// [`encode_record_into`] for records of a fixed size (`dropped`, `process_end`,
/// `pjrt_memory_stats`), which fit a small stack buffer; `None` for any other record.
pub fn encode_small_record_into(record: &Record, out: &mut [u8]) -> Option<usize> {
    if !record.has_fixed_size() {
        return None;
    }
    encode_record_into(record, out)
}

/// Writes an events frame for `events` into `out` without allocating. Returns the
/// number of bytes written, or `None` when `out` is too small. This is the shim's path.
pub fn encode_events_frame_into(events: &[Event], out: &mut [u8]) -> Option<usize> {
    let mut w = SliceWriter::new(out);
    frame_around(&mut w, frame_type::EVENTS, |w| {
        encode_events(events, w);
        Ok(())
    })
    .ok()?;
    w.finish()
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
    fn no_alloc_small_records_equal_record_encoding() {
        for rec in [
            Record::ProcessEnd(ProcessEnd {
                pid: 7,
                ts_ns: u64::MAX - 3,
                exit_code: 134,
            }),
            Record::Dropped(Dropped {
                pid: 9,
                ts_ns: 12,
                dropped_total: 1 << 40,
            }),
        ] {
            let mut want = Vec::new();
            encode_record(&rec, &mut want).unwrap();
            let mut buf = [0u8; 64];
            let n = encode_small_record_into(&rec, &mut buf).unwrap();
            assert_eq!(&buf[..n], &want[..]);
            assert_eq!(encode_small_record_into(&rec, &mut buf[..n - 1]), None);
        }
        let other = Record::Events(vec![]);
        assert_eq!(encode_small_record_into(&other, &mut [0u8; 64]), None);
    }

    #[test]
    fn the_readme_layout_table_is_the_one_the_record_definitions_give() {
        let readme = include_str!("../README.md");
        let (begin, end) = ("<!-- layout:begin -->\n", "<!-- layout:end -->");
        let table = readme
            .split_once(begin)
            .and_then(|(_, rest)| rest.split_once(end))
            .map(|(t, _)| t);
        let want = layout_table();
        assert_eq!(
            table,
            Some(want.as_str()),
            "agents/wire/README.md must hold, between {begin:?} and {end:?}:\n{want}"
        );
    }

    #[test]
    fn event_fields_sit_at_their_documented_offsets() {
        let e = Event {
            ts_ns: 0x0101_0101_0101_0101,
            device: -2,
            api: 0x0302,
            kind: 0x04,
            mem_kind: 0x05,
            ..Event::default()
        };
        let mut b = [0xAAu8; EVENT_SIZE];
        encode_event(&e, &mut b);
        assert_eq!(&b[0..8], &[1; 8]);
        assert_eq!(&b[60..64], &(-2i32).to_le_bytes());
        assert_eq!(&b[64..68], &[0x02, 0x03, 0x04, 0x05]);
        assert_eq!(&b[68..72], &[0; 4], "reserved bytes are zero");
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
