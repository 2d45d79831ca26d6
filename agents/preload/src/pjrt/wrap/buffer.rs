//! The buffer entries: `PJRT_Client_BufferFromHostBuffer` and the two copies (a new
//! buffer with its device and on-device size), `PJRT_Buffer_Destroy` / `_Delete` (its
//! release).

use super::shared::{after, before, new_buffer, push};
use crate::pjrt::abi::*;
use crate::pjrt::plugin::{buffer_device, buffer_size, call_real, device_of};
use crate::pjrt::{pre_attach, ready, switches};
use core::ffi::c_void;
use memwatch_wire::{Api, EventKind, MemKind};

/// `PJRT_Client_BufferFromHostBuffer`.
///
/// # Safety
/// The plugin entry's contract.
pub(in crate::pjrt) unsafe extern "C" fn buffer_from_host(args: *mut c_void) -> *mut Error {
    let t0 = before(|| {
        (switches::recording() && !args.is_null() && switches::buffers_on()).then(crate::clock::raw)
    });
    // SAFETY: the caller's args for the wrapped entry.
    let err = unsafe { call_real(slot::CLIENT_BUFFER_FROM_HOST_BUFFER, args) };
    if let (Some(t0), true) = (t0, err.is_null()) {
        let t1 = crate::clock::raw();
        // SAFETY: non-null args of a successful call: `buffer` (read where covered) is
        // the new live buffer, `device` NULL or one of the client's devices.
        after(|| unsafe {
            let a = args as *mut BufferFromHostBufferArgs;
            if !field_ok!(a, BufferFromHostBufferArgs, buffer) {
                return;
            }
            let a = &*a;
            if !a.buffer.is_null() {
                let dev = if a.device.is_null() {
                    buffer_device(a.buffer)
                } else {
                    device_of(a.device)
                };
                new_buffer(
                    Api::PjrtBufferFromHostBuffer,
                    a.buffer,
                    dev,
                    buffer_size(a.buffer),
                    0,
                    None,
                    t0,
                    t1,
                );
            }
        });
    }
    err
}

/// The two buffer copies (same args layout).
///
/// # Safety
/// `s` is a wrapped copy slot; the plugin entry's contract for `args`.
unsafe fn copy_common(s: usize, api: Api, args: *mut c_void) -> *mut Error {
    let t0 = before(|| {
        (switches::recording() && !args.is_null() && switches::buffers_on()).then(crate::clock::raw)
    });
    // SAFETY: the caller's args for the wrapped entry.
    let err = unsafe { call_real(s, args) };
    if let (Some(t0), true) = (t0, err.is_null()) {
        let t1 = crate::clock::raw();
        // SAFETY: non-null args of a successful copy: `dst_buffer` (read where covered)
        // is the new live buffer.
        after(|| unsafe {
            let a = args as *mut BufferCopyArgs;
            if !field_ok!(a, BufferCopyArgs, dst_buffer) {
                return;
            }
            let a = &*a;
            if !a.dst_buffer.is_null() {
                let dev = buffer_device(a.dst_buffer);
                new_buffer(
                    api,
                    a.dst_buffer,
                    dev,
                    buffer_size(a.dst_buffer),
                    0,
                    None,
                    t0,
                    t1,
                );
            }
        });
    }
    err
}

/// `PJRT_Buffer_CopyToDevice`.
///
/// # Safety
/// The plugin entry's contract.
pub(in crate::pjrt) unsafe extern "C" fn buffer_copy_to_device(args: *mut c_void) -> *mut Error {
    // SAFETY: a wrapped copy slot; the caller's args.
    unsafe {
        copy_common(
            slot::BUFFER_COPY_TO_DEVICE,
            Api::PjrtBufferCopyToDevice,
            args,
        )
    }
}

/// `PJRT_Buffer_CopyToMemory`.
///
/// # Safety
/// The plugin entry's contract.
pub(in crate::pjrt) unsafe extern "C" fn buffer_copy_to_memory(args: *mut c_void) -> *mut Error {
    // SAFETY: a wrapped copy slot; the caller's args.
    unsafe {
        copy_common(
            slot::BUFFER_COPY_TO_MEMORY,
            Api::PjrtBufferCopyToMemory,
            args,
        )
    }
}

/// `PJRT_Buffer_Destroy` / `_Delete` (same args layout).
///
/// # Safety
/// `s` is a wrapped release slot; the plugin entry's contract for `args`.
unsafe fn release(s: usize, api: Api, args: *mut c_void) -> *mut Error {
    // SAFETY: the caller's args, read before the call where `struct_size` covers them.
    let buf = before(|| unsafe {
        let a = args as *mut BufferArgs;
        let buf = if !a.is_null() && switches::buffers_on() && field_ok!(a, BufferArgs, buffer) {
            (*a).buffer
        } else {
            core::ptr::null_mut()
        };
        if !buf.is_null() {
            ready::unlink_output(buf as u64);
        }
        Some((buf, crate::clock::raw()))
    });
    // SAFETY: the caller's args for the wrapped entry.
    let err = unsafe { call_real(s, args) };
    if let Some((buf, t0)) = buf {
        let t1 = crate::clock::raw();
        after(|| {
            if !buf.is_null() && err.is_null() {
                pre_attach::released(buf as u64);
            }
            if !buf.is_null() && switches::recording() {
                push(api, |e| {
                    e.set_kind(if err.is_null() {
                        EventKind::Free
                    } else {
                        EventKind::FreeFailed
                    });
                    e.set_mem_kind(MemKind::PjrtBuffer);
                    e.ptr = buf as u64;
                    e.device = -1;
                    e.ts_ns = t0;
                    e.duration_ns = t1.wrapping_sub(t0);
                });
            }
        });
    }
    err
}

/// `PJRT_Buffer_Destroy`.
///
/// # Safety
/// The plugin entry's contract.
pub(in crate::pjrt) unsafe extern "C" fn buffer_destroy(args: *mut c_void) -> *mut Error {
    // SAFETY: a wrapped release slot; the caller's args.
    unsafe { release(slot::BUFFER_DESTROY, Api::PjrtBufferDestroy, args) }
}

/// `PJRT_Buffer_Delete`.
///
/// # Safety
/// The plugin entry's contract.
pub(in crate::pjrt) unsafe extern "C" fn buffer_delete(args: *mut c_void) -> *mut Error {
    // SAFETY: a wrapped release slot; the caller's args.
    unsafe { release(slot::BUFFER_DELETE, Api::PjrtBufferDelete, args) }
}
