//! NVIDIA devices through NVML. `nvml-wrapper` opens `libnvidia-ml.so.1` at run time, so
//! a machine without the driver gets an error here and no NVIDIA readings. Per device:
//! `nvmlDeviceGetMemoryInfo` (used, total), then `nvmlDeviceGetComputeRunningProcesses`
//! (each process's `usedGpuMemory`), right after each other.

use memwatch_wire::{DeviceIdentity, DeviceInfo, Vendor};
use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::Nvml;

use super::monotonic_ns;
use super::reader::{DeviceRead, DeviceReader, ProcessRead};

pub struct NvmlReader {
    nvml: Nvml,
    /// (index, UUID, PCI bus id), read once.
    devices: Vec<(u32, String, String)>,
}

impl NvmlReader {
    /// Loads NVML; fails when the library or a GPU is missing.
    pub fn new() -> Result<Self, String> {
        let nvml = Nvml::init().map_err(|e| format!("NVML not available: {e}"))?;
        let count = nvml
            .device_count()
            .map_err(|e| format!("NVML device count: {e}"))?;
        if count == 0 {
            return Err("NVML: no NVIDIA GPU found".into());
        }
        let devices = (0..count)
            .map(|i| match nvml.device_by_index(i) {
                Ok(d) => (
                    i,
                    d.uuid().unwrap_or_default(),
                    d.pci_info().map(|p| p.bus_id).unwrap_or_default(),
                ),
                Err(_) => (i, String::new(), String::new()),
            })
            .collect();
        Ok(Self { nvml, devices })
    }
}

impl DeviceReader for NvmlReader {
    fn source(&self) -> &'static str {
        "nvml"
    }

    fn infos(&self) -> Vec<DeviceInfo> {
        self.devices
            .iter()
            .filter_map(|(i, uuid, bus)| {
                let d = self.nvml.device_by_index(*i).ok()?;
                Some(DeviceInfo {
                    pid: 0,
                    device: *i as i32,
                    vendor: Vendor::Nvidia.code(),
                    total_bytes: d.memory_info().map(|m| m.total).unwrap_or(0),
                    name: d.name().unwrap_or_else(|_| "nvidia".into()),
                    identity: Some(DeviceIdentity::new(uuid, bus)),
                })
            })
            .collect()
    }

    fn read(&mut self) -> Vec<DeviceRead> {
        let mut out = Vec::with_capacity(self.devices.len());
        for (i, uuid, bus) in &self.devices {
            let Ok(d) = self.nvml.device_by_index(*i) else {
                continue;
            };
            let ts_ns = monotonic_ns();
            let Ok(m) = d.memory_info() else {
                continue;
            };
            let processes = d.running_compute_processes().ok().map(|ps| {
                ps.into_iter()
                    .map(|p| ProcessRead {
                        pid: p.pid,
                        used_bytes: match p.used_gpu_memory {
                            UsedGpuMemory::Used(b) => Some(b),
                            UsedGpuMemory::Unavailable => None,
                        },
                    })
                    .collect()
            });
            out.push(DeviceRead {
                device: *i as i32,
                vendor: Vendor::Nvidia,
                ts_ns,
                used_bytes: m.used,
                total_bytes: m.total,
                uuid: uuid.clone(),
                pci_bus_id: bus.clone(),
                processes,
            });
        }
        out
    }
}
