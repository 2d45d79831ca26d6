//! Describing devices: name, total memory and which physical device it is (UUID, PCI bus
//! id), asked of the real runtime; for HIP devices also whether the GPU is integrated (an
//! APU) and the OS's physical memory.
//!
//! Owns the `device_info` queries. Runs only on the flusher thread (never on the hook
//! path, never at exit when runtimes may be torn down). The runtime library is found
//! from a real function we already resolved (`dladdr` -> `dlopen(RTLD_NOLOAD)`), so it
//! works for libraries loaded privately with `dlopen` as XLA does.

use crate::config::Family;
use crate::hooks::table::HOOKS;
use crate::real::real_dlsym;
use core::ffi::{c_char, c_int, c_void, CStr};
use memwatch_wire::identity::{uuid_from_cuda_bytes, uuid_from_hip_bytes};
use memwatch_wire::{canonical_pci_bus_id, DeviceIdentity, DeviceInfo, DeviceProps, Vendor};

/// The families whose runtime can describe its devices, in [`runtime_index`] order.
pub const RUNTIMES: [Family; 3] = [Family::Hip, Family::CudaDriver, Family::CudaRuntime];

/// `f`'s index in [`RUNTIMES`]; `None` for PJRT (no runtime to describe devices with).
pub fn runtime_index(f: Family) -> Option<usize> {
    RUNTIMES.iter().position(|r| *r == f)
}

type NameFn = unsafe extern "C" fn(*mut c_char, c_int, c_int) -> c_int;
type HipTotalFn = unsafe extern "C" fn(*mut usize, c_int) -> c_int;
type CuDeviceGetFn = unsafe extern "C" fn(*mut c_int, c_int) -> c_int;
type HipAttributeFn = unsafe extern "C" fn(*mut c_int, c_int, c_int) -> c_int;
/// `cuDeviceGetUuid(_v2)(CUuuid*, CUdevice)`, `hipDeviceGetUuid(hipUUID*, hipDevice_t)`:
/// both fill a 16-byte struct.
type UuidFn = unsafe extern "C" fn(*mut [u8; 16], c_int) -> c_int;
/// `cuDeviceGetPCIBusId(char*, int len, CUdevice)`, `hipDeviceGetPCIBusId(char*, int, int)`.
type BusIdFn = unsafe extern "C" fn(*mut c_char, c_int, c_int) -> c_int;

/// `hipDeviceAttributeIntegrated` in `hipDeviceAttribute_t` (ROCm 5.0 and later: the
/// CUDA-compatible attributes in their fixed order; 16 in ROCm 5.2's header).
const HIP_DEVICE_ATTRIBUTE_INTEGRATED: c_int = 16;

/// A `dlopen` handle of the library that provides family `fam`'s functions.
fn library_handle(fam: Family) -> *mut c_void {
    for h in HOOKS.iter() {
        if h.family != fam {
            continue;
        }
        let p = h.real();
        if p.is_null() {
            continue;
        }
        // SAFETY: dladdr fills info for an address inside a loaded object.
        unsafe {
            let mut info: libc::Dl_info = core::mem::zeroed();
            if libc::dladdr(p, &mut info) != 0 && !info.dli_fname.is_null() {
                let handle = libc::dlopen(info.dli_fname, libc::RTLD_LAZY | libc::RTLD_NOLOAD);
                if !handle.is_null() {
                    return handle;
                }
            }
        }
    }
    core::ptr::null_mut()
}

/// A `dlopen(RTLD_NOLOAD)` reference, released when dropped: the shim must never keep
/// a runtime loaded that the program `dlclose`s.
struct Handle(*mut c_void);

impl Drop for Handle {
    fn drop(&mut self) {
        if !self.0.is_null() {
            // SAFETY: a handle from dlopen, closed once.
            unsafe { crate::real::real_dlclose()(self.0) };
        }
    }
}

/// `name` in the library behind `handle` (NULL when `handle` is).
///
/// # Safety
/// `handle` is NULL or a live `dlopen` handle.
unsafe fn sym(handle: *mut c_void, name: &CStr) -> *mut c_void {
    if handle.is_null() {
        return core::ptr::null_mut();
    }
    // SAFETY: a live handle (caller's contract) and a NUL-terminated name.
    unsafe { real_dlsym()(handle, name.as_ptr()) }
}

/// Name and total bytes of device `ordinal` of family `fam`; `None` when the runtime
/// cannot say (e.g. no such device).
pub fn query(fam: Family, ordinal: i32, pid: u32) -> Option<DeviceInfo> {
    let lib = Handle(library_handle(fam));
    let handle = lib.0;
    let mut _extra = Handle(core::ptr::null_mut());
    // SAFETY: function pointers come from the runtime library with the documented
    // signatures; buffers are sized as passed.
    unsafe {
        let mut cuda = handle;
        if fam == Family::CudaRuntime && sym(cuda, c"cuDeviceGetName").is_null() {
            cuda = libc::dlopen(
                c"libcuda.so.1".as_ptr(),
                libc::RTLD_LAZY | libc::RTLD_NOLOAD,
            );
            _extra = Handle(cuda);
        }
        let simulated = !sym(handle, c"memwatchSimulatedRuntime").is_null();
        let mut name = [0 as c_char; 256];
        let mut total: usize = 0;
        let identity;
        let vendor = if fam == Family::Hip {
            let n = sym(handle, c"hipDeviceGetName");
            let t = sym(handle, c"hipDeviceTotalMem");
            if n.is_null() || t.is_null() {
                return None;
            }
            let n: NameFn = core::mem::transmute::<*mut c_void, NameFn>(n);
            let t: HipTotalFn = core::mem::transmute::<*mut c_void, HipTotalFn>(t);
            if n(name.as_mut_ptr(), 255, ordinal) != 0 || t(&mut total, ordinal) != 0 {
                return None;
            }
            identity = hip_identity(handle, ordinal);
            Vendor::Amd
        } else {
            let g = sym(cuda, c"cuDeviceGet");
            let n = sym(cuda, c"cuDeviceGetName");
            let t = sym(cuda, c"cuDeviceTotalMem_v2");
            if g.is_null() || n.is_null() || t.is_null() {
                return None;
            }
            let g: CuDeviceGetFn = core::mem::transmute::<*mut c_void, CuDeviceGetFn>(g);
            let n: NameFn = core::mem::transmute::<*mut c_void, NameFn>(n);
            let t: HipTotalFn = core::mem::transmute::<*mut c_void, HipTotalFn>(t);
            let mut dev: c_int = 0;
            if g(&mut dev, ordinal) != 0
                || n(name.as_mut_ptr(), 255, dev) != 0
                || t(&mut total, dev) != 0
            {
                return None;
            }
            identity = cuda_identity(cuda, dev);
            Vendor::Nvidia
        };
        let name = CStr::from_ptr(name.as_ptr()).to_string_lossy().into_owned();
        Some(DeviceInfo {
            pid,
            device: ordinal,
            vendor: if simulated { Vendor::Simulated } else { vendor }.code(),
            total_bytes: total as u64,
            name,
            identity: identity.is_known().then_some(identity),
        })
    }
}

/// The 16 bytes a `UuidFn` at `f` (may be NULL) writes for `dev`; `None` when it is
/// missing or fails.
///
/// # Safety
/// `f` is NULL or a function with the [`UuidFn`] signature.
unsafe fn uuid_bytes(f: *mut c_void, dev: c_int) -> Option<[u8; 16]> {
    if f.is_null() {
        return None;
    }
    // SAFETY: the caller's contract; the buffer is the 16-byte struct the function fills.
    unsafe {
        let f: UuidFn = core::mem::transmute::<*mut c_void, UuidFn>(f);
        let mut b = [0u8; 16];
        (f(&mut b, dev) == 0).then_some(b)
    }
}

/// The bus id a `BusIdFn` at `f` (may be NULL) writes for `dev`, in canonical form.
///
/// # Safety
/// `f` is NULL or a function with the [`BusIdFn`] signature.
unsafe fn bus_id(f: *mut c_void, dev: c_int) -> String {
    if f.is_null() {
        return String::new();
    }
    // SAFETY: the caller's contract; the buffer's length is passed (one byte kept for
    // the NUL, which is written there again after the call).
    unsafe {
        let f: BusIdFn = core::mem::transmute::<*mut c_void, BusIdFn>(f);
        let mut b = [0 as c_char; 64];
        if f(b.as_mut_ptr(), 63, dev) != 0 {
            return String::new();
        }
        b[63] = 0;
        let raw = CStr::from_ptr(b.as_ptr()).to_string_lossy();
        canonical_pci_bus_id(&raw).unwrap_or_default()
    }
}

/// UUID and PCI bus id of CUDA device `dev` from the driver library behind `cuda`:
/// `cuDeviceGetUuid_v2` (a MIG instance's own UUID; `cuDeviceGetUuid` where the driver
/// predates it), `cuDeviceGetPCIBusId`. A MIG instance is told by the two UUID calls
/// disagreeing (the old one names the GPU).
///
/// # Safety
/// `cuda` is NULL or a live `dlopen` handle.
unsafe fn cuda_identity(cuda: *mut c_void, dev: c_int) -> DeviceIdentity {
    // SAFETY: symbols of the CUDA driver with the documented signatures.
    unsafe {
        let v2 = uuid_bytes(sym(cuda, c"cuDeviceGetUuid_v2"), dev);
        let v1 = uuid_bytes(sym(cuda, c"cuDeviceGetUuid"), dev);
        let uuid = match (v2, v1) {
            (Some(a), b) => uuid_from_cuda_bytes(&a, b.is_some_and(|b| b != a)),
            (None, Some(b)) => uuid_from_cuda_bytes(&b, false),
            (None, None) => None,
        };
        DeviceIdentity {
            uuid: uuid.unwrap_or_default(),
            pci_bus_id: bus_id(sym(cuda, c"cuDeviceGetPCIBusId"), dev),
        }
    }
}

/// UUID (`hipDeviceGetUuid`, when the library has it) and PCI bus id
/// (`hipDeviceGetPCIBusId`) of HIP device `ordinal`.
///
/// # Safety
/// `hip` is NULL or a live `dlopen` handle.
unsafe fn hip_identity(hip: *mut c_void, ordinal: c_int) -> DeviceIdentity {
    // SAFETY: symbols of the HIP runtime with the documented signatures.
    unsafe {
        DeviceIdentity {
            uuid: uuid_bytes(sym(hip, c"hipDeviceGetUuid"), ordinal)
                .and_then(|b| uuid_from_hip_bytes(&b))
                .unwrap_or_default(),
            pci_bus_id: bus_id(sym(hip, c"hipDeviceGetPCIBusId"), ordinal),
        }
    }
}

/// Properties of HIP device `ordinal` beyond [`query`]: `integrated` from
/// `hipDeviceGetAttribute` (left unknown when the runtime lacks it or fails) and the
/// physical memory the OS manages. `None` when neither is known.
pub fn hip_props(ordinal: i32) -> Option<DeviceProps> {
    let lib = Handle(library_handle(Family::Hip));
    // SAFETY: the symbol comes from the HIP runtime with the documented signature
    // `hipError_t hipDeviceGetAttribute(int*, hipDeviceAttribute_t, int)`.
    let integrated = unsafe {
        let f = sym(lib.0, c"hipDeviceGetAttribute");
        if f.is_null() {
            None
        } else {
            let f: HipAttributeFn = core::mem::transmute::<*mut c_void, HipAttributeFn>(f);
            let mut v: c_int = -1;
            (f(&mut v, HIP_DEVICE_ATTRIBUTE_INTEGRATED, ordinal) == 0 && (v == 0 || v == 1))
                .then_some(v == 1)
        }
    };
    // SAFETY: plain sysconf queries.
    let (pages, page) = unsafe {
        (
            libc::sysconf(libc::_SC_PHYS_PAGES),
            libc::sysconf(libc::_SC_PAGESIZE),
        )
    };
    let host_memory_bytes = (pages > 0 && page > 0).then(|| pages as u64 * page as u64);
    (integrated.is_some() || host_memory_bytes.is_some()).then_some(DeviceProps {
        device: ordinal,
        integrated,
        host_memory_bytes,
    })
}
