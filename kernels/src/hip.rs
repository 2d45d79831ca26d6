//! HIP backend (AMD ROCm) through the `hip-sys` crate; compiled with the `rocm` feature.
//!
//! Owns: one device selected with hipSetDevice, the replay kernels' module (the embedded
//! code object for the device's gfx architecture, or one given by the caller, loaded with
//! hipModuleLoadData), launches, a checksum scratch word and two timing events — released
//! in `Drop`. Trace allocations handed out by `alloc` are freed by the caller's `Session`.
//! Built and linked here against Debian's ROCm 5.2 (libamdhip64); not yet run on an AMD GPU.

use crate::backend::{DeviceDescription, DevicePtr, GpuBackend, GpuError, MemInfo};
use crate::code_object::hip_code_object_for;
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
                None => hip_code_object_for(&arch).ok_or_else(|| {
                    GpuError::Kernels(format!(
                        "no embedded code object for {arch} (built: {:?}; skipped: {:?})",
                        crate::code_object::HIP_CODE_OBJECTS
                            .iter()
                            .map(|(t, _)| *t)
                            .collect::<Vec<_>>(),
                        crate::code_object::HIP_SKIPPED
                    ))
                })?,
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
                (&mut me.f_touch as *mut hiprt::hipFunction_t, "mw_touch"),
                (
                    &mut me.f_checksum as *mut hiprt::hipFunction_t,
                    "mw_checksum",
                ),
                (&mut me.f_strided as *mut hiprt::hipFunction_t, "mw_strided"),
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
        params: &mut [*mut c_void],
    ) -> Result<(), GpuError> {
        let blocks = bytes.div_ceil(16).max(1).div_ceil(256);
        let grid = blocks.min(self.cu_count as u64 * 16).max(1) as u32;
        // SAFETY: params point at the caller's live locals matching the kernel signature.
        check("hipModuleLaunchKernel", unsafe {
            hiprt::hipModuleLaunchKernel(
                f,
                grid,
                1,
                1,
                256,
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
        let (mut a, mut b, mut s) = (ptr, bytes, seed);
        let mut params = [
            (&mut a as *mut u64).cast(),
            (&mut b as *mut u64).cast(),
            (&mut s as *mut u32).cast(),
        ];
        self.launch(self.f_touch, bytes, &mut params)
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
        let (mut a, mut b, mut s, mut out) = (ptr, bytes, seed, self.scratch as u64);
        let mut params = [
            (&mut a as *mut u64).cast(),
            (&mut b as *mut u64).cast(),
            (&mut s as *mut u32).cast(),
            (&mut out as *mut u64).cast(),
        ];
        self.launch(self.f_checksum, bytes, &mut params)?;
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
        let (mut a, mut b, mut st, mut p) = (ptr, bytes, (stride_bytes / 16).max(1), passes);
        let mut params = [
            (&mut a as *mut u64).cast(),
            (&mut b as *mut u64).cast(),
            (&mut st as *mut u64).cast(),
            (&mut p as *mut u32).cast(),
        ];
        self.launch(self.f_strided, bytes, &mut params)
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
