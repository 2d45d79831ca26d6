//! The one place the daemon turns the raw codes stored in wire events, live-set blobs and
//! rows (event kind `u8`, memory kind `u8`, API `u16`, vendor `u8`) into
//! `memwatch-wire`'s enums and their stable names, and back. Every other module calls
//! these, so when the wire crate's own typed accessors change, only this file does.

use memwatch_wire::{Api, ApiFamily, Event, EventKind, MemKind, Vendor};

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

/// The `argv[0]` of the process a PyTorch snapshot run is stored with
/// (`memwatch_analysis::torch`): a recording, never a running program.
pub(crate) const SNAPSHOT_ARGV0: &str = "pytorch-memory-snapshot";

/// The condition of [`NOT_DATA_MARKER`] as a literal, for [`GROUPING_MARKER`].
macro_rules! not_data_marker {
    () => {
        "text NOT LIKE 'torch.stack %' AND text NOT LIKE 'torch.segment %'"
    };
}

/// An SQL condition on `annotations.text` that keeps annotations and leaves out the
/// markers a snapshot import stores as data (`torch.stack N` stacks, `torch.segment`
/// segments at the dump): they are read by the snapshot views, not shown or grouped by
/// as annotations.
pub(crate) const NOT_DATA_MARKER: &str = not_data_marker!();

/// [`NOT_DATA_MARKER`] and no `memwatch.tag` either: what the Peak page may group live
/// allocations by (a run's tags describe the whole run, not the allocations after them).
pub(crate) const GROUPING_MARKER: &str =
    concat!(not_data_marker!(), " AND text NOT LIKE 'memwatch.tag %'");

/// A `LIKE` pattern matching the stored argv (a JSON array) of a snapshot's process.
pub(crate) fn snapshot_argv_pattern() -> String {
    format!("[\"{SNAPSHOT_ARGV0}\"%")
}

/// Whether an event comes from the PJRT wrapper (an API this build knows, of the PJRT
/// family: executes, completions, buffers). PyTorch's snapshot events (`torch:alloc`,
/// `torch:free`, [`ApiFamily::Torch`]) are framework-level too, but not PJRT records.
pub(crate) fn is_pjrt(e: &Event) -> bool {
    api(e.api).family() == Some(ApiFamily::Pjrt)
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

/// The result of a failed call as its API family names it: the driver's error name
/// (`CUDA_ERROR_OUT_OF_MEMORY`, `hipErrorOutOfMemory`, `cudaErrorMemoryAllocation`), the
/// status code of a PJRT call (`RESOURCE_EXHAUSTED`), `torch.OutOfMemoryError` for a
/// request PyTorch's caching allocator refused; else `error N`. `api` is the stored API
/// name (incidents keep the name).
pub(crate) fn result_name(api: &str, result: i64) -> String {
    let a = Api::from_name(api).unwrap_or(Api::Unknown);
    let code = result as i32;
    let known = match a.family() {
        Some(ApiFamily::Pjrt) => match memwatch_analysis::doctor::failure::result_code_name(code) {
            "error" => None,
            n => Some(n),
        },
        Some(ApiFamily::Torch) => (result == TORCH_OOM).then_some("torch.OutOfMemoryError"),
        _ => memwatch_analysis::capture::result_name(a, code),
    };
    known.map_or_else(|| format!("error {result}"), str::to_string)
}

/// PJRT's status code for "out of memory" (absl `RESOURCE_EXHAUSTED`).
const PJRT_RESOURCE_EXHAUSTED: i64 = 8;
/// The result of a refused `torch:alloc` (the snapshot's `oom` entry).
const TORCH_OOM: i64 = 2;
/// The out-of-memory result of every driver family (hipErrorOutOfMemory,
/// CUDA_ERROR_OUT_OF_MEMORY, cudaErrorMemoryAllocation).
const DRIVER_OOM: i64 = 2;

/// Whether a failed call (stored API name, result) ran out of memory.
pub(crate) fn is_oom(api: &str, result: i64) -> bool {
    match Api::from_name(api).and_then(Api::family) {
        Some(ApiFamily::Pjrt) => result == PJRT_RESOURCE_EXHAUSTED,
        Some(ApiFamily::Torch) => result == TORCH_OOM,
        _ => result == DRIVER_OOM,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_are_named_by_their_family() {
        let exec = Api::PjrtExecuteComplete.name();
        assert_eq!(result_name(exec, 8), "RESOURCE_EXHAUSTED");
        assert!(is_oom(exec, 8) && !is_oom(exec, 2));
        assert_eq!(result_name("cuMemAlloc_v2", 2), "CUDA_ERROR_OUT_OF_MEMORY");
        assert_eq!(result_name("hipMalloc", 2), "hipErrorOutOfMemory");
        assert!(is_oom("hipMalloc", 2) && !is_oom("hipMalloc", 101));
        assert_eq!(
            result_name(Api::TorchAlloc.name(), 2),
            "torch.OutOfMemoryError"
        );
        assert_eq!(result_name("hipMalloc", 12345), "error 12345");
        assert_eq!(result_name("no such call", 8), "error 8");
    }
}
