//! `nvidia-smi` CSV output as memwatch reads it: its timestamps, and the per-process
//! readings of `--query-compute-apps` (NVML's figure of each process's use of each GPU:
//! every allocation, plus what the driver holds for the process — the CUDA context,
//! loaded module code, NCCL's internal buffers).
//!
//! Owns parsing only; `capture::devices` lines the readings up with a capture, and the
//! doctor reads the per-GPU form (`doctor::evidence::read_nvsmi_csv`).

use std::path::{Path, PathBuf};

/// The flags that produce the per-process CSV [`read_apps_csv`] reads.
pub const APPS_QUERY: &str =
    "nvidia-smi --query-compute-apps=timestamp,gpu_bus_id,pid,used_memory --format=csv,noheader,nounits";

/// A file that is not the expected `nvidia-smi` CSV.
#[derive(Debug, thiserror::Error)]
pub enum NvsmiError {
    #[error("{}: cannot read: {err}", path.display())]
    Io { path: PathBuf, err: std::io::Error },
    #[error("{}:{line}: {msg}", path.display())]
    Format {
        path: PathBuf,
        line: usize,
        msg: String,
    },
}

/// One process's use of one GPU at one instant (one line of [`APPS_QUERY`]'s output).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessSample {
    /// Unix ns, read as UTC (nvidia-smi prints the machine's local time; memwatch's device
    /// machines run in UTC).
    pub wall_unix_ns: u64,
    /// The GPU's PCI bus id (NVML's identity of the device: not a CUDA ordinal).
    pub gpu_bus_id: String,
    pub pid: u32,
    pub used_bytes: u64,
}

/// Reads [`APPS_QUERY`]'s output (MiB). Lines whose memory reads `[N/A]` (a process NVML
/// cannot see into, e.g. in another container) are skipped.
pub fn read_apps_csv(path: &Path) -> Result<Vec<ProcessSample>, NvsmiError> {
    let text = std::fs::read_to_string(path).map_err(|err| NvsmiError::Io {
        path: path.to_path_buf(),
        err,
    })?;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let bad = |msg: &str| NvsmiError::Format {
            path: path.to_path_buf(),
            line: i + 1,
            msg: msg.to_string(),
        };
        let f: Vec<&str> = line.split(',').map(str::trim).collect();
        if f.len() != 4 {
            return Err(bad(&format!(
                "expected `timestamp, gpu_bus_id, pid, used_memory` ({APPS_QUERY})"
            )));
        }
        let wall_unix_ns =
            parse_time(f[0]).ok_or_else(|| bad("timestamp is not `YYYY/MM/DD HH:MM:SS.mmm`"))?;
        let pid = f[2]
            .parse::<u32>()
            .map_err(|_| bad("pid is not a number"))?;
        if f[3].starts_with('[') {
            continue;
        }
        let mib = f[3]
            .parse::<u64>()
            .map_err(|_| bad("used_memory is not whole MiB (use --format=csv,noheader,nounits)"))?;
        out.push(ProcessSample {
            wall_unix_ns,
            gpu_bus_id: f[1].to_string(),
            pid,
            used_bytes: mib << 20,
        });
    }
    if out.is_empty() {
        return Err(NvsmiError::Format {
            path: path.to_path_buf(),
            line: 0,
            msg: "no readings".into(),
        });
    }
    Ok(out)
}

/// `2026/11/25 18:10:49.669` -> unix ns (UTC).
pub fn parse_time(s: &str) -> Option<u64> {
    let (date, time) = s.split_once(' ')?;
    let d: Vec<i64> = date
        .split('/')
        .map(|x| x.parse().ok())
        .collect::<Option<_>>()?;
    let (hms, frac) = time.split_once('.').unwrap_or((time, "0"));
    let t: Vec<u64> = hms
        .split(':')
        .map(|x| x.parse().ok())
        .collect::<Option<_>>()?;
    if d.len() != 3 || t.len() != 3 || !(1..=12).contains(&d[1]) || !(1..=31).contains(&d[2]) {
        return None;
    }
    let days = days_from_civil(d[0], d[1], d[2]);
    let ms: u64 = format!("{frac:0<3}").get(..3)?.parse().ok()?;
    let secs = u64::try_from(days).ok()? * 86_400 + t[0] * 3600 + t[1] * 60 + t[2];
    Some(secs * 1_000_000_000 + ms * 1_000_000)
}

/// Days since 1970-01-01 of a proleptic Gregorian date.
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn apps_lines_and_bad_input() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("apps.csv");
        std::fs::write(
            &p,
            "2026/11/26 15:01:33.158, 00000000:00:06.0, 710, 14\n\
             2026/11/26 15:01:33.160, 00000000:00:07.0, 711, [N/A]\n",
        )
        .unwrap();
        let s = read_apps_csv(&p).unwrap();
        assert_eq!(s.len(), 1);
        assert_eq!(s[0].pid, 710);
        assert_eq!(s[0].used_bytes, 14 << 20);
        assert_eq!(s[0].gpu_bus_id, "00000000:00:06.0");
        assert_eq!(
            s[0].wall_unix_ns,
            parse_time("2026/11/26 15:01:33.158").unwrap()
        );
        std::fs::write(&p, "2026/11/26 15:01:33.158, 0, 81559\n").unwrap();
        let e = read_apps_csv(&p).unwrap_err().to_string();
        assert!(e.contains("apps.csv:1") && e.contains("gpu_bus_id"), "{e}");
    }
}
