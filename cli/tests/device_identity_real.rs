//! Real H200 captures (testdata/h200-device-identity): a PyTorch and a JAX program, run
//! with `CUDA_VISIBLE_DEVICES` as an index and as the GPU's UUID, recorded the identity
//! the driver gives their device 0, which `memwatch report --json` shows as nvidia-smi
//! printed it (after the one normalisation), and the run's own NVML readings of that GPU
//! are paired with the device by that identity.

mod common;

use common::{repo, report_json};

/// UUID and PCI bus id `nvidia-smi` printed for GPU 0 (env.txt), in memwatch's canonical
/// forms: UUID as printed; bus id with a four-digit domain (NVML prints eight).
fn nvidia_smi_identity() -> (String, String) {
    let env = std::fs::read_to_string(repo("testdata/h200-device-identity/env.txt")).unwrap();
    let line = env
        .lines()
        .find_map(|l| l.strip_prefix("nvidia-smi GPU 0: "))
        .expect("env.txt names GPU 0");
    let mut parts = line.split(',').map(str::trim);
    let uuid = parts.next().unwrap().to_string();
    let bus = parts.next().unwrap();
    let (domain, rest) = bus.split_once(':').unwrap();
    let domain = u32::from_str_radix(domain, 16).unwrap();
    (uuid, format!("{domain:04x}:{}", rest.to_ascii_lowercase()))
}

#[test]
fn real_captures_carry_the_drivers_identity_and_pair_their_readings_by_it() {
    let (uuid, bus) = nvidia_smi_identity();
    assert!(uuid.starts_with("GPU-") && bus.len() == 12, "{uuid} {bus}");
    for name in ["torch-index", "torch-uuid", "jax-index", "jax-uuid"] {
        let path = repo(&format!("testdata/h200-device-identity/{name}.mwcap"));
        let r = report_json(&path);
        let devices: Vec<&serde_json::Value> = r["processes"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|p| p["devices"].as_array().unwrap())
            .filter(|d| d["device"].as_i64() == Some(0))
            .collect();
        assert_eq!(devices.len(), 1, "{name}: one device 0");
        assert_eq!(devices[0]["uuid"], uuid.as_str(), "{name}");
        assert_eq!(devices[0]["pci_bus_id"], bus.as_str(), "{name}");
        assert_eq!(devices[0]["name"], "NVIDIA H200", "{name}");
        let readings = r["device_readings"]["devices"].as_array().unwrap();
        let paired: Vec<_> = readings
            .iter()
            .filter(|d| d["uuid"] == uuid.as_str())
            .collect();
        assert_eq!(paired.len(), 1, "{name}: the GPU's readings");
        assert_eq!(paired[0]["ordinal"], 0, "{name}: paired with device 0");
        assert!(paired[0]["readings"].as_u64().unwrap() > 0, "{name}");
    }
}
