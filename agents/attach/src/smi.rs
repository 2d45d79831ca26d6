//! Per-process device memory as the vendor tool reports it (`nvidia-smi`), for the
//! pre-attach baseline next to the in-process `cuMemGetInfo` figures. AMD's per-process
//! figures come from /proc/PID/fdinfo instead (see `procfs::Proc::drm_usage`).
//!
//! Owns running `nvidia-smi --query-compute-apps` and parsing its CSV. Absent tool or
//! failure means "no figures", never an error: the baseline is best effort.

use std::process::Command;

/// One process's memory on one NVIDIA GPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SmiUsage {
    pub pid: u32,
    pub used_bytes: u64,
    /// PCI bus id as nvidia-smi prints it, e.g. `00000000:3B:00.0`.
    pub bus_id: String,
}

/// Parses `nvidia-smi --query-compute-apps=pid,used_memory,gpu_bus_id
/// --format=csv,noheader,nounits` (used_memory in MiB). Lines that do not parse are
/// skipped.
pub fn parse_compute_apps(text: &str) -> Vec<SmiUsage> {
    text.lines()
        .filter_map(|l| {
            let mut it = l.split(',').map(str::trim);
            let pid = it.next()?.parse().ok()?;
            let mib: u64 = it.next()?.parse().ok()?;
            let bus_id = it.next().unwrap_or("").to_string();
            Some(SmiUsage {
                pid,
                used_bytes: mib << 20,
                bus_id,
            })
        })
        .collect()
}

/// The figures for `pid`, empty when nvidia-smi is absent or fails.
pub fn nvidia_usage(pid: u32) -> Vec<SmiUsage> {
    let Ok(out) = Command::new("nvidia-smi")
        .args([
            "--query-compute-apps=pid,used_memory,gpu_bus_id",
            "--format=csv,noheader,nounits",
        ])
        .output()
    else {
        return Vec::new();
    };
    if !out.status.success() {
        return Vec::new();
    }
    parse_compute_apps(&String::from_utf8_lossy(&out.stdout))
        .into_iter()
        .filter(|u| u.pid == pid)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_lines() {
        let got = parse_compute_apps(
            "4242, 10240, 00000000:3B:00.0\n4243, 512, 00000000:5E:00.0\n[N/A], x\n",
        );
        assert_eq!(
            got,
            vec![
                SmiUsage {
                    pid: 4242,
                    used_bytes: 10240 << 20,
                    bus_id: "00000000:3B:00.0".into()
                },
                SmiUsage {
                    pid: 4243,
                    used_bytes: 512 << 20,
                    bus_id: "00000000:5E:00.0".into()
                },
            ]
        );
    }
}
