//! How much memory a program can get on a unified-memory APU (Strix Halo), and how much
//! HIP says it can: the two differ, and both matter.
//!
//! Owns the one set of rules the replay's `strix-halo` profile and `memwatch report`'s
//! APU section both use. The figures and where each rule comes from are in
//! `analysis/src/apu/README.md` ("Unified-memory limits"); in short:
//! - the firmware's VRAM carve-out (BIOS "UMA frame buffer") is taken from the RAM before
//!   the OS boots; the OS manages the rest;
//! - GTT is the system RAM the GPU may map for user processes; TTM's default limit is half
//!   of the OS's RAM (`ttm.pages_limit` / `amdgpu.gttsize` raise it), and the kernel caps
//!   it at the OS's RAM on APUs;
//! - `hipMalloc` lands in the carve-out, except where the carve-out is smaller than GTT:
//!   there amdkfd sends VRAM allocations to GTT ("Let VRAM allocations go to GTT domain on
//!   small APUs"), so GTT is the limit;
//! - managed / host memory (`hipMallocManaged`, `hipHostMalloc`) is system pages mapped
//!   through GTT;
//! - what HIP *reports* (`hipMemGetInfo`, `hipDeviceTotalMem`, `totalGlobalMem`, the base
//!   of JAX's memory fraction and of PyTorch's `total_memory`) was the carve-out alone
//!   ("aperture", ~15.5 GiB on a 128 GiB machine with 96 GiB of GTT: ROCm/hip#3892); a
//!   later ROCm adds GTT when GTT is the larger ("unified", ROCm/rocm-systems#5596).

/// Which figure HIP reports as the device's total memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum HipReporting {
    /// The VRAM carve-out only (ROCm releases before rocm-systems#5596).
    Aperture,
    /// Carve-out plus GTT when GTT is the larger pool (rocm-systems#5596).
    Unified,
    /// A figure measured on the machine (`hipMemGetInfo` total).
    Measured(u64),
}

/// The memory of one APU configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct UnifiedMemory {
    /// RAM installed (the carve-out comes out of it).
    pub installed_bytes: u64,
    /// Firmware VRAM carve-out (`mem_info_vram_total`).
    pub carveout_bytes: u64,
    /// GTT limit set on the kernel command line; `None`: TTM's default.
    pub gtt_limit_bytes: Option<u64>,
}

impl UnifiedMemory {
    /// RAM the OS manages: installed minus the carve-out.
    pub fn os_bytes(&self) -> u64 {
        self.installed_bytes.saturating_sub(self.carveout_bytes)
    }

    /// The GTT limit in effect (`mem_info_gtt_total`): the configured one or half the
    /// OS's RAM, at most the OS's RAM.
    pub fn gtt_bytes(&self) -> u64 {
        let os = self.os_bytes();
        self.gtt_limit_bytes.unwrap_or(os / 2).min(os)
    }

    /// What `hipMalloc` can get in all.
    pub fn hip_malloc_bytes(&self) -> u64 {
        hip_malloc_limit(self.carveout_bytes, self.gtt_bytes())
    }

    /// What managed / host memory mapped for the GPU can get in all.
    pub fn managed_bytes(&self) -> u64 {
        self.gtt_bytes()
    }

    /// What HIP reports as the total.
    pub fn hip_reported_bytes(&self, how: HipReporting) -> u64 {
        hip_reported(self.carveout_bytes, self.gtt_bytes(), how)
    }
}

/// The `hipMalloc` limit from the two pools the driver reports (sysfs
/// `mem_info_vram_total`, `mem_info_gtt_total`): GTT where it is the larger (amdkfd then
/// places VRAM allocations in GTT), else the carve-out.
pub fn hip_malloc_limit(vram_bytes: u64, gtt_bytes: u64) -> u64 {
    if gtt_bytes > vram_bytes {
        gtt_bytes
    } else {
        vram_bytes
    }
}

/// What HIP reports as the device's total for these pools.
pub fn hip_reported(vram_bytes: u64, gtt_bytes: u64, how: HipReporting) -> u64 {
    match how {
        HipReporting::Aperture => vram_bytes,
        HipReporting::Unified if gtt_bytes > vram_bytes => vram_bytes.saturating_add(gtt_bytes),
        HipReporting::Unified => vram_bytes,
        HipReporting::Measured(b) => b,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    #[test]
    fn a_small_carveout_sends_hipmalloc_to_gtt() {
        // 128 GiB, 512 MiB carve-out, GTT raised to 120 GiB (LocalAI#12058's figures).
        let m = UnifiedMemory {
            installed_bytes: 128 * GIB,
            carveout_bytes: 512 << 20,
            gtt_limit_bytes: Some(120 * GIB),
        };
        assert_eq!(m.gtt_bytes(), 120 * GIB);
        assert_eq!(m.hip_malloc_bytes(), 120 * GIB);
        assert_eq!(m.hip_reported_bytes(HipReporting::Aperture), 512 << 20);
        assert_eq!(
            m.hip_reported_bytes(HipReporting::Unified),
            120 * GIB + (512 << 20)
        );
    }

    #[test]
    fn a_large_carveout_is_the_hipmalloc_limit_and_gtt_defaults_to_half_the_rest() {
        let m = UnifiedMemory {
            installed_bytes: 128 * GIB,
            carveout_bytes: 96 * GIB,
            gtt_limit_bytes: None,
        };
        assert_eq!(m.os_bytes(), 32 * GIB);
        assert_eq!(m.gtt_bytes(), 16 * GIB);
        assert_eq!(m.hip_malloc_bytes(), 96 * GIB);
        assert_eq!(m.managed_bytes(), 16 * GIB);
        // Unified reporting adds GTT only when it is the larger pool.
        assert_eq!(m.hip_reported_bytes(HipReporting::Unified), 96 * GIB);
        // A GTT limit above the OS's RAM is capped to it.
        let m = UnifiedMemory {
            gtt_limit_bytes: Some(100 * GIB),
            ..m
        };
        assert_eq!(m.gtt_bytes(), 32 * GIB);
        assert_eq!(m.hip_reported_bytes(HipReporting::Measured(7)), 7);
    }

    #[test]
    fn hip_3892_figures() {
        // ROCm/hip#3892: VRAM 16636528640 B (15.49 GiB), GTT 103079215104 B (96 GiB):
        // HIP reported the aperture; hipMalloc can get GTT.
        assert_eq!(
            hip_reported(16_636_528_640, 103_079_215_104, HipReporting::Aperture),
            16_636_528_640
        );
        assert_eq!(
            hip_malloc_limit(16_636_528_640, 103_079_215_104),
            103_079_215_104
        );
    }
}
