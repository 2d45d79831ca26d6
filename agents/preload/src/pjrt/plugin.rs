//! The plugin's own entries, as the shim calls them.
//!
//! Owns the real entries saved from the plugin's table when it was copied or wrapped in
//! place (`table`), calling them ([`call_real`] for a wrapped entry, [`call_quiet`] for
//! one the shim only asks), and the questions the wrappers and the sampler ask the
//! plugin: an error's code and requested size, a device's hardware id, a buffer's size
//! and device, a device's memory statistics. Every call passes args the shim built or
//! the caller's own, and destroys any error returned to the shim.

use super::abi::{self, slot, *};
use super::registry;
use core::ffi::{c_int, c_void};
use core::sync::atomic::{AtomicPtr, Ordering};

/// Real function of each slot we wrap (null: not wrapped).
pub(super) static REAL: [AtomicPtr<c_void>; slot::MAX] =
    [const { AtomicPtr::new(core::ptr::null_mut()) }; slot::MAX];
/// Real function of each slot we only call (may be null).
pub(super) static CALL: [AtomicPtr<c_void>; slot::MAX] =
    [const { AtomicPtr::new(core::ptr::null_mut()) }; slot::MAX];

/// The real function of wrapped slot `s` (null when `s` is not wrapped).
#[inline]
pub fn real(s: usize) -> *mut c_void {
    REAL.get(s)
        .map_or(core::ptr::null_mut(), |a| a.load(Ordering::Relaxed))
}

/// A real function we call (wrapped or not); null when the plugin lacks it.
#[inline]
pub fn callable(s: usize) -> Option<abi::ApiFn> {
    let p = CALL.get(s)?.load(Ordering::Relaxed);
    if p.is_null() {
        None
    } else {
        // SAFETY: a function pointer taken from the plugin's own table for this slot.
        Some(unsafe { core::mem::transmute::<*mut c_void, abi::ApiFn>(p) })
    }
}

/// Calls wrapped slot `s`'s real entry.
///
/// # Safety
/// `s` is a wrapped slot (its real entry is non-null: only those are installed, see
/// `table::build`) and `args` what the caller passed for it.
#[inline]
pub(super) unsafe fn call_real(s: usize, args: *mut c_void) -> *mut Error {
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
pub(super) unsafe fn call_quiet(s: usize, args: *mut c_void) -> bool {
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
pub(super) unsafe fn destroy_error(err: *mut Error) {
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
pub(super) unsafe fn error_info(err: *mut Error) -> (c_int, u64) {
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
                    bytes = requested_bytes(msg);
                }
            }
        }
    }
    (code, bytes)
}

/// The byte count in a RESOURCE_EXHAUSTED message ("... allocate 123456 bytes",
/// "... allocate 16.00GiB"), 0 when none is named.
pub fn requested_bytes(msg: &[u8]) -> u64 {
    let key = b"allocate ";
    let Some(at) = msg.windows(key.len()).position(|w| w == key) else {
        return 0;
    };
    let rest = &msg[at + key.len()..];
    let int_len = rest.iter().take_while(|c| c.is_ascii_digit()).count();
    if int_len == 0 || int_len > 19 {
        return 0;
    }
    let mut value = super::switches::parse_u64(&rest[..int_len]).unwrap_or(0) as f64;
    let mut tail = &rest[int_len..];
    if tail.first() == Some(&b'.') {
        let frac = tail[1..].iter().take_while(|c| c.is_ascii_digit()).count();
        let mut scale = 0.1;
        for d in &tail[1..1 + frac] {
            value += (d - b'0') as f64 * scale;
            scale /= 10.0;
        }
        tail = &tail[1 + frac..];
    }
    let unit: f64 = if tail.starts_with(b"KiB") {
        1024.0
    } else if tail.starts_with(b"MiB") {
        1048576.0
    } else if tail.starts_with(b"GiB") {
        1073741824.0
    } else if tail.starts_with(b"TiB") {
        1099511627776.0
    } else {
        1.0
    };
    (value * unit) as u64
}

/// The local hardware id of a `PJRT_Device*` (-1 when unknown).
///
/// # Safety
/// `dev` is NULL or a device pointer the plugin handed out, while its client lives.
pub(super) unsafe fn device_of(dev: *mut c_void) -> i32 {
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
pub(super) unsafe fn buffer_size(buf: *mut c_void) -> u64 {
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
pub(super) unsafe fn buffer_device(buf: *mut c_void) -> i32 {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn oom_message_sizes() {
        assert_eq!(
            requested_bytes(b"Out of memory while trying to allocate 17179869184 bytes."),
            17179869184
        );
        assert_eq!(requested_bytes(b"failed to allocate 2.50GiB"), 5 << 29);
        assert_eq!(requested_bytes(b"Failed to allocate 512MiB"), 512 << 20);
        assert_eq!(requested_bytes(b"no size here"), 0);
        assert_eq!(requested_bytes(b"allocate "), 0);
    }
}
