//! Whether a device is an APU (an integrated GPU using the system's RAM).
//!
//! Owns the decision and the evidence it rests on: the runtime's own answer
//! (`hipDeviceAttributeIntegrated`, recorded by the shim) decides when it was given; else
//! the driver's counters do when they show a small firmware carve-out next to a GTT pool
//! many times its size (APUs set up for compute run with the 512 MiB minimum carve-out;
//! no discrete card ROCm supports has 2 GiB of VRAM or less).

/// Largest `mem_info_vram_total` read as a carve-out rather than a discrete card's VRAM.
pub const MAX_CARVEOUT_BYTES: u64 = 2 << 30;

/// How many times the carve-out GTT must be at least for the sysfs rule.
pub const MIN_GTT_TO_CARVEOUT: u64 = 8;

/// What says a device is an APU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ApuEvidence {
    /// The HIP runtime said so (`hipDeviceAttributeIntegrated` = 1).
    HipIntegrated,
    /// amdgpu sysfs: a carve-out of at most [`MAX_CARVEOUT_BYTES`] and GTT at least
    /// [`MIN_GTT_TO_CARVEOUT`] times larger (the runtime was not asked).
    SysfsCarveout,
}

impl ApuEvidence {
    /// How the report words it.
    pub fn describe(self) -> &'static str {
        match self {
            Self::HipIntegrated => "the HIP runtime reports an integrated GPU",
            Self::SysfsCarveout => {
                "amdgpu sysfs shows a small VRAM carve-out next to a much larger GTT pool"
            }
        }
    }
}

/// Whether sysfs totals look like an APU's carve-out.
pub fn sysfs_shows_carveout(vram_total_bytes: u64, gtt_total_bytes: u64) -> bool {
    vram_total_bytes > 0
        && vram_total_bytes <= MAX_CARVEOUT_BYTES
        && gtt_total_bytes >= vram_total_bytes.saturating_mul(MIN_GTT_TO_CARVEOUT)
}

/// The decision: the runtime's answer wins (also a "no"); sysfs decides only when the
/// runtime was not asked. `sysfs_totals`: (VRAM, GTT) totals of the device's card.
pub fn is_apu(integrated: Option<bool>, sysfs_totals: Option<(u64, u64)>) -> Option<ApuEvidence> {
    match integrated {
        Some(true) => Some(ApuEvidence::HipIntegrated),
        Some(false) => None,
        None => sysfs_totals
            .filter(|&(v, g)| sysfs_shows_carveout(v, g))
            .map(|_| ApuEvidence::SysfsCarveout),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    #[test]
    fn the_runtime_decides_when_it_answered() {
        assert_eq!(is_apu(Some(true), None), Some(ApuEvidence::HipIntegrated));
        // A 96 GiB carve-out is still an APU when HIP says so.
        assert_eq!(
            is_apu(Some(true), Some((96 * GIB, 16 * GIB))),
            Some(ApuEvidence::HipIntegrated)
        );
        assert_eq!(is_apu(Some(false), Some((512 << 20, 120 * GIB))), None);
    }

    #[test]
    fn sysfs_carveouts_of_real_apus_and_discrete_cards() {
        // LocalAI#12058: 512 MiB carve-out, 120 GiB GTT (Strix Halo).
        assert!(sysfs_shows_carveout(536_870_912, 128_849_018_880));
        // Beelink GTR9 Pro (ROCm/legacy-rocm-build#6004): 0.5 GiB / 128 GiB.
        assert!(sysfs_shows_carveout(536_870_912, 137_438_953_472));
        // ROCm/hip#3892's 15.49 GiB carve-out is too large for the sysfs rule alone.
        assert!(!sysfs_shows_carveout(16_636_528_640, 103_079_215_104));
        // A 16 GiB discrete card on a 256 GiB host, a 192 GiB MI300X.
        assert!(!sysfs_shows_carveout(16 * GIB, 128 * GIB));
        assert!(!sysfs_shows_carveout(205_822_885_888, 1024 * GIB));
        // 2 GiB next to only 8 GiB of GTT: not enough to tell.
        assert!(!sysfs_shows_carveout(2 * GIB, 8 * GIB - 1));
        assert!(!sysfs_shows_carveout(0, 8 * GIB));
        assert_eq!(
            is_apu(None, Some((536_870_912, 128_849_018_880))),
            Some(ApuEvidence::SysfsCarveout)
        );
        assert_eq!(is_apu(None, None), None);
    }
}
