//! HIP backend (AMD ROCm) through the `hip-sys` crate; compiled with the `rocm` feature.
//!
//! Owns: one device selected with hipSetDevice, the replay kernels' module (the embedded
//! code object for the device's `gcnArchName` — a device this build has none for is
//! refused, naming it — or one given by the caller, loaded with hipModuleLoadData), launches, a checksum scratch word and two timing events — released
//! in `Drop`. Trace allocations handed out by `alloc` are freed by the caller's `Session`.
//! Built and linked here against Debian's ROCm 5.2 (libamdhip64); not yet run on an AMD GPU.

use crate::backend::{DeviceDescription, DevicePtr, GpuBackend, GpuError, MemInfo};
use crate::code_object::select_hip_code_object;
use crate::kernel_abi::{self, KernelArgs};
use hip_sys::hiprt::{self, hipError_t};
use std::ffi::{c_void, CStr, CString};
use std::ptr;

fn check(api: &'static str, r: hipError_t) -> Result<(), GpuError> {
    if r == hipError_t::hipSuccess {
        return Ok(());
    }
    // SAFETY: hipGetErrorName returns a static NUL-terminated string.
    let name = unsafe {
        let p = hiprt::hipGetErrorName(r);
        if p.is_null() {
            "unknown error".to_string()
        } else {
            CStr::from_ptr(p).to_string_lossy().into_owned()
        }
    };
    Err(GpuError::Api {
        api,
        code: r as i32,
        name,
    })
}

/// One AMD GPU driven through the HIP runtime.
pub struct HipBackend {
    index: u32,
    name: String,
    arch: String,
    cu_count: u32,
    module: hiprt::hipModule_t,
    f_touch: hiprt::hipFunction_t,
    f_checksum: hiprt::hipFunction_t,
    f_strided: hiprt::hipFunction_t,
    scratch: *mut c_void,
    events: [hiprt::hipEvent_t; 2],
}

/// Room for hipDeviceProp_t of any ROCm version (its size changed between releases).
#[repr(C, align(16))]
struct PropBuf([u8; 8192]);

impl HipBackend {
    /// Opens device `index`; `code_object` overrides the embedded code object.
    pub fn open(index: u32, code_object: Option<&[u8]>) -> Result<HipBackend, GpuError> {
        // SAFETY: plain runtime calls with valid out-pointers; PropBuf is larger than any
        // hipDeviceProp_t and suitably aligned.
        unsafe {
            check("hipInit", hiprt::hipInit(0))?;
            check("hipSetDevice", hiprt::hipSetDevice(index as i32))?;
            let mut buf = Box::new(PropBuf([0; 8192]));
            let prop = buf.0.as_mut_ptr().cast::<hiprt::hipDeviceProp_t>();
            check(
                "hipGetDeviceProperties",
                hiprt::hipGetDeviceProperties(prop, index as i32),
            )?;
            let name = CStr::from_ptr((*prop).name.as_ptr())
                .to_string_lossy()
                .into_owned();
            let arch = CStr::from_ptr((*prop).gcnArchName.as_ptr())
                .to_string_lossy()
                .into_owned();
            let cu_count = (*prop).multiProcessorCount.max(1) as u32;
            let image = match code_object {
                Some(c) => c,
                None => select_hip_code_object(&format!("device {index} {name}"), &arch)
                    .map_err(|e| GpuError::Kernels(e.to_string()))?,
            };
            let mut me = HipBackend {
                index,
                name,
                arch,
                cu_count,
                module: ptr::null_mut(),
                f_touch: ptr::null_mut(),
                f_checksum: ptr::null_mut(),
                f_strided: ptr::null_mut(),
                scratch: ptr::null_mut(),
                events: [ptr::null_mut(); 2],
            };
            check(
                "hipModuleLoadData",
                hiprt::hipModuleLoadData(&mut me.module, image.as_ptr().cast()),
            )?;
            for (slot, n) in [
                (
                    &mut me.f_touch as *mut hiprt::hipFunction_t,
                    kernel_abi::TOUCH.name,
                ),
                (
                    &mut me.f_checksum as *mut hiprt::hipFunction_t,
                    kernel_abi::CHECKSUM.name,
                ),
                (
                    &mut me.f_strided as *mut hiprt::hipFunction_t,
                    kernel_abi::STRIDED.name,
                ),
            ] {
                let c = CString::new(n).unwrap_or_default();
                check(
                    "hipModuleGetFunction",
                    hiprt::hipModuleGetFunction(slot, me.module, c.as_ptr()),
                )?;
            }
            check("hipMalloc", hiprt::hipMalloc(&mut me.scratch, 256))?;
            for i in 0..2 {
                check("hipEventCreate", hiprt::hipEventCreate(&mut me.events[i]))?;
            }
            Ok(me)
        }
    }

    fn launch(
        &self,
        f: hiprt::hipFunction_t,
        bytes: u64,
        mut args: KernelArgs,
    ) -> Result<(), GpuError> {
        let grid = kernel_abi::grid_blocks(bytes, self.cu_count);
        let mut params = args.param_pointers();
        // SAFETY: params point into `args`, alive until the call returns, with the types
        // of the kernel's signature (kernel_abi).
        check("hipModuleLaunchKernel", unsafe {
            hiprt::hipModuleLaunchKernel(
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
        })
    }
}

impl GpuBackend for HipBackend {
    fn describe(&self) -> DeviceDescription {
        DeviceDescription {
            vendor: "hip".into(),
            name: self.name.clone(),
            index: self.index,
            arch: self.arch.clone(),
        }
    }

    fn mem_info(&mut self) -> Result<MemInfo, GpuError> {
        let (mut free, mut total) = (0usize, 0usize);
        // SAFETY: valid out-pointers.
        check("hipMemGetInfo", unsafe {
            hiprt::hipMemGetInfo(&mut free, &mut total)
        })?;
        Ok(MemInfo {
            free_bytes: free as u64,
            total_bytes: total as u64,
        })
    }

    fn alloc(&mut self, bytes: u64) -> Result<DevicePtr, GpuError> {
        let mut p: *mut c_void = ptr::null_mut();
        // SAFETY: valid out-pointer.
        let r = unsafe { hiprt::hipMalloc(&mut p, bytes as usize) };
        if r == hipError_t::hipErrorOutOfMemory {
            return Err(GpuError::OutOfMemory {
                api: "hipMalloc",
                bytes,
            });
        }
        check("hipMalloc", r)?;
        Ok(p as u64)
    }

    fn free(&mut self, ptr: DevicePtr) -> Result<(), GpuError> {
        // SAFETY: ptr came from hipMalloc (the Session checks ownership).
        check("hipFree", unsafe { hiprt::hipFree(ptr as *mut c_void) })
    }

    fn touch(&mut self, ptr: DevicePtr, bytes: u64, seed: u32) -> Result<(), GpuError> {
        self.launch(self.f_touch, bytes, KernelArgs::touch(ptr, bytes, seed))
    }

    fn checksum(&mut self, ptr: DevicePtr, bytes: u64, seed: u32) -> Result<u64, GpuError> {
        let mut zero: u64 = 0;
        // SAFETY: scratch is our 256-byte allocation; host words are valid for 8 bytes.
        unsafe {
            check(
                "hipMemcpyHtoD",
                hiprt::hipMemcpyHtoD(self.scratch, (&mut zero as *mut u64).cast(), 8),
            )?;
        }
        let args = KernelArgs::checksum(ptr, bytes, seed, self.scratch as u64);
        self.launch(self.f_checksum, bytes, args)?;
        let mut result: u64 = 0;
        // SAFETY: as above; the copy waits for the kernel on the null stream.
        unsafe {
            check(
                "hipMemcpyDtoH",
                hiprt::hipMemcpyDtoH((&mut result as *mut u64).cast(), self.scratch, 8),
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
        check("hipMemcpyDtoD", unsafe {
            hiprt::hipMemcpyDtoD(dst as *mut c_void, src as *mut c_void, bytes as usize)
        })
    }

    fn synchronize(&mut self) -> Result<(), GpuError> {
        // SAFETY: plain call.
        check("hipDeviceSynchronize", unsafe {
            hiprt::hipDeviceSynchronize()
        })
    }

    fn timer_start(&mut self) -> Result<(), GpuError> {
        // SAFETY: event created in open().
        check("hipEventRecord", unsafe {
            hiprt::hipEventRecord(self.events[0], ptr::null_mut())
        })
    }

    fn timer_stop(&mut self) -> Result<f64, GpuError> {
        let mut ms: f32 = 0.0;
        // SAFETY: events created in open(); valid out-pointer.
        unsafe {
            check(
                "hipEventRecord",
                hiprt::hipEventRecord(self.events[1], ptr::null_mut()),
            )?;
            check(
                "hipEventSynchronize",
                hiprt::hipEventSynchronize(self.events[1]),
            )?;
            check(
                "hipEventElapsedTime",
                hiprt::hipEventElapsedTime(&mut ms, self.events[0], self.events[1]),
            )?;
        }
        Ok(ms as f64 / 1e3)
    }
}

impl Drop for HipBackend {
    fn drop(&mut self) {
        // SAFETY: each handle is released once, only if it was acquired.
        unsafe {
            hiprt::hipDeviceSynchronize();
            for e in self.events {
                if !e.is_null() {
                    hiprt::hipEventDestroy(e);
                }
            }
            if !self.scratch.is_null() {
                hiprt::hipFree(self.scratch);
            }
            if !self.module.is_null() {
                hiprt::hipModuleUnload(self.module);
            }
        }
    }
}
