//! CUDA backend: the driver API (libcuda.so.1) loaded at run time with `libloading`.
//!
//! Owns: loading the driver, the primary context of one device, the replay kernels'
//! module (a fatbin/cubin from `build-cuda.sh`, loaded with cuModuleLoadData), kernel
//! launches, a checksum scratch word and two timing events — all released in `Drop`.
//! Nothing here links against CUDA at build time, so memwatch builds and runs on machines
//! without it; trace allocations handed out by `alloc` are freed by the caller's `Session`.

use crate::backend::{DeviceDescription, DevicePtr, GpuBackend, GpuError, MemInfo};
use crate::kernel_abi::{self, KernelArgs};
use libloading::Library;
use std::ffi::{c_char, c_int, c_uint, c_void, CStr, CString};
use std::ptr;

type CuResult = c_int;
type CuDevice = c_int;
type CuContext = *mut c_void;
type CuModule = *mut c_void;
type CuFunction = *mut c_void;
type CuEvent = *mut c_void;
type CuStream = *mut c_void;

const CUDA_SUCCESS: CuResult = 0;
const CUDA_ERROR_OUT_OF_MEMORY: CuResult = 2;
const CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: c_int = 16;
const CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: c_int = 75;
const CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: c_int = 76;

/// The driver entry points memwatch uses (copied out of the library, which is kept alive).
struct Api {
    init: unsafe extern "C" fn(c_uint) -> CuResult,
    device_get: unsafe extern "C" fn(*mut CuDevice, c_int) -> CuResult,
    device_get_name: unsafe extern "C" fn(*mut c_char, c_int, CuDevice) -> CuResult,
    device_get_attribute: unsafe extern "C" fn(*mut c_int, c_int, CuDevice) -> CuResult,
    primary_ctx_retain: unsafe extern "C" fn(*mut CuContext, CuDevice) -> CuResult,
    primary_ctx_release: unsafe extern "C" fn(CuDevice) -> CuResult,
    ctx_set_current: unsafe extern "C" fn(CuContext) -> CuResult,
    ctx_synchronize: unsafe extern "C" fn() -> CuResult,
    mem_alloc: unsafe extern "C" fn(*mut u64, usize) -> CuResult,
    mem_free: unsafe extern "C" fn(u64) -> CuResult,
    mem_get_info: unsafe extern "C" fn(*mut usize, *mut usize) -> CuResult,
    memcpy_dtod: unsafe extern "C" fn(u64, u64, usize) -> CuResult,
    memcpy_htod: unsafe extern "C" fn(u64, *const c_void, usize) -> CuResult,
    memcpy_dtoh: unsafe extern "C" fn(*mut c_void, u64, usize) -> CuResult,
    module_load_data: unsafe extern "C" fn(*mut CuModule, *const c_void) -> CuResult,
    module_unload: unsafe extern "C" fn(CuModule) -> CuResult,
    module_get_function: unsafe extern "C" fn(*mut CuFunction, CuModule, *const c_char) -> CuResult,
    #[allow(clippy::type_complexity)]
    launch_kernel: unsafe extern "C" fn(
        CuFunction,
        c_uint,
        c_uint,
        c_uint,
        c_uint,
        c_uint,
        c_uint,
        c_uint,
        CuStream,
        *mut *mut c_void,
        *mut *mut c_void,
    ) -> CuResult,
    event_create: unsafe extern "C" fn(*mut CuEvent, c_uint) -> CuResult,
    event_record: unsafe extern "C" fn(CuEvent, CuStream) -> CuResult,
    event_synchronize: unsafe extern "C" fn(CuEvent) -> CuResult,
    event_elapsed_time: unsafe extern "C" fn(*mut f32, CuEvent, CuEvent) -> CuResult,
    event_destroy: unsafe extern "C" fn(CuEvent) -> CuResult,
    get_error_name: unsafe extern "C" fn(CuResult, *mut *const c_char) -> CuResult,
    _lib: Library,
}

/// A libloading error with the loader's own words (`dlerror()`), which libloading keeps
/// as the error's source: its Display alone says only "dlopen failed".
fn load_error(e: &libloading::Error) -> String {
    match std::error::Error::source(e) {
        Some(why) => format!("{e}: {why}"),
        None => e.to_string(),
    }
}

macro_rules! sym {
    ($lib:expr, $path:expr, $name:literal) => {{
        // SAFETY: the symbol is a CUDA driver entry point whose C signature is the fn type
        // of the Api field it is assigned to (inferred).
        let s =
            unsafe { $lib.get(concat!($name, "\0").as_bytes()) }.map_err(|e| GpuError::Load {
                lib: $path.to_string(),
                reason: format!("missing {}: {}", $name, load_error(&e)),
            })?;
        *s
    }};
}

impl Api {
    fn load(path: &str) -> Result<Api, GpuError> {
        // SAFETY: loading the CUDA driver runs its initialisers, which are sound to run.
        let lib = unsafe { Library::new(path) }.map_err(|e| GpuError::Load {
            lib: path.to_string(),
            reason: load_error(&e),
        })?;
        Ok(Api {
            init: sym!(lib, path, "cuInit"),
            device_get: sym!(lib, path, "cuDeviceGet"),
            device_get_name: sym!(lib, path, "cuDeviceGetName"),
            device_get_attribute: sym!(lib, path, "cuDeviceGetAttribute"),
            primary_ctx_retain: sym!(lib, path, "cuDevicePrimaryCtxRetain"),
            primary_ctx_release: sym!(lib, path, "cuDevicePrimaryCtxRelease_v2"),
            ctx_set_current: sym!(lib, path, "cuCtxSetCurrent"),
            ctx_synchronize: sym!(lib, path, "cuCtxSynchronize"),
            mem_alloc: sym!(lib, path, "cuMemAlloc_v2"),
            mem_free: sym!(lib, path, "cuMemFree_v2"),
            mem_get_info: sym!(lib, path, "cuMemGetInfo_v2"),
            memcpy_dtod: sym!(lib, path, "cuMemcpyDtoD_v2"),
            memcpy_htod: sym!(lib, path, "cuMemcpyHtoD_v2"),
            memcpy_dtoh: sym!(lib, path, "cuMemcpyDtoH_v2"),
            module_load_data: sym!(lib, path, "cuModuleLoadData"),
            module_unload: sym!(lib, path, "cuModuleUnload"),
            module_get_function: sym!(lib, path, "cuModuleGetFunction"),
            launch_kernel: sym!(lib, path, "cuLaunchKernel"),
            event_create: sym!(lib, path, "cuEventCreate"),
            event_record: sym!(lib, path, "cuEventRecord"),
            event_synchronize: sym!(lib, path, "cuEventSynchronize"),
            event_elapsed_time: sym!(lib, path, "cuEventElapsedTime"),
            event_destroy: sym!(lib, path, "cuEventDestroy_v2"),
            get_error_name: sym!(lib, path, "cuGetErrorName"),
            _lib: lib,
        })
    }

    fn check(&self, api: &'static str, r: CuResult) -> Result<(), GpuError> {
        if r == CUDA_SUCCESS {
            return Ok(());
        }
        let mut p: *const c_char = ptr::null();
        // SAFETY: cuGetErrorName writes a pointer to a static string or leaves it null.
        let name = if unsafe { (self.get_error_name)(r, &mut p) } == CUDA_SUCCESS && !p.is_null() {
            // SAFETY: non-null, NUL-terminated static string from the driver.
            unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
        } else {
            "unknown error".to_string()
        };
        Err(GpuError::Api { api, code: r, name })
    }
}

/// One CUDA device driven through the driver API.
pub struct CudaBackend {
    api: Api,
    dev: CuDevice,
    index: u32,
    name: String,
    arch: String,
    sm_count: u32,
    ctx: CuContext,
    module: CuModule,
    f_touch: CuFunction,
    f_checksum: CuFunction,
    f_strided: CuFunction,
    scratch: u64,
    events: [CuEvent; 2],
}

/// Loads the driver at `driver_path`, initialises it and names device `index`, without
/// creating a context or loading code: tells "no usable CUDA device here" apart from "the
/// device is there, the kernels are missing".
pub fn probe_device(driver_path: &str, index: u32) -> Result<String, GpuError> {
    let api = Api::load(driver_path)?;
    init_device(&api, index).map(|(_, name)| name)
}

/// `cuInit`, then device `index` and its name.
fn init_device(api: &Api, index: u32) -> Result<(CuDevice, String), GpuError> {
    // SAFETY: plain driver calls with valid out-pointers; the name buffer is NUL-terminated
    // by the driver within its 256 bytes.
    unsafe {
        api.check("cuInit", (api.init)(0))?;
        let mut dev: CuDevice = 0;
        api.check("cuDeviceGet", (api.device_get)(&mut dev, index as c_int))?;
        let mut buf = [0 as c_char; 256];
        api.check(
            "cuDeviceGetName",
            (api.device_get_name)(buf.as_mut_ptr(), 256, dev),
        )?;
        Ok((
            dev,
            CStr::from_ptr(buf.as_ptr()).to_string_lossy().into_owned(),
        ))
    }
}

impl CudaBackend {
    /// Opens device `index` through `driver_path` (normally `libcuda.so.1`) and loads the
    /// replay kernels from `code_object` (a fatbin or cubin built by `build-cuda.sh`).
    pub fn open(
        driver_path: &str,
        index: u32,
        code_object: &[u8],
    ) -> Result<CudaBackend, GpuError> {
        let api = Api::load(driver_path)?;
        let (dev, name) = init_device(&api, index)?;
        // SAFETY: plain driver calls with valid out-pointers.
        unsafe {
            let attr = |a| {
                let mut v: c_int = 0;
                api.check(
                    "cuDeviceGetAttribute",
                    (api.device_get_attribute)(&mut v, a, dev),
                )
                .map(|_| v)
            };
            let sm_count = attr(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?.max(1) as u32;
            let arch = format!(
                "sm_{}{}",
                attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?,
                attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?
            );
            let mut ctx: CuContext = ptr::null_mut();
            api.check(
                "cuDevicePrimaryCtxRetain",
                (api.primary_ctx_retain)(&mut ctx, dev),
            )?;
            // From here on Drop releases what was acquired.
            let mut me = CudaBackend {
                api,
                dev,
                index,
                name,
                arch,
                sm_count,
                ctx,
                module: ptr::null_mut(),
                f_touch: ptr::null_mut(),
                f_checksum: ptr::null_mut(),
                f_strided: ptr::null_mut(),
                scratch: 0,
                events: [ptr::null_mut(); 2],
            };
            me.api
                .check("cuCtxSetCurrent", (me.api.ctx_set_current)(me.ctx))?;
            me.load_module(code_object)?;
            let mut s: u64 = 0;
            me.api
                .check("cuMemAlloc_v2", (me.api.mem_alloc)(&mut s, 256))?;
            me.scratch = s;
            for i in 0..2 {
                me.api
                    .check("cuEventCreate", (me.api.event_create)(&mut me.events[i], 0))?;
            }
            Ok(me)
        }
    }

    fn load_module(&mut self, code_object: &[u8]) -> Result<(), GpuError> {
        // The driver reads the image without a length; give it a copy that ends in NUL so
        // a PTX or truncated image cannot make it read past the end.
        let mut image = code_object.to_vec();
        image.push(0);
        // SAFETY: image outlives the call; out-pointers are valid.
        unsafe {
            self.api
                .check(
                    "cuModuleLoadData",
                    (self.api.module_load_data)(&mut self.module, image.as_ptr().cast()),
                )
                .map_err(|e| {
                    GpuError::Kernels(format!("{e} (is the fatbin built for {}?)", self.arch))
                })?;
            for (slot, name) in [
                (&mut self.f_touch as *mut CuFunction, kernel_abi::TOUCH.name),
                (
                    &mut self.f_checksum as *mut CuFunction,
                    kernel_abi::CHECKSUM.name,
                ),
                (
                    &mut self.f_strided as *mut CuFunction,
                    kernel_abi::STRIDED.name,
                ),
            ] {
                let c = CString::new(name).unwrap_or_default();
                self.api.check(
                    "cuModuleGetFunction",
                    (self.api.module_get_function)(slot, self.module, c.as_ptr()),
                )?;
            }
        }
        Ok(())
    }

    fn launch(&self, f: CuFunction, bytes: u64, mut args: KernelArgs) -> Result<(), GpuError> {
        let grid = kernel_abi::grid_blocks(bytes, self.sm_count);
        let mut params = args.param_pointers();
        // SAFETY: params point into `args`, alive until the call returns, with the types
        // of the kernel's signature (kernel_abi).
        let r = unsafe {
            (self.api.launch_kernel)(
                f,
                grid,
                1,
                1,
                kernel_abi::BLOCK_THREADS,
                1,
                1,
                0,
                ptr::null_mut(),
                params.as_mut_ptr(),
                ptr::null_mut(),
            )
        };
        self.api.check("cuLaunchKernel", r)
    }
}

impl GpuBackend for CudaBackend {
    fn describe(&self) -> DeviceDescription {
        DeviceDescription {
            vendor: "cuda".into(),
            name: self.name.clone(),
            index: self.index,
            arch: self.arch.clone(),
        }
    }

    fn mem_info(&mut self) -> Result<MemInfo, GpuError> {
        let (mut free, mut total) = (0usize, 0usize);
        // SAFETY: valid out-pointers.
        self.api.check("cuMemGetInfo_v2", unsafe {
            (self.api.mem_get_info)(&mut free, &mut total)
        })?;
        Ok(MemInfo {
            free_bytes: free as u64,
            total_bytes: total as u64,
        })
    }

    fn alloc(&mut self, bytes: u64) -> Result<DevicePtr, GpuError> {
        let mut p: u64 = 0;
        // SAFETY: valid out-pointer.
        let r = unsafe { (self.api.mem_alloc)(&mut p, bytes as usize) };
        if r == CUDA_ERROR_OUT_OF_MEMORY {
            return Err(GpuError::OutOfMemory {
                api: "cuMemAlloc_v2",
                bytes,
            });
        }
        self.api.check("cuMemAlloc_v2", r)?;
        Ok(p)
    }

    fn free(&mut self, ptr: DevicePtr) -> Result<(), GpuError> {
        // SAFETY: ptr came from cuMemAlloc (the Session checks ownership).
        self.api
            .check("cuMemFree_v2", unsafe { (self.api.mem_free)(ptr) })
    }

    fn touch(&mut self, ptr: DevicePtr, bytes: u64, seed: u32) -> Result<(), GpuError> {
        self.launch(self.f_touch, bytes, KernelArgs::touch(ptr, bytes, seed))
    }

    fn checksum(&mut self, ptr: DevicePtr, bytes: u64, seed: u32) -> Result<u64, GpuError> {
        let zero: u64 = 0;
        // SAFETY: scratch is our 256-byte allocation; host buffers are valid for 8 bytes.
        unsafe {
            self.api.check(
                "cuMemcpyHtoD_v2",
                (self.api.memcpy_htod)(self.scratch, (&zero as *const u64).cast(), 8),
            )?;
        }
        let args = KernelArgs::checksum(ptr, bytes, seed, self.scratch);
        self.launch(self.f_checksum, bytes, args)?;
        let mut result: u64 = 0;
        // SAFETY: as above; the copy waits for the kernel (same stream).
        unsafe {
            self.api.check(
                "cuMemcpyDtoH_v2",
                (self.api.memcpy_dtoh)((&mut result as *mut u64).cast(), self.scratch, 8),
            )?;
        }
        Ok(result)
    }

    fn strided(
        &mut self,
        ptr: DevicePtr,
        bytes: u64,
        stride_bytes: u64,
        passes: u32,
    ) -> Result<(), GpuError> {
        let args = KernelArgs::strided(ptr, bytes, stride_bytes, passes);
        self.launch(self.f_strided, bytes, args)
    }

    fn copy(&mut self, dst: DevicePtr, src: DevicePtr, bytes: u64) -> Result<(), GpuError> {
        // SAFETY: both ranges are owned allocations (checked by the Session).
        self.api.check("cuMemcpyDtoD_v2", unsafe {
            (self.api.memcpy_dtod)(dst, src, bytes as usize)
        })
    }

    fn synchronize(&mut self) -> Result<(), GpuError> {
        // SAFETY: plain call in our current context.
        self.api
            .check("cuCtxSynchronize", unsafe { (self.api.ctx_synchronize)() })
    }

    fn timer_start(&mut self) -> Result<(), GpuError> {
        // SAFETY: event created in open().
        self.api.check("cuEventRecord", unsafe {
            (self.api.event_record)(self.events[0], ptr::null_mut())
        })
    }

    fn timer_stop(&mut self) -> Result<f64, GpuError> {
        let mut ms: f32 = 0.0;
        // SAFETY: events created in open(); valid out-pointer.
        unsafe {
            self.api.check(
                "cuEventRecord",
                (self.api.event_record)(self.events[1], ptr::null_mut()),
            )?;
            self.api.check(
                "cuEventSynchronize",
                (self.api.event_synchronize)(self.events[1]),
            )?;
            self.api.check(
                "cuEventElapsedTime",
                (self.api.event_elapsed_time)(&mut ms, self.events[0], self.events[1]),
            )?;
        }
        Ok(ms as f64 / 1e3)
    }
}

impl Drop for CudaBackend {
    fn drop(&mut self) {
        // SAFETY: each handle is released once, only if it was acquired.
        unsafe {
            (self.api.ctx_synchronize)();
            for e in self.events {
                if !e.is_null() {
                    (self.api.event_destroy)(e);
                }
            }
            if self.scratch != 0 {
                (self.api.mem_free)(self.scratch);
            }
            if !self.module.is_null() {
                (self.api.module_unload)(self.module);
            }
            (self.api.primary_ctx_release)(self.dev);
        }
    }
}
