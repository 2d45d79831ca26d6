//! `memwatch import --db PATH --log FILE [--xla-dump DIR]`: the real H200 OOM incident is
//! stored (log + dump) and diagnosed; bad input (missing file, binary file, a directory
//! without a dump, an unknown run, --log without --db) exits 2 with one clear line and
//! stores nothing.

mod common;

use common::{mw, repo};

const INC: &str = "testdata/h200/incidents/h200-jax0.11.2-oom-temp";

#[test]
fn stores_the_real_incident_and_refuses_bad_input() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("m.db");
    let db = db.to_str().unwrap();
    let log = repo(INC).join("run.log");
    let (code, out, err) = mw(&[
        "import",
        "--db",
        db,
        "--log",
        log.to_str().unwrap(),
        "--xla-dump",
        repo(INC).to_str().unwrap(),
        "--mem-fraction",
        "0.025",
        "--json",
    ]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["log_id"], 1);
    assert_eq!(v["dump_id"], 1);
    assert_eq!(v["modules"][0], "jit_model");
    assert_eq!(v["ooms"], 1);
    assert_eq!(v["diagnoses"], 1);
    assert_eq!(v["page"], "/incidents/logs/1");

    let exe = std::env::current_exe().unwrap();
    for (args, needle) in [
        (
            vec!["--log", "/no/such.log"],
            "/no/such.log: cannot open log",
        ),
        (vec!["--log", exe.to_str().unwrap()], "not UTF-8 text"),
        (
            vec!["--xla-dump", dir.path().to_str().unwrap()],
            "no XLA dump modules here",
        ),
        (
            vec!["--log", log.to_str().unwrap(), "--run-id", "77"],
            "--run-id 77: there is no run 77",
        ),
        (
            vec!["--log", log.to_str().unwrap(), "--mem-fraction", "3"],
            "--mem-fraction 3: must be in (0, 1]",
        ),
    ] {
        let mut a = vec!["import", "--db", db];
        a.extend(args.iter().copied());
        let (code, _, err) = mw(&a);
        assert_eq!(code, 2, "{a:?}: {err}");
        assert!(err.contains(needle), "{a:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    }
    // Nothing more was stored by the refused imports: the next log gets id 2.
    let (code, out, err) = mw(&[
        "import",
        "--db",
        db,
        "--log",
        log.to_str().unwrap(),
        "--json",
    ]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["log_id"], 2);
    assert_eq!(v["diagnoses"], 0, "no dump attached to this one");

    let (code, _, err) = mw(&["import", "--log", log.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
}
