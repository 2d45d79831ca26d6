//! Which runs are one job, on real recordings: the workers of a launcher, forwarded one
//! run per process as the node agent forwards them (testdata/h200-gen/017_launcher: three
//! JAX workers on an H200; testdata/multi-gpu: two JAX and two PyTorch DDP workers on two
//! H100s), are one job each, on the overview and on each worker's page; the whole
//! recordings of testdata/h200-gen and the H200 corpus, all from hosts called `vm` with
//! parent pids that repeat across machines, and one process recorded twice (an H100 leak
//! imported as itself and again as another run) are no job.

mod common;

use std::collections::BTreeSet;

use common::corpus::{capture_records, store_records, testdata};
use common::*;
use memwatch_wire::Record;

use common::http::page as get;

/// The records of process `pid` of a capture: its start and end, its devices and its
/// events (what the node agent forwards as the process's own run).
fn of_process(records: &[Record], pid: u32) -> Vec<Record> {
    records
        .iter()
        .filter_map(|r| match r {
            Record::ProcessStart(p) if p.pid == pid => Some(r.clone()),
            Record::ProcessEnd(p) if p.pid == pid => Some(r.clone()),
            Record::DeviceInfo(d) if d.pid == pid => Some(r.clone()),
            Record::Events(evs) => {
                let mine: Vec<_> = evs.iter().filter(|e| e.pid == pid).copied().collect();
                (!mine.is_empty()).then_some(Record::Events(mine))
            }
            _ => None,
        })
        .collect()
}

fn pids(records: &[Record]) -> Vec<u32> {
    records
        .iter()
        .filter_map(|r| match r {
            Record::ProcessStart(p) => Some(p.pid),
            _ => None,
        })
        .collect()
}

/// The overview's jobs: each `<li id="job-N">`'s run ids.
fn overview_jobs(page: &str) -> Vec<BTreeSet<i64>> {
    let mut out = Vec::new();
    let mut rest = page;
    while let Some(at) = rest.find("<li id=\"job-") {
        let li = &rest[at..];
        let end = li.find("</li>").expect("job item ends");
        let ids = li[..end]
            .split("href=\"/runs/")
            .skip(1)
            .filter_map(|s| s.split('"').next()?.parse().ok())
            .collect();
        out.push(ids);
        rest = &li[end..];
    }
    out
}

/// The runs a run page names as its job's other runs.
fn page_job(page: &str) -> BTreeSet<i64> {
    let Some(at) = page.find("<p class=\"job\"") else {
        return BTreeSet::new();
    };
    let p = &page[at..at + page[at..].find("</p>").expect("job line ends")];
    p.split("href=\"/runs/")
        .skip(1)
        .filter_map(|s| s.split('"').next()?.parse().ok())
        .collect()
}

#[tokio::test]
async fn workers_of_a_launcher_are_one_job_and_nothing_else_is() {
    let dbs = dbs("jobs_real").await;
    let (app, store) = test_app(&dbs.urls[0], None, 16 << 20).await;
    let mut stream = 0;
    let mut want: Vec<BTreeSet<i64>> = Vec::new();
    for launcher in [
        "h200-gen/017_launcher",
        "multi-gpu/jax_train",
        "multi-gpu/torch_ddp",
    ] {
        let records = capture_records(&testdata(&format!("{launcher}/capture.mwcap")));
        let workers = pids(&records);
        assert!(workers.len() >= 2, "{launcher}: {workers:?}");
        let mut job = BTreeSet::new();
        for pid in workers {
            stream += 1;
            let key = format!("vm:{pid}:{stream}");
            let run =
                store_records(&store, "vm", &key, stream, of_process(&records, pid), 64).await;
            job.insert(run);
        }
        want.push(job);
    }
    // Whole recordings, each imported as one run on node `vm` (their hosts' name): other
    // machines and days, parent pids such as 900, 901, 2263 that fresh VMs hand out again.
    let mut whole = Vec::new();
    for dir in std::fs::read_dir(testdata("h200-gen")).unwrap() {
        let dir = dir.unwrap().path();
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        if dir.join("capture.mwcap").is_file() && name != "017_launcher" {
            whole.push(dir.join("capture.mwcap"));
        }
    }
    for s in ["jax_leak_bfc", "jax_scan_temp", "h200_jax_attach_leak"] {
        whole.push(testdata(&format!("oom-corpus/{s}/capture.mwcap")));
    }
    // One process recorded twice: the leak again under another key.
    whole.push(testdata("oom-corpus/jax_leak_bfc/capture.mwcap"));
    whole.sort();
    let mut alone = Vec::new();
    for path in &whole {
        stream += 1;
        let key = format!("import:{}:{stream}", path.display());
        alone.push(store_records(&store, "vm", &key, stream, capture_records(path), 64).await);
    }

    let overview = get(&app, "/").await;
    let mut got = overview_jobs(&overview);
    got.sort();
    want.sort();
    assert_eq!(got, want, "the overview's jobs");
    for job in &want {
        for &run in job {
            let page = get(&app, &format!("/runs/{run}")).await;
            let others: BTreeSet<i64> = job.iter().copied().filter(|&r| r != run).collect();
            assert_eq!(page_job(&page), others, "run {run}'s page");
        }
    }
    for run in alone {
        let page = get(&app, &format!("/runs/{run}")).await;
        assert!(
            page_job(&page).is_empty() && !page.contains("Part of a job"),
            "run {run} is in no job"
        );
    }
}
