//! The vendor-neutral view of a device memory library that can name processes: one
//! [`DeviceReader`] per library (NVML, ROCm SMI), read by [`super::sampling`].
//!
//! Owns the trait, what one device read looks like ([`DeviceRead`]) and the choice of
//! readers on this machine ([`detect_readers`]): a library that is absent, or finds no
//! device, is left out with the reason said once.

use memwatch_wire::{DeviceInfo, Vendor};

/// One process's use of a device as the library answered it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcessRead {
    pub pid: u32,
    /// `None`: the library has no figure for it (NVML "not available"; ROCm SMI's
    /// per-process figure of a process on several devices).
    pub used_bytes: Option<u64>,
}

/// One device, read at one instant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceRead {
    /// The library's device index.
    pub device: i32,
    pub vendor: Vendor,
    /// CLOCK_MONOTONIC ns when this device's reading started.
    pub ts_ns: u64,
    pub used_bytes: u64,
    pub total_bytes: u64,
    pub uuid: String,
    pub pci_bus_id: String,
    /// `None`: the process list could not be read this time.
    pub processes: Option<Vec<ProcessRead>>,
}

/// A device memory library that reads devices and the processes on them.
pub trait DeviceReader: Send {
    /// Short name stored with each reading ("nvml", "rocm_smi").
    fn source(&self) -> &'static str;
    /// The devices it reads, named (`device_info` with pid 0: the node's view).
    fn infos(&self) -> Vec<DeviceInfo>;
    /// Every device, each stamped with [`super::monotonic_ns`] when its reading started.
    /// A device that cannot be read this time is left out.
    fn read(&mut self) -> Vec<DeviceRead>;
}

/// The readers that work on this machine, and why each one that does not was left out
/// (`"NVML not available: …"`, `"ROCm SMI: no AMD GPU found"`).
pub fn detect_readers() -> (Vec<Box<dyn DeviceReader>>, Vec<String>) {
    let mut readers: Vec<Box<dyn DeviceReader>> = Vec::new();
    let mut off = Vec::new();
    match super::nvml::NvmlReader::new() {
        Ok(r) => readers.push(Box::new(r)),
        Err(e) => off.push(e),
    }
    match super::rocm::RocmReader::new() {
        Ok(r) => readers.push(Box::new(r)),
        Err(e) => off.push(e),
    }
    (readers, off)
}
