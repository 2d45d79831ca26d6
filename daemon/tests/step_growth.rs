//! Growth on the dashboard is the doctor's: real H100/H200 recordings of the OOM corpus
//! (JAX leaks through the allocator and the platform allocator, PyTorch leaks through
//! expandable segments and grouped segments, and runs that allocate their weights once:
//! a fraction too small, an update without donation, a temp buffer, two processes, JAX
//! and PyTorch in one process, a run that fits), each stored as `memwatch import` stores
//! it. On each, the framework API's growth and the overview's badge agree with
//! `memwatch diagnose`'s first verdict (capture + stderr + XLA dump): growth exactly where
//! the doctor gives a per-step growth figure, with the same figure per step and the same
//! bytes kept.

mod common;

use common::corpus::{corpus_diagnosis, store_corpus};
use common::*;

use common::http::page as get;

#[tokio::test]
async fn dashboard_growth_is_the_doctors() {
    let dbs = dbs("step_growth").await;
    let (app, store) = test_app(&dbs.urls[0], None, 16 << 20).await;
    let scenarios = [
        "jax_leak_bfc",
        "jax_leak_bfc_b",
        "jax_leak_bfc_c",
        "jax_leak_cuda_async",
        "jax_leak_platform",
        "h200_torch_leak_expandable",
        "h200_torch_leak_groups",
        "h200_torch_weights_over_fraction",
        "h200_jax_no_donation",
        "jax_mlp_fits",
        "jax_exec_temp",
        "jax_co_resident",
        "h200_jax_torch_same",
        "h200_jax_recovered",
    ];
    let mut runs = Vec::new();
    for (i, scenario) in scenarios.into_iter().enumerate() {
        let run = store_corpus(&store, scenario, 60 + i as u64).await;
        let doc = corpus_diagnosis(scenario);
        let figures = &doc["verdicts"][0]["figures"];
        let per_step = figures["growth_per_step_bytes"].as_i64();
        let kept = figures["leaked_bytes"].as_i64();
        runs.push((run, scenario, per_step, kept));
    }
    let grows = runs.iter().filter(|r| r.2.is_some()).count();
    assert!(grows >= 6 && grows + 6 <= runs.len(), "{runs:?}");
    for &(run, scenario, per_step, kept) in &runs {
        let api: serde_json::Value =
            serde_json::from_str(&get(&app, &format!("/api/runs/{run}/framework")).await).unwrap();
        let g = &api["growing"];
        match per_step {
            Some(step) => {
                assert_eq!(g["per_step"].as_i64(), Some(step), "{scenario}: {g}");
                if let Some(kept) = kept {
                    assert_eq!(g["growth_bytes"].as_i64(), Some(kept), "{scenario}: {g}");
                }
                assert!(g["bytes_per_s"].as_f64().is_some_and(|b| b > 0.0), "{g}");
            }
            None => assert!(g.is_null(), "{scenario}: no growth by the doctor; {g}"),
        }
    }
    // Two processes: the worker keeps one 512 MiB array per execution until the 12th
    // fails; the doctor puts the failure down to the other process (its first verdict
    // carries no growth figure), the worker's own arrays grow by its request per step.
    let run = store_corpus(&store, "two_processes", 99).await;
    let doc = corpus_diagnosis("two_processes");
    assert_eq!(doc["verdicts"][0]["kind"], "other_process");
    let request = doc["verdicts"][0]["figures"]["request_bytes"].as_i64();
    let api: serde_json::Value =
        serde_json::from_str(&get(&app, &format!("/api/runs/{run}/framework")).await).unwrap();
    assert_eq!(api["growing"]["per_step"].as_i64(), request, "{api}");
    // The overview's badge, once the framework views are built (the API built them).
    let page = get(&app, "/").await;
    let list = &page[page.find("id=\"runs-h\"").unwrap()..];
    for (run, scenario, per_step, _) in runs {
        let at = list.find(&format!("href=\"/runs/{run}\">#{run} ")).unwrap();
        let row = &list[at..at + list[at..].find("</tr>").unwrap()];
        assert_eq!(
            row.contains("class=\"badge grow\""),
            per_step.is_some(),
            "{scenario}: the overview's badge: {row}"
        );
    }
}
