//! What every PJRT wrapper shares: memwatch's part before and after the real call,
//! each caught (`panic_guard`), queueing one event, and a new buffer's event.

use crate::panic_guard;
use crate::pjrt::pre_attach;
use crate::record::fault;
use core::ffi::c_void;
use memwatch_wire::{Api, Event, EventKind, MemKind};

/// Memwatch's part of an entry before the real call: `None` when it declines (not
/// recording) or panicked.
#[inline(always)]
pub(super) fn before<T>(f: impl FnOnce() -> Option<T>) -> Option<T> {
    panic_guard::catch(|| {
        fault::check_before_call();
        f()
    })
    .flatten()
}

/// Memwatch's part of an entry after the real call.
#[inline(always)]
pub(super) fn after(f: impl FnOnce()) {
    panic_guard::catch(|| {
        fault::check_after_call();
        f()
    });
}

/// Queues one event of `api` built by `f` (timestamps in raw clock units; `f` sets
/// them, so no clock is read here).
#[inline]
pub(super) fn push(api: Api, f: impl FnOnce(&mut Event)) {
    let Some(mut p) =
        crate::record::begin_at::<crate::lifecycle::Lifecycle>(crate::config::Family::Pjrt, api, 0)
    else {
        return;
    };
    f(&mut p.ev);
    p.commit();
}

/// A new PJRT buffer; `output` is which output of the executable `producer` it is, for
/// execute outputs.
#[allow(clippy::too_many_arguments)]
pub(super) fn new_buffer(
    api: Api,
    buf: *mut c_void,
    device: i32,
    size: u64,
    producer: u64,
    output: Option<u32>,
    t0: u64,
    t1: u64,
) {
    pre_attach::created(buf as u64);
    push(api, |e| {
        if let Some(i) = output {
            e.set_pjrt_output_index(i);
        }
        e.set_kind(EventKind::Alloc);
        e.set_mem_kind(MemKind::PjrtBuffer);
        e.ptr = buf as u64;
        e.size = size;
        e.aux = producer;
        e.device = device;
        e.ts_ns = t0;
        e.duration_ns = t1.wrapping_sub(t0);
    });
}
