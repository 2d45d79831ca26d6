//! The client entries: `PJRT_Client_AddressableDevices` (learns the devices, starts
//! sampling) and `PJRT_Client_Destroy` (sampling stops first).

use super::shared::{after, before};
use crate::pjrt::abi::{slot, ClientAddressableDevicesArgs, Error};
use crate::pjrt::plugin::{call_real, device_of};
use crate::pjrt::{registry, sample};
use core::ffi::c_void;

/// `PJRT_Client_Destroy`: sampling stops (and waits for a sample in progress) before
/// the client goes.
///
/// # Safety
/// The plugin entry's contract (`args` as the framework passes them).
pub(in crate::pjrt) unsafe extern "C" fn client_destroy(args: *mut c_void) -> *mut Error {
    before(|| {
        sample::stop_sampling();
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
pub(in crate::pjrt) unsafe extern "C" fn client_addressable_devices(
    args: *mut c_void,
) -> *mut Error {
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
                sample::start_sampling();
            }
        });
    }
    err
}
