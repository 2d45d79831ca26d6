//! Compiling the HIP replay kernels into AMD code objects, one per GPU target.
//!
//! Owns: finding `hipcc`, compiling `gpu/replay_kernels.cu` for each requested target, and
//! telling a target the compiler does not know (skipped, with the compiler's reason) from
//! a real compile error. Used by `build.rs` (embedding the code objects) and by the tests
//! (every supported target must compile). Depends on `std` only, because `build.rs`
//! includes this file directly.

use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The AMD targets memwatch ships kernels for: MI200 (gfx90a), MI300X (gfx942) and
/// Strix Halo (gfx1151).
pub const DEFAULT_HIP_TARGETS: &[&str] = &["gfx90a", "gfx942", "gfx1151"];

/// What happened to one target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TargetOutcome {
    /// The code object was written to this path.
    Built(PathBuf),
    /// The compiler does not support this target; the reason quotes it.
    Skipped(String),
}

/// A compile that failed for a reason other than an unknown target.
#[derive(Debug)]
pub struct HipBuildError {
    /// The target being compiled.
    pub target: String,
    /// The command line and the compiler's message.
    pub message: String,
}

impl fmt::Display for HipBuildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "hipcc failed for {}: {}", self.target, self.message)
    }
}

impl std::error::Error for HipBuildError {}

/// `hipcc` from `$MEMWATCH_HIPCC`, else the first `hipcc` on `PATH`, else ROCm's
/// default location.
pub fn find_hipcc() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("MEMWATCH_HIPCC") {
        let p = PathBuf::from(p);
        return p.is_file().then_some(p);
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|d| d.join("hipcc"))
        .chain([PathBuf::from("/opt/rocm/bin/hipcc")])
        .find(|p| p.is_file())
}

/// The kernel source directory of this crate (`src/gpu`).
pub fn gpu_source_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("src")
        .join("gpu")
}

/// Messages with which clang/hipcc reject a target it does not know.
fn is_unknown_target(stderr: &str) -> bool {
    let s = stderr.to_ascii_lowercase();
    s.contains("invalid target id")
        || s.contains("unknown target cpu")
        || s.contains("unsupported cuda gpu architecture")
        || s.contains("invalid offload arch")
        || s.contains("unsupported hip gpu architecture")
}

/// Compiles `source` for one `target` into `out` (a clang offload bundle that
/// `hipModuleLoadData` accepts).
pub fn compile_hip_target(
    hipcc: &Path,
    source: &Path,
    target: &str,
    out: &Path,
) -> Result<TargetOutcome, HipBuildError> {
    let mut cmd = Command::new(hipcc);
    cmd.arg("--genco")
        .arg(format!("--offload-arch={target}"))
        .args(["-O3", "-x", "hip"])
        .arg(source)
        .arg("-o")
        .arg(out);
    let shown = format!("{cmd:?}");
    let output = cmd.output().map_err(|e| HipBuildError {
        target: target.to_string(),
        message: format!("cannot run {shown}: {e}"),
    })?;
    let stderr = String::from_utf8_lossy(&output.stderr);
    if output.status.success() && out.is_file() {
        return Ok(TargetOutcome::Built(out.to_path_buf()));
    }
    let first_error = stderr
        .lines()
        .find(|l| l.contains("error"))
        .unwrap_or_else(|| stderr.lines().next().unwrap_or("no message"))
        .trim()
        .to_string();
    if is_unknown_target(&stderr) {
        return Ok(TargetOutcome::Skipped(format!(
            "this hipcc does not support {target} ({first_error})"
        )));
    }
    Err(HipBuildError {
        target: target.to_string(),
        message: format!("{shown} exited with {}: {stderr}", output.status),
    })
}

/// Compiles the replay kernels for every target into `out_dir/replay_kernels-<target>.hsaco`.
pub fn compile_all(
    hipcc: &Path,
    targets: &[&str],
    out_dir: &Path,
) -> Result<Vec<(String, TargetOutcome)>, HipBuildError> {
    let source = gpu_source_dir().join("replay_kernels.cu");
    targets
        .iter()
        .map(|t| {
            let out = out_dir.join(format!("replay_kernels-{t}.hsaco"));
            compile_hip_target(hipcc, &source, t, &out).map(|o| (t.to_string(), o))
        })
        .collect()
}
