//! Finding modules in an XLA dump directory: which files belong to which module, and
//! normalising module names (`module_0042.jit_f.sm_9.0a_gpu_after_optimizations-…` ->
//! name `jit_f`, id 42, platform `sm_9.0a_gpu`). Only file-name logic lives here.

use std::path::{Path, PathBuf};

/// Suffix that identifies a module in a dump directory.
pub const BUFFER_ASSIGNMENT_SUFFIX: &str = "-buffer-assignment.txt";

/// The files XLA wrote for one module (each may be missing except the buffer assignment).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModuleFiles {
    /// `…after_optimizations-buffer-assignment.txt`.
    pub buffer_assignment: PathBuf,
    /// `…after_optimizations.txt` (scheduled HLO).
    pub hlo: PathBuf,
    /// `…after_optimizations-live-range.txt`.
    pub live_range: PathBuf,
    /// `…after_optimizations-buffer-assignment-values.txt`.
    pub values: PathBuf,
    /// `…after_optimizations-memory-usage-report.txt`.
    pub memory_usage_report: PathBuf,
    /// Module name from the file name (`jit_f`).
    pub name: String,
    /// The dump's numeric module id (`module_0042` -> 42).
    pub id: Option<u64>,
    /// Platform tag (`sm_9.0a_gpu`, `gfx942_gpu`, `cpu`), empty when absent.
    pub platform: String,
}

/// Builds the module's file set from its buffer-assignment path; `None` if the path does
/// not end in `-buffer-assignment.txt`.
pub fn module_files(buffer_assignment: &Path) -> Option<ModuleFiles> {
    let fname = buffer_assignment.file_name()?.to_str()?;
    let prefix = fname.strip_suffix(BUFFER_ASSIGNMENT_SUFFIX)?;
    let dir = buffer_assignment.parent().unwrap_or(Path::new(""));
    let (name, id, platform) = split_module_prefix(prefix);
    Some(ModuleFiles {
        buffer_assignment: buffer_assignment.to_path_buf(),
        hlo: dir.join(format!("{prefix}.txt")),
        live_range: dir.join(format!("{prefix}-live-range.txt")),
        values: dir.join(format!("{prefix}-buffer-assignment-values.txt")),
        memory_usage_report: dir.join(format!("{prefix}-memory-usage-report.txt")),
        name,
        id,
        platform,
    })
}

/// Splits `module_0042.jit_f.sm_9.0a_gpu_after_optimizations` into (`jit_f`, 42,
/// `sm_9.0a_gpu`).
pub fn split_module_prefix(prefix: &str) -> (String, Option<u64>, String) {
    let mut rest = prefix;
    let mut id = None;
    if let Some(r) = rest.strip_prefix("module_") {
        let end = r.find('.').unwrap_or(r.len());
        id = r[..end].parse().ok();
        rest = r.get(end + 1..).unwrap_or("");
    }
    let rest = rest.strip_suffix("after_optimizations").unwrap_or(rest);
    let rest = rest.strip_suffix('_').unwrap_or(rest);
    // The platform tag follows the module name after a '.', and may itself contain dots
    // (`sm_9.0a_gpu`): find the first '.' that starts a known platform tag.
    for (i, _) in rest.match_indices('.') {
        let tail = &rest[i + 1..];
        if tail.starts_with("sm_")
            || tail.starts_with("gfx")
            || tail == "cpu"
            || tail == "gpu"
            || tail.ends_with("_gpu")
            || tail.ends_with("_cpu")
            || tail.is_empty()
        {
            return (rest[..i].to_string(), id, tail.to_string());
        }
    }
    (rest.trim_end_matches('.').to_string(), id, String::new())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalises_names() {
        assert_eq!(
            split_module_prefix("module_3318.jit_mlp.sm_9.0a_gpu_after_optimizations"),
            ("jit_mlp".into(), Some(3318), "sm_9.0a_gpu".into())
        );
        assert_eq!(
            split_module_prefix("module_0012.jit_mlp_train_step.cpu_after_optimizations"),
            ("jit_mlp_train_step".into(), Some(12), "cpu".into())
        );
        assert_eq!(
            split_module_prefix("module_0042.jit_f.gfx942_gpu_after_optimizations"),
            ("jit_f".into(), Some(42), "gfx942_gpu".into())
        );
        assert_eq!(
            split_module_prefix("module_7.jit_g.after_optimizations"),
            ("jit_g".into(), Some(7), "".into())
        );
        let f = module_files(Path::new(
            "d/module_1.jit_f.cpu_after_optimizations-buffer-assignment.txt",
        ))
        .unwrap();
        assert_eq!(
            f.hlo,
            Path::new("d/module_1.jit_f.cpu_after_optimizations.txt")
        );
        assert!(module_files(Path::new("d/x.txt")).is_none());
    }
}
