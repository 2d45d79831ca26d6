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

/// Runs `memwatch ARGS` to its end: its whole `Output`.
pub fn run_memwatch(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_memwatch"))
        .args(args)
        .output()
        .expect("run memwatch")
}

/// Waits for `child` to end; past a generous deadline (120 s: it only tells a hang from a
/// busy machine) kills it and fails the test with "hung: `what`". For tests whose subject
/// is that something ends, checked by what happened, never by how long it took.
pub fn wait_or_hung(child: &mut std::process::Child, what: &str) -> std::process::ExitStatus {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    loop {
        if let Some(status) = child.try_wait().expect("wait for the child") {
            return status;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("hung: {what}");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// A loopback TCP port free right now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("bind a loopback port")
        .port()
}

/// Runs `memwatch ARGS`: (exit code, stdout, stderr).
pub fn mw(args: &[&str]) -> (i32, String, String) {
    let o = run_memwatch(args);
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

/// A new, empty PostgreSQL database named `<prefix>_<pid>_<ns>` on the server of
/// `MEMWATCH_TEST_POSTGRES_URL` (`export MEMWATCH_TEST_POSTGRES_URL=$(bash
/// scripts/start-test-postgres.sh)`): (its URL, its name). None, with a notice naming
/// `what` was skipped, when the variable is not set.
pub fn fresh_postgres_database(prefix: &str, what: &str) -> Option<(String, String)> {
    let Some(admin) = std::env::var("MEMWATCH_TEST_POSTGRES_URL")
        .ok()
        .filter(|u| !u.is_empty())
    else {
        eprintln!("NOTICE: MEMWATCH_TEST_POSTGRES_URL is not set: {what} skipped");
        return None;
    };
    let name = format!(
        "{prefix}_{}_{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock after 1970")
            .subsec_nanos()
    );
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    rt.block_on(async {
        sqlx::any::install_default_drivers();
        let pool = sqlx::AnyPool::connect(&admin)
            .await
            .unwrap_or_else(|e| panic!("connecting to MEMWATCH_TEST_POSTGRES_URL [{admin}]: {e}"));
        sqlx::query(&format!("CREATE DATABASE {name}"))
            .execute(&pool)
            .await
            .expect("CREATE DATABASE");
    });
    let url = format!(
        "{}/{name}",
        admin.rsplit_once('/').expect("a URL with a database").0
    );
    Some((url, name))
}

/// `memwatch diagnose --json` on a recorded scenario folder (`testdata/oom-corpus*/NAME`)
/// with the files a user would have — capture, stderr, nvidia-smi samples, the PyTorch
/// snapshot, the XLA dump, wherever present — and the scenario's environment.
pub fn diagnose_scenario(dir: &Path, scenario: &serde_json::Value) -> serde_json::Value {
    let mut args: Vec<String> = vec!["diagnose".into()];
    for f in [
        "capture.mwcap",
        "stderr.log",
        "nvsmi.csv",
        "snapshot.pickle",
    ] {
        let p = dir.join(f);
        if p.is_file() {
            args.push(p.display().to_string());
        }
    }
    if dir.join("dump").is_dir() {
        args.push("--xla-dump".into());
        args.push(dir.join("dump").display().to_string());
    }
    for (k, v) in scenario["env"].as_object().into_iter().flatten() {
        args.push("--env".into());
        args.push(format!("{k}={}", v.as_str().unwrap_or_default()));
    }
    args.push("--json".into());
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    let (code, out, err) = mw(&a);
    assert_eq!(code, 0, "{}: {err}", dir.display());
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{}: {e}: {out}", dir.display()))
}
