//! Compiling the HIP replay kernels into AMD code objects, one per GPU target.
//!
//! Owns: finding a clang whose AMDGPU back end can build them (Debian's `clang-19`, or
//! ROCm's own), compiling `gpu/replay_kernels.cu` for each requested target into a plain
//! AMDGPU ELF code object (`-x hip -nogpuinc -nogpulib`: no HIP headers, no device
//! libraries, so no ROCm install is needed to build), and telling a target or tool the
//! toolchain lacks (skipped, with the compiler's reason) from a real compile error. Used
//! by `build.rs` (embedding the code objects) and by the tests. Depends on `std` only,
//! because `build.rs` includes this file directly.

use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The AMD targets memwatch ships kernels for: MI200 (gfx90a), MI300X (gfx942) and
/// Strix Halo (gfx1151).
pub const DEFAULT_HIP_TARGETS: &[&str] = &["gfx90a", "gfx942", "gfx1151"];

/// The code object version the kernels are built as. Version 4 is loaded by every ROCm
/// since 4.1 (Debian's ROCm 5.2, which the HIP backend links against, included) and by
/// current ones; clang 19 would default to 5, which ROCm 5.2 cannot load.
pub const CODE_OBJECT_VERSION: u32 = 4;

/// The clang the build uses, most preferred first, when `$MEMWATCH_HIP_CLANG` is not
/// set: Debian's versioned clang (19 is what `scripts/install-deps.sh` installs; gfx942
/// and gfx1151 need LLVM 17 or later), then ROCm's own clang.
pub const CLANG_CANDIDATES: &[&str] = &[
    "clang-19",
    "clang-20",
    "clang-21",
    "clang-22",
    "clang-18",
    "clang-17",
    "/usr/lib/llvm-19/bin/clang",
    "/opt/rocm/llvm/bin/clang",
];

/// What happened to one target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TargetOutcome {
    /// The code object was written to this path.
    Built(PathBuf),
    /// The toolchain cannot build this target (unknown processor, or a tool such as the
    /// AMDGPU linker is missing); the reason quotes the compiler.
    Skipped(String),
}

/// A compile that failed for a reason other than a target or tool the toolchain lacks.
#[derive(Debug)]
pub struct HipBuildError {
    /// The target being compiled.
    pub target: String,
    /// The command line and the compiler's message.
    pub message: String,
}

impl fmt::Display for HipBuildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "compiling the HIP kernels for {} failed: {}",
            self.target, self.message
        )
    }
}

impl std::error::Error for HipBuildError {}

/// Where the compiler came from, for messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClangSearch {
    /// Found (from `$MEMWATCH_HIP_CLANG` or the candidates).
    Found(PathBuf),
    /// `$MEMWATCH_HIP_CLANG` names something that is not a file.
    BadOverride(PathBuf),
    /// No candidate exists.
    NotFound,
}

impl ClangSearch {
    /// The compiler, when one was found.
    pub fn path(&self) -> Option<&Path> {
        match self {
            Self::Found(p) => Some(p),
            _ => None,
        }
    }

    /// Why no compiler is used (empty when one was found).
    pub fn reason(&self) -> String {
        match self {
            Self::Found(_) => String::new(),
            Self::BadOverride(p) => format!("MEMWATCH_HIP_CLANG={} is not a file", p.display()),
            Self::NotFound => format!(
                "no clang with an AMDGPU back end found (tried {}; install clang-19 and lld-19, \
                 see scripts/install-deps.sh, or set MEMWATCH_HIP_CLANG)",
                CLANG_CANDIDATES.join(", ")
            ),
        }
    }
}

/// The compiler: `$MEMWATCH_HIP_CLANG`, else the first of [`CLANG_CANDIDATES`] on `PATH`
/// (or at its absolute path).
pub fn find_hip_clang() -> ClangSearch {
    if let Some(p) = std::env::var_os("MEMWATCH_HIP_CLANG") {
        let p = PathBuf::from(p);
        return if p.is_file() {
            ClangSearch::Found(p)
        } else {
            ClangSearch::BadOverride(p)
        };
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    let dirs: Vec<PathBuf> = std::env::split_paths(&path).collect();
    for c in CLANG_CANDIDATES {
        let found = if c.starts_with('/') {
            Some(PathBuf::from(c)).filter(|p| p.is_file())
        } else {
            dirs.iter().map(|d| d.join(c)).find(|p| p.is_file())
        };
        if let Some(p) = found {
            return ClangSearch::Found(p);
        }
    }
    ClangSearch::NotFound
}

/// The kernel source directory of this crate (`src/gpu`).
pub fn gpu_source_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("src")
        .join("gpu")
}

/// Messages with which clang rejects a processor it does not know.
fn is_unknown_target(stderr: &str) -> bool {
    let s = stderr.to_ascii_lowercase();
    s.contains("invalid target id")
        || s.contains("unknown target cpu")
        || s.contains("invalid offload arch")
        || s.contains("unsupported hip gpu architecture")
}

/// Messages with which the clang driver says a tool of the toolchain (the AMDGPU linker
/// `ld.lld`, shipped apart as lld-N) is missing.
fn is_missing_tool(stderr: &str) -> bool {
    stderr.contains("unable to execute command") || stderr.contains("doesn't exist")
}

/// The compile command for one target.
pub fn compile_command(clang: &Path, source: &Path, target: &str, out: &Path) -> Command {
    let mut cmd = Command::new(clang);
    cmd.args(["-x", "hip", "--cuda-device-only", "--no-gpu-bundle-output"])
        .args(["-nogpuinc", "-nogpulib", "-O3"])
        .arg(format!("--offload-arch={target}"))
        .arg(format!("-mcode-object-version={CODE_OBJECT_VERSION}"))
        .arg(source)
        .arg("-o")
        .arg(out);
    cmd
}

/// Compiles `source` for one `target` into `out` (an AMDGPU ELF code object that
/// `hipModuleLoadData` accepts).
pub fn compile_hip_target(
    clang: &Path,
    source: &Path,
    target: &str,
    out: &Path,
) -> Result<TargetOutcome, HipBuildError> {
    let mut cmd = compile_command(clang, source, target, out);
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
            "{} does not support {target} ({first_error})",
            clang.display()
        )));
    }
    if is_missing_tool(&stderr) {
        return Ok(TargetOutcome::Skipped(format!(
            "the toolchain of {} cannot link AMDGPU code for {target} ({first_error}; \
             install the matching lld, e.g. lld-19)",
            clang.display()
        )));
    }
    Err(HipBuildError {
        target: target.to_string(),
        message: format!("{shown} exited with {}: {stderr}", output.status),
    })
}

/// Compiles the replay kernels for every target into `out_dir/replay_kernels-<target>.co`.
pub fn compile_all(
    clang: &Path,
    targets: &[&str],
    out_dir: &Path,
) -> Result<Vec<(String, TargetOutcome)>, HipBuildError> {
    let source = gpu_source_dir().join("replay_kernels.cu");
    targets
        .iter()
        .map(|t| {
            let file = format!("replay_kernels-{}.co", t.replace(':', "_"));
            compile_hip_target(clang, &source, t, &out_dir.join(file)).map(|o| (t.to_string(), o))
        })
        .collect()
}
