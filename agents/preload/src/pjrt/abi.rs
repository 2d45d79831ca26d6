//! The few PJRT C API layouts the shim touches, written from `xla/pjrt/c/pjrt_c_api.h`
//! (openxla/xla, API major 0). Owns struct layouts and the slot number of each function
//! pointer in `PJRT_Api`; nothing else. Every `*_Args` struct starts with `struct_size`
//! and `extension_start`; a field may only be read when `struct_size` covers it.

use core::ffi::{c_char, c_int, c_void};

/// Bytes before the first function pointer: struct_size, extension_start and the
/// 24-byte `PJRT_Api_Version` (struct_size, extension_start, major, minor).
pub const API_HEADER: usize = 40;

/// Byte offset of function-pointer slot `slot` in `PJRT_Api`.
pub const fn slot_offset(slot: usize) -> usize {
    API_HEADER + 8 * slot
}

/// The fixed head of `PJRT_Api`.
#[repr(C)]
pub struct ApiHead {
    pub struct_size: usize,
    pub extension_start: *mut c_void,
    pub version_struct_size: usize,
    pub version_extension_start: *mut c_void,
    pub major: c_int,
    pub minor: c_int,
}

/// Slot numbers (index of the function pointer after the header), in header order.
pub mod slot {
    pub const ERROR_DESTROY: usize = 0;
    pub const ERROR_MESSAGE: usize = 1;
    pub const ERROR_GET_CODE: usize = 2;
    pub const EVENT_DESTROY: usize = 5;
    pub const EVENT_ERROR: usize = 7;
    pub const EVENT_AWAIT: usize = 8;
    pub const EVENT_ON_READY: usize = 9;
    pub const CLIENT_DESTROY: usize = 11;
    pub const CLIENT_ADDRESSABLE_DEVICES: usize = 16;
    pub const CLIENT_COMPILE: usize = 20;
    pub const CLIENT_BUFFER_FROM_HOST_BUFFER: usize = 22;
    pub const DEVICE_LOCAL_HARDWARE_ID: usize = 31;
    pub const DEVICE_MEMORY_STATS: usize = 34;
    pub const EXECUTABLE_DESTROY: usize = 40;
    pub const EXECUTABLE_NAME: usize = 41;
    pub const EXECUTABLE_NUM_OUTPUTS: usize = 44;
    pub const LOADED_EXECUTABLE_DESTROY: usize = 50;
    pub const LOADED_EXECUTABLE_GET_EXECUTABLE: usize = 51;
    pub const LOADED_EXECUTABLE_ADDRESSABLE_DEVICES: usize = 52;
    pub const LOADED_EXECUTABLE_EXECUTE: usize = 55;
    pub const EXECUTABLE_DESERIALIZE_AND_LOAD: usize = 56;
    pub const LOADED_EXECUTABLE_FINGERPRINT: usize = 57;
    pub const BUFFER_DESTROY: usize = 58;
    pub const BUFFER_ON_DEVICE_SIZE_IN_BYTES: usize = 64;
    pub const BUFFER_DEVICE: usize = 65;
    pub const BUFFER_DELETE: usize = 67;
    pub const BUFFER_COPY_TO_DEVICE: usize = 69;
    pub const BUFFER_READY_EVENT: usize = 72;
    pub const BUFFER_COPY_TO_MEMORY: usize = 92;
    pub const EXECUTABLE_FINGERPRINT: usize = 94;
    pub const EXECUTABLE_GET_COMPILED_MEMORY_STATS: usize = 96;
    /// Slots up to here are in the table the shim keeps.
    pub const MAX: usize = 97;
}

/// Slots at or above this number are only used when the plugin reports API minor
/// version [`MIN_MINOR_LATE_SLOTS`] or newer (their order settled after early versions).
pub const LATE_SLOT: usize = 93;
pub const MIN_MINOR_LATE_SLOTS: c_int = 45;

pub type Error = c_void;
/// Every wrapped entry: `PJRT_Error* f(Args*)`.
pub type ApiFn = unsafe extern "C" fn(*mut c_void) -> *mut Error;
pub type VoidFn = unsafe extern "C" fn(*mut c_void);
pub type OnReadyCallback = unsafe extern "C" fn(*mut Error, *mut c_void);

/// PJRT_Error_Code_RESOURCE_EXHAUSTED.
pub const RESOURCE_EXHAUSTED: c_int = 8;

/// Spare bytes after every args struct the shim builds itself: `struct_size` names only
/// the fields we know, so a plugin built against a newer header either rejects the call
/// (`struct_size` too small: an error, we record nothing) or, if it does not check,
/// writes its newer out-fields into this spare room instead of past our struct.
pub const SPARE_WORDS: usize = 16;

macro_rules! args {
    ($name:ident { $($f:ident : $t:ty),* $(,)? }) => {
        #[repr(C)]
        pub struct $name {
            pub struct_size: usize,
            pub extension_start: *mut c_void,
            $(pub $f: $t,)*
            spare: [u64; SPARE_WORDS],
        }
        impl $name {
            /// Bytes of the fields we know (what `struct_size` says).
            pub const KNOWN: usize = core::mem::offset_of!($name, spare);
            /// A zeroed value with `struct_size` set to [`Self::KNOWN`].
            pub fn new() -> Self {
                // SAFETY: plain-old-data of integers and raw pointers; all-zero is valid.
                let mut v: Self = unsafe { core::mem::zeroed() };
                v.struct_size = Self::KNOWN;
                v
            }
        }
        impl Default for $name {
            fn default() -> Self {
                Self::new()
            }
        }
    };
}

args!(ErrorDestroyArgs { error: *mut Error });
args!(ErrorMessageArgs { error: *const Error, message: *const c_char, message_size: usize });
args!(ErrorGetCodeArgs { error: *const Error, code: c_int });
args!(EventArgs { event: *mut c_void });
args!(BufferReadyEventArgs { buffer: *mut c_void, event: *mut c_void });
args!(EventOnReadyArgs { event: *mut c_void, callback: Option<OnReadyCallback>, user_arg: *mut c_void });
args!(ClientDestroyArgs { client: *mut c_void });
args!(ClientAddressableDevicesArgs { client: *mut c_void, devices: *mut *mut c_void, num_devices: usize });
args!(ClientCompileArgs {
    client: *mut c_void,
    program: *mut c_void,
    compile_options: *const c_char,
    compile_options_size: usize,
    executable: *mut c_void,
});
args!(BufferFromHostBufferArgs {
    client: *mut c_void,
    data: *const c_void,
    type_: c_int,
    dims: *const i64,
    num_dims: usize,
    byte_strides: *const i64,
    num_byte_strides: usize,
    host_buffer_semantics: c_int,
    device: *mut c_void,
    memory: *mut c_void,
    device_layout: *mut c_void,
    done_with_host_buffer: *mut c_void,
    buffer: *mut c_void,
});
args!(DeviceLocalHardwareIdArgs { device: *mut c_void, local_hardware_id: c_int });
args!(DeviceMemoryStatsArgs {
    device: *mut c_void,
    bytes_in_use: i64,
    peak_bytes_in_use: i64,
    peak_bytes_in_use_is_set: u8,
    num_allocs: i64,
    num_allocs_is_set: u8,
    largest_alloc_size: i64,
    largest_alloc_size_is_set: u8,
    bytes_limit: i64,
    bytes_limit_is_set: u8,
    bytes_reserved: i64,
    bytes_reserved_is_set: u8,
    peak_bytes_reserved: i64,
    peak_bytes_reserved_is_set: u8,
    bytes_reservable_limit: i64,
    bytes_reservable_limit_is_set: u8,
    largest_free_block_bytes: i64,
    largest_free_block_bytes_is_set: u8,
    pool_bytes: i64,
    pool_bytes_is_set: u8,
    peak_pool_bytes: i64,
    peak_pool_bytes_is_set: u8,
});
args!(ExecutableDestroyArgs { executable: *mut c_void });
args!(ExecutableNameArgs { executable: *mut c_void, name: *const c_char, name_size: usize });
args!(ExecutableNumOutputsArgs { executable: *mut c_void, num_outputs: usize });
args!(ExecutableFingerprintArgs { executable: *mut c_void, fingerprint: *const c_char, fingerprint_size: usize });
args!(CompiledMemoryStatsArgs {
    executable: *mut c_void,
    generated_code: i64,
    argument: i64,
    output: i64,
    alias: i64,
    temp: i64,
    host_generated_code: i64,
    host_argument: i64,
    host_output: i64,
    host_alias: i64,
    host_temp: i64,
    peak_memory: i64,
    total_size: i64,
});
args!(LoadedExecutableDestroyArgs { executable: *mut c_void });
args!(LoadedGetExecutableArgs { loaded_executable: *mut c_void, executable: *mut c_void });
args!(LoadedAddressableDevicesArgs { executable: *mut c_void, devices: *mut *mut c_void, num_devices: usize });
args!(ExecuteArgs {
    executable: *mut c_void,
    options: *mut c_void,
    argument_lists: *mut *mut *mut c_void,
    num_devices: usize,
    num_args: usize,
    output_lists: *mut *mut *mut c_void,
    device_complete_events: *mut *mut c_void,
    execute_device: *mut c_void,
});
args!(DeserializeAndLoadArgs {
    client: *mut c_void,
    serialized_executable: *const c_char,
    serialized_executable_size: usize,
    loaded_executable: *mut c_void,
});
args!(BufferArgs { buffer: *mut c_void });
args!(BufferOnDeviceSizeArgs { buffer: *mut c_void, on_device_size_in_bytes: usize });
args!(BufferDeviceArgs { buffer: *mut c_void, device: *mut c_void });
args!(BufferCopyArgs { buffer: *mut c_void, dst: *mut c_void, dst_buffer: *mut c_void });

/// Whether a caller's args struct of `struct_size` bytes covers a field ending at `end`.
#[inline]
pub fn covers(struct_size: usize, end: usize) -> bool {
    struct_size >= end
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::mem::{offset_of, size_of};

    #[test]
    fn layouts_match_the_header() {
        // Sizes the header's PJRT_DEFINE_STRUCT_TRAITS give (x86-64).
        assert_eq!(ExecuteArgs::KNOWN, 80);
        assert_eq!(offset_of!(ExecuteArgs, execute_device), 72);
        assert_eq!(ClientCompileArgs::KNOWN, 56);
        assert_eq!(offset_of!(BufferFromHostBufferArgs, dims), 40);
        assert_eq!(offset_of!(BufferFromHostBufferArgs, device), 80);
        assert_eq!(offset_of!(BufferFromHostBufferArgs, buffer), 112);
        // the newest header appends peak_memory_in_bytes and total_size_in_bytes
        assert_eq!(CompiledMemoryStatsArgs::KNOWN, 120);
        assert_eq!(offset_of!(DeviceMemoryStatsArgs, pool_bytes), 160);
        assert_eq!(DeviceMemoryStatsArgs::KNOWN, 192);
        // header STRUCT_SIZE 28; ours rounds up to the spare words' alignment
        assert_eq!(DeviceLocalHardwareIdArgs::new().struct_size, 32);
        assert_eq!(size_of::<ErrorDestroyArgs>(), 24 + 8 * SPARE_WORDS);
        assert_eq!(slot_offset(slot::LOADED_EXECUTABLE_EXECUTE), 40 + 55 * 8);
        assert_eq!(size_of::<ApiHead>(), API_HEADER);
    }
}
