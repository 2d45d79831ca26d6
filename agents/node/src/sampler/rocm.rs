//! AMD sampling through ROCm SMI (`librocm_smi64.so`, loaded at run time; cargo feature
//! `rocm`). VRAM and GTT usage are read separately (RSMI_MEM_TYPE_VRAM = 0,
//! RSMI_MEM_TYPE_GTT = 2) and reported as separate samples.

use libloading::{Library, Symbol};
use memwatch_wire::{DeviceInfo, DeviceSample, Vendor};

use super::DeviceSampler;

type InitFn = unsafe extern "C" fn(u64) -> u32;
type NumFn = unsafe extern "C" fn(*mut u32) -> u32;
type MemFn = unsafe extern "C" fn(u32, u32, *mut u64) -> u32;

const RSMI_MEM_TYPE_VRAM: u32 = 0;
const RSMI_MEM_TYPE_GTT: u32 = 2;

pub struct RocmSampler {
    lib: Library,
    count: u32,
}

impl RocmSampler {
    pub fn new() -> Result<Self, String> {
        // SAFETY: loading a well-known system library; its initialisers are trusted.
        let lib = unsafe { Library::new("librocm_smi64.so.1") }
            .or_else(|_| unsafe { Library::new("librocm_smi64.so") })
            // libloading's Display says only "dlopen failed"; the loader's reason is
            // its source.
            .map_err(|e| match std::error::Error::source(&e) {
                Some(why) => format!("librocm_smi64 not available: {e}: {why}"),
                None => format!("librocm_smi64 not available: {e}"),
            })?;
        let mut count = 0u32;
        // SAFETY: symbols with the C signatures of rocm_smi.h.
        unsafe {
            let init: Symbol<InitFn> = lib.get(b"rsmi_init\0").map_err(|e| e.to_string())?;
            if init(0) != 0 {
                return Err("rsmi_init failed".into());
            }
            let num: Symbol<NumFn> = lib
                .get(b"rsmi_num_monitor_devices\0")
                .map_err(|e| e.to_string())?;
            if num(&mut count) != 0 {
                return Err("rsmi_num_monitor_devices failed".into());
            }
        }
        Ok(Self { lib, count })
    }

    fn read(&self, name: &[u8], dev: u32, kind: u32) -> Option<u64> {
        let mut v = 0u64;
        // SAFETY: C signature (uint32_t, rsmi_memory_type_t, uint64_t*).
        unsafe {
            let f: Symbol<MemFn> = self.lib.get(name).ok()?;
            (f(dev, kind, &mut v) == 0).then_some(v)
        }
    }
}

impl DeviceSampler for RocmSampler {
    fn name(&self) -> &'static str {
        "rocm_smi"
    }

    fn devices(&mut self) -> Vec<DeviceInfo> {
        (0..self.count)
            .map(|i| DeviceInfo {
                pid: 0,
                device: i as i32,
                vendor: Vendor::Amd.code(),
                total_bytes: self
                    .read(b"rsmi_dev_memory_total_get\0", i, RSMI_MEM_TYPE_VRAM)
                    .unwrap_or(0),
                name: "amdgpu".into(),
            })
            .collect()
    }

    fn sample(&mut self, ts_ns: u64) -> Vec<DeviceSample> {
        let mut out = Vec::new();
        for i in 0..self.count {
            for (memory, kind) in [(0u8, RSMI_MEM_TYPE_VRAM), (1u8, RSMI_MEM_TYPE_GTT)] {
                let used = self.read(b"rsmi_dev_memory_usage_get\0", i, kind);
                let total = self.read(b"rsmi_dev_memory_total_get\0", i, kind);
                if let (Some(used_bytes), Some(total_bytes)) = (used, total) {
                    out.push(DeviceSample {
                        ts_ns,
                        device: i as i32,
                        memory,
                        used_bytes,
                        total_bytes,
                        source: "rocm_smi".into(),
                    });
                }
            }
        }
        out
    }
}
