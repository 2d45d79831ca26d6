//! The OOM doctor on real H100 failures held out from the rules' tuning
//! (`testdata/oom-corpus-heldout/`, recorded by `tests/gpu/oom_corpus/heldout.sh` with
//! other shapes, sizes, fractions and allocators than the corpus): each verdict's kind
//! must be the kind its program was written to produce (`design_kind`, from the
//! program's docstring and its allocator setting, never from memwatch's output), and the
//! device ledger must close.

mod common;

use common::{diagnose_scenario, repo};
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
        let doc = diagnose_scenario(&dir, &scenario);
        let got = doc["verdicts"][0]["kind"].as_str().unwrap_or("none");
        seen += 1;
        if got != want {
            wrong.push(format!(
                "{}: want {want}, got {got} ({})",
                dir.display(),
                doc["headline"]
            ));
        }
        // The device ledger closes on these runs too (held out from its tuning as well).
        if doc["ledger"]["closes"] != Value::Bool(true) {
            wrong.push(format!(
                "{}: the ledger does not close: {}",
                dir.display(),
                doc["ledger"]
            ));
        }
    }
    assert!(seen >= 9, "only {seen} held-out scenarios found");
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
