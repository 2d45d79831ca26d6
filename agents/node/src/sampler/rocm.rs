//! AMD devices through ROCm SMI (`librocm_smi64.so`, loaded at run time with
//! `libloading`: nothing links it). Per device: VRAM used and total
//! (`rsmi_dev_memory_usage_get` / `_total_get`, RSMI_MEM_TYPE_VRAM), its unique id and
//! PCI id; per process: `rsmi_compute_process_info_get` (`vram_usage`, one figure per
//! process over all its devices) and `rsmi_compute_process_gpus_get` (which devices): a
//! process on one device has its figure there, one on several has none (ROCm SMI does
//! not split it). Without an AMD GPU it says so and is left out.

use libloading::{Library, Symbol};
use memwatch_wire::{DeviceIdentity, DeviceInfo, Vendor};

use super::monotonic_ns;
use super::reader::{DeviceRead, DeviceReader, ProcessRead};

type InitFn = unsafe extern "C" fn(u64) -> u32;
type NumFn = unsafe extern "C" fn(*mut u32) -> u32;
type MemFn = unsafe extern "C" fn(u32, u32, *mut u64) -> u32;
type IdFn = unsafe extern "C" fn(u32, *mut u64) -> u32;
type ProcsFn = unsafe extern "C" fn(*mut ProcessInfo, *mut u32) -> u32;
type GpusFn = unsafe extern "C" fn(u32, *mut u32, *mut u32) -> u32;

const RSMI_MEM_TYPE_VRAM: u32 = 0;
const RSMI_STATUS_SUCCESS: u32 = 0;

/// `rsmi_process_info_t` of rocm_smi.h (ROCm 5.2).
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct ProcessInfo {
    process_id: u32,
    pasid: u32,
    vram_usage: u64,
    sdma_usage: u64,
    cu_occupancy: u32,
}

pub struct RocmReader {
    lib: Library,
    /// (index, unique id, PCI bus id), read once.
    devices: Vec<(u32, String, String)>,
}

/// `librocm_smi64`'s loader error with the loader's reason (libloading's Display says
/// only "dlopen failed").
fn load() -> Result<Library, String> {
    // SAFETY: loading a well-known system library; its initialisers are trusted.
    unsafe { Library::new("librocm_smi64.so.1") }
        .or_else(|_| unsafe { Library::new("librocm_smi64.so") })
        .map_err(|e| match std::error::Error::source(&e) {
            Some(why) => format!("ROCm SMI not available: {e}: {why}"),
            None => format!("ROCm SMI not available: {e}"),
        })
}

/// `DDDD:BB:DD.F` of rocm_smi's BDFID (domain in bits 32-63, bus 8-15, device 3-7,
/// function 0-2).
fn bus_id(bdfid: u64) -> String {
    format!(
        "{:04x}:{:02x}:{:02x}.{:x}",
        bdfid >> 32,
        (bdfid >> 8) & 0xff,
        (bdfid >> 3) & 0x1f,
        bdfid & 0x7
    )
}

impl RocmReader {
    /// Loads ROCm SMI and counts its devices; an error when the library is missing, it
    /// does not start, or it finds no AMD GPU.
    pub fn new() -> Result<Self, String> {
        Self::with_sysfs(std::path::Path::new("/sys"))
    }

    /// [`RocmReader::new`] on a machine whose sysfs is at `sys`: without the amdgpu
    /// driver there is no AMD GPU to ask about (and `rsmi_init` would print its own
    /// complaint on stderr).
    pub fn with_sysfs(sys: &std::path::Path) -> Result<Self, String> {
        if !sys.join("module/amdgpu").exists() {
            return Err("ROCm SMI: no AMD GPU found (the amdgpu driver is not loaded)".into());
        }
        let lib = load()?;
        let mut count = 0u32;
        // SAFETY: symbols with the C signatures of rocm_smi.h.
        unsafe {
            let init: Symbol<InitFn> = lib
                .get(b"rsmi_init\0")
                .map_err(|e| format!("ROCm SMI: {e}"))?;
            let status = init(0);
            if status != RSMI_STATUS_SUCCESS {
                return Err(format!(
                    "ROCm SMI: no AMD GPU found (rsmi_init returned {status})"
                ));
            }
            let num: Symbol<NumFn> = lib
                .get(b"rsmi_num_monitor_devices\0")
                .map_err(|e| format!("ROCm SMI: {e}"))?;
            if num(&mut count) != RSMI_STATUS_SUCCESS {
                return Err("ROCm SMI: rsmi_num_monitor_devices failed".into());
            }
        }
        if count == 0 {
            return Err("ROCm SMI: no AMD GPU found".into());
        }
        let mut r = Self {
            lib,
            devices: Vec::new(),
        };
        r.devices = (0..count)
            .map(|i| {
                let uuid = r
                    .id(b"rsmi_dev_unique_id_get\0", i)
                    .map_or_else(String::new, |v| format!("{v:016x}"));
                let pci = r
                    .id(b"rsmi_dev_pci_id_get\0", i)
                    .map_or_else(String::new, bus_id);
                (i, uuid, pci)
            })
            .collect();
        Ok(r)
    }

    fn id(&self, name: &[u8], dev: u32) -> Option<u64> {
        let mut v = 0u64;
        // SAFETY: C signature (uint32_t, uint64_t*).
        unsafe {
            let f: Symbol<IdFn> = self.lib.get(name).ok()?;
            (f(dev, &mut v) == RSMI_STATUS_SUCCESS).then_some(v)
        }
    }

    fn vram(&self, name: &[u8], dev: u32) -> Option<u64> {
        let mut v = 0u64;
        // SAFETY: C signature (uint32_t, rsmi_memory_type_t, uint64_t*).
        unsafe {
            let f: Symbol<MemFn> = self.lib.get(name).ok()?;
            (f(dev, RSMI_MEM_TYPE_VRAM, &mut v) == RSMI_STATUS_SUCCESS).then_some(v)
        }
    }

    /// Every process on the GPUs with its VRAM figure and its devices; `None` when the
    /// list cannot be read.
    fn processes(&self) -> Option<Vec<(ProcessInfo, Vec<u32>)>> {
        // SAFETY: C signatures of rocm_smi.h; buffers sized by the counts passed.
        unsafe {
            let info: Symbol<ProcsFn> = self.lib.get(b"rsmi_compute_process_info_get\0").ok()?;
            let gpus: Symbol<GpusFn> = self.lib.get(b"rsmi_compute_process_gpus_get\0").ok()?;
            let mut n = 0u32;
            if info(std::ptr::null_mut(), &mut n) != RSMI_STATUS_SUCCESS {
                return None;
            }
            // Room for processes that start between the two calls.
            n += 8;
            let mut procs = vec![ProcessInfo::default(); n as usize];
            if info(procs.as_mut_ptr(), &mut n) != RSMI_STATUS_SUCCESS {
                return None;
            }
            procs.truncate(n as usize);
            let devices = self.devices.len() as u32;
            Some(
                procs
                    .into_iter()
                    .map(|p| {
                        let mut idx = vec![0u32; devices as usize];
                        let mut m = devices;
                        let on = if gpus(p.process_id, idx.as_mut_ptr(), &mut m)
                            == RSMI_STATUS_SUCCESS
                        {
                            idx.truncate(m.min(devices) as usize);
                            idx
                        } else {
                            Vec::new()
                        };
                        (p, on)
                    })
                    .collect(),
            )
        }
    }
}

impl DeviceReader for RocmReader {
    fn source(&self) -> &'static str {
        "rocm_smi"
    }

    fn infos(&self) -> Vec<DeviceInfo> {
        self.devices
            .iter()
            .map(|(i, uuid, pci)| DeviceInfo {
                pid: 0,
                device: *i as i32,
                vendor: Vendor::Amd.code(),
                total_bytes: self.vram(b"rsmi_dev_memory_total_get\0", *i).unwrap_or(0),
                name: "amdgpu".into(),
                identity: Some(DeviceIdentity::new(uuid, pci)),
            })
            .collect()
    }

    fn read(&mut self) -> Vec<DeviceRead> {
        let mut out = Vec::with_capacity(self.devices.len());
        let mut stamped = Vec::with_capacity(self.devices.len());
        for (i, uuid, pci) in &self.devices {
            let ts_ns = monotonic_ns();
            let used = self.vram(b"rsmi_dev_memory_usage_get\0", *i);
            let total = self.vram(b"rsmi_dev_memory_total_get\0", *i);
            if let (Some(used_bytes), Some(total_bytes)) = (used, total) {
                stamped.push(*i);
                out.push(DeviceRead {
                    device: *i as i32,
                    vendor: Vendor::Amd,
                    ts_ns,
                    used_bytes,
                    total_bytes,
                    uuid: uuid.clone(),
                    pci_bus_id: pci.clone(),
                    processes: None,
                });
            }
        }
        // One process list for all devices, read right after the devices.
        if let Some(procs) = self.processes() {
            for (d, i) in out.iter_mut().zip(stamped) {
                d.processes = Some(
                    procs
                        .iter()
                        .filter(|(_, on)| on.contains(&i))
                        .map(|(p, on)| ProcessRead {
                            pid: p.process_id,
                            used_bytes: (on.len() == 1).then_some(p.vram_usage),
                        })
                        .collect(),
                );
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bus_ids_in_nvml_like_form() {
        // Domain 0, bus 0xc1, device 0, function 0.
        assert_eq!(bus_id(0xc100), "0000:c1:00.0");
        assert_eq!(
            bus_id((1 << 32) | (0x2f << 8) | (3 << 3) | 1),
            "0001:2f:03.1"
        );
    }

    /// Without the amdgpu driver: a clear reason, never a reader with zero devices.
    #[test]
    fn without_an_amd_gpu_the_reason_is_said() {
        let empty = tempfile::tempdir().unwrap();
        let why = RocmReader::with_sysfs(empty.path())
            .err()
            .expect("no reader");
        assert_eq!(
            why,
            "ROCm SMI: no AMD GPU found (the amdgpu driver is not loaded)"
        );
        // With the driver's directory but no device behind it, the library itself
        // (installed here: Debian's ROCm 5.2) finds none, or is absent.
        let sys = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(sys.path().join("module/amdgpu")).unwrap();
        if !std::path::Path::new("/sys/class/drm/card0/device/mem_info_vram_used").exists() {
            let why = RocmReader::with_sysfs(sys.path()).err().expect("no reader");
            assert!(why.starts_with("ROCm SMI"), "{why}");
        }
    }
}
