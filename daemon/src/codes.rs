//! The one place the daemon turns the raw codes stored in wire events, live-set blobs and
//! rows (event kind `u8`, memory kind `u8`, API `u16`, vendor `u8`) into
//! `memwatch-wire`'s enums and their stable names, and back. Every other module calls
//! these, so when the wire crate's own typed accessors change, only this file does.

use memwatch_wire::{Api, Event, EventKind, MemKind, Vendor};

/// The event kind of a stored code; `None` for one this build does not know.
pub(crate) fn event_kind(raw: u8) -> Option<EventKind> {
    EventKind::from_u8(raw)
}

/// The memory kind of a stored code; `None` for one this build does not know.
pub(crate) fn mem_kind(raw: u8) -> Option<MemKind> {
    MemKind::from_u8(raw)
}

/// The API of a stored code (unknown numbers give [`Api::Unknown`]).
pub(crate) fn api(raw: u16) -> Api {
    Api::from_u16(raw)
}

/// The name of an event kind code as JSON shows it ("unknown" for a code this build does
/// not know).
pub(crate) fn event_kind_name(raw: u8) -> &'static str {
    event_kind(raw).map_or("unknown", EventKind::name)
}

/// The name of a memory kind code as JSON shows it ("unknown" when not known).
pub(crate) fn mem_kind_name(raw: u8) -> &'static str {
    mem_kind(raw).map_or("unknown", MemKind::name)
}

/// The name of an API code (its call name, "unknown" when not known).
pub(crate) fn api_name(raw: u16) -> &'static str {
    api(raw).name()
}

/// The name of a device-info vendor code.
pub(crate) fn vendor_name(raw: u8) -> &'static str {
    Vendor::from_u8(raw).name()
}

/// First code of the PJRT APIs in `memwatch-wire`'s numbering (the framework-level calls
/// the PJRT wrapper records: executes, completions, buffers).
const PJRT_API_BASE: u16 = 3000;

/// Whether an event comes from the PJRT wrapper (an API this build knows, numbered
/// among the PJRT calls).
pub(crate) fn is_pjrt(e: &Event) -> bool {
    e.api >= PJRT_API_BASE && api(e.api) != Api::Unknown
}

/// The stored code of an event kind.
pub(crate) fn event_kind_code(k: EventKind) -> u8 {
    k as u8
}

/// The stored code of a memory kind.
pub(crate) fn mem_kind_code(k: MemKind) -> u8 {
    k as u8
}

/// The stored code of an API.
pub(crate) fn api_code(a: Api) -> u16 {
    a as u16
}
