//! Reading the kernel code objects memwatch loads at run time.
//!
//! Owns: the embedded HIP code objects (from `build.rs`), picking the one for a device's
//! architecture (`gcnArchName`, refusing one it has none for), and checking that a code
//! object really is one: an AMDGPU ELF (`e_machine` 0xE0, the processor named by
//! `e_flags`) or a clang offload bundle of them, defining every replay kernel; or a CUDA
//! fatbin/cubin. It never loads code into a device (the backends do).

include!(concat!(env!("OUT_DIR"), "/hip_code_objects.rs"));

use thiserror::Error;

/// The kernel entry points every code object must define.
pub const KERNEL_NAMES: [&str; 3] = [
    crate::kernel_abi::TOUCH.name,
    crate::kernel_abi::CHECKSUM.name,
    crate::kernel_abi::STRIDED.name,
];

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

/// `e_flags & EF_AMDGPU_MACH` of AMDGPU ELF code objects: the processor (LLVM's
/// `llvm/BinaryFormat/ELF.h`; the tests check the shipped targets against llvm-readobj).
const AMDGPU_MACH: &[(u32, &str)] = &[
    (0x2f, "gfx906"),
    (0x30, "gfx908"),
    (0x3f, "gfx90a"),
    (0x40, "gfx940"),
    (0x41, "gfx1100"),
    (0x43, "gfx1150"),
    (0x46, "gfx1101"),
    (0x47, "gfx1102"),
    (0x48, "gfx1200"),
    (0x4a, "gfx1151"),
    (0x4b, "gfx941"),
    (0x4c, "gfx942"),
    (0x4e, "gfx1201"),
    (0x4f, "gfx950"),
    (0x55, "gfx1152"),
];
const EF_AMDGPU_MACH_MASK: u32 = 0xff;

/// The processor an AMDGPU ELF was built for (from `e_flags`), `None` for one this table
/// does not name or bytes that are not an AMDGPU ELF.
pub fn amdgpu_processor(elf: &[u8]) -> Option<&'static str> {
    if !elf.starts_with(b"\x7fELF") || elf.len() < 52 {
        return None;
    }
    if u16::from_le_bytes([elf[18], elf[19]]) != EM_AMDGPU {
        return None;
    }
    // e_flags follows e_entry, e_phoff, e_shoff (8 bytes each in ELF64) at offset 48.
    let flags = u32::from_le_bytes([elf[48], elf[49], elf[50], elf[51]]);
    AMDGPU_MACH
        .iter()
        .find(|(m, _)| *m == flags & EF_AMDGPU_MACH_MASK)
        .map(|(_, name)| *name)
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
            "cuda-elf".to_string()
        } else {
            format!(
                "amdgcn-amd-amdhsa--{}",
                amdgpu_processor(data).unwrap_or("unknown")
            )
        };
        return Ok(vec![DeviceImage {
            id,
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

/// Whether a code object built for `target` (`gfx90a`, or with features such as
/// `gfx90a:xnack+`) runs on a device whose `gcnArchName` is `device_arch`
/// (`gfx90a:sramecc+:xnack-`): the same processor, and every feature the target pins is
/// the device's setting. A target without features (what memwatch builds) runs with
/// either setting.
pub fn target_runs_on(target: &str, device_arch: &str) -> bool {
    let mut t = target.split(':');
    let mut d = device_arch.trim().split(':');
    if t.next() != d.next() {
        return false;
    }
    let device_features: Vec<&str> = d.collect();
    t.all(|f| device_features.contains(&f))
}

/// The embedded HIP code object for a device's `gcnArchName` (e.g.
/// `gfx90a:sramecc+:xnack-`), if this build has one.
pub fn hip_code_object_for(arch: &str) -> Option<&'static [u8]> {
    HIP_CODE_OBJECTS
        .iter()
        .find(|(t, _)| target_runs_on(t, arch))
        .map(|(_, b)| *b)
}

/// This build has no replay kernels for a device.
#[derive(Debug, Error, PartialEq, Eq)]
#[error(
    "no replay kernels for {device} ({arch}): this memwatch has code objects for {built}{skipped}; \
     build memwatch with a clang that knows {base} (MEMWATCH_HIP_TARGETS={base}) or pass --kernels FILE"
)]
pub struct NoCodeObject {
    /// The device's name.
    pub device: String,
    /// Its `gcnArchName`.
    pub arch: String,
    /// The processor part of `arch`.
    pub base: String,
    /// The targets embedded, comma-separated (or "none").
    pub built: String,
    /// "; skipped at build time: ..." when targets were skipped.
    pub skipped: String,
}

/// The code object to load on a device, chosen by its `gcnArchName`, or an error naming
/// the device and what this build has.
pub fn select_hip_code_object(
    device: &str,
    arch: &str,
) -> Result<&'static [u8], Box<NoCodeObject>> {
    select_from(HIP_CODE_OBJECTS, HIP_SKIPPED, device, arch)
}

fn select_from(
    objects: &'static [(&'static str, &'static [u8])],
    skipped: &[(&str, &str)],
    device: &str,
    arch: &str,
) -> Result<&'static [u8], Box<NoCodeObject>> {
    if let Some((_, bytes)) = objects.iter().find(|(t, _)| target_runs_on(t, arch)) {
        return Ok(bytes);
    }
    let built: Vec<&str> = objects.iter().map(|(t, _)| *t).collect();
    let skipped: Vec<String> = skipped
        .iter()
        .map(|(t, why)| format!("{t}: {why}"))
        .collect();
    Err(Box::new(NoCodeObject {
        device: device.to_string(),
        arch: arch.to_string(),
        base: arch.split(':').next().unwrap_or(arch).trim().to_string(),
        built: if built.is_empty() {
            "no target".into()
        } else {
            built.join(", ")
        },
        skipped: if skipped.is_empty() {
            String::new()
        } else {
            format!("; skipped at build time: {}", skipped.join("; "))
        },
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_match_the_devices_processor_and_pinned_features() {
        assert!(target_runs_on("gfx90a", "gfx90a:sramecc+:xnack-"));
        assert!(target_runs_on("gfx942", "gfx942"));
        assert!(target_runs_on("gfx1151", " gfx1151 "));
        assert!(!target_runs_on("gfx1151", "gfx1150"));
        assert!(!target_runs_on("gfx90a", "gfx908:sramecc+:xnack-"));
        assert!(target_runs_on("gfx90a:xnack-", "gfx90a:sramecc+:xnack-"));
        assert!(!target_runs_on("gfx90a:xnack+", "gfx90a:sramecc+:xnack-"));
    }

    static FAKE: &[(&str, &[u8])] = &[("gfx90a", b"a"), ("gfx942", b"b")];

    #[test]
    fn selection_picks_by_arch_and_refuses_naming_the_device() {
        assert_eq!(
            select_from(FAKE, &[], "MI300X", "gfx942:sramecc+:xnack-").unwrap(),
            b"b"
        );
        let e = select_from(
            FAKE,
            &[("gfx1151", "clang-15 does not support gfx1151")],
            "AMD Radeon 8060S",
            "gfx1151",
        )
        .unwrap_err();
        let msg = e.to_string();
        for part in [
            "AMD Radeon 8060S (gfx1151)",
            "gfx90a, gfx942",
            "clang-15 does not support gfx1151",
            "MEMWATCH_HIP_TARGETS=gfx1151",
        ] {
            assert!(msg.contains(part), "{part:?} in {msg}");
        }
        let none = select_from(&[], &[], "Radeon RX 7900 XTX", "gfx1100").unwrap_err();
        assert!(
            none.to_string().contains("code objects for no target"),
            "{none}"
        );
    }
}
