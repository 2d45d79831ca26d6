//! The wrappers placed in the copied `PJRT_Api` table.
//!
//! Each wrapper calls the plugin's real entry with the caller's args untouched, returns
//! its `PJRT_Error*` untouched, and records afterwards: compile/load (span + the
//! executable's name, fingerprint and compiled memory stats, asked of the plugin on the
//! compiling thread), execute (one span per device, output buffers with their on-device
//! size — asked of the plugin on an executable's first execute, then cached per output
//! since output shapes are static —, a completion span from `PJRT_Event_OnReady` when
//! the caller asked for completion events, a memory-stats request for the flusher),
//! buffer creation / copy / destroy. An execute error is recorded with its code and the
//! size its RESOURCE_EXHAUSTED message names, whether Execute returned it or it came
//! later with the completion event or — when the caller asked for no completion events —
//! on an output buffer's ready event (`PJRT_Buffer_ReadyEvent`, then `PJRT_Event_OnReady`,
//! `_Await` or `_Error`; the links live in `ready`), once per execution and device.
//! Fields are only read when the caller's `struct_size` covers them. No lock is held
//! across a real call and the recording guard is not held either, so the driver calls
//! the plugin makes inside (cuMemAlloc ...) are still recorded.
//!
//! Every entry has the same shape: memwatch's part before the real call (`shared::before`),
//! the real call once with the caller's args, memwatch's part after it (`shared::after`);
//! both parts are caught (`panic_guard`), so a bug in them loses a record, never the
//! plugin's answer. The callbacks the shim registers with the plugin are caught too,
//! and the caller's own callback always runs.
//!
//! Laid out by what the entries handle: `client` (devices, destroy), `executable`
//! (compile / load / destroy), `execute` (spans, outputs, completion), `buffer`
//! (creation, copies, release), `event` (errors on the outputs' ready events); what
//! they share is in `shared`, the plugin calls they make in `super::plugin`.

/// Whether the caller's args struct (`$args`, a non-null pointer to `$ty`) covers
/// `$field` (its `struct_size` reaches past it). Reads `struct_size`: use inside an
/// `unsafe` block whose SAFETY note says `$args` is valid.
macro_rules! field_ok {
    ($args:expr, $ty:ty, $field:ident) => {
        $crate::pjrt::abi::covers(
            (*$args).struct_size,
            core::mem::offset_of!($ty, $field) + core::mem::size_of::<usize>(),
        )
    };
}

mod buffer;
mod client;
mod event;
mod executable;
mod execute;
mod shared;

pub(super) use buffer::{
    buffer_copy_to_device, buffer_copy_to_memory, buffer_delete, buffer_destroy, buffer_from_host,
};
pub(super) use client::{client_addressable_devices, client_destroy};
pub(super) use event::{
    buffer_ready_event, event_await, event_destroy, event_error, event_on_ready,
};
pub(super) use executable::{client_compile, deserialize_and_load, loaded_destroy};
pub(super) use execute::execute;
