//! Raw driver memory grows on the dashboard exactly where `memwatch diagnose` finds a
//! leak: real H100/H200 recordings of the OOM corpus without PJRT records (PyTorch, CuPy
//! leaks, a fraction too small, a request too large, fragmentation), each stored as
//! `memwatch import` stores it; the overview's "growing" badge and the run page's figure
//! are checked against what each program did (the corpus' `expect.kind`, which
//! `memwatch diagnose` names for each of these captures).

mod common;

use common::corpus::{store_corpus, testdata};
use common::*;

use common::http::page as get;

#[tokio::test]
async fn driver_growth_agrees_with_the_doctor() {
    let dbs = dbs("driver_growth").await;
    let (app, store) = test_app(&dbs.urls[0], None, 16 << 20).await;
    let mut runs = Vec::new();
    for (i, scenario) in [
        "torch_leak",
        "torch_leak_b",
        "h200_cupy_leak",
        "h200_cupy_leak_retry",
        "torch_fraction",
        "torch_too_large",
        "torch_fragmentation",
        "cupy_limit",
    ]
    .into_iter()
    .enumerate()
    {
        let run = store_corpus(&store, scenario, 40 + i as u64).await;
        // What the program did (the corpus' truth, which `memwatch diagnose` matches:
        // analysis' doctor_corpus test).
        let truth: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(testdata(&format!("oom-corpus/{scenario}/scenario.json")))
                .unwrap(),
        )
        .unwrap();
        let leak = truth["expect"]["kind"] == "leak";
        runs.push((run, scenario, leak));
    }
    assert!(
        runs.iter().any(|r| r.2) && runs.iter().any(|r| !r.2),
        "{runs:?}"
    );
    let page = get(&app, "/").await;
    let list = &page[page.find("id=\"runs-h\"").unwrap()..];
    for (run, scenario, leak) in runs {
        let at = list.find(&format!("href=\"/runs/{run}\">#{run} ")).unwrap();
        let row = &list[at..at + list[at..].find("</tr>").unwrap()];
        assert_eq!(
            row.contains("class=\"badge grow\""),
            leak,
            "{scenario}: leak {leak}; the overview row: {row}"
        );
        let run_page = get(&app, &format!("/runs/{run}")).await;
        assert_eq!(
            run_page.contains("in driver memory (+"),
            leak,
            "{scenario}: the run page's growth figure"
        );
    }
}
