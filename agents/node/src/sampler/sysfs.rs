//! amdgpu sysfs sampling: `/sys/class/drm/cardN/device/mem_info_{vram,gtt}_{used,total}`.
//!
//! Dependency-free AMD fallback, and what `memwatch run` records for the report's APU
//! section. On an APU such as Strix Halo `vram` is the BIOS carve-out and `gtt` the
//! system memory the GPU maps; they are separate samples. Cards are numbered 0.. in
//! `cardN` order, skipping entries without the counters (connectors, render nodes, a
//! BMC's VGA card): with one AMD GPU that is HIP's device 0; with several it assumes
//! HIP enumerates them in the same order.

use std::path::{Path, PathBuf};

use memwatch_wire::{DeviceIdentity, DeviceInfo, DeviceSample, Vendor};

use super::DeviceSampler;

/// Reads the amdgpu memory counters of every card under a sysfs root.
pub struct SysfsSampler {
    /// (device ordinal, card's `device` directory).
    cards: Vec<(i32, PathBuf)>,
}

fn read_u64(p: &Path) -> Option<u64> {
    std::fs::read_to_string(p).ok()?.trim().parse().ok()
}

/// A card's identity: amdgpu's `unique_id` (the unique id ROCm names the GPU by) and the
/// PCI address its `device` directory links to; unknown parts stay empty.
fn identity(dev: &Path) -> DeviceIdentity {
    let uuid = std::fs::read_to_string(dev.join("unique_id")).unwrap_or_default();
    let bus = std::fs::canonicalize(dev)
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_default();
    DeviceIdentity::new(&uuid, &bus)
}

impl SysfsSampler {
    /// `root` is normally `/sys`; tests point it at a fake tree.
    pub fn new(root: &Path) -> Self {
        let drm = root.join("class/drm");
        let mut cards: Vec<(u32, PathBuf)> = std::fs::read_dir(&drm)
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                let n: u32 = name.strip_prefix("card")?.parse().ok()?;
                let dev = e.path().join("device");
                dev.join("mem_info_vram_used").exists().then_some((n, dev))
            })
            .collect();
        cards.sort();
        Self {
            cards: cards
                .into_iter()
                .enumerate()
                .map(|(i, (_, p))| (i as i32, p))
                .collect(),
        }
    }

    pub fn card_count(&self) -> usize {
        self.cards.len()
    }
}

impl DeviceSampler for SysfsSampler {
    fn name(&self) -> &'static str {
        "sysfs"
    }

    fn devices(&mut self) -> Vec<DeviceInfo> {
        self.cards
            .iter()
            .map(|(i, p)| DeviceInfo {
                pid: 0,
                device: *i,
                vendor: Vendor::Amd.code(),
                total_bytes: read_u64(&p.join("mem_info_vram_total")).unwrap_or(0),
                name: std::fs::read_to_string(p.join("product_name"))
                    .map(|s| s.trim().to_string())
                    .ok()
                    .filter(|s| !s.is_empty())
                    .unwrap_or_else(|| "amdgpu".into()),
                identity: Some(identity(p)).filter(DeviceIdentity::is_known),
            })
            .collect()
    }

    fn sample(&mut self, ts_ns: u64) -> Vec<DeviceSample> {
        let mut out = Vec::new();
        for (i, p) in &self.cards {
            for (memory, what) in [(0u8, "vram"), (1u8, "gtt")] {
                let used = read_u64(&p.join(format!("mem_info_{what}_used")));
                let total = read_u64(&p.join(format!("mem_info_{what}_total")));
                if let (Some(used_bytes), Some(total_bytes)) = (used, total) {
                    out.push(DeviceSample {
                        ts_ns,
                        device: *i,
                        memory,
                        used_bytes,
                        total_bytes,
                        source: "sysfs".into(),
                    });
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../testdata/amdgpu-sysfs")
            .join(name)
    }

    /// A card whose `device` links to its PCI address, with amdgpu's `unique_id`: the
    /// node's description names the GPU as HIP does (`GPU-` and the unique id) and by
    /// its bus id; the fixture trees (no link, no unique_id) name none.
    #[test]
    fn a_card_is_named_by_its_unique_id_and_pci_address() {
        let root = tempfile::tempdir().unwrap();
        for (k, (bus, id)) in [("0000:C1:00.0", "4b2c8e3f1d5a6b7c\n"), ("0000:03:00.0", "")]
            .iter()
            .enumerate()
        {
            let pci = root.path().join("devices/pci0000:00").join(bus);
            std::fs::create_dir_all(&pci).unwrap();
            std::fs::write(pci.join("mem_info_vram_used"), "1\n").unwrap();
            std::fs::write(pci.join("mem_info_vram_total"), "2\n").unwrap();
            if !id.is_empty() {
                std::fs::write(pci.join("unique_id"), id).unwrap();
            }
            let card = root.path().join(format!("class/drm/card{}", k + 1));
            std::fs::create_dir_all(&card).unwrap();
            std::os::unix::fs::symlink(&pci, card.join("device")).unwrap();
        }
        let ids: Vec<Option<DeviceIdentity>> = SysfsSampler::new(root.path())
            .devices()
            .into_iter()
            .map(|d| d.identity)
            .collect();
        assert_eq!(
            ids,
            vec![
                Some(DeviceIdentity {
                    uuid: "GPU-4b2c8e3f1d5a6b7c".into(),
                    pci_bus_id: "0000:c1:00.0".into()
                }),
                Some(DeviceIdentity {
                    uuid: String::new(),
                    pci_bus_id: "0000:03:00.0".into()
                }),
            ]
        );
        let d = SysfsSampler::new(&fixture("mi300x-x2-bmc")).devices();
        assert!(d.iter().all(|d| d.identity.is_none()));
    }

    #[test]
    fn the_fixture_trees_read_as_the_driver_documents_them() {
        // Strix Halo with a 512 MiB carve-out: card1 only (connector, render node skipped).
        let mut s = SysfsSampler::new(&fixture("strix-halo-uma512m-gtt120g"));
        assert_eq!(s.card_count(), 1);
        let d = s.devices();
        assert_eq!((d[0].device, d[0].total_bytes), (0, 536_870_912));
        assert_eq!(d[0].name, "amdgpu");
        let v = s.sample(9);
        assert_eq!(v.len(), 2);
        assert_eq!(
            (v[0].memory, v[0].used_bytes, v[0].total_bytes),
            (0, 507_244_544, 536_870_912)
        );
        assert_eq!((v[1].memory, v[1].total_bytes), (1, 128_849_018_880));
        // Two MI300X behind a BMC's VGA card0: devices 0 and 1 are card1 and card2.
        let mut s = SysfsSampler::new(&fixture("mi300x-x2-bmc"));
        assert_eq!(s.card_count(), 2);
        let v = s.sample(1);
        assert_eq!(v.len(), 4);
        assert_eq!(
            v.iter().map(|x| (x.device, x.memory)).collect::<Vec<_>>(),
            [(0, 0), (0, 1), (1, 0), (1, 1)]
        );
        assert!(v
            .iter()
            .filter(|x| x.memory == 0)
            .all(|x| x.total_bytes == 205_822_885_888));
    }

    #[test]
    fn strix_halo_like_card_reports_vram_and_gtt_apart() {
        let root = tempfile::tempdir().unwrap();
        let dev = root.path().join("class/drm/card1/device");
        std::fs::create_dir_all(&dev).unwrap();
        std::fs::create_dir_all(root.path().join("class/drm/card1-eDP-1")).unwrap();
        for (f, v) in [
            ("mem_info_vram_used", "1073741824"),
            ("mem_info_vram_total", "536870912000"),
            ("mem_info_gtt_used", "2147483648\n"),
            ("mem_info_gtt_total", "68719476736"),
        ] {
            std::fs::write(dev.join(f), v).unwrap();
        }
        let mut s = SysfsSampler::new(root.path());
        assert_eq!(s.card_count(), 1);
        assert_eq!(s.devices()[0].total_bytes, 536870912000);
        let v = s.sample(5);
        assert_eq!(v.len(), 2);
        assert_eq!((v[0].memory, v[0].used_bytes), (0, 1 << 30));
        assert_eq!((v[1].memory, v[1].used_bytes), (1, 2 << 30));
        // A card without the counters (e.g. a non-amdgpu device) is not listed.
        let empty = tempfile::tempdir().unwrap();
        assert_eq!(SysfsSampler::new(empty.path()).card_count(), 0);
    }
}
