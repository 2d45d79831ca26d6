//! Importing the whole capture after a cut-off copy of it, under one run key, stores
//! exactly what the copy lacked: the run then equals a run imported from the whole file
//! alone (events and device peak), directly into SQLite and through a daemon. Before,
//! the overlap was stored twice and the peak inflated.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod common;

use common::run_memwatch as mw;

fn import(args: &[&str]) -> serde_json::Value {
    let mut a = vec!["import", "--json"];
    a.extend_from_slice(args);
    let out = mw(&a);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The device peaks of a stored run, through `memwatch gate --update`'s baseline.
fn peaks(db: &str, run: i64, dir: &Path) -> String {
    let stem = Path::new(db)
        .file_stem()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    let base = dir.join(format!("peaks-{stem}-{run}.toml"));
    let out = mw(&[
        "gate",
        "--baseline",
        base.to_str().unwrap(),
        "--run",
        &format!("r={run}"),
        "--db",
        db,
        "--update",
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::read_to_string(base).unwrap()
}

fn fixture() -> Vec<u8> {
    std::fs::read(common::repo(
        "testdata/h200-captures/jax0.11.2-platform-allocator.mwcap",
    ))
    .unwrap()
}

#[test]
fn a_cut_off_copy_then_the_whole_capture_store_it_once() {
    let dir = tempfile::tempdir().unwrap();
    let whole = fixture();
    let full = dir.path().join("job.mwcap");
    std::fs::write(&full, &whole).unwrap();
    let cut = dir.path().join("job-copy.mwcap");
    std::fs::write(&cut, &whole[..whole.len() * 3 / 5]).unwrap();
    let (f, c) = (full.to_str().unwrap(), cut.to_str().unwrap());

    let alone = dir.path().join("alone.db");
    let a = import(&[f, "--db", alone.to_str().unwrap(), "--run", "job"]);
    let total_events = a["events"].as_u64().unwrap();
    assert!(total_events > 0);

    let db = dir.path().join("mw.db");
    let d = db.to_str().unwrap();
    let first = import(&[c, "--db", d, "--run", "job"]);
    let second = import(&[f, "--db", d, "--run", "job"]);
    assert!(first["events"].as_u64().unwrap() < total_events, "{first}");
    assert_eq!(
        second["records_already_stored"], first["records"],
        "{second}"
    );
    assert_eq!(
        first["events"].as_u64().unwrap() + second["events"].as_u64().unwrap(),
        total_events
    );
    assert_eq!(second["run_id"], first["run_id"]);
    let run = first["run_id"].as_i64().unwrap();
    assert_eq!(
        peaks(d, run, dir.path()),
        peaks(
            alone.to_str().unwrap(),
            a["run_id"].as_i64().unwrap(),
            dir.path()
        )
    );
    // Once more: nothing new, the run is named all the same.
    let third = import(&[f, "--db", d, "--run", "job"]);
    assert_eq!(third["events"], 0);
    assert_eq!(third["records_already_stored"], third["records"]);
    assert_eq!(third["run_id"], run);
}

#[test]
fn the_same_through_a_daemon() {
    let dir = tempfile::tempdir().unwrap();
    let whole = fixture();
    let full = dir.path().join("job.mwcap");
    std::fs::write(&full, &whole).unwrap();
    let cut = dir.path().join("job-copy.mwcap");
    std::fs::write(&cut, &whole[..whole.len() / 3]).unwrap();
    let db = dir.path().join("served.db");
    let (api, ingest) = (common::free_port(), common::free_port());
    let mut serve = Command::new(env!("CARGO_BIN_EXE_memwatch"))
        .args(["serve", "--db", db.to_str().unwrap()])
        .args(["--listen", &format!("127.0.0.1:{api}")])
        .args(["--ingest", &format!("127.0.0.1:{ingest}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let url = format!("http://127.0.0.1:{api}");
    let deadline = Instant::now() + Duration::from_secs(120);
    while ureq::get(&format!("{url}/api/runs")).call().is_err() {
        assert!(Instant::now() < deadline, "daemon did not come up");
        std::thread::sleep(Duration::from_millis(50));
    }
    let first = import(&[cut.to_str().unwrap(), "--daemon", &url, "--run", "job"]);
    let second = import(&[full.to_str().unwrap(), "--daemon", &url, "--run", "job"]);
    let third = import(&[full.to_str().unwrap(), "--daemon", &url, "--run", "job"]);
    let _ = serve.kill();
    let _ = serve.wait();
    assert_eq!(second["records_already_stored"], first["records"]);
    assert_eq!(third["events"], 0);
    assert_eq!(third["run_id"], first["run_id"]);
    let alone = dir.path().join("alone.db");
    let a = import(&[
        full.to_str().unwrap(),
        "--db",
        alone.to_str().unwrap(),
        "--run",
        "job",
    ]);
    assert_eq!(
        first["events"].as_u64().unwrap() + second["events"].as_u64().unwrap(),
        a["events"].as_u64().unwrap()
    );
    assert_eq!(
        peaks(
            db.to_str().unwrap(),
            first["run_id"].as_i64().unwrap(),
            dir.path()
        ),
        peaks(
            alone.to_str().unwrap(),
            a["run_id"].as_i64().unwrap(),
            dir.path()
        )
    );
}
