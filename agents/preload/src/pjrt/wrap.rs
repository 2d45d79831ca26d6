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
//! Every entry has the same shape: memwatch's part before the real call ([`before`]),
//! the real call once with the caller's args, memwatch's part after it ([`after`]);
//! both parts are caught (`panic_guard`), so a bug in them loses a record, never the
//! plugin's answer. The callbacks the shim registers with the plugin are caught too,
//! and the caller's own callback always runs.

use super::abi::{self, slot, *};
use super::registry::{self, ExecInfo};
use super::table::{callable, real};
use crate::panic_guard;
use crate::record::fault;
use core::ffi::{c_int, c_void};
use core::mem::{offset_of, size_of};
use memwatch_wire::{Api, Event, EventKind, MemKind, PjrtExecutable};

/// Memwatch's part of an entry before the real call: `None` when it declines (not
/// recording) or panicked.
#[inline(always)]
fn before<T>(f: impl FnOnce() -> Option<T>) -> Option<T> {
    panic_guard::catch(|| {
        fault::check_before_call();
        f()
    })
    .flatten()
}

/// Memwatch's part of an entry after the real call.
#[inline(always)]
fn after(f: impl FnOnce()) {
    panic_guard::catch(|| {
        fault::check_after_call();
        f()
    });
}

/// Calls wrapped slot `s`'s real entry.
///
/// # Safety
/// `s` is a wrapped slot (its real entry is non-null: only those are installed, see
/// `table::build`) and `args` what the caller passed for it.
#[inline]
unsafe fn call_real(s: usize, args: *mut c_void) -> *mut Error {
    let p = real(s);
    // SAFETY: a non-null `PJRT_Api` entry (contract above) with the `ApiFn` signature,
    // called with the caller's args.
    unsafe {
        let f: ApiFn = core::mem::transmute::<*mut c_void, ApiFn>(p);
        f(args)
    }
}

/// Calls a plugin entry we do not wrap; destroys any error it returns. Returns success.
///
/// # Safety
/// `args` is a valid args struct of slot `s`'s entry.
unsafe fn call_quiet(s: usize, args: *mut c_void) -> bool {
    let Some(f) = callable(s) else {
        return false;
    };
    // SAFETY: the plugin's entry for `s` with its args (contract above).
    let err = unsafe { f(args) };
    if err.is_null() {
        true
    } else {
        // SAFETY: an error the plugin just returned to us.
        unsafe { destroy_error(err) };
        false
    }
}

/// Destroys an error the plugin returned to the shim (never one the caller owns).
///
/// # Safety
/// `err` is a live `PJRT_Error` owned by the shim.
unsafe fn destroy_error(err: *mut Error) {
    if let Some(f) = callable(slot::ERROR_DESTROY) {
        let mut a = ErrorDestroyArgs::new();
        a.error = err;
        // SAFETY: PJRT_Error_Destroy returns void (the ApiFn return value is not
        // read); its args are ours and valid.
        unsafe {
            let f: VoidFn = core::mem::transmute::<ApiFn, VoidFn>(f);
            f((&mut a as *mut ErrorDestroyArgs).cast());
        }
    }
}

/// The error's code, and for RESOURCE_EXHAUSTED the byte count its message names.
///
/// # Safety
/// `err` is NULL or a live `PJRT_Error`.
unsafe fn error_info(err: *mut Error) -> (c_int, u64) {
    if err.is_null() {
        return (0, 0);
    }
    let mut a = ErrorGetCodeArgs::new();
    a.error = err;
    let mut code = 2; // UNKNOWN
    if let Some(f) = callable(slot::ERROR_GET_CODE) {
        // SAFETY: the plugin's Error_GetCode with our valid args.
        let e2 = unsafe { f((&mut a as *mut ErrorGetCodeArgs).cast()) };
        if e2.is_null() {
            code = a.code;
        } else {
            // SAFETY: an error returned to us.
            unsafe { destroy_error(e2) };
        }
    }
    let mut bytes = 0;
    if code == RESOURCE_EXHAUSTED {
        if let Some(f) = callable(slot::ERROR_MESSAGE) {
            let mut m = ErrorMessageArgs::new();
            m.error = err;
            // SAFETY: Error_Message returns void and fills `message` / `message_size`
            // with a buffer owned by the error, alive while `err` is.
            unsafe {
                let f: VoidFn = core::mem::transmute::<ApiFn, VoidFn>(f);
                f((&mut m as *mut ErrorMessageArgs).cast());
                if !m.message.is_null() {
                    let msg = core::slice::from_raw_parts(m.message.cast::<u8>(), m.message_size);
                    bytes = super::requested_bytes(msg);
                }
            }
        }
    }
    (code, bytes)
}

/// Queues one event of `api` built by `f` (timestamps in raw clock units; `f` sets
/// them, so no clock is read here).
#[inline]
fn push(api: Api, f: impl FnOnce(&mut Event)) {
    let Some(mut p) =
        crate::record::begin_at::<crate::lifecycle::Lifecycle>(crate::config::Family::Pjrt, api, 0)
    else {
        return;
    };
    f(&mut p.ev);
    p.commit();
}

/// The local hardware id of a `PJRT_Device*` (-1 when unknown).
///
/// # Safety
/// `dev` is NULL or a device pointer the plugin handed out, while its client lives.
unsafe fn device_of(dev: *mut c_void) -> i32 {
    if dev.is_null() {
        return -1;
    }
    if let Some(id) = registry::device_id(dev) {
        return id;
    }
    let mut a = DeviceLocalHardwareIdArgs::new();
    a.device = dev;
    // SAFETY: valid args for Device_LocalHardwareId (contract above).
    if unsafe {
        call_quiet(
            slot::DEVICE_LOCAL_HARDWARE_ID,
            (&mut a as *mut DeviceLocalHardwareIdArgs).cast(),
        )
    } {
        registry::register_device(dev, a.local_hardware_id);
        a.local_hardware_id
    } else {
        -1
    }
}

/// A buffer's on-device size (0 when the plugin does not say).
///
/// # Safety
/// `buf` is a live `PJRT_Buffer*`.
unsafe fn buffer_size(buf: *mut c_void) -> u64 {
    let mut a = BufferOnDeviceSizeArgs::new();
    a.buffer = buf;
    // SAFETY: valid args for Buffer_OnDeviceSizeInBytes (contract above).
    if unsafe {
        call_quiet(
            slot::BUFFER_ON_DEVICE_SIZE_IN_BYTES,
            (&mut a as *mut BufferOnDeviceSizeArgs).cast(),
        )
    } {
        a.on_device_size_in_bytes as u64
    } else {
        0
    }
}

/// A buffer's device (-1 when unknown).
///
/// # Safety
/// `buf` is a live `PJRT_Buffer*`.
unsafe fn buffer_device(buf: *mut c_void) -> i32 {
    let mut a = BufferDeviceArgs::new();
    a.buffer = buf;
    // SAFETY: valid args for Buffer_Device; the device it names belongs to the live
    // client (contract above).
    unsafe {
        if call_quiet(
            slot::BUFFER_DEVICE,
            (&mut a as *mut BufferDeviceArgs).cast(),
        ) {
            device_of(a.device)
        } else {
            -1
        }
    }
}

/// A new PJRT buffer; `output` is which output of the executable `producer` it is, for
/// execute outputs.
#[allow(clippy::too_many_arguments)]
fn new_buffer(
    api: Api,
    buf: *mut c_void,
    device: i32,
    size: u64,
    producer: u64,
    output: Option<u32>,
    t0: u64,
    t1: u64,
) {
    super::pre_attach::created(buf as u64);
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

/// Whether the caller's args struct (`$args`, a non-null pointer to `$ty`) covers
/// `$field` (its `struct_size` reaches past it). Reads `struct_size`: use inside an
/// `unsafe` block whose SAFETY note says `$args` is valid.
macro_rules! field_ok {
    ($args:expr, $ty:ty, $field:ident) => {
        abi::covers(
            (*$args).struct_size,
            offset_of!($ty, $field) + size_of::<usize>(),
        )
    };
}

// ------------------------------------------------------------- client

/// `PJRT_Client_Destroy`: sampling stops (and waits for a sample in progress) before
/// the client goes.
///
/// # Safety
/// The plugin entry's contract (`args` as the framework passes them).
pub(super) unsafe extern "C" fn client_destroy(args: *mut c_void) -> *mut Error {
    before(|| {
        super::stop_sampling();
        registry::clear_devices();
        Some(())
    });
    // SAFETY: the caller's args for the wrapped entry.
    unsafe { call_real(slot::CLIENT_DESTROY, args) }
}

/// `PJRT_Client_AddressableDevices`: learns the devices, starts sampling.
///
/// # Safety
/// The plugin entry's contract.
pub(super) unsafe extern "C" fn client_addressable_devices(args: *mut c_void) -> *mut Error {
    // SAFETY: the caller's args for the wrapped entry.
    let err = unsafe { call_real(slot::CLIENT_ADDRESSABLE_DEVICES, args) };
    let a = args as *mut ClientAddressableDevicesArgs;
    if err.is_null() && !a.is_null() {
        // SAFETY: on success the args hold `num_devices` device pointers of the live
        // client; fields are read only where `struct_size` covers them.
        after(|| unsafe {
            if !field_ok!(a, ClientAddressableDevicesArgs, num_devices) {
                return;
            }
            let a = &*a;
            if !a.devices.is_null() {
                for i in 0..a.num_devices.min(registry::MAX_DEVICES) {
                    device_of(*a.devices.add(i));
                }
                super::start_sampling();
            }
        });
    }
    err
}

// ------------------------------------------------------- executables

/// Asks entry `s` (`Executable_Fingerprint` or `LoadedExecutable_Fingerprint`, which
/// share their args layout) for `handle`'s fingerprint and stores it in `info`.
///
/// # Safety
/// `handle` is a live executable of the kind entry `s` takes.
unsafe fn fingerprint_via(s: usize, handle: *mut c_void, info: &mut ExecInfo) {
    let mut f = ExecutableFingerprintArgs::new();
    f.executable = handle;
    // SAFETY: valid args (contract above); on success the plugin's fingerprint buffer
    // of `fingerprint_size` bytes lives as long as the executable.
    unsafe {
        if call_quiet(s, (&mut f as *mut ExecutableFingerprintArgs).cast())
            && !f.fingerprint.is_null()
        {
            info.set_fingerprint(core::slice::from_raw_parts(
                f.fingerprint.cast::<u8>(),
                f.fingerprint_size,
            ));
        }
    }
}

/// Asks the plugin about a freshly loaded executable and stores what it says.
///
/// # Safety
/// `loaded` is a live `PJRT_LoadedExecutable*`.
unsafe fn describe(loaded: *mut c_void, flags: u32, t0: u64) {
    let mut info = ExecInfo::empty();
    info.ts_raw = t0;
    info.flags = flags;
    let mut g = LoadedGetExecutableArgs::new();
    g.loaded_executable = loaded;
    // SAFETY: every call passes valid args for its entry about the live executable
    // (contract above) or the `PJRT_Executable*` it handed out, destroyed last; strings
    // the plugin returns are read within their stated sizes while the executable lives.
    unsafe {
        if call_quiet(
            slot::LOADED_EXECUTABLE_GET_EXECUTABLE,
            (&mut g as *mut LoadedGetExecutableArgs).cast(),
        ) && !g.executable.is_null()
        {
            let exe = g.executable;
            let mut n = ExecutableNameArgs::new();
            n.executable = exe;
            if call_quiet(
                slot::EXECUTABLE_NAME,
                (&mut n as *mut ExecutableNameArgs).cast(),
            ) && !n.name.is_null()
            {
                info.set_name(core::slice::from_raw_parts(
                    n.name.cast::<u8>(),
                    n.name_size,
                ));
            }
            fingerprint_via(slot::EXECUTABLE_FINGERPRINT, exe, &mut info);
            let mut o = ExecutableNumOutputsArgs::new();
            o.executable = exe;
            if call_quiet(
                slot::EXECUTABLE_NUM_OUTPUTS,
                (&mut o as *mut ExecutableNumOutputsArgs).cast(),
            ) {
                info.num_outputs = o.num_outputs.min(u32::MAX as usize) as u32;
            }
            let mut m = CompiledMemoryStatsArgs::new();
            m.executable = exe;
            if call_quiet(
                slot::EXECUTABLE_GET_COMPILED_MEMORY_STATS,
                (&mut m as *mut CompiledMemoryStatsArgs).cast(),
            ) {
                info.flags |= PjrtExecutable::FLAG_STATS;
                info.stats = memwatch_wire::CompiledMemoryStats {
                    generated_code: m.generated_code,
                    argument: m.argument,
                    output: m.output,
                    alias: m.alias,
                    temp: m.temp,
                    host_generated_code: m.host_generated_code,
                    host_argument: m.host_argument,
                    host_output: m.host_output,
                    host_alias: m.host_alias,
                    host_temp: m.host_temp,
                };
            }
            let mut d = ExecutableDestroyArgs::new();
            d.executable = exe;
            call_quiet(
                slot::EXECUTABLE_DESTROY,
                (&mut d as *mut ExecutableDestroyArgs).cast(),
            );
        }
        if info.fp_len == 0 {
            fingerprint_via(slot::LOADED_EXECUTABLE_FINGERPRINT, loaded, &mut info);
        }
        let mut ad = LoadedAddressableDevicesArgs::new();
        ad.executable = loaded;
        if call_quiet(
            slot::LOADED_EXECUTABLE_ADDRESSABLE_DEVICES,
            (&mut ad as *mut LoadedAddressableDevicesArgs).cast(),
        ) && !ad.devices.is_null()
        {
            let n = ad.num_devices.min(registry::EXEC_DEVICES);
            for i in 0..n {
                info.devices[i] = device_of(*ad.devices.add(i));
            }
            info.num_devices = n as u8;
        }
    }
    registry::insert_exec(loaded as u64, &info);
}

/// Records a compile / load: the executable's description and the call's span.
///
/// # Safety
/// `loaded` is NULL or the executable the call just returned; `err` NULL or its error.
unsafe fn after_load(api: Api, loaded: *mut c_void, err: *mut Error, flags: u32, t0: u64, t1: u64) {
    // SAFETY: the call's own error (contract above).
    let (code, _) = unsafe { error_info(err) };
    if err.is_null() && !loaded.is_null() {
        // SAFETY: the live executable the call returned.
        unsafe { describe(loaded, flags, t0) };
    }
    push(api, |e| {
        e.set_kind(EventKind::ApiSpan);
        e.ptr = if err.is_null() { loaded as u64 } else { 0 };
        e.result = code;
        e.device = -1;
        e.ts_ns = t0;
        e.duration_ns = t1.wrapping_sub(t0);
    });
}

/// `PJRT_Client_Compile`.
///
/// # Safety
/// The plugin entry's contract.
pub(super) unsafe extern "C" fn client_compile(args: *mut c_void) -> *mut Error {
    let t0 = before(|| (super::recording() && !args.is_null()).then(crate::clock::raw));
    // SAFETY: the caller's args for the wrapped entry.
    let err = unsafe { call_real(slot::CLIENT_COMPILE, args) };
    if let Some(t0) = t0 {
        let t1 = crate::clock::raw();
        // SAFETY: non-null args of a finished call; `executable` read only when covered.
        after(|| unsafe {
            let a = args as *mut ClientCompileArgs;
            let loaded = if field_ok!(a, ClientCompileArgs, executable) {
                (*a).executable
            } else {
                core::ptr::null_mut()
            };
            after_load(Api::PjrtClientCompile, loaded, err, 0, t0, t1);
        });
    }
    err
}

/// `PJRT_Executable_DeserializeAndLoad`.
///
/// # Safety
/// The plugin entry's contract.
pub(super) unsafe extern "C" fn deserialize_and_load(args: *mut c_void) -> *mut Error {
    let t0 = before(|| (super::recording() && !args.is_null()).then(crate::clock::raw));
    // SAFETY: the caller's args for the wrapped entry.
    let err = unsafe { call_real(slot::EXECUTABLE_DESERIALIZE_AND_LOAD, args) };
    if let Some(t0) = t0 {
        let t1 = crate::clock::raw();
        // SAFETY: as in `client_compile`.
        after(|| unsafe {
            let a = args as *mut DeserializeAndLoadArgs;
            let loaded = if field_ok!(a, DeserializeAndLoadArgs, loaded_executable) {
                (*a).loaded_executable
            } else {
                core::ptr::null_mut()
            };
            after_load(
                Api::PjrtDeserializeAndLoad,
                loaded,
                err,
                PjrtExecutable::FLAG_DESERIALIZED,
                t0,
                t1,
            );
        });
    }
    err
}

/// `PJRT_LoadedExecutable_Destroy`.
///
/// # Safety
/// The plugin entry's contract.
pub(super) unsafe extern "C" fn loaded_destroy(args: *mut c_void) -> *mut Error {
    // SAFETY: the caller's args, read before the call where `struct_size` covers them.
    let handle = before(|| unsafe {
        let a = args as *mut LoadedExecutableDestroyArgs;
        (!a.is_null() && field_ok!(a, LoadedExecutableDestroyArgs, executable))
            .then(|| ((*a).executable as u64, crate::clock::raw()))
    });
    // SAFETY: the caller's args for the wrapped entry.
    let err = unsafe { call_real(slot::LOADED_EXECUTABLE_DESTROY, args) };
    if let Some((handle, t0)) = handle {
        let t1 = crate::clock::raw();
        after(|| {
            if handle != 0 && super::recording() {
                push(Api::PjrtLoadedExecutableDestroy, |e| {
                    e.set_kind(EventKind::ApiSpan);
                    e.ptr = handle;
                    e.result = if err.is_null() { 0 } else { 2 };
                    e.device = -1;
                    e.ts_ns = t0;
                    e.duration_ns = t1.wrapping_sub(t0);
                });
            }
        });
    }
    err
}

// ------------------------------------------------------------ execute

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
        if code != 0 && !super::ready::first_report((handle, t0, device)) {
            super::request_sample();
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
    super::request_sample();
}

/// `PJRT_LoadedExecutable_Execute`.
///
/// # Safety
/// The plugin entry's contract.
pub(super) unsafe extern "C" fn execute(args: *mut c_void) -> *mut Error {
    let t0 = before(|| (super::recording() && !args.is_null()).then(crate::clock::raw));
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
        if super::pre_attach::active() && registry::exec_layout(handle).is_none() {
            // Compiled before a late attach: described now, at its first execute since.
            describe(a.executable, 0, t0);
            super::start_sampling();
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
        if super::pre_attach::active() && !a.argument_lists.is_null() {
            for d in 0..ndev {
                let list = *a.argument_lists.add(d);
                if list.is_null() {
                    continue;
                }
                for i in 0..a.num_args {
                    let b = *list.add(i);
                    if !b.is_null() && super::pre_attach::first_sight(b as u64) {
                        pre_attach_buffer(b, dev_at(d));
                    }
                }
            }
        }
        if err.is_null() {
            if let (Some((nout, _, _)), false) = (layout, a.output_lists.is_null()) {
                if super::buffers_on() {
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
                                super::ready::link_output(b as u64, (handle, t0, dev_at(d)));
                            }
                        }
                    }
                }
            }
            if !a.device_complete_events.is_null() && super::completion_on() {
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
    super::request_sample();
}

/// Records a buffer that lived before a late attach (an execute's argument not created
/// since): an allocation stamped with the attach time (`pre_attach`).
///
/// # Safety
/// `b` is a live buffer (an argument of an execute in progress or just finished).
unsafe fn pre_attach_buffer(b: *mut c_void, device: i32) {
    // SAFETY: contract above.
    let size = unsafe { buffer_size(b) };
    super::pre_attach::found(size);
    let at = super::pre_attach::attach_raw();
    push(Api::PjrtBufferPreAttach, |e| {
        e.set_kind(EventKind::Alloc);
        e.set_mem_kind(MemKind::PjrtBuffer);
        e.ptr = b as u64;
        e.size = size;
        e.device = device;
        e.ts_ns = at;
    });
}

// ------------------------------------------------------------ buffers

/// `PJRT_Client_BufferFromHostBuffer`.
///
/// # Safety
/// The plugin entry's contract.
pub(super) unsafe extern "C" fn buffer_from_host(args: *mut c_void) -> *mut Error {
    let t0 = before(|| {
        (super::recording() && !args.is_null() && super::buffers_on()).then(crate::clock::raw)
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
        (super::recording() && !args.is_null() && super::buffers_on()).then(crate::clock::raw)
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
pub(super) unsafe extern "C" fn buffer_copy_to_device(args: *mut c_void) -> *mut Error {
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
pub(super) unsafe extern "C" fn buffer_copy_to_memory(args: *mut c_void) -> *mut Error {
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
        let buf = if !a.is_null() && super::buffers_on() && field_ok!(a, BufferArgs, buffer) {
            (*a).buffer
        } else {
            core::ptr::null_mut()
        };
        if !buf.is_null() {
            super::ready::unlink_output(buf as u64);
        }
        Some((buf, crate::clock::raw()))
    });
    // SAFETY: the caller's args for the wrapped entry.
    let err = unsafe { call_real(s, args) };
    if let Some((buf, t0)) = buf {
        let t1 = crate::clock::raw();
        after(|| {
            if !buf.is_null() && err.is_null() {
                super::pre_attach::released(buf as u64);
            }
            if !buf.is_null() && super::recording() {
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
pub(super) unsafe extern "C" fn buffer_destroy(args: *mut c_void) -> *mut Error {
    // SAFETY: a wrapped release slot; the caller's args.
    unsafe { release(slot::BUFFER_DESTROY, Api::PjrtBufferDestroy, args) }
}

/// `PJRT_Buffer_Delete`.
///
/// # Safety
/// The plugin entry's contract.
pub(super) unsafe extern "C" fn buffer_delete(args: *mut c_void) -> *mut Error {
    // SAFETY: a wrapped release slot; the caller's args.
    unsafe { release(slot::BUFFER_DELETE, Api::PjrtBufferDelete, args) }
}

// ------------------------------------------ errors on the outputs' ready events

/// Records a failed execution whose error surfaced on an output's ready event (once per
/// execution and device; see `ready`). Reads the error, never destroys it.
///
/// # Safety
/// `err` is NULL or a live error.
unsafe fn report_ready_error(err: *mut Error, o: super::ready::Origin) {
    if err.is_null() || !super::recording() {
        return;
    }
    let now = crate::clock::raw();
    // SAFETY: contract above.
    let (code, requested) = unsafe { error_info(err) };
    if code == 0 || !super::ready::first_report(o) {
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
    super::request_sample();
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
pub(super) unsafe extern "C" fn buffer_ready_event(args: *mut c_void) -> *mut Error {
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
            if let Some(o) = super::ready::output_origin(a.buffer as u64) {
                super::ready::link_event(a.event as u64, o);
            }
        });
    }
    err
}

/// `PJRT_Event_Await`.
///
/// # Safety
/// The plugin entry's contract.
pub(super) unsafe extern "C" fn event_await(args: *mut c_void) -> *mut Error {
    // SAFETY: a wrapped slot with event args; the caller's args.
    unsafe { call_reporting_event_error(slot::EVENT_AWAIT, args) }
}

/// `PJRT_Event_Error`.
///
/// # Safety
/// The plugin entry's contract.
pub(super) unsafe extern "C" fn event_error(args: *mut c_void) -> *mut Error {
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
            if let Some(o) = super::ready::event_origin(ev) {
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
pub(super) unsafe extern "C" fn event_destroy(args: *mut c_void) -> *mut Error {
    before(|| {
        // SAFETY: the caller's args, read before the call.
        super::ready::unlink_event(unsafe { event_arg(args) });
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
    let Some(Some((cb, user, o))) =
        panic_guard::catch(|| super::ready::take_callback(user_arg as usize))
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
pub(super) unsafe extern "C" fn event_on_ready(args: *mut c_void) -> *mut Error {
    // SAFETY: the caller's args, read before the call where covered.
    let claim = before(|| unsafe {
        let a = args as *mut EventOnReadyArgs;
        if a.is_null() || !field_ok!(a, EventOnReadyArgs, user_arg) || !super::recording() {
            return None;
        }
        let a = &*a;
        let (cb, o) = (a.callback?, super::ready::event_origin(a.event as u64)?);
        let idx = super::ready::claim_callback(cb as usize, a.user_arg as usize, o)?;
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
            super::ready::take_callback(idx);
        });
    }
    err
}

// ------------------------------------------------------ memory stats

/// One `PJRT_Device_MemoryStats` call (flusher thread only).
///
/// # Safety
/// `dev` is a device pointer of the live client.
pub(super) unsafe fn memory_stats(
    dev: *mut c_void,
    id: i32,
    pid: u32,
    ts_ns: u64,
) -> Option<memwatch_wire::PjrtMemoryStats> {
    use memwatch_wire::PjrtMemoryStats as S;
    let mut a = DeviceMemoryStatsArgs::new();
    a.device = dev;
    // SAFETY: valid args about a live device (contract above).
    if !unsafe {
        call_quiet(
            slot::DEVICE_MEMORY_STATS,
            (&mut a as *mut DeviceMemoryStatsArgs).cast(),
        )
    } {
        return None;
    }
    let mut flags = S::BYTES_IN_USE;
    let mut set = |b: bool, f: u32| {
        if b {
            flags |= f
        }
    };
    set(a.peak_bytes_in_use_is_set != 0, S::PEAK_BYTES_IN_USE);
    set(
        a.largest_free_block_bytes_is_set != 0,
        S::LARGEST_FREE_BLOCK,
    );
    set(a.pool_bytes_is_set != 0, S::POOL_BYTES);
    set(a.peak_pool_bytes_is_set != 0, S::PEAK_POOL_BYTES);
    set(a.bytes_limit_is_set != 0, S::BYTES_LIMIT);
    set(a.num_allocs_is_set != 0, S::NUM_ALLOCS);
    set(a.largest_alloc_size_is_set != 0, S::LARGEST_ALLOC_SIZE);
    Some(S {
        pid,
        ts_ns,
        device: id,
        flags,
        bytes_in_use: a.bytes_in_use,
        peak_bytes_in_use: a.peak_bytes_in_use,
        largest_free_block: a.largest_free_block_bytes,
        pool_bytes: a.pool_bytes,
        peak_pool_bytes: a.peak_pool_bytes,
        bytes_limit: a.bytes_limit,
        num_allocs: a.num_allocs,
        largest_alloc_size: a.largest_alloc_size,
    })
}
