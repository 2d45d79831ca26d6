//! Where a command's capture file goes: an existing regular file named by `--out` is
//! replaced only once there is a capture to put there (written beside it, renamed over
//! it), and paths are compared as files, not as strings.

use std::path::{Path, PathBuf};

/// The capture file a command writes: where it writes while running, and what becomes
/// of that when there is (or is not) a capture to keep.
pub struct CaptureOut {
    out: PathBuf,
    /// A path that was there before (a file, a link, a device such as /dev/null) is never
    /// removed.
    existed: bool,
    staging: Option<(PathBuf, PathBuf)>,
}

impl CaptureOut {
    pub fn new(out: &Path) -> Self {
        CaptureOut {
            out: out.to_path_buf(),
            existed: out.symlink_metadata().is_ok(),
            staging: staging_path(out),
        }
    }

    /// Where to write while the command runs.
    pub fn write_path(&self) -> &Path {
        self.staging.as_ref().map_or(&self.out, |s| &s.0)
    }

    /// Nothing was captured: leave no capture behind and `--out` as it was.
    pub fn discard(&self) {
        match &self.staging {
            Some((tmp, _)) => {
                let _ = std::fs::remove_file(tmp);
            }
            None if !self.existed => {
                let _ = std::fs::remove_file(&self.out);
            }
            None => {}
        }
    }

    /// The capture is whole: put it at `--out` (rename over the file it replaces).
    pub fn commit(&self) -> Result<(), String> {
        if let Some((tmp, target)) = &self.staging {
            std::fs::rename(tmp, target).map_err(|e| {
                format!(
                    "cannot move the capture {} to {}: {e} (it is kept there)",
                    tmp.display(),
                    target.display()
                )
            })?;
        }
        Ok(())
    }
}

/// Where to write the capture when `out` names an existing regular file (directly or
/// through symlinks): a temporary file beside that file, and the file to replace with it
/// once CMD ran. None: write `out` itself (new, or a device or pipe such as /dev/null).
fn staging_path(out: &Path) -> Option<(PathBuf, PathBuf)> {
    let target = std::fs::canonicalize(out).ok()?;
    if !std::fs::metadata(&target).ok()?.is_file() {
        return None;
    }
    let mut name = target.file_name()?.to_os_string();
    name.push(format!(".{}.tmp", std::process::id()));
    Some((target.with_file_name(name), target))
}

/// Whether two paths name one file (symlinks and `..` resolved; a path not there yet
/// by its directory's real path).
pub fn same_file(a: &Path, b: &Path) -> bool {
    let real = |p: &Path| {
        std::fs::canonicalize(p).ok().or_else(|| {
            let dir = p
                .parent()
                .filter(|d| !d.as_os_str().is_empty())
                .unwrap_or(Path::new("."));
            Some(std::fs::canonicalize(dir).ok()?.join(p.file_name()?))
        })
    };
    match (real(a), real(b)) {
        (Some(x), Some(y)) => x == y,
        _ => a == b,
    }
}
