//! The executable entries: `PJRT_Client_Compile` and
//! `PJRT_Executable_DeserializeAndLoad` (a span, and the executable described: name,
//! fingerprint, compiled memory stats, outputs, devices, asked of the plugin on the
//! compiling thread), `PJRT_LoadedExecutable_Destroy` (a span).

use super::shared::{after, before, push};
use crate::pjrt::abi::*;
use crate::pjrt::plugin::{call_quiet, call_real, device_of, error_info};
use crate::pjrt::registry::{self, ExecInfo};
use crate::pjrt::switches;
use core::ffi::c_void;
use memwatch_wire::{Api, EventKind, PjrtExecutable};

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
pub(super) unsafe fn describe(loaded: *mut c_void, flags: u32, t0: u64) {
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
pub(in crate::pjrt) unsafe extern "C" fn client_compile(args: *mut c_void) -> *mut Error {
    let t0 = before(|| (switches::recording() && !args.is_null()).then(crate::clock::raw));
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
pub(in crate::pjrt) unsafe extern "C" fn deserialize_and_load(args: *mut c_void) -> *mut Error {
    let t0 = before(|| (switches::recording() && !args.is_null()).then(crate::clock::raw));
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
pub(in crate::pjrt) unsafe extern "C" fn loaded_destroy(args: *mut c_void) -> *mut Error {
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
            if handle != 0 && switches::recording() {
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
