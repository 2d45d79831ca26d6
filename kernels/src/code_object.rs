//! Reading the kernel code objects memwatch loads at run time.
//!
//! Owns: the embedded HIP code objects (from `build.rs`), picking the one for a device's
//! architecture, and checking that a code object really is one: a clang offload bundle
//! whose device entry is an AMDGPU ELF (`e_machine` 0xE0) defining every replay kernel, or
//! a CUDA fatbin/cubin. It never loads code into a device (the backends do).

include!(concat!(env!("OUT_DIR"), "/hip_code_objects.rs"));

use thiserror::Error;

/// The kernel entry points every code object must define.
pub const KERNEL_NAMES: &[&str] = &["mw_touch", "mw_checksum", "mw_strided"];

const BUNDLE_MAGIC: &[u8] = b"__CLANG_OFFLOAD_BUNDLE__";
const EM_AMDGPU: u16 = 0xE0;
const EM_CUDA: u16 = 190;
const FATBIN_MAGIC: u32 = 0xBA55_ED50;

/// Why bytes are not a usable code object.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum CodeObjectError {
    #[error("truncated at byte {0}")]
    Truncated(usize),
    #[error("not a clang offload bundle, ELF, or CUDA fatbin (first bytes {0:02x?})")]
    UnknownFormat(Vec<u8>),
    #[error("offload bundle has no AMDGPU entry (entries: {0:?})")]
    NoDeviceEntry(Vec<String>),
    #[error("ELF machine is {0:#x}, expected AMDGPU (0xe0) or CUDA (190)")]
    WrongMachine(u16),
    #[error("kernel `{0}` is not defined in the code object")]
    MissingKernel(String),
}

/// One device entry of a code object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceImage {
    /// The bundle entry id (`hipv4-amdgcn-amd-amdhsa--gfx90a`) or `cuda-elf` / `cuda-fatbin`.
    pub id: String,
    /// Size of the device image in bytes.
    pub bytes: usize,
}

fn u64_at(d: &[u8], o: usize) -> Result<u64, CodeObjectError> {
    d.get(o..o + 8)
        .map(|b| u64::from_le_bytes(b.try_into().unwrap_or([0; 8])))
        .ok_or(CodeObjectError::Truncated(o))
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

fn check_elf(elf: &[u8]) -> Result<u16, CodeObjectError> {
    if elf.len() < 20 {
        return Err(CodeObjectError::Truncated(elf.len()));
    }
    let machine = u16::from_le_bytes([elf[18], elf[19]]);
    if machine != EM_AMDGPU && machine != EM_CUDA {
        return Err(CodeObjectError::WrongMachine(machine));
    }
    Ok(machine)
}

fn check_kernels(image: &[u8]) -> Result<(), CodeObjectError> {
    for k in KERNEL_NAMES {
        let mut sym = k.as_bytes().to_vec();
        sym.push(0);
        if !contains(image, &sym) {
            return Err(CodeObjectError::MissingKernel(k.to_string()));
        }
    }
    Ok(())
}

/// Checks a code object and lists its device images (each must define every kernel).
pub fn inspect(data: &[u8]) -> Result<Vec<DeviceImage>, CodeObjectError> {
    if data.starts_with(BUNDLE_MAGIC) {
        let n = u64_at(data, BUNDLE_MAGIC.len())? as usize;
        let mut o = BUNDLE_MAGIC.len() + 8;
        let mut ids = Vec::new();
        let mut images = Vec::new();
        for _ in 0..n {
            let off = u64_at(data, o)? as usize;
            let size = u64_at(data, o + 8)? as usize;
            let len = u64_at(data, o + 16)? as usize;
            o += 24;
            let id = data.get(o..o + len).ok_or(CodeObjectError::Truncated(o))?;
            let id = String::from_utf8_lossy(id).into_owned();
            o += len;
            ids.push(id.clone());
            if id.contains("amdgcn") {
                let end = off
                    .checked_add(size)
                    .ok_or(CodeObjectError::Truncated(off))?;
                let image = data.get(off..end).ok_or(CodeObjectError::Truncated(off))?;
                if !image.starts_with(b"\x7fELF") {
                    return Err(CodeObjectError::UnknownFormat(
                        image.iter().take(4).copied().collect(),
                    ));
                }
                check_elf(image)?;
                check_kernels(image)?;
                images.push(DeviceImage { id, bytes: size });
            }
        }
        if images.is_empty() {
            return Err(CodeObjectError::NoDeviceEntry(ids));
        }
        return Ok(images);
    }
    if data.starts_with(b"\x7fELF") {
        let machine = check_elf(data)?;
        check_kernels(data)?;
        let id = if machine == EM_CUDA {
            "cuda-elf"
        } else {
            "amdgcn-elf"
        };
        return Ok(vec![DeviceImage {
            id: id.into(),
            bytes: data.len(),
        }]);
    }
    if data.len() >= 4 && u32::from_le_bytes([data[0], data[1], data[2], data[3]]) == FATBIN_MAGIC {
        // Fatbin members may be compressed; cuModuleGetFunction checks the names at load.
        return Ok(vec![DeviceImage {
            id: "cuda-fatbin".into(),
            bytes: data.len(),
        }]);
    }
    Err(CodeObjectError::UnknownFormat(
        data.iter().take(8).copied().collect(),
    ))
}

/// The embedded HIP code object for an AMD architecture name such as `gfx90a:sramecc+:xnack-`
/// (features after the first `:` are ignored).
pub fn hip_code_object_for(arch: &str) -> Option<&'static [u8]> {
    let base = arch.split(':').next().unwrap_or(arch);
    HIP_CODE_OBJECTS
        .iter()
        .find(|(t, _)| *t == base)
        .map(|(_, b)| *b)
}
