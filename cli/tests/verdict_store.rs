//! The verdict is stored with the run: by `memwatch run --db` (a command replaying a real
//! PyTorch OOM's stderr, as `run_doctor.rs` does: no GPU needed) and by `memwatch import
//! CAPTURE --log STDERR --xla-dump DIR --db` (a real H100 capture of the OOM corpus).
//! Read back through the store: the same verdict `memwatch diagnose` gives.

mod common;

use common::repo;
use std::path::Path;
use std::process::{Command, Output};

fn mw(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_memwatch"))
        .current_dir(dir)
        .env("MEMWATCH_PRELOAD", common::shim())
        .env_remove("XLA_FLAGS")
        .args(args)
        .output()
        .unwrap()
}

/// (kind of the first verdict, headline, source) stored with run `run` of `db`.
fn stored(db: &Path, run: i64) -> (String, String, String) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let store = memwatch_daemon::Store::open(db.to_str().unwrap())
            .await
            .unwrap();
        let d = store
            .diagnosis(run)
            .await
            .unwrap()
            .expect("a stored diagnosis");
        store.close().await.unwrap();
        (d.kind.unwrap_or_default(), d.headline, d.source)
    })
}

/// The logs stored with `run`: (source, bytes).
fn logs_of(db: &Path, run: i64) -> Vec<(String, i64)> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let store = memwatch_daemon::Store::open(db.to_str().unwrap())
            .await
            .unwrap();
        let logs = store.incident_logs().await.unwrap();
        store.close().await.unwrap();
        logs.into_iter()
            .filter(|l| l.run_id == Some(run))
            .map(|l| (l.source, l.bytes))
            .collect()
    })
}

#[test]
fn memwatch_run_db_stores_the_verdict() {
    let dir = tempfile::tempdir().unwrap();
    let log = repo("testdata/oom-corpus/torch_fraction/stderr.log");
    let hip = "import ctypes; ctypes.CDLL('libamdhip64.so').hipMalloc(ctypes.byref(ctypes.c_void_p()), 1 << 20)";
    let script = format!("python3 -c \"{hip}\"; cat '{}' >&2; exit 1", log.display());
    let out = mw(
        dir.path(),
        &[
            "run", "--quiet", "--db", "mw.db", "--out", "r.mwcap", "--", "sh", "-c", &script,
        ],
    );
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (kind, headline, source) = stored(&dir.path().join("mw.db"), 1);
    assert_eq!(kind, "torch_fraction_limit");
    assert!(!headline.is_empty());
    assert_eq!(source, "memwatch run");
}

#[test]
fn import_with_the_runs_stderr_stores_the_verdict() {
    let dir = tempfile::tempdir().unwrap();
    let s = repo("testdata/oom-corpus/jax_leak_bfc");
    let (cap, log, dump) = (
        s.join("capture.mwcap"),
        s.join("stderr.log"),
        s.join("dump"),
    );
    let out = mw(
        dir.path(),
        &[
            "import",
            cap.to_str().unwrap(),
            "--log",
            log.to_str().unwrap(),
            "--xla-dump",
            dump.to_str().unwrap(),
            "--db",
            "mw.db",
            "--json",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let run = summary["run_id"].as_i64().unwrap();
    let (kind, headline, source) = stored(&dir.path().join("mw.db"), run);
    assert_eq!(kind, "leak");
    assert_eq!(summary["verdict"].as_str(), Some(headline.as_str()));
    assert_eq!(source, "memwatch import --log");
    // The log is kept with the run (the Incident page lists it, the run page reads its
    // error line).
    let logs = logs_of(&dir.path().join("mw.db"), run);
    assert_eq!(logs.len(), 1, "{logs:?}");
    assert_eq!(logs[0].1 as u64, std::fs::metadata(&log).unwrap().len());
    // The same verdict as `memwatch diagnose` of the same files.
    let d = mw(
        dir.path(),
        &[
            "diagnose",
            cap.to_str().unwrap(),
            log.to_str().unwrap(),
            "--xla-dump",
            dump.to_str().unwrap(),
            "--json",
        ],
    );
    let d: serde_json::Value = serde_json::from_slice(&d.stdout).unwrap();
    assert_eq!(d["headline"].as_str(), Some(headline.as_str()));

    // A log that cannot be read stores nothing: no run, no verdict.
    let out = mw(
        dir.path(),
        &[
            "import",
            cap.to_str().unwrap(),
            "--log",
            "nope.log",
            "--db",
            "other.db",
        ],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("nope.log"));
}
