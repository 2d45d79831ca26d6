//! `memwatch gate --run ID --db PATH`: runs imported into the daemon's store gate by
//! their per-device peaks, and the verdicts land in the store's gate_results table.

mod common;

use std::path::Path;
use std::process::Output;
#[path = "support/synthetic_capture.rs"]
mod synthetic_capture;
use synthetic_capture::capture;

use common::run_memwatch as mw;

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Imports `cap` into `db`; returns the run id.
fn import(db: &str, cap: &Path) -> i64 {
    let o = mw(&["import", "--json", "--db", db, cap.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    v["run_id"]
        .as_i64()
        .unwrap_or_else(|| panic!("no run_id: {v}"))
}

#[test]
fn stored_run_peak_regression_fails_missing_run_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    let db_path = dir.path().join("mw.db");
    scenario(dir.path(), db_path.to_str().unwrap(), "mw.db");
    bad_databases(dir.path());
}

/// The same scenario on a fresh PostgreSQL database when MEMWATCH_TEST_POSTGRES_URL is set
/// (`export MEMWATCH_TEST_POSTGRES_URL=$(bash scripts/start-test-postgres.sh)`).
#[test]
fn stored_run_gate_on_postgres() {
    let Some((url, name)) = common::fresh_postgres_database("mwgate", "PostgreSQL gate test")
    else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    scenario(dir.path(), &url, &name);
}

/// Two imports, baseline, regression, names, gate_results rows, missing run. `shown` is
/// how error messages name the database.
fn scenario(root: &Path, db: &str, shown: &str) {
    let dir = root;
    let base = dir.join("b.toml");
    let b = base.to_str().unwrap();
    // Two runs of "the same program" (same capture name), the second with 200 MiB more peak.
    std::fs::create_dir(dir.join("r1")).unwrap();
    std::fs::create_dir(dir.join("r2")).unwrap();
    let (c1, c2) = (dir.join("r1/train.mwcap"), dir.join("r2/train.mwcap"));
    capture(&c1, 1 << 20);
    capture(&c2, 201 << 20);
    // Equal-length captures that differ only in one size are two runs (import's content
    // id must not be a CRC32 of CRC-trailed frames, which is the same for both).
    let (run1, run2) = (import(db, &c1), import(db, &c2));
    assert_ne!(run1, run2);

    // Baseline from run 1: keyed like the capture adapter, by the capture's stem.
    let o = mw(&[
        "gate",
        "--baseline",
        b,
        "--run",
        &run1.to_string(),
        "--db",
        db,
        "--update",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let text = std::fs::read_to_string(&base).unwrap();
    assert!(text.contains("train/device0"), "{text}");
    assert!(!text.contains("4242"), "no pid in keys: {text}");
    assert!(
        text.contains(&(2u64 << 20).to_string()),
        "peak 2 MiB: {text}"
    );

    // The same capture file gates against the same key.
    let o = mw(&["gate", "--baseline", b, "--capture", c1.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));

    // Run 2 regresses: exit 1, entry and metric named, Δ 200 MiB.
    let o = mw(&[
        "gate",
        "--baseline",
        b,
        "--run",
        &run2.to_string(),
        "--db",
        db,
        "--json",
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let e = &v["entries"][0];
    assert_eq!(e["key"], "train/device0", "{v}");
    assert_eq!(e["status"], "regressed", "{v}");
    let peak = e["metrics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["metric"] == "peak")
        .unwrap();
    assert_eq!(peak["delta_bytes"], 200u64 << 20, "{v}");
    assert!(
        e["source"]
            .as_str()
            .unwrap()
            .contains(&format!("run {run2}")),
        "{v}"
    );

    // NAME=ID names the entries; run 1 under another name is new, not a regression.
    let o = mw(&[
        "gate",
        "--baseline",
        b,
        "--run",
        &format!("other={run1}"),
        "--run",
        &run1.to_string(),
        "--db",
        db,
        "--json",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let keys: Vec<&str> = v["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["key"].as_str().unwrap())
        .collect();
    assert!(
        keys.contains(&"other/device0") && keys.contains(&"train/device0"),
        "{v}"
    );

    // Every gate run with --db recorded one row per measured entry (1 + 1 + 2 above).
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let rows = rt.block_on(async {
        let store = memwatch_daemon::Store::open(db).await.unwrap();
        memwatch_daemon::gate_results(&store).await.unwrap()
    });
    assert_eq!(rows.len(), 4);
    let failed: Vec<_> = rows.iter().filter(|r| !r.passed).collect();
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0].run_id, Some(run2));
    assert_eq!(failed[0].name, "train/device0");
    assert_eq!(failed[0].measured_bytes, 202 << 20);
    assert_eq!(failed[0].limit_bytes, (2 << 20) + (64 << 20));

    // A run that is not in the store: exit 2 naming the database and the run.
    let o = mw(&["gate", "--baseline", b, "--run", "999", "--db", db]);
    assert_eq!(o.status.code(), Some(2));
    let err = stderr(&o);
    assert!(err.contains(shown) && err.contains("no run 999"), "{err}");
}

fn bad_databases(root: &Path) {
    let dir = root;
    let base = dir.join("b.toml");
    let b = base.to_str().unwrap();

    // A database that does not exist: exit 2, and no empty database is created.
    let missing = dir.join("nope.db");
    let o = mw(&[
        "gate",
        "--baseline",
        b,
        "--run",
        "1",
        "--db",
        missing.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2));
    let err = stderr(&o);
    assert!(
        err.contains("nope.db") && err.contains("no such file"),
        "{err}"
    );
    assert!(!missing.exists());

    // A file that is not a database: exit 2 naming it.
    let junk = dir.join("junk.db");
    std::fs::write(
        &junk,
        "this is not sqlite, just text padded out to look like a file\n".repeat(200),
    )
    .unwrap();
    let o = mw(&[
        "gate",
        "--baseline",
        b,
        "--run",
        "1",
        "--db",
        junk.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2));
    let err = stderr(&o);
    assert!(
        err.contains("junk.db") && err.contains("not a SQLite database"),
        "{err}"
    );

    // --run needs --db; a non-numeric ID is a usage error.
    assert_eq!(
        mw(&["gate", "--baseline", b, "--run", "1"]).status.code(),
        Some(2)
    );
    let db = dir.join("mw.db");
    let db = db.to_str().unwrap();
    assert_eq!(
        mw(&["gate", "--baseline", b, "--run", "x", "--db", db])
            .status
            .code(),
        Some(2)
    );
}
