//! memwatch-wire: THE event schema and framing shared by every memwatch component.
#![doc = include_str!("../README.md")]

pub mod codec;
pub mod device_props;
pub mod event;
pub mod frame;
pub mod identity;
pub mod ingest;
pub mod pre_attach;
pub mod reader;
pub mod records;
pub mod writer;

pub use device_props::{DeviceProps, DEVICE_PROPS_PREFIX};
pub use event::{Api, ApiFamily, Event, EventKind, MemKind, Vendor};
pub use frame::{
    encode_events_frame_into, encode_record, encode_record_into, encode_small_record_into,
    Backtrace, CompiledMemoryStats, DeviceInfo, DeviceReading, DeviceSample, Dropped, Marker,
    Module, ModuleMap, PjrtExecutable, PjrtMemoryStats, ProcessEnd, ProcessStart, ProcessUse,
    Record, EVENT_SIZE, FORMAT_VERSION, MAGIC, PREAMBLE_LEN,
};
pub use identity::{
    canonical_pci_bus_id, canonical_uuid, find_device, find_device_like, DeviceIdentity, DeviceLook,
};
pub use reader::{Damage, DamageKind, FrameReader, ReadMode};
pub use writer::FrameWriter;

/// Errors of encoding and decoding.
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    #[error("not a memwatch capture: wrong magic bytes (expected \"MWCAP\\0\\r\\n\")")]
    BadMagic,
    #[error("not a memwatch capture: only {got} bytes, shorter than the 16-byte header")]
    ShortPreamble { got: usize },
    #[error(
        "capture format version {found} is not supported (this build reads version {supported})"
    )]
    UnsupportedVersion { found: u16, supported: u16 },
    #[error("frame type {frame_type}: payload too short (need {need} bytes, have {got})")]
    ShortPayload {
        frame_type: u8,
        need: usize,
        got: usize,
    },
    #[error("frame type {frame_type}: {extra} unexpected bytes after the payload")]
    TrailingBytes { frame_type: u8, extra: usize },
    #[error("frame of {len} bytes exceeds the 16 MiB limit")]
    FrameTooLarge { len: u64 },
    #[error("cannot encode a frame of unknown type {frame_type}")]
    CannotEncodeUnknown { frame_type: u8 },
    #[error("damaged stream at byte {offset}: {what}")]
    Damaged { offset: u64, what: String },
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
}
