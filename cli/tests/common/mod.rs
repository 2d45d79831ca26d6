//! Shared by the CLI integration tests: the real LD_PRELOAD shim for `memwatch run`.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The workspace root.
pub fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("cli/ has a parent")
        .to_path_buf()
}

/// `libmemwatch_preload.so` next to the memwatch binary (where `memwatch run` looks),
/// built with `cargo build -p memwatch-preload` when this test run did not build it.
pub fn shim() -> &'static PathBuf {
    static SHIM: OnceLock<PathBuf> = OnceLock::new();
    SHIM.get_or_init(|| {
        let shim =
            PathBuf::from(env!("CARGO_BIN_EXE_memwatch")).with_file_name("libmemwatch_preload.so");
        if !shim.is_file() {
            let st = Command::new(env!("CARGO"))
                .args(["build", "-p", "memwatch-preload"])
                .current_dir(workspace())
                .status()
                .expect("run cargo build");
            assert!(st.success(), "cargo build -p memwatch-preload failed");
        }
        assert!(shim.is_file(), "{}", shim.display());
        shim
    })
}

/// A path under the workspace root.
pub fn repo(p: &str) -> PathBuf {
    workspace().join(p)
}

/// Runs `memwatch ARGS`: (exit code, stdout, stderr).
pub fn mw(args: &[&str]) -> (i32, String, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_memwatch"))
        .args(args)
        .output()
        .expect("run memwatch");
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// `memwatch report --json CAPTURE`, which must succeed.
pub fn report_json(path: &Path) -> serde_json::Value {
    let out = Command::new(env!("CARGO_BIN_EXE_memwatch"))
        .args(["report", "--json"])
        .arg(path)
        .output()
        .expect("run memwatch report");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("report --json is JSON")
}
