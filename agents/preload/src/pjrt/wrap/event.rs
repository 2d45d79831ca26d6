//! Execute errors on the outputs' ready events: `PJRT_Buffer_ReadyEvent` links an
//! event to the output's execution (`ready`), `PJRT_Event_Await` / `_Error` record the
//! error they return for such an event, `PJRT_Event_OnReady` routes the caller's
//! callback through the shim's for its registration, `PJRT_Event_Destroy` forgets the
//! link. A failed execution is one record per device, however it surfaced.

use super::shared::{after, before, push};
use crate::panic_guard;
use crate::pjrt::abi::*;
use crate::pjrt::plugin::{call_real, error_info};
use crate::pjrt::{ready, sample, switches};
use core::ffi::c_void;
use memwatch_wire::{Api, EventKind};

/// Records a failed execution whose error surfaced on an output's ready event (once per
/// execution and device; see `ready`). Reads the error, never destroys it.
///
/// # Safety
/// `err` is NULL or a live error.
unsafe fn report_ready_error(err: *mut Error, o: ready::Origin) {
    if err.is_null() || !switches::recording() {
        return;
    }
    let now = crate::clock::raw();
    // SAFETY: contract above.
    let (code, requested) = unsafe { error_info(err) };
    if code == 0 || !ready::first_report(o) {
        return;
    }
    let (handle, t0, device) = o;
    push(Api::PjrtExecuteComplete, |e| {
        e.set_kind(EventKind::ApiSpan);
        e.ptr = handle;
        e.size = requested;
        e.result = code;
        e.device = device;
        e.ts_ns = t0;
        e.duration_ns = now.wrapping_sub(t0);
    });
    sample::request_sample();
}

/// The event of an `EventArgs` call, when `struct_size` covers it.
///
/// # Safety
/// `args` is NULL or the caller's event args.
unsafe fn event_arg(args: *mut c_void) -> u64 {
    let a = args as *mut EventArgs;
    // SAFETY: non-null caller's args; `event` read only when covered.
    unsafe {
        if a.is_null() || !field_ok!(a, EventArgs, event) {
            return 0;
        }
        (*a).event as u64
    }
}

/// `PJRT_Buffer_ReadyEvent`: links the event to the buffer's execution.
///
/// # Safety
/// The plugin entry's contract.
pub(in crate::pjrt) unsafe extern "C" fn buffer_ready_event(args: *mut c_void) -> *mut Error {
    // SAFETY: the caller's args for the wrapped entry.
    let err = unsafe { call_real(slot::BUFFER_READY_EVENT, args) };
    let a = args as *mut BufferReadyEventArgs;
    if err.is_null() && !a.is_null() {
        // SAFETY: non-null args of a successful call, read where covered.
        after(|| unsafe {
            if !field_ok!(a, BufferReadyEventArgs, event) {
                return;
            }
            let a = &*a;
            if let Some(o) = ready::output_origin(a.buffer as u64) {
                ready::link_event(a.event as u64, o);
            }
        });
    }
    err
}

/// `PJRT_Event_Await`.
///
/// # Safety
/// The plugin entry's contract.
pub(in crate::pjrt) unsafe extern "C" fn event_await(args: *mut c_void) -> *mut Error {
    // SAFETY: a wrapped slot with event args; the caller's args.
    unsafe { call_reporting_event_error(slot::EVENT_AWAIT, args) }
}

/// `PJRT_Event_Error`.
///
/// # Safety
/// The plugin entry's contract.
pub(in crate::pjrt) unsafe extern "C" fn event_error(args: *mut c_void) -> *mut Error {
    // SAFETY: a wrapped slot with event args; the caller's args.
    unsafe { call_reporting_event_error(slot::EVENT_ERROR, args) }
}

/// Calls the real `Event_Await` / `Event_Error` (same args layout) and records the error
/// it returns when the event is a linked output's ready event.
///
/// # Safety
/// `real` is a wrapped slot taking `EventArgs`; the caller's `args`.
unsafe fn call_reporting_event_error(real: usize, args: *mut c_void) -> *mut Error {
    // SAFETY: the caller's args, read before the call.
    let ev = before(|| Some(unsafe { event_arg(args) }));
    // SAFETY: the caller's args for the wrapped entry.
    let err = unsafe { call_real(real, args) };
    if let (Some(ev), false) = (ev, err.is_null()) {
        // SAFETY: the error the call returned (the caller's, only read here).
        after(|| unsafe {
            if let Some(o) = ready::event_origin(ev) {
                report_ready_error(err, o);
            }
        });
    }
    err
}

/// `PJRT_Event_Destroy`: forgets the event's link.
///
/// # Safety
/// The plugin entry's contract.
pub(in crate::pjrt) unsafe extern "C" fn event_destroy(args: *mut c_void) -> *mut Error {
    before(|| {
        // SAFETY: the caller's args, read before the call.
        ready::unlink_event(unsafe { event_arg(args) });
        Some(())
    });
    // SAFETY: the caller's args for the wrapped entry.
    unsafe { call_real(slot::EVENT_DESTROY, args) }
}

/// Interposed `OnReady` callback of a linked ready event: records a failure, then hands
/// the error (and its ownership) to the caller's callback, which always runs once its
/// registration is found.
///
/// # Safety
/// Called by the plugin with the event's error and the index `event_on_ready` passed.
unsafe extern "C" fn ready_callback(err: *mut Error, user_arg: *mut c_void) {
    let Some(Some((cb, user, o))) = panic_guard::catch(|| ready::take_callback(user_arg as usize))
    else {
        return;
    };
    // SAFETY: the event's live error (or NULL), only read.
    panic_guard::catch(|| unsafe { report_ready_error(err, o) });
    // SAFETY: the caller's non-null callback and argument, stored by `event_on_ready`.
    unsafe {
        let cb = core::mem::transmute::<usize, OnReadyCallback>(cb);
        cb(err, user as *mut c_void);
    }
}

/// `PJRT_Event_OnReady`: for a linked output's ready event, the caller's callback is
/// routed through [`ready_callback`] for the duration of the registration.
///
/// # Safety
/// The plugin entry's contract.
pub(in crate::pjrt) unsafe extern "C" fn event_on_ready(args: *mut c_void) -> *mut Error {
    // SAFETY: the caller's args, read before the call where covered.
    let claim = before(|| unsafe {
        let a = args as *mut EventOnReadyArgs;
        if a.is_null() || !field_ok!(a, EventOnReadyArgs, user_arg) || !switches::recording() {
            return None;
        }
        let a = &*a;
        let (cb, o) = (a.callback?, ready::event_origin(a.event as u64)?);
        let idx = ready::claim_callback(cb as usize, a.user_arg as usize, o)?;
        Some((cb, a.user_arg, idx))
    });
    let Some((cb, user, idx)) = claim else {
        // SAFETY: the caller's args for the wrapped entry, unchanged.
        return unsafe { call_real(slot::EVENT_ON_READY, args) };
    };
    // The plugin sees our callback for the duration of the call; the caller's args are
    // restored before returning, so the caller observes nothing.
    // SAFETY: the caller's non-null args, covering `user_arg` (checked above).
    let err = unsafe {
        let a = &mut *(args as *mut EventOnReadyArgs);
        a.callback = Some(ready_callback);
        a.user_arg = idx as *mut c_void;
        let err = call_real(slot::EVENT_ON_READY, args);
        let a = &mut *(args as *mut EventOnReadyArgs);
        a.callback = Some(cb);
        a.user_arg = user;
        err
    };
    if !err.is_null() {
        // Registration failed: the callback will not run; free its context.
        after(|| {
            ready::take_callback(idx);
        });
    }
    err
}
