//! Which physical device a record is about, as the driver says it — not the ordinal a
//! process saw (`CUDA_VISIBLE_DEVICES=1` makes the second GPU a process's device 0, and
//! captures of two machines both have a device 0).
//!
//! Owns the canonical forms every component writes and compares ([`canonical_uuid`],
//! [`canonical_pci_bus_id`], the runtimes' 16-byte UUIDs in [`uuid_from_cuda_bytes`] and
//! [`uuid_from_hip_bytes`]), the [`DeviceIdentity`] a `device_info` record may carry, and
//! the one rule that decides whether two views of a device are the same device
//! ([`DeviceIdentity::same_as`], [`find_device`]): by UUID, then by PCI bus id, and by
//! ordinal only when the two share no identity.

use crate::codec::wire_struct;

wire_struct! {
    /// A device's identity, in canonical form; an empty field is not known.
    #[derive(Debug, Clone, PartialEq, Eq, Default, Hash, PartialOrd, Ord)]
    pub struct DeviceIdentity {
        /// [`canonical_uuid`]: `GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx` (NVIDIA, as
        /// NVML prints it), `MIG-…` for a MIG instance, `GPU-` and 16 hex digits for AMD
        /// (ROCm's unique id, as HSA and `HIP_VISIBLE_DEVICES` write it).
        pub uuid: String,
        /// [`canonical_pci_bus_id`]: `dddd:bb:dd.f`, lowercase hex.
        pub pci_bus_id: String,
    }
}

static UNKNOWN: DeviceIdentity = DeviceIdentity {
    uuid: String::new(),
    pci_bus_id: String::new(),
};

impl DeviceIdentity {
    /// An identity from the forms a library wrote (NVML's `00000000:18:00.0`, ROCm SMI's
    /// bare hex unique id, …), each put in canonical form; one that cannot be read is
    /// left unknown.
    pub fn new(uuid: &str, pci_bus_id: &str) -> Self {
        DeviceIdentity {
            uuid: canonical_uuid(uuid).unwrap_or_default(),
            pci_bus_id: canonical_pci_bus_id(pci_bus_id).unwrap_or_default(),
        }
    }

    /// The identity that knows nothing (a record written before identities were).
    pub fn unknown() -> &'static DeviceIdentity {
        &UNKNOWN
    }

    /// The UUID, when known.
    pub fn uuid(&self) -> Option<&str> {
        (!self.uuid.is_empty()).then_some(self.uuid.as_str())
    }

    /// The PCI bus id, when known.
    pub fn pci_bus_id(&self) -> Option<&str> {
        (!self.pci_bus_id.is_empty()).then_some(self.pci_bus_id.as_str())
    }

    /// Whether anything is known.
    pub fn is_known(&self) -> bool {
        self.uuid().is_some() || self.pci_bus_id().is_some()
    }

    /// Whether `self` and `other` are the same device: decided by the UUIDs when both
    /// know one of the same kind (a MIG instance's UUID is not its GPU's), else by the
    /// PCI bus ids when both know one; `None` when they share no identity (then only
    /// an ordinal can pair them).
    pub fn same_as(&self, other: &DeviceIdentity) -> Option<bool> {
        if let (Some(a), Some(b)) = (self.uuid(), other.uuid()) {
            if uuid_kind(a) == uuid_kind(b) {
                return Some(a == b);
            }
        }
        match (self.pci_bus_id(), other.pci_bus_id()) {
            (Some(a), Some(b)) => Some(a == b),
            _ => None,
        }
    }

    /// The identity with the fields `self` lacks taken from `other` (one view knew the
    /// UUID, another the bus id).
    pub fn merged(&self, other: &DeviceIdentity) -> DeviceIdentity {
        DeviceIdentity {
            uuid: self.uuid().or(other.uuid()).unwrap_or_default().to_string(),
            pci_bus_id: self
                .pci_bus_id()
                .or(other.pci_bus_id())
                .unwrap_or_default()
                .to_string(),
        }
    }

    /// "GPU-… at 0000:18:00.0", "0000:18:00.0", or "" when nothing is known.
    pub fn label(&self) -> String {
        match (self.uuid(), self.pci_bus_id()) {
            (Some(u), Some(p)) => format!("{u} at {p}"),
            (Some(u), None) => u.to_string(),
            (None, Some(p)) => p.to_string(),
            (None, None) => String::new(),
        }
    }
}

/// What a view says of a device beside its identity: its name and its memory. Two views
/// that share no identity ([`DeviceIdentity::same_as`] is `None`) are paired by ordinal
/// only when these agree where both know them ([`DeviceLook::may_be`]): device 0 of an
/// H100 machine and device 0 of an H200 machine imported under one host name are two
/// devices even when one of the views recorded no UUID.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DeviceLook<'a> {
    /// The device's name as a driver or sampler gave it (`None` or empty: not known).
    pub name: Option<&'a str>,
    /// Its memory in bytes (`None` or 0: not known).
    pub total_bytes: Option<u64>,
}

impl DeviceLook<'_> {
    /// The largest ratio between two views' totals of one device: the runtime's total
    /// (`cuDeviceTotalMem`) sits below the sampler's (NVML) by what the driver reserves,
    /// 0.4-0.6 % on H100/H200; two models of one ordinal differ by far more (80 GB and
    /// 94 GB H100s by 17 %).
    const SAME_TOTAL_RATIO: f64 = 1.05;

    /// Whether `self` and `other` may describe the same device: names that are both
    /// known must contain one another (ignoring case: `AMD Instinct MI300X` and `AMD
    /// Instinct MI300X OAM` may; `NVIDIA H100 80GB HBM3` and `NVIDIA H200` may not), and
    /// totals that are both known must be within [`Self::SAME_TOTAL_RATIO`].
    pub fn may_be(&self, other: &DeviceLook<'_>) -> bool {
        fn known(n: Option<&str>) -> Option<&str> {
            n.map(str::trim).filter(|n| !n.is_empty())
        }
        let names = match (known(self.name), known(other.name)) {
            (Some(a), Some(b)) => {
                let (a, b) = (a.to_lowercase(), b.to_lowercase());
                a.contains(&b) || b.contains(&a)
            }
            _ => true,
        };
        let totals = match (
            self.total_bytes.filter(|t| *t > 0),
            other.total_bytes.filter(|t| *t > 0),
        ) {
            (Some(a), Some(b)) => a.max(b) as f64 / a.min(b) as f64 <= Self::SAME_TOTAL_RATIO,
            _ => true,
        };
        names && totals
    }
}

/// Of `candidates` (ordinal, identity) — the devices one view knows, e.g. a node's
/// sampled devices — the index of the one that is device `ordinal` with `identity` of
/// another view (a process's): the first whose identity is the same
/// ([`DeviceIdentity::same_as`]); else the first with the same ordinal that shares no
/// identity with it. A candidate whose identity differs is never taken for its ordinal.
/// [`find_device_like`] with nothing known beside the identities.
pub fn find_device<'a, I>(ordinal: i64, identity: &DeviceIdentity, candidates: I) -> Option<usize>
where
    I: IntoIterator<Item = (i64, &'a DeviceIdentity)>,
{
    find_device_like(
        ordinal,
        identity,
        DeviceLook::default(),
        candidates
            .into_iter()
            .map(|(o, id)| (o, id, DeviceLook::default())),
    )
}

/// [`find_device`], where the views also say what the device looks like: a candidate
/// paired by ordinal alone must also [`DeviceLook::may_be`] the device.
pub fn find_device_like<'a, 'b, I>(
    ordinal: i64,
    identity: &DeviceIdentity,
    look: DeviceLook<'_>,
    candidates: I,
) -> Option<usize>
where
    I: IntoIterator<Item = (i64, &'a DeviceIdentity, DeviceLook<'b>)>,
{
    let mut by_ordinal = None;
    for (i, (o, id, other)) in candidates.into_iter().enumerate() {
        match identity.same_as(id) {
            Some(true) => return Some(i),
            None if o == ordinal && by_ordinal.is_none() && look.may_be(&other) => {
                by_ordinal = Some(i)
            }
            _ => {}
        }
    }
    by_ordinal
}

/// "GPU" or "MIG" (what the UUID names), from its canonical form.
fn uuid_kind(u: &str) -> &str {
    u.split_once('-').map_or("", |(k, _)| k)
}

fn all_hex(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// 32 hex digits as 8-4-4-4-12.
fn dashed(hex: &str) -> String {
    format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

/// A device UUID in its one form: the `GPU-` / `MIG-` prefix upper case, the hex lower
/// case; 32 hex digits dashed 8-4-4-4-12 (NVML's `GPU-` form, also from undashed or
/// `0x` input); 16 hex digits kept as they are (ROCm's unique id; ROCm SMI writes it bare).
/// Other text is kept, trimmed, with its hex lower-cased (equal strings still compare
/// equal). `None` for empty text or an all-zero UUID.
pub fn canonical_uuid(raw: &str) -> Option<String> {
    let t = raw.trim();
    let lower = t.to_ascii_lowercase();
    let (kind, body) = match lower.get(..4) {
        Some("gpu-") => ("GPU", &lower[4..]),
        Some("mig-") => ("MIG", &lower[4..]),
        _ => ("GPU", lower.strip_prefix("0x").unwrap_or(&lower)),
    };
    let digits: String = body.chars().filter(|c| *c != '-').collect();
    if digits.is_empty() || (all_hex(&digits) && digits.bytes().all(|b| b == b'0')) {
        return None;
    }
    let plain_dashes = body.split('-').map(str::len).collect::<Vec<_>>();
    let body = if all_hex(&digits) && digits.len() == 32 && {
        plain_dashes == [32] || plain_dashes == [8, 4, 4, 4, 12]
    } {
        dashed(&digits)
    } else if all_hex(body) && body.len() == 16 {
        body.to_string()
    } else {
        return Some(format!("{}{}", &t[..t.len() - body.len()], body));
    };
    Some(format!("{kind}-{body}"))
}

/// A PCI bus id in its one form, `dddd:bb:dd.f` in lower-case hex (the CUDA driver's and
/// HIP's form; NVML's eight-digit domain `00000000:18:00.0` and a missing domain
/// `18:00.0` read the same). `None` when the text is not a bus id.
pub fn canonical_pci_bus_id(raw: &str) -> Option<String> {
    let t = raw.trim();
    let parts: Vec<&str> = t.split(':').collect();
    let (domain, bus, devfn) = match parts.as_slice() {
        [d, b, df] => (*d, *b, *df),
        [b, df] => ("0", *b, *df),
        _ => return None,
    };
    let (dev, func) = devfn.split_once('.')?;
    let hex = |s: &str, max: u32| {
        (all_hex(s) && s.len() <= 8)
            .then(|| u32::from_str_radix(s, 16).ok())
            .flatten()
            .filter(|v| *v <= max)
    };
    Some(format!(
        "{:04x}:{:02x}:{:02x}.{:x}",
        hex(domain, u32::MAX)?,
        hex(bus, 0xff)?,
        hex(dev, 0x1f)?,
        hex(func, 7)?
    ))
}

/// A CUDA `CUuuid` (`cuDeviceGetUuid_v2`'s 16 bytes) as NVML prints it:
/// `GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`, or `MIG-…` for a MIG instance. `None`
/// for all zeros (no UUID).
pub fn uuid_from_cuda_bytes(bytes: &[u8; 16], mig: bool) -> Option<String> {
    if bytes.iter().all(|b| *b == 0) {
        return None;
    }
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    Some(format!(
        "{}-{}",
        if mig { "MIG" } else { "GPU" },
        dashed(&hex)
    ))
}

/// A HIP `hipUUID` (`hipDeviceGetUuid`'s 16 bytes). ROCm fills it with the 16 hex
/// characters of the device's unique id (the part of HSA's `GPU-<16 hex>` after the
/// prefix), which is what this returns with the prefix; 16 bytes that are not hex text
/// (HIP over CUDA) are read as a CUDA UUID. `None` for all zeros.
pub fn uuid_from_hip_bytes(bytes: &[u8; 16]) -> Option<String> {
    match std::str::from_utf8(bytes) {
        Ok(s) if all_hex(s) => canonical_uuid(&format!("GPU-{s}")),
        _ => uuid_from_cuda_bytes(bytes, false),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uuids_from_every_writer_read_the_same() {
        let nvml = "GPU-1A2B3C4D-5e6f-7081-92a3-b4c5d6e7f809";
        let want = "GPU-1a2b3c4d-5e6f-7081-92a3-b4c5d6e7f809";
        for raw in [
            nvml,
            want,
            "gpu-1a2b3c4d5e6f708192a3b4c5d6e7f809",
            "  1A2B3C4D-5E6F-7081-92A3-B4C5D6E7F809\n",
            "1a2b3c4d5e6f708192a3b4c5d6e7f809",
        ] {
            assert_eq!(canonical_uuid(raw).as_deref(), Some(want), "{raw:?}");
        }
        let bytes: [u8; 16] = [
            0x1a, 0x2b, 0x3c, 0x4d, 0x5e, 0x6f, 0x70, 0x81, 0x92, 0xa3, 0xb4, 0xc5, 0xd6, 0xe7,
            0xf8, 0x09,
        ];
        assert_eq!(uuid_from_cuda_bytes(&bytes, false).as_deref(), Some(want));
        assert_eq!(
            uuid_from_cuda_bytes(&bytes, true).as_deref(),
            Some("MIG-1a2b3c4d-5e6f-7081-92a3-b4c5d6e7f809")
        );
        assert_eq!(uuid_from_cuda_bytes(&[0; 16], false), None);
        // ROCm: SMI's bare unique id, HSA's GPU- form and hipUUID's 16 characters.
        let amd = "GPU-4b2c8e3f1d5a6b7c";
        assert_eq!(canonical_uuid("4b2c8e3f1d5a6b7c").as_deref(), Some(amd));
        assert_eq!(canonical_uuid("0x4B2C8E3F1D5A6B7C").as_deref(), Some(amd));
        assert_eq!(canonical_uuid("GPU-4b2c8e3f1d5a6b7c").as_deref(), Some(amd));
        assert_eq!(
            uuid_from_hip_bytes(b"4B2C8E3F1D5A6B7C").as_deref(),
            Some(amd)
        );
        assert_eq!(
            uuid_from_hip_bytes(&bytes).as_deref(),
            Some(want),
            "HIP over CUDA"
        );
        assert_eq!(canonical_uuid(""), None);
        assert_eq!(canonical_uuid("0000000000000000"), None);
        assert_eq!(canonical_uuid("GPU-XX").as_deref(), Some("GPU-xx"));
        assert_eq!(
            canonical_uuid("MIG-GPU-1a2b3c4d-5e6f-7081-92a3-b4c5d6e7f809/1/0").as_deref(),
            Some("MIG-gpu-1a2b3c4d-5e6f-7081-92a3-b4c5d6e7f809/1/0")
        );
    }

    #[test]
    fn bus_ids_from_every_writer_read_the_same() {
        for (raw, want) in [
            ("00000000:18:00.0", Some("0000:18:00.0")),
            ("0000:18:00.0", Some("0000:18:00.0")),
            ("00000000:1B:00.0", Some("0000:1b:00.0")),
            ("18:00.0", Some("0000:18:00.0")),
            ("0001:2F:03.1\n", Some("0001:2f:03.1")),
            ("10000:c1:1f.7", Some("10000:c1:1f.7")),
            ("", None),
            ("0000:18:00", None),
            ("0000:118:00.0", None),
            ("0000:18:20.0", None),
            ("0000:18:00.8", None),
            ("zz:18:00.0", None),
        ] {
            assert_eq!(canonical_pci_bus_id(raw).as_deref(), want, "{raw:?}");
        }
    }

    fn id(uuid: &str, bus: &str) -> DeviceIdentity {
        DeviceIdentity::new(uuid, bus)
    }

    #[test]
    fn the_uuid_decides_then_the_bus_then_nothing() {
        let a = id("GPU-aaaaaaaa-0000-0000-0000-000000000001", "0000:18:00.0");
        let b = id("GPU-bbbbbbbb-0000-0000-0000-000000000002", "0000:18:00.0");
        // Two machines' GPUs on the same slot are two devices.
        assert_eq!(a.same_as(&b), Some(false));
        assert_eq!(a.same_as(&a.clone()), Some(true));
        // One side without a UUID: the bus decides.
        assert_eq!(id("", "00000000:18:00.0").same_as(&a), Some(true));
        assert_eq!(id("", "0000:19:00.0").same_as(&a), Some(false));
        // A MIG instance is compared with its GPU by the bus.
        let mig = id("MIG-cccccccc-0000-0000-0000-000000000003", "0000:18:00.0");
        assert_eq!(mig.same_as(&a), Some(true));
        assert_eq!(DeviceIdentity::unknown().same_as(&a), None);
        assert_eq!(id("", "0000:18:00.0").same_as(&id("GPU-1234", "")), None);
    }

    /// The process saw ordinal `seen` on the GPU of UUID index `gpu` (it ran under
    /// CUDA_VISIBLE_DEVICES); the node's sampler lists `n` GPUs in its own order.
    #[test]
    fn a_process_device_is_found_among_the_nodes_by_identity_then_ordinal() {
        let uuid = |k: usize| format!("GPU-{k:08x}-1111-2222-3333-444455556666");
        let bus = |k: usize| format!("00000000:{:02x}:00.0", 0x18 + k);
        for n in 1..6usize {
            let node: Vec<(i64, DeviceIdentity)> =
                (0..n).map(|k| (k as i64, id(&uuid(k), &bus(k)))).collect();
            let cands = || node.iter().map(|(o, i)| (*o, i));
            for gpu in 0..n {
                for seen in 0..n as i64 {
                    // Known UUID: the GPU whatever the ordinal.
                    assert_eq!(find_device(seen, &id(&uuid(gpu), ""), cands()), Some(gpu));
                    // Known bus id only.
                    assert_eq!(find_device(seen, &id("", &bus(gpu)), cands()), Some(gpu));
                    // Nothing known (an old capture): the ordinal.
                    assert_eq!(
                        find_device(seen, DeviceIdentity::unknown(), cands()),
                        Some(seen as usize)
                    );
                }
            }
            // A GPU the node does not have: no device, not the one at its ordinal.
            assert_eq!(find_device(0, &id(&uuid(99), ""), cands()), None);
        }
    }

    #[test]
    fn an_ordinal_pairs_only_devices_that_look_alike() {
        let none = DeviceIdentity::unknown();
        let h200_cuda = DeviceLook {
            name: Some("NVIDIA H200"),
            total_bytes: Some(150_109_880_320),
        };
        let h200_nvml = DeviceLook {
            name: None,
            total_bytes: Some(150_754_820_096),
        };
        let h100 = DeviceLook {
            name: Some("NVIDIA H100 80GB HBM3"),
            total_bytes: Some(85_029_158_912),
        };
        let mi300x = DeviceLook {
            name: Some("AMD Instinct MI300X"),
            total_bytes: None,
        };
        let mi300x_oam = DeviceLook {
            name: Some("amd instinct mi300x oam"),
            total_bytes: Some(205_822_885_888),
        };
        assert!(h200_cuda.may_be(&h200_nvml) && h200_nvml.may_be(&h200_cuda));
        assert!(mi300x.may_be(&mi300x_oam));
        assert!(!h200_cuda.may_be(&h100) && !h100.may_be(&h200_nvml));
        assert!(DeviceLook::default().may_be(&h100));
        // An H100's row and an H200's at ordinal 0 of one host name: the H200's view
        // pairs with the H200's row, never the first row at its ordinal.
        let rows = [(0, none, h100), (0, none, h200_nvml)];
        assert_eq!(find_device_like(0, none, h200_cuda, rows), Some(1));
        assert_eq!(find_device_like(0, none, h100, rows), Some(0));
        let other_model = DeviceLook {
            name: Some("NVIDIA A100-SXM4-40GB"),
            total_bytes: Some(42_505_273_344),
        };
        assert_eq!(find_device_like(0, none, other_model, rows), None);
        // Nothing known beside the ordinal: the first row at it, as find_device.
        assert_eq!(find_device(0, none, rows.map(|(o, i, _)| (o, i))), Some(0));
        // A shared identity decides whatever the looks say.
        let a = DeviceIdentity::new("GPU-1a2b3c4d-5e6f-7081-92a3-b4c5d6e7f809", "");
        let rows = [(3, &a, h100)];
        assert_eq!(find_device_like(0, &a, h200_cuda, rows), Some(0));
    }
}
