//! `memwatch gate` end to end on the checked-in JAX 0.10.2 data (testdata/gate-jax0.10.2,
//! regenerate/verify with scripts/gate-jax-test.sh): a baseline from the jax.checkpoint
//! model; removing the checkpoint must fail the gate naming jit_train_step, temp and the
//! exact Δ; a smaller model must pass and report the improvement. Bad baselines exit 2.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/gate-jax0.10.2")
}

fn memwatch(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_memwatch"))
        .args(args)
        .output()
        .expect("run memwatch")
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// memory_analysis() of `module` in a variant's memory.json.
fn analysis(variant: &str, module: &str, field: &str) -> i64 {
    let v: Value = serde_json::from_slice(
        &std::fs::read(fixtures().join(variant).join("memory.json")).unwrap(),
    )
    .unwrap();
    let e = v["entries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == module)
        .unwrap();
    e["memory_analysis"][field].as_i64().unwrap()
}

fn json(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)))
}

fn entry<'a>(report: &'a Value, key: &str) -> &'a Value {
    report["entries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["key"] == key)
        .unwrap()
}

fn metric<'a>(entry: &'a Value, m: &str) -> &'a Value {
    entry["metrics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["metric"] == m)
        .unwrap()
}

const TIGHT: [&str; 4] = ["--max-increase", "2%", "--max-increase-bytes", "512KiB"];

fn scenario(source_flag: &str, input: &dyn Fn(&str) -> PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().join("memory-baseline.toml");
    let run = |variant: &str, extra: &[&str]| {
        let p = input(variant);
        let mut a = vec!["gate", "--baseline", s(&base), source_flag, s(&p)];
        a.extend_from_slice(&TIGHT);
        a.extend_from_slice(extra);
        memwatch(&a)
    };
    let out = run("checkpoint", &["--update"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&base).unwrap();
    assert!(
        text.contains("[entries.jit_train_step]") && text.contains("[entries.jit_predict]"),
        "{text}"
    );

    // jax.checkpoint removed: temp grows, the gate fails naming module, metric and Δ.
    let out = run("no-checkpoint", &["--json"]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r = json(&out);
    assert_eq!(r["passed"], false);
    let step = entry(&r, "jit_train_step");
    assert_eq!(step["status"], "regressed");
    let want = analysis("no-checkpoint", "jit_train_step", "temp_size_in_bytes")
        - analysis("checkpoint", "jit_train_step", "temp_size_in_bytes");
    assert!(want > 0);
    let temp = metric(step, "temp");
    assert_eq!(temp["delta_bytes"].as_i64(), Some(want));
    assert_eq!(temp["regressed"], true);
    assert_ne!(entry(&r, "jit_predict")["status"], "regressed");
    let out = run("no-checkpoint", &[]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("jit_train_step")
            && text.contains("REGRESSED")
            && text.contains("Temp +1.00 MiB (+4.17%)"),
        "{text}"
    );

    // A smaller model: passes, improvement reported.
    let out = run("small", &["--json"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r = json(&out);
    let step = entry(&r, "jit_train_step");
    assert_eq!(step["status"], "improved");
    let want = analysis("small", "jit_train_step", "temp_size_in_bytes")
        - analysis("checkpoint", "jit_train_step", "temp_size_in_bytes");
    assert_eq!(metric(step, "temp")["delta_bytes"].as_i64(), Some(want));
    assert!(want < 0);

    // --ratchet locks the improvement in: the checkpoint model now regresses against it.
    let out = run("small", &["--ratchet"]);
    assert_eq!(out.status.code(), Some(0));
    let out = run("checkpoint", &[]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

#[test]
fn memory_analysis_json_checkpoint_removal_regresses_and_shrink_improves() {
    scenario("--memory-analysis", &|v| {
        fixtures().join(v).join("memory.json")
    });
}

#[test]
fn xla_dump_checkpoint_removal_regresses_and_shrink_improves() {
    scenario("--xla-dump", &|v| fixtures().join(v).join("dump"));
}

#[test]
fn xla_dump_markdown_names_grown_ops_and_junit_fails() {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().join("b.toml");
    let dump = |v: &str| fixtures().join(v).join("dump");
    let out = memwatch(&[
        "gate",
        "--baseline",
        s(&base),
        "--xla-dump",
        s(&dump("checkpoint")),
        "--update",
    ]);
    assert_eq!(out.status.code(), Some(0));
    let md = dir.path().join("gate.md");
    let junit = dir.path().join("gate.xml");
    let grown = dump("no-checkpoint");
    let mut a = vec!["gate", "--baseline", s(&base), "--xla-dump", s(&grown)];
    a.extend_from_slice(&TIGHT);
    a.extend_from_slice(&[
        "--format",
        "markdown",
        "--markdown-out",
        s(&md),
        "--junit-out",
        s(&junit),
    ]);
    let out = memwatch(&a);
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(text, std::fs::read_to_string(&md).unwrap());
    assert!(text.contains("| Module | Status | Total | Output | Temp | Argument | Host Temp | Peak | Δ vs baseline |"), "{text}");
    assert!(
        text.contains("| `jit_train_step` | ❌ regressed |"),
        "{text}"
    );
    assert!(text.contains("**Temp +1.00 MiB (+4.17%)**"), "{text}");
    assert!(
        text.contains("#### `jit_train_step`: ops whose peak bytes grew most"),
        "{text}"
    );
    assert!(text.contains("jit(train_step)/jvp()/tanh"), "{text}");
    let xml = std::fs::read_to_string(&junit).unwrap();
    assert!(
        xml.contains(r#"<testsuite name="memwatch gate" tests="2" failures="1""#),
        "{xml}"
    );
    assert!(
        xml.contains(
            r#"<failure message="jit_train_step: Total +1.00 MiB (+3.10%); Temp +1.00 MiB (+4.17%)"#
        ),
        "{xml}"
    );
}

fn bad_baseline(text: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().join("bad-baseline.toml");
    std::fs::write(&base, text).unwrap();
    let ma = fixtures().join("checkpoint/memory.json");
    let out = memwatch(&["gate", "--baseline", s(&base), "--memory-analysis", s(&ma)]);
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert!(out.stdout.is_empty());
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    assert!(
        err.contains(&format!("{}:", base.display())),
        "names the file: {err}"
    );
    err
}

#[test]
fn bad_baselines_exit_2_naming_file_and_line() {
    let e = bad_baseline("version = 1\n[entries.jit_train_step\ntemp = 1\n");
    assert!(
        e.contains("bad-baseline.toml:2:") && e.contains("TOML syntax error"),
        "{e}"
    );
    let e = bad_baseline("version = 1\n\n[entries.jit_train_step]\ntemp = 1\ntemperature = 2\n");
    assert!(
        e.contains("bad-baseline.toml:5:1:") && e.contains("unknown metric `temperature`"),
        "{e}"
    );
    let e =
        bad_baseline("version = 1\n[entries.jit_train_step]\ntemp = 1\nmax_increase = \"-5%\"\n");
    assert!(
        e.contains("bad-baseline.toml:4:") && e.contains("negative threshold"),
        "{e}"
    );
    let e = bad_baseline(
        "version = 1\n[entries.jit_train_step]\ntemp = 1\nmax_increase_bytes = -1048576\n",
    );
    assert!(
        e.contains("bad-baseline.toml:4:") && e.contains("negative threshold"),
        "{e}"
    );
}

#[test]
fn missing_baseline_missing_entries_and_bad_inputs_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().join("b.toml");
    let ma = fixtures().join("checkpoint/memory.json");
    let out = memwatch(&["gate", "--baseline", s(&base), "--memory-analysis", s(&ma)]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr)
        .contains("baseline file does not exist (create it with --update)"));

    std::fs::write(
        &base,
        "version = 1\n[entries.jit_gone]\ntemp = 5\nnote = \"kept\"\n",
    )
    .unwrap();
    let out = memwatch(&["gate", "--baseline", s(&base), "--memory-analysis", s(&ma)]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("1 baseline entry was not measured: jit_gone")
            && err.contains("--allow-missing"),
        "{err}"
    );
    let out = memwatch(&[
        "gate",
        "--baseline",
        s(&base),
        "--memory-analysis",
        s(&ma),
        "--allow-missing",
        "--json",
    ]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(entry(&json(&out), "jit_gone")["status"], "missing");
    // --update with --allow-missing keeps the unmeasured entry and its note.
    let out = memwatch(&[
        "gate",
        "--baseline",
        s(&base),
        "--memory-analysis",
        s(&ma),
        "--allow-missing",
        "--update",
    ]);
    assert_eq!(out.status.code(), Some(0));
    let text = std::fs::read_to_string(&base).unwrap();
    assert!(
        text.contains("[entries.jit_gone]")
            && text.contains("note = \"kept\"")
            && text.contains("[entries.jit_train_step]"),
        "{text}"
    );

    let junk = dir.path().join("junk.json");
    std::fs::write(
        &junk,
        "{\"format\": \"memwatch-jax\", \"version\": 1,\n \"entries\": [{\"name\": 3}]}",
    )
    .unwrap();
    let out = memwatch(&[
        "gate",
        "--baseline",
        s(&base),
        "--memory-analysis",
        s(&junk),
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("junk.json:2:"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = memwatch(&["gate", "--baseline", s(&base), "--xla-dump", s(dir.path())]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no XLA dump modules"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = memwatch(&[
        "gate",
        "--baseline",
        s(&base),
        "--memory-analysis",
        s(&ma),
        "--max-increase",
        "-1%",
    ]);
    assert_eq!(out.status.code(), Some(2));
    let out = memwatch(&[
        "gate",
        "--baseline",
        s(&base),
        "--memory-analysis",
        s(&ma),
        "--metric",
        "temp,bogus",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown metric `bogus`"));
}
