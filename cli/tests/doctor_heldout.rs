//! The OOM doctor on real H100 failures held out from the rules' tuning
//! (`testdata/oom-corpus-heldout/`, recorded by `tests/gpu/oom_corpus/heldout.sh` with
//! other shapes, sizes, fractions and allocators than the corpus): each verdict's kind
//! must be the kind its program was written to produce (`design_kind`, from the
//! program's docstring and its allocator setting, never from memwatch's output).

mod common;

use common::{mw, repo};
use serde_json::Value;

#[test]
fn held_out_failures_get_the_kind_their_program_produces() {
    let root = repo("testdata/oom-corpus-heldout");
    let mut wrong = Vec::new();
    let mut seen = 0;
    for entry in std::fs::read_dir(&root).unwrap() {
        let dir = entry.unwrap().path();
        let Ok(text) = std::fs::read_to_string(dir.join("scenario.json")) else {
            continue;
        };
        let scenario: Value = serde_json::from_str(&text).unwrap();
        let want = scenario["design_kind"].as_str().unwrap().to_string();
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
        for (k, v) in scenario["env"].as_object().into_iter().flatten() {
            args.push("--env".into());
            args.push(format!("{k}={}", v.as_str().unwrap_or_default()));
        }
        args.push("--json".into());
        let a: Vec<&str> = args.iter().map(String::as_str).collect();
        let (code, out, err) = mw(&a);
        assert_eq!(code, 0, "{}: {err}", dir.display());
        let doc: Value = serde_json::from_str(&out).unwrap();
        let got = doc["verdicts"][0]["kind"].as_str().unwrap_or("none");
        seen += 1;
        if got != want {
            wrong.push(format!(
                "{}: want {want}, got {got} ({})",
                dir.display(),
                doc["headline"]
            ));
        }
    }
    assert!(seen >= 9, "only {seen} held-out scenarios found");
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
