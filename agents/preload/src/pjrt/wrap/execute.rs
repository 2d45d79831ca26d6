//! `PJRT_LoadedExecutable_Execute`: one span per device, the output buffers (their
//! size asked of the plugin on the first execute, then cached per output), a
//! completion span from the `PJRT_Event_OnReady` callback the shim registers when the
//! caller asked for completion events, the pre-attach buffers its arguments name, and
//! a memory-statistics request for the flusher.

use super::executable::describe;
use super::shared::{after, before, new_buffer, push};
use crate::panic_guard;
use crate::pjrt::abi::*;
use crate::pjrt::plugin::{buffer_size, call_real, callable, destroy_error, device_of, error_info};
use crate::pjrt::{pre_attach, ready, registry, sample, switches};
use core::ffi::c_void;
use memwatch_wire::{Api, EventKind, MemKind};

/// The completion callback the shim registers for an execute (its own registration:
/// the error is the shim's to destroy).
///
/// # Safety
/// Called by the plugin with the event's error (or NULL) and the shim's `user_arg`.
unsafe extern "C" fn on_complete(err: *mut Error, user_arg: *mut c_void) {
    let now = crate::clock::raw();
    // An execute that returned success can still fail on the device side (e.g. the
    // temp allocation of an asynchronously dispatched execute): the error then arrives
    // here, and is recorded like a synchronous one (code + the size its message names).
    // SAFETY: the plugin's live error (or NULL), destroyed only below.
    panic_guard::catch(|| unsafe { record_completion(err, user_arg as usize, now) });
    if !err.is_null() {
        // SAFETY: this registration's error is the shim's to destroy, once.
        panic_guard::catch(|| unsafe { destroy_error(err) });
    }
}

/// [`on_complete`]'s record.
///
/// # Safety
/// `err` is NULL or a live error.
unsafe fn record_completion(err: *mut Error, idx: usize, now: u64) {
    // SAFETY: contract above.
    let (code, requested) = unsafe { error_info(err) };
    if let Some((handle, t0, device)) = registry::take_completion(idx) {
        // A failure already reported through an output's ready event is not counted twice.
        if code != 0 && !ready::first_report((handle, t0, device)) {
            sample::request_sample();
            return;
        }
        push(Api::PjrtExecuteComplete, |e| {
            e.set_kind(EventKind::ApiSpan);
            e.ptr = handle;
            e.size = requested;
            e.result = code;
            e.device = device;
            e.ts_ns = t0;
            e.duration_ns = now.wrapping_sub(t0);
        });
    }
    sample::request_sample();
}

/// `PJRT_LoadedExecutable_Execute`.
///
/// # Safety
/// The plugin entry's contract.
pub(in crate::pjrt) unsafe extern "C" fn execute(args: *mut c_void) -> *mut Error {
    let t0 = before(|| (switches::recording() && !args.is_null()).then(crate::clock::raw));
    // SAFETY: the caller's args for the wrapped entry.
    let err = unsafe { call_real(slot::LOADED_EXECUTABLE_EXECUTE, args) };
    if let Some(t0) = t0 {
        let t1 = crate::clock::raw();
        // SAFETY: non-null args of a finished execute: fields read where covered,
        // output lists and completion events as many as the caller passed devices.
        after(|| unsafe { after_execute(args as *mut ExecuteArgs, err, t0, t1) });
    }
    err
}

/// Records a finished execute: one span per device, its outputs, completion callbacks.
///
/// # Safety
/// `a` points to the caller's execute args after the call returned `err`.
unsafe fn after_execute(a: *mut ExecuteArgs, err: *mut Error, t0: u64, t1: u64) {
    // SAFETY: the caller's args (contract above); every field read is covered by its
    // `struct_size` (checked here for the last one used), and the lists hold
    // `num_devices` entries of `num_outputs` buffers as the plugin filled them.
    unsafe {
        if !field_ok!(a, ExecuteArgs, device_complete_events) {
            return;
        }
        let a = &*a;
        let handle = a.executable as u64;
        let (code, requested) = error_info(err);
        if pre_attach::active() && registry::exec_layout(handle).is_none() {
            // Compiled before a late attach: described now, at its first execute since.
            describe(a.executable, 0, t0);
            sample::start_sampling();
        }
        let layout = registry::exec_layout(handle);
        let single = if field_ok!(a as *const ExecuteArgs, ExecuteArgs, execute_device)
            && !a.execute_device.is_null()
        {
            Some(device_of(a.execute_device))
        } else {
            None
        };
        let ndev = a.num_devices.min(registry::EXEC_DEVICES);
        let dev_at = |d: usize| -> i32 {
            if let Some(s) = single {
                return s;
            }
            match layout {
                Some((_, n, devs)) if d < n as usize => devs[d],
                _ => d as i32,
            }
        };
        for d in 0..ndev.max(1) {
            let device = dev_at(d);
            push(Api::PjrtExecute, |e| {
                e.set_kind(EventKind::ApiSpan);
                e.ptr = handle;
                e.size = requested;
                e.result = code;
                e.device = device;
                e.ts_ns = t0;
                e.duration_ns = t1.wrapping_sub(t0);
            });
        }
        if pre_attach::active() && !a.argument_lists.is_null() {
            for d in 0..ndev {
                let list = *a.argument_lists.add(d);
                if list.is_null() {
                    continue;
                }
                for i in 0..a.num_args {
                    let b = *list.add(i);
                    if !b.is_null() && pre_attach::first_sight(b as u64) {
                        pre_attach_buffer(b, dev_at(d));
                    }
                }
            }
        }
        if err.is_null() {
            if let (Some((nout, _, _)), false) = (layout, a.output_lists.is_null()) {
                if switches::buffers_on() {
                    for d in 0..ndev {
                        let list = *a.output_lists.add(d);
                        if list.is_null() {
                            continue;
                        }
                        for i in 0..nout as usize {
                            let b = *list.add(i);
                            if !b.is_null() {
                                let size = match registry::output_size(handle, i) {
                                    Some(n) => n,
                                    None => {
                                        let n = buffer_size(b);
                                        registry::set_output_size(handle, i, n);
                                        n
                                    }
                                };
                                new_buffer(
                                    Api::PjrtExecuteOutput,
                                    b,
                                    dev_at(d),
                                    size,
                                    handle,
                                    u32::try_from(i).ok(),
                                    t0,
                                    t1,
                                );
                                ready::link_output(b as u64, (handle, t0, dev_at(d)));
                            }
                        }
                    }
                }
            }
            if !a.device_complete_events.is_null() && switches::completion_on() {
                if let Some(on_ready) = callable(slot::EVENT_ON_READY) {
                    for d in 0..ndev {
                        let ev = *a.device_complete_events.add(d);
                        if ev.is_null() {
                            continue;
                        }
                        let Some(idx) = registry::claim_completion(handle, t0, dev_at(d)) else {
                            continue;
                        };
                        let mut r = EventOnReadyArgs::new();
                        r.event = ev;
                        r.callback = Some(on_complete);
                        r.user_arg = idx as *mut c_void;
                        let e2 = on_ready((&mut r as *mut EventOnReadyArgs).cast());
                        if !e2.is_null() {
                            destroy_error(e2);
                            registry::take_completion(idx);
                        }
                    }
                }
            }
        }
    }
    sample::request_sample();
}

/// Records a buffer that lived before a late attach (an execute's argument not created
/// since): an allocation stamped with the attach time (`pre_attach`).
///
/// # Safety
/// `b` is a live buffer (an argument of an execute in progress or just finished).
unsafe fn pre_attach_buffer(b: *mut c_void, device: i32) {
    // SAFETY: contract above.
    let size = unsafe { buffer_size(b) };
    pre_attach::found(size);
    let at = pre_attach::attach_raw();
    push(Api::PjrtBufferPreAttach, |e| {
        e.set_kind(EventKind::Alloc);
        e.set_mem_kind(MemKind::PjrtBuffer);
        e.ptr = b as u64;
        e.size = size;
        e.device = device;
        e.ts_ns = at;
    });
}
