//! Where a command's capture file goes: an existing regular file named by `--out` is
//! replaced only once there is a capture to put there (written beside it, renamed over
//! it), and paths are compared as files, not as strings.

use std::path::{Path, PathBuf};

/// Where to write the capture when `out` names an existing regular file (directly or
/// through symlinks): a temporary file beside that file, and the file to replace with it
/// once CMD ran. None: write `out` itself (new, or a device or pipe such as /dev/null).
pub fn staging_path(out: &Path) -> Option<(PathBuf, PathBuf)> {
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
