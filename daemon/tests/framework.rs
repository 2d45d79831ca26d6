//! The framework view (issue 23 items 1 and 2) on real H100 recordings: JAX runs of the
//! OOM corpus (default BFC allocator; a leak of 64 MiB per step that ends in
//! RESOURCE_EXHAUSTED, a run that fits, a temp buffer too large at execute) and a PyTorch
//! snapshot. Expected figures come from the recordings themselves (the allocator samples
//! and buffer events in the capture, swept here independently) and from what the
//! programs printed (`figures.json`, the snapshot's `at_dump`), never from the daemon.

mod common;

use std::collections::HashMap;

use axum::http::StatusCode;
use common::corpus::{capture_records, store_corpus, store_snapshot_file, testdata};
use common::*;
use memwatch_wire::{EventKind, MemKind, Record};

use common::http::text as get;

async fn api(app: &axum::Router, uri: &str) -> serde_json::Value {
    let (s, body) = get(app, uri).await;
    assert_eq!(s, StatusCode::OK, "{uri}: {body}");
    serde_json::from_str(&body).unwrap()
}

/// The capture's own figures on device 0: the highest allocator bytes in use and pool,
/// and the highest total of live PJRT buffers (creations before frees at one instant).
fn capture_figures(scenario: &str) -> (i64, i64, i64) {
    let recs = capture_records(&testdata(&format!("oom-corpus/{scenario}/capture.mwcap")));
    let (mut in_use, mut pool) = (0i64, 0i64);
    let mut changes: Vec<(u64, u8, i64)> = Vec::new();
    let mut live: HashMap<(u32, u64), u64> = HashMap::new();
    let mut events: Vec<memwatch_wire::Event> = Vec::new();
    for r in recs {
        match r {
            Record::PjrtMemoryStats(s) if s.device == 0 => {
                in_use = in_use.max(s.bytes_in_use);
                pool = pool.max(s.pool_bytes);
            }
            Record::Events(ev) => events.extend(ev),
            _ => {}
        }
    }
    events.sort_by_key(|e| e.ts_ns);
    // A buffer's free event need not carry its device: frees match creations by
    // (pid, buffer).
    for e in &events {
        match e.kind() {
            Some(EventKind::Alloc)
                if e.mem_kind() == Some(MemKind::PjrtBuffer) && e.device == 0 =>
            {
                live.insert((e.pid, e.ptr), e.size);
                changes.push((e.ts_ns, 0, e.size as i64));
            }
            Some(EventKind::Free) => {
                if let Some(size) = live.remove(&(e.pid, e.ptr)) {
                    changes.push((e.ts_ns, 1, -(size as i64)));
                }
            }
            _ => {}
        }
    }
    changes.sort_by_key(|c| (c.0, c.1));
    let (mut cur, mut top) = (0i64, 0i64);
    for c in changes {
        cur += c.2;
        top = top.max(cur);
    }
    (in_use, pool, top)
}

fn series_max(tl: &serde_json::Value, series: i64) -> i64 {
    tl["series"][series.to_string()]
        .as_array()
        .unwrap_or_else(|| panic!("no series {series} in {tl}"))
        .iter()
        .map(|p| p["max"].as_i64().unwrap())
        .max()
        .unwrap()
}

#[tokio::test]
async fn jax_runs_lead_with_the_allocator_and_live_arrays() {
    for url in dbs("framework").await.urls.clone() {
        let (app, store) = test_app(&url, None, 16 << 20).await;
        let leak = store_corpus(&store, "jax_leak_bfc", 1).await;
        let fits = store_corpus(&store, "jax_mlp_fits", 2).await;
        let temp = store_corpus(&store, "jax_exec_temp", 3).await;
        for (run, scenario) in [
            (leak, "jax_leak_bfc"),
            (fits, "jax_mlp_fits"),
            (temp, "jax_exec_temp"),
        ] {
            let (in_use, pool, live) = capture_figures(scenario);
            // Whole run at chart resolution and squeezed into 7 points: the maxima are
            // the capture's, exactly (no peak hidden by downsampling).
            for points in [1100, 7] {
                let v = api(
                    &app,
                    &format!("/api/runs/{run}/framework?device=0&points={points}"),
                )
                .await;
                assert_eq!(v["framework"], "pjrt", "{scenario}: {v}");
                let tl = &v["timeline"];
                assert_eq!(
                    series_max(tl, 0),
                    in_use,
                    "{scenario}: bytes in use, {points} points"
                );
                assert_eq!(series_max(tl, 1), pool, "{scenario}: pool, {points} points");
                assert_eq!(
                    series_max(tl, 3),
                    live,
                    "{scenario}: live buffers, {points} points"
                );
            }
            let (s, page) = get(&app, &format!("/runs/{run}")).await;
            assert_eq!(s, StatusCode::OK);
            let fw = page
                .find("Inside the pool: JAX / PJRT on GPU 0")
                .unwrap_or_else(|| panic!("{scenario}: no framework view"));
            let driver = page.find("The driver view").expect("driver view below");
            assert!(fw < driver, "{scenario}: the framework view leads");
            assert!(
                page.contains("class=\"reconcile\">At "),
                "{scenario}: reconciliation line"
            );
            assert!(page.contains("live arrays + "), "{scenario}");
            assert!(
                page.contains("/framework/stack.svg?device=0"),
                "{scenario}: stacked chart"
            );
        }
        // The leak keeps accumulating: named by its executable, 64 MiB per step as the
        // program printed (figures.json: output_bytes_per_step, executable).
        let figures: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(testdata("oom-corpus/jax_leak_bfc/figures.json")).unwrap(),
        )
        .unwrap();
        let v = api(
            &app,
            &format!("/api/runs/{leak}/framework?device=0&points=8"),
        )
        .await;
        let g = &v["growing"];
        assert_eq!(
            g["executable"], figures["executable"],
            "{} / {}",
            v["growing"], v["growth"]
        );
        let per_step = figures["output_bytes_per_step"].as_i64().unwrap();
        let per_exec = g["per_execution"].as_i64().unwrap();
        assert!(
            (per_exec - per_step).abs() <= per_step / 10,
            "growth per execution {per_exec} vs {per_step} per step"
        );
        let top = &v["growth"][0];
        assert_eq!(top["name"], figures["executable"]);
        assert_eq!(top["growing"], true);
        // What was live at an instant, inside the pool: by producing executable; the total
        // is the live-buffers series there (flat around 5 s of this run).
        let v = api(
            &app,
            &format!("/api/runs/{leak}/framework?device=0&points=1100"),
        )
        .await;
        let at = 5_000_000_000u64;
        let p = v["timeline"]["series"]["3"]
            .as_array()
            .unwrap()
            .iter()
            .rev()
            .find(|p| p["t_ns"].as_u64().unwrap() <= at)
            .unwrap()
            .clone();
        assert_eq!(p["min"], p["max"], "flat around {at}: {p}");
        let (s, page) = get(&app, &format!("/runs/{leak}/peak?device=0&at={at}")).await;
        assert_eq!(s, StatusCode::OK);
        let want = format!(
            "framework buffers live then ({})",
            memwatch_analysis::size::format_bytes(p["max"].as_u64().unwrap())
        );
        assert!(page.contains(&want), "expected {want}");
        assert!(page.contains("<td><code>jit_update</code></td>"));
        // No dump attached: by executable only, saying what a dump would add.
        assert!(page.contains("attach its XLA dump to see op_name"));
        assert!(!page.contains("class=\"fw-value\""));
        // The run that fits and the execute-time OOM do not grow.
        for run in [fits, temp] {
            let v = api(
                &app,
                &format!("/api/runs/{run}/framework?device=0&points=8"),
            )
            .await;
            assert!(
                v["growing"].is_null(),
                "run {run} is not growing: {}",
                v["growing"]
            );
        }
        // The overview shows the badge on the leak only.
        let (_, overview) = get(&app, "/").await;
        assert_eq!(
            overview.matches("class=\"badge grow\"").count(),
            1,
            "one growing run"
        );
        assert!(overview.contains(&format!(
            "href=\"/runs/{leak}\" title=\"live framework memory keeps accumulating"
        )));
        // Each chart alone, for zooming; an unknown one is refused by name.
        for part in ["memory", "stack", "lanes"] {
            let (s, svg) = get(
                &app,
                &format!("/runs/{leak}/framework/{part}.svg?device=0&from=0&to=1000000000"),
            )
            .await;
            assert_eq!(s, StatusCode::OK, "{part}: {svg}");
            assert!(svg.starts_with("<svg"), "{part}");
        }
        let (s, body) = get(&app, &format!("/runs/{leak}/framework/pie.svg?device=0")).await;
        assert_eq!(s, StatusCode::NOT_FOUND);
        assert!(body.contains("pie.svg"));
    }
}

#[tokio::test]
async fn pytorch_snapshot_runs_show_allocated_against_reserved() {
    for url in dbs("framework_torch").await.urls.clone() {
        let (app, store) = test_app(&url, None, 16 << 20).await;
        let path = testdata("torch-snapshots/leak.pickle");
        let run = store_snapshot_file(&store, &path, "snapshot:leak", 1).await;
        let want: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(testdata("torch-snapshots/leak.json")).unwrap(),
        )
        .unwrap();
        let v = api(
            &app,
            &format!("/api/runs/{run}/framework?device=0&points=50"),
        )
        .await;
        assert_eq!(v["framework"], "pytorch", "{v}");
        let alloc = v["timeline"]["series"]["4"]
            .as_array()
            .expect("allocated series");
        assert_eq!(
            alloc.last().unwrap()["last"],
            want["at_dump"]["memory_allocated"],
            "allocated at the end = memory_allocated()"
        );
        let top = alloc
            .iter()
            .map(|p| p["max"].as_i64().unwrap())
            .max()
            .unwrap();
        assert_eq!(
            serde_json::json!(top),
            want["at_dump"]["max_memory_allocated"]
        );
        // The kept loss graphs ramp the allocated blocks up to the failure: growth by the
        // one rule (`memwatch_analysis::growth::ramp`, per second: a snapshot has no
        // steps); the training step and the fragmentation below fill once and hold.
        assert_eq!(v["growing"]["executable"], "allocated blocks", "{v}");
        assert!(
            v["growing"]["growth_bytes"].as_i64().unwrap() > 1 << 30,
            "{v}"
        );
        let mut others = Vec::new();
        for (stream, name) in [(2, "train_snapshot"), (3, "fragmentation")] {
            let other = store_snapshot_file(
                &store,
                &testdata(&format!("torch-snapshots/{name}.pickle")),
                &format!("snapshot:{name}"),
                stream,
            )
            .await;
            let v = api(
                &app,
                &format!("/api/runs/{other}/framework?device=0&points=8"),
            )
            .await;
            assert!(
                v["growing"].is_null(),
                "{name} is not growing: {}",
                v["growing"]
            );
            others.push((other, name));
        }
        // Two stored snapshots compared: both allocated series on one chart, and their
        // peaks side by side as PyTorch reported them (max_memory_allocated()).
        let (train, name) = others[0];
        let (s, page) = get(&app, &format!("/compare?a={run}&b={train}")).await;
        assert_eq!(s, StatusCode::OK);
        assert!(page.contains("Inside the pool"), "framework comparison");
        let fig = |n: &str| {
            let v: serde_json::Value = serde_json::from_str(
                &std::fs::read_to_string(testdata(&format!("torch-snapshots/{n}.json"))).unwrap(),
            )
            .unwrap();
            v["at_dump"]["max_memory_allocated"].as_u64().unwrap()
        };
        let (pa, pb) = (fig("leak"), fig(name));
        let row = format!(
            "<td>peak allocated</td><td class=\"num\">{}</td><td class=\"num\">{}</td>",
            memwatch_analysis::size::format_bytes(pa),
            memwatch_analysis::size::format_bytes(pb)
        );
        assert!(page.contains(&row), "expected {row}");
        let (_, page) = get(&app, &format!("/runs/{run}")).await;
        assert!(page.contains("Inside the pool: PyTorch on GPU 0"));
        assert!(
            page.contains("allocated + "),
            "reconciliation of reserved and allocated"
        );
    }
}

#[tokio::test]
async fn pytorch_snapshot_runs_stack_allocated_bytes_by_site() {
    use memwatch_analysis::torch::{report, scan_path, ReportOptions};
    for url in dbs("framework_torch_sites").await.urls.clone() {
        let (app, store) = test_app(&url, None, 16 << 20).await;
        for (stream, name) in [(1, "leak"), (2, "train_snapshot"), (3, "fragmentation")] {
            let path = testdata(&format!("torch-snapshots/{name}.pickle"));
            let run = store_snapshot_file(&store, &path, &format!("snapshot:{name}"), stream).await;
            let v = api(
                &app,
                &format!("/api/runs/{run}/framework?device=0&points=50"),
            )
            .await;
            let series = v["timeline"]["series"].as_object().expect("series");
            let producers = v["timeline"]["producers"].as_array().expect("producers");
            let last = |k: &str| series[k].as_array().unwrap().last().unwrap()["last"].as_i64();
            // Allocated bytes per site at the end, from the per-site series.
            let mut ours = std::collections::BTreeMap::new();
            for (k, _) in series {
                let s: i64 = k.parse().unwrap();
                if (1_000..1_000_000).contains(&s) {
                    let bytes = last(k).unwrap();
                    if bytes > 0 {
                        let site = producers[(s - 1_000) as usize].as_str().unwrap();
                        ours.insert(site.to_string(), bytes as u64);
                    }
                }
            }
            assert_eq!(
                ours.values().sum::<u64>() as i64,
                last("4").unwrap(),
                "{name}: sites sum to allocated"
            );
            // The same as the snapshot's own report at the end of its trace.
            let scan = scan_path(&path).unwrap();
            let opts = ReportOptions {
                sites: 10_000,
                ..ReportOptions::default()
            };
            let r = report(&scan, &opts).unwrap();
            let want: std::collections::BTreeMap<String, u64> = r.devices[0]
                .at_end
                .by_site
                .iter()
                .map(|s| (s.site.clone(), s.bytes))
                .collect();
            assert_eq!(ours, want, "{name}: allocated by site at the end");
            // The run page: the chart stacked by site and the table at the peak.
            let (_, page) = get(&app, &format!("/runs/{run}")).await;
            assert!(page.contains("stacked by allocation site"), "{name}");
            assert!(page.contains("Allocated by Python line at"), "{name}");
            assert!(!page.contains("Live outputs per executable"), "{name}");
        }
    }
}

/// A live run: the background builder keeps its framework view current as records
/// arrive, so the "growing" badge shows while the job still runs. The real leak capture
/// arrives in two parts; after the second, the builder rebuilds the run by itself.
#[tokio::test]
async fn the_builder_follows_a_live_run() {
    use memwatch_daemon::{spawn_framework_builder, stale_framework_runs};
    for url in dbs("framework_live").await.urls.clone() {
        let (app, store) = test_app(&url, None, 16 << 20).await;
        let recs = capture_records(&testdata("oom-corpus/jax_leak_bfc/capture.mwcap"));
        // Up to the last execute's records: the leak is stored, the OOM and exit are not.
        let half = recs.len() * 9 / 10;
        let (run, seq) = send_part(&store, &recs[..half], 0).await;
        let run = run.expect("run");
        let mut progress =
            spawn_framework_builder(store.clone(), std::time::Duration::from_millis(50));
        progress.wait_for(|p| p.builds >= 1).await.unwrap();
        assert!(stale_framework_runs(&store).await.unwrap().is_empty());
        let before = api(&app, &format!("/api/runs/{run}/framework?device=0")).await;
        let live_before = series_max(&before["timeline"], 3);
        // The rest of the capture, as an agent would send it.
        send_part(&store, &recs[half..], seq).await;
        assert_eq!(stale_framework_runs(&store).await.unwrap(), vec![run]);
        let t = std::time::Instant::now();
        while !stale_framework_runs(&store).await.unwrap().is_empty() {
            assert!(t.elapsed().as_secs() < 60, "the builder did not catch up");
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        let after = api(&app, &format!("/api/runs/{run}/framework?device=0")).await;
        let (_, _, live) = capture_figures("jax_leak_bfc");
        assert_eq!(
            series_max(&after["timeline"], 3),
            live,
            "rebuilt with every record"
        );
        assert!(live_before <= live);
        assert_eq!(after["growing"]["executable"], "jit_update");
    }
}

/// Sends `part` as the agent's stream 7 of run "live-leak", batches numbered after
/// `seq`; returns the run id and the last batch number.
async fn send_part(
    store: &memwatch_daemon::Store,
    part: &[Record],
    mut seq: u64,
) -> (Option<i64>, u64) {
    let mut ing = memwatch_daemon::Ingestor::new(store.clone());
    let mut id = None;
    for group in part.chunks(16) {
        seq += 1;
        let out = ing
            .commit(vec![memwatch_daemon::Batch {
                node: "h100".into(),
                stream: 7,
                seq,
                run_key: "live-leak".into(),
                records: group.to_vec(),
            }])
            .await
            .unwrap();
        id = id.or(out[0].run_id);
    }
    (id, seq)
}

/// "What was live at" inside the pool, with the run's XLA dump attached: live outputs of
/// an executable are grouped by the framework op of the HLO value each output is. The
/// expectation is swept from the capture itself (buffers created by then and not yet
/// freed; a call's outputs numbered in the order the shim wrote them) and the dump's
/// ROOT elements, whose sizes every output must have.
#[tokio::test]
async fn live_at_groups_outputs_by_executable_and_op_name() {
    for url in dbs("framework_live_ops").await.urls.clone() {
        let (app, store) = test_app(&url, None, 16 << 20).await;
        let mut executables_checked = std::collections::BTreeSet::new();
        for (stream, scenario) in [
            (11u64, "jax_leak_bfc"),
            (12, "jax_co_resident"),
            (13, "jax_exec_temp"),
        ] {
            let run = store_corpus(&store, scenario, stream).await;
            let mods = memwatch_analysis::xla::load_dump_dir(&testdata(&format!(
                "oom-corpus/{scenario}/dump"
            )))
            .unwrap();
            store.attach_xla_modules(run, "dump", &mods).await.unwrap();
            let t0 = store.run_t0(run).await.unwrap().unwrap();
            // Without the dump's module the page still groups by executable and says
            // what a dump would add.
            let recs = capture_records(&testdata(&format!("oom-corpus/{scenario}/capture.mwcap")));
            let mut names: HashMap<(u32, u64), String> = HashMap::new();
            let mut events: Vec<memwatch_wire::Event> = Vec::new();
            for r in recs {
                match r {
                    Record::PjrtExecutable(x) => {
                        names.insert((x.pid, x.handle), x.name.clone());
                    }
                    Record::Events(ev) => events.extend(ev),
                    _ => {}
                }
            }
            let with_outputs = |name: &str| {
                mods.iter()
                    .find(|m| m.name == name && !m.outputs.is_empty())
            };
            // Outputs numbered per call (pid, executable, device, stamp) in file order.
            let mut next: HashMap<(u32, u64, i32, u64), u32> = HashMap::new();
            let mut outputs: Vec<(memwatch_wire::Event, u32)> = Vec::new();
            for e in &events {
                if e.api() == memwatch_wire::Api::PjrtExecuteOutput {
                    let n = next.entry((e.pid, e.aux, e.device, e.ts_ns)).or_default();
                    outputs.push((*e, *n));
                    *n += 1;
                }
            }
            // Every output of an executable whose module is in the dump has the size of
            // the dump's output of its index.
            let mut sized = 0;
            for (e, i) in &outputs {
                if let Some(m) = names.get(&(e.pid, e.aux)).and_then(|n| with_outputs(n)) {
                    assert_eq!(
                        Some(e.size),
                        m.outputs[*i as usize].bytes,
                        "{scenario}: {} output {i}",
                        m.name
                    );
                    sized += 1;
                }
            }
            assert!(sized > 0, "{scenario}: no output of a dumped module");
            // The instant: the last call of a dumped executable, when its outputs were made.
            let (last, _) = outputs
                .iter()
                .rev()
                .find(|(e, _)| {
                    names
                        .get(&(e.pid, e.aux))
                        .and_then(|n| with_outputs(n))
                        .is_some()
                })
                .unwrap();
            let (at_abs, device) = (last.ts_ns, last.device);
            let mut live: HashMap<(u32, u64), (u64, u64, Option<u32>)> = HashMap::new();
            let index: HashMap<(u32, u64, u64), u32> = outputs
                .iter()
                .map(|(e, i)| ((e.pid, e.ptr, e.ts_ns), *i))
                .collect();
            let mut sorted = events.clone();
            sorted.sort_by_key(|e| e.ts_ns);
            for e in sorted.iter().filter(|e| e.ts_ns <= at_abs) {
                match e.kind() {
                    Some(EventKind::Alloc)
                        if e.mem_kind() == Some(MemKind::PjrtBuffer) && e.device == device =>
                    {
                        let i = (e.api() == memwatch_wire::Api::PjrtExecuteOutput)
                            .then(|| index[&(e.pid, e.ptr, e.ts_ns)]);
                        live.insert((e.pid, e.ptr), (e.aux, e.size, i));
                    }
                    Some(EventKind::Free) => {
                        live.remove(&(e.pid, e.ptr));
                    }
                    _ => {}
                }
            }
            // executable -> op_name -> (bytes, count)
            let mut want: HashMap<String, HashMap<String, (u64, u64)>> = HashMap::new();
            for ((pid, _), (producer, size, i)) in &live {
                let (Some(i), Some(name)) = (i, names.get(&(*pid, *producer))) else {
                    continue;
                };
                let Some(m) = with_outputs(name) else {
                    continue;
                };
                let o = &m.outputs[*i as usize];
                let op = match (o.parameter, &o.op_name) {
                    (Some(p), Some(n)) => format!("argument {p} ({n}) passed through"),
                    (Some(p), None) => format!("argument {p} passed through"),
                    (None, Some(n)) => n.clone(),
                    (None, None) => format!("{} (no op_name)", o.instruction),
                };
                let g = want.entry(name.clone()).or_default().entry(op).or_default();
                g.0 += size;
                g.1 += 1;
            }
            assert!(!want.is_empty(), "{scenario}");
            let at = at_abs - t0;
            let v = api(
                &app,
                &format!("/runs/{run}/peak?device={device}&at={at}&format=json"),
            )
            .await;
            let groups = v["framework_live"].as_array().unwrap();
            for (exe, ops) in &want {
                let g = groups
                    .iter()
                    .find(|g| g["executable"] == exe.as_str())
                    .unwrap_or_else(|| panic!("{scenario}: {exe} not in {v}"));
                assert_eq!(g["module"], exe.as_str());
                let got: HashMap<String, (u64, u64)> = g["values"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|x| {
                        (
                            x["op_name"].as_str().unwrap().to_string(),
                            (x["bytes"].as_u64().unwrap(), x["count"].as_u64().unwrap()),
                        )
                    })
                    .collect();
                assert_eq!(&got, ops, "{scenario}: {exe}");
                for x in g["values"].as_array().unwrap() {
                    assert!(
                        x["instructions"]
                            .as_array()
                            .unwrap()
                            .iter()
                            .all(|i| i.as_str().unwrap().contains("[output ")),
                        "{x}"
                    );
                }
                executables_checked.insert(exe.clone());
            }
            // The page shows the same, executable then op_name.
            let (s, page) = get(&app, &format!("/runs/{run}/peak?device={device}&at={at}")).await;
            assert_eq!(s, StatusCode::OK);
            for (exe, ops) in &want {
                assert!(
                    page.contains(&format!("<td><code>{exe}</code></td>")),
                    "{scenario}"
                );
                for op in ops.keys() {
                    let shown = op
                        .replace('&', "&amp;")
                        .replace('"', "&quot;")
                        .replace('\'', "&#x27;");
                    assert!(
                        page.contains(&format!("<td class=\"indent\"><code>{shown}</code></td>")),
                        "{scenario}: {op}"
                    );
                }
            }
        }
        assert!(executables_checked.len() >= 2, "{executables_checked:?}");
        eprintln!("checked live outputs of {executables_checked:?}");
    }
}
