//! NVIDIA sampling through NVML. `nvml-wrapper` opens `libnvidia-ml.so.1` at run time,
//! so a machine without the driver just gets an error here and no NVIDIA samples.

use memwatch_wire::{DeviceInfo, DeviceSample, Vendor};
use nvml_wrapper::Nvml;

use super::DeviceSampler;

pub struct NvmlSampler {
    nvml: Nvml,
    count: u32,
}

impl NvmlSampler {
    /// Loads NVML; fails when the library or a GPU is missing.
    pub fn new() -> Result<Self, String> {
        let nvml = Nvml::init().map_err(|e| format!("NVML not available: {e}"))?;
        let count = nvml
            .device_count()
            .map_err(|e| format!("NVML device count: {e}"))?;
        Ok(Self { nvml, count })
    }
}

impl DeviceSampler for NvmlSampler {
    fn name(&self) -> &'static str {
        "nvml"
    }

    fn devices(&mut self) -> Vec<DeviceInfo> {
        (0..self.count)
            .filter_map(|i| {
                let d = self.nvml.device_by_index(i).ok()?;
                Some(DeviceInfo {
                    pid: 0,
                    device: i as i32,
                    vendor: Vendor::Nvidia.code(),
                    total_bytes: d.memory_info().map(|m| m.total).unwrap_or(0),
                    name: d.name().unwrap_or_else(|_| "nvidia".into()),
                })
            })
            .collect()
    }

    fn sample(&mut self, ts_ns: u64) -> Vec<DeviceSample> {
        (0..self.count)
            .filter_map(|i| {
                let m = self.nvml.device_by_index(i).ok()?.memory_info().ok()?;
                Some(DeviceSample {
                    ts_ns,
                    device: i as i32,
                    memory: 0,
                    used_bytes: m.used,
                    total_bytes: m.total,
                    source: "nvml".into(),
                })
            })
            .collect()
    }
}
