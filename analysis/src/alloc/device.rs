//! Device profiles: how much memory a program can get on a given accelerator.
//!
//! Owns the built-in table (MI300X, MI325X, MI355X, Strix Halo, H100, H200), each with
//! the capacity the runtime reports (the base of JAX's memory fraction), its source, the
//! driver's allocation granularity and what the framework reserves; plus parsing of
//! `NAME[:key=value,...]` specs (Strix Halo's carve-out, GTT limit, RAM, API and what HIP
//! reports). Strix Halo's figures follow the unified-memory rules of
//! `crate::apu::limits` (what HIP reports vs what the OS can give). It does not run
//! anything.

use crate::apu::limits::{HipReporting, UnifiedMemory};

/// GiB.
pub const GIB: u64 = 1 << 30;
/// MiB.
pub const MIB: u64 = 1 << 20;

/// JAX's default `XLA_PYTHON_CLIENT_MEM_FRACTION` (XLA's `FixedMemFraction{0.75}`).
pub const JAX_DEFAULT_MEM_FRACTION: f64 = 0.75;

/// Which allocation API the replayed program uses on a unified-memory APU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApuAccounting {
    /// `hipMalloc`: amdgpu places it in the VRAM domain, i.e. the BIOS carve-out.
    DeviceMalloc,
    /// `hipMallocManaged` / host-coherent memory: system pages in the GTT domain, bounded
    /// by the GTT limit (TTM's page limit).
    Managed,
}

/// The two limits of a unified-memory APU profile (`crate::apu::limits`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct UnifiedLimits {
    /// RAM, carve-out and GTT limit of the configuration.
    pub memory: UnifiedMemory,
    /// Which figure HIP reports.
    pub hip_reporting: HipReporting,
    /// What HIP reports as the device's total (`hipMemGetInfo`): the base frameworks
    /// size their pools from.
    pub hip_reported_bytes: u64,
    /// What the OS lets the replayed API map in all (`hipMalloc`: GTT where it is the
    /// larger pool, else the carve-out; managed: GTT).
    pub os_allocatable_bytes: u64,
}

/// A resolved device.
#[derive(Debug, Clone, PartialEq)]
pub struct DeviceProfile {
    /// Canonical name (`mi300x`, `strix-halo`, ...).
    pub name: String,
    /// Marketing name.
    pub display: &'static str,
    /// Bytes the replay uses as the device's capacity (the base of `--mem-fraction`).
    pub capacity_bytes: u64,
    /// Physical memory on the package.
    pub physical_bytes: u64,
    /// Driver allocation granularity (platform model, async pages).
    pub granularity: u64,
    /// Where the figures come from.
    pub source: &'static str,
    /// What the framework keeps for itself / how the pool is sized.
    pub framework_reserve: &'static str,
    /// Whether `capacity_bytes` was measured on a real device (else datasheet).
    pub measured: bool,
    /// For a unified-memory APU: what HIP reports and what the OS can give
    /// (`capacity_bytes` is the smaller for `hipMalloc`, the OS's for managed memory).
    pub unified: Option<UnifiedLimits>,
}

/// Why a device spec was rejected.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum DeviceError {
    #[error("unknown device {0:?} (known: {known})", known = known_names().join(", "))]
    Unknown(String),
    #[error("device {device}: bad parameter {param:?}: {msg}")]
    BadParam {
        device: String,
        param: String,
        msg: String,
    },
}

const STRIX_HALO_SOURCE: &str = "AMD Ryzen AI Max+ 395: up to 128 GB LPDDR5X-8000 unified memory. \
Two limits (analysis/src/apu/README.md, Unified-memory limits): what HIP reports, the base of the frameworks' \
pools: the BIOS UMA carve-out (~15.5 GiB reported next to 96 GiB of GTT on a 128 GiB machine, \
ROCm/hip#3892), or carve-out + GTT since ROCm/rocm-systems#5596 (hip=unified); and what the OS \
lets the program map: hipMalloc gets the carve-out, or GTT when GTT is the larger pool (amdkfd: VRAM \
allocations go to GTT on small-carve-out APUs), managed memory gets GTT; GTT = amdgpu.gttsize / \
ttm.pages_limit, default half of the OS-visible RAM, at most that RAM. Capacity = the smaller of the \
two for hipMalloc, the OS's for managed memory";

const JAX_RESERVE: &str = "JAX/XLA BFC pool = capacity x XLA_PYTHON_CLIENT_MEM_FRACTION (default 0.75, \
floor of the product); preallocated at the first allocation unless XLA_PYTHON_CLIENT_PREALLOCATE=false; \
the remaining 25% is left to the CUDA/HIP context, cuBLAS/cuDNN/MIOpen workspaces and other processes";

struct Entry {
    name: &'static str,
    aliases: &'static [&'static str],
    display: &'static str,
    capacity: u64,
    physical: u64,
    source: &'static str,
    measured: bool,
}

const TABLE: &[Entry] = &[
    Entry {
        name: "mi300x",
        aliases: &["mi300", "instinct-mi300x"],
        display: "AMD Instinct MI300X",
        capacity: 192 * GIB,
        physical: 192 * GIB,
        source: "AMD Instinct MI300X data sheet: 192 GB HBM3 (8 stacks x 24 GiB); the runtime reports slightly less",
        measured: false,
    },
    Entry {
        name: "mi325x",
        aliases: &["instinct-mi325x"],
        display: "AMD Instinct MI325X",
        capacity: 256 * GIB,
        physical: 256 * GIB,
        source: "AMD Instinct MI325X data sheet: 256 GB HBM3E (8 stacks x 32 GiB)",
        measured: false,
    },
    Entry {
        name: "mi355x",
        aliases: &["instinct-mi355x", "mi350x"],
        display: "AMD Instinct MI355X",
        capacity: 288 * GIB,
        physical: 288 * GIB,
        source: "AMD Instinct MI355X data sheet: 288 GB HBM3E (8 stacks x 36 GiB)",
        measured: false,
    },
    Entry {
        name: "h100",
        aliases: &["h100-80gb", "h100-sxm"],
        display: "NVIDIA H100 80GB",
        capacity: 80 * GIB,
        physical: 80 * GIB,
        source: "NVIDIA H100 data sheet: 80 GB HBM3 (5 stacks x 16 GiB); cudaMemGetInfo reports less \
(not measured here: pass --capacity for an exact figure)",
        measured: false,
    },
    Entry {
        name: "h200",
        aliases: &["h200-141gb", "h200-sxm"],
        display: "NVIDIA H200 141GB",
        capacity: 150_156_083_200,
        physical: 144 * GIB,
        source: "NVIDIA H200 data sheet: 141 GB HBM3E; capacity = cudaMemGetInfo total 150156083200 B (143200 MiB) \
measured on an H200 with CUDA 13 / driver 580 (testdata/h200: 0.04 x total = bytes_limit 6006243328)",
        measured: true,
    },
];

/// Names accepted by [`resolve`].
pub fn known_names() -> Vec<&'static str> {
    let mut v: Vec<&'static str> = TABLE.iter().map(|e| e.name).collect();
    v.push("strix-halo");
    v
}

/// The default granularity of device allocations (2 MiB pages, CUDA and HIP).
pub const DEFAULT_GRANULARITY: u64 = 2 * MIB;

/// Strix Halo (Ryzen AI Max+ 395) parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StrixHalo {
    /// Installed LPDDR5X.
    pub system_bytes: u64,
    /// BIOS UMA frame buffer (VRAM carve-out).
    pub vram_carveout: u64,
    /// GTT limit; `None`: TTM's default, half of the RAM the OS sees.
    pub gtt_limit: Option<u64>,
    pub accounting: ApuAccounting,
    /// What HIP reports as the total.
    pub hip: HipReporting,
}

impl StrixHalo {
    /// The memory configuration.
    pub fn memory(&self) -> UnifiedMemory {
        UnifiedMemory {
            installed_bytes: self.system_bytes,
            carveout_bytes: self.vram_carveout,
            gtt_limit_bytes: self.gtt_limit,
        }
    }

    /// Both limits of this configuration.
    pub fn limits(&self) -> UnifiedLimits {
        let memory = self.memory();
        UnifiedLimits {
            memory,
            hip_reporting: self.hip,
            hip_reported_bytes: memory.hip_reported_bytes(self.hip),
            os_allocatable_bytes: match self.accounting {
                ApuAccounting::DeviceMalloc => memory.hip_malloc_bytes(),
                ApuAccounting::Managed => memory.managed_bytes(),
            },
        }
    }

    /// Bytes the replayed program can allocate: for `hipMalloc` the smaller of what HIP
    /// reports (frameworks size their pools from it) and what the OS lets it map; for
    /// managed memory what the OS lets it map (HIP's figure does not bound it).
    pub fn capacity(&self) -> u64 {
        let l = self.limits();
        match self.accounting {
            ApuAccounting::DeviceMalloc => l.hip_reported_bytes.min(l.os_allocatable_bytes),
            ApuAccounting::Managed => l.os_allocatable_bytes,
        }
    }
}

/// A size in a device spec: [`crate::size`]'s rules, at most 2^60 bytes (1 EiB), the
/// largest pool the allocator models take.
fn parse_bytes(s: &str) -> Result<u64, String> {
    let v = crate::size::parse_size(s).map_err(|e| e.to_string())?;
    if v > crate::alloc::trace::MAX_POOL_BYTES {
        return Err(format!(
            "{:?}: larger than any device (the limit is 2^60 bytes, 1 EiB)",
            s.trim()
        ));
    }
    Ok(v)
}

/// Resolves `NAME[:key=value,...]`. Strix Halo keys: `vram=` (carve-out, default 96G,
/// the largest the firmware offers and the usual setting for ML work; 512M is the
/// factory minimum), `gtt=` (GTT limit, default half the OS-visible RAM),
/// `mem=hipmalloc|managed` (default `hipmalloc`), `ram=` (default 128G),
/// `hip=aperture|unified|SIZE` (what HIP reports: the carve-out, as ROCm did before
/// rocm-systems#5596 (default); carve-out + GTT when GTT is larger, as it does after; or
/// a figure measured with `hipMemGetInfo`).
pub fn resolve(spec: &str) -> Result<DeviceProfile, DeviceError> {
    let (name, params) = match spec.split_once(':') {
        Some((n, p)) => (n, p),
        None => (spec, ""),
    };
    let lname = name.trim().to_ascii_lowercase();
    let bad = |param: &str, msg: &str| DeviceError::BadParam {
        device: lname.clone(),
        param: param.to_string(),
        msg: msg.to_string(),
    };
    if matches!(
        lname.as_str(),
        "strix-halo" | "strixhalo" | "ryzen-ai-max" | "gfx1151"
    ) {
        let mut sh = StrixHalo {
            system_bytes: 128 * GIB,
            vram_carveout: 96 * GIB,
            gtt_limit: None,
            accounting: ApuAccounting::DeviceMalloc,
            hip: HipReporting::Aperture,
        };
        let mut seen: Vec<&str> = Vec::new();
        for p in params.split(',').filter(|p| !p.trim().is_empty()) {
            let (k, v) = p
                .split_once('=')
                .ok_or_else(|| bad(p, "expected key=value"))?;
            if seen.contains(&k.trim()) {
                return Err(bad(p, "given twice"));
            }
            seen.push(k.trim());
            match k.trim() {
                "vram" => sh.vram_carveout = parse_bytes(v).map_err(|e| bad(p, &e))?,
                "gtt" => sh.gtt_limit = Some(parse_bytes(v).map_err(|e| bad(p, &e))?),
                "ram" => sh.system_bytes = parse_bytes(v).map_err(|e| bad(p, &e))?,
                "mem" => {
                    sh.accounting = match v.trim() {
                        "hipmalloc" | "device" => ApuAccounting::DeviceMalloc,
                        "managed" | "gtt" => ApuAccounting::Managed,
                        _ => return Err(bad(p, "expected hipmalloc or managed")),
                    }
                }
                "hip" => {
                    sh.hip = match v.trim() {
                        "aperture" | "vram" => HipReporting::Aperture,
                        "unified" => HipReporting::Unified,
                        size => HipReporting::Measured(parse_bytes(size).map_err(|e| {
                            bad(p, &format!("expected aperture, unified or a size: {e}"))
                        })?),
                    }
                }
                _ => return Err(bad(p, "unknown key (vram, gtt, ram, mem, hip)")),
            }
        }
        if sh.vram_carveout == 0 || sh.vram_carveout >= sh.system_bytes {
            return Err(bad(
                "vram",
                "the carve-out must be above 0 and below the installed RAM",
            ));
        }
        return Ok(DeviceProfile {
            name: "strix-halo".into(),
            display: "AMD Ryzen AI Max+ 395 (Strix Halo, Radeon 8060S)",
            capacity_bytes: sh.capacity(),
            physical_bytes: sh.system_bytes,
            granularity: DEFAULT_GRANULARITY,
            source: STRIX_HALO_SOURCE,
            framework_reserve: JAX_RESERVE,
            measured: false,
            unified: Some(sh.limits()),
        });
    }
    if !params.is_empty() {
        return Err(bad(params, "this device takes no parameters"));
    }
    let e = TABLE
        .iter()
        .find(|e| e.name == lname || e.aliases.contains(&lname.as_str()))
        .ok_or_else(|| DeviceError::Unknown(spec.to_string()))?;
    Ok(DeviceProfile {
        name: e.name.into(),
        display: e.display,
        capacity_bytes: e.capacity,
        physical_bytes: e.physical,
        granularity: DEFAULT_GRANULARITY,
        source: e.source,
        framework_reserve: JAX_RESERVE,
        measured: e.measured,
        unified: None,
    })
}

/// JAX's pool limit for a capacity and fraction: `size_t(total * fraction)` as XLA's
/// `CreateBFCAllocator` computes it (a double product, truncated).
pub fn pool_limit(capacity: u64, fraction: f64) -> u64 {
    (capacity as f64 * fraction) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn h200_pool_matches_the_fixture() {
        let d = resolve("h200").unwrap();
        assert_eq!(pool_limit(d.capacity_bytes, 0.04), 6_006_243_328);
        assert_eq!(pool_limit(d.capacity_bytes, 0.025), 3_753_902_080);
    }

    #[test]
    fn strix_halo_params() {
        let d = resolve("strix-halo:vram=96G").unwrap();
        assert_eq!(d.capacity_bytes, 96 * GIB);
        assert_eq!(resolve("strix-halo").unwrap().capacity_bytes, 96 * GIB);
        let d = resolve("strix-halo:vram=512M,mem=managed").unwrap();
        assert_eq!(d.capacity_bytes, (128 * GIB - 512 * MIB) / 2);
        let d = resolve("strix-halo:vram=512M,mem=managed,gtt=100G").unwrap();
        assert_eq!(d.capacity_bytes, 100 * GIB);
        assert!(resolve("strix-halo:vram=200G").is_err());
        assert!(resolve("mi300x").unwrap().unified.is_none());
        assert!(resolve("strix-halo:foo=1").is_err());
        assert!(matches!(resolve("mi999"), Err(DeviceError::Unknown(_))));
        assert!(resolve("MI300X").is_ok());
    }

    #[test]
    fn strix_halo_unified_limits_what_hip_reports_vs_what_the_os_gives() {
        let limits = |spec: &str| {
            let d = resolve(spec).unwrap();
            let u = d.unified.unwrap();
            (
                d.capacity_bytes,
                u.hip_reported_bytes,
                u.os_allocatable_bytes,
            )
        };
        // The 96 GiB carve-out: both limits are the carve-out.
        assert_eq!(limits("strix-halo"), (96 * GIB, 96 * GIB, 96 * GIB));
        // The 512 MiB minimum: hipMalloc could map GTT (half of 127.5 GiB), but HIP
        // reports the aperture, which frameworks size their pools from.
        let gtt = (128 * GIB - 512 * MIB) / 2;
        assert_eq!(limits("strix-halo:vram=512M"), (512 * MIB, 512 * MIB, gtt));
        // A ROCm that reports carve-out + GTT: the OS's limit binds.
        assert_eq!(
            limits("strix-halo:vram=512M,hip=unified"),
            (gtt, 512 * MIB + gtt, gtt)
        );
        assert_eq!(
            limits("strix-halo:vram=512M,gtt=120G,hip=unified"),
            (120 * GIB, 120 * GIB + 512 * MIB, 120 * GIB)
        );
        // ROCm/hip#3892's machine: HIP measured at 15.49 GiB next to 96 GiB of GTT.
        assert_eq!(
            limits("strix-halo:vram=16G,gtt=96G,hip=16636528640"),
            (16_636_528_640, 16_636_528_640, 96 * GIB)
        );
        // Managed memory is bounded by GTT, whatever HIP reports.
        assert_eq!(
            limits("strix-halo:vram=16G,gtt=96G,mem=managed"),
            (96 * GIB, 16 * GIB, 96 * GIB)
        );
        let e = resolve("strix-halo:hip=lots").unwrap_err().to_string();
        assert!(e.contains("expected aperture, unified or a size"), "{e}");
        assert!(resolve("strix-halo:hip=unified,hip=aperture").is_err());
    }
}
