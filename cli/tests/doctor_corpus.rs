//! `memwatch diagnose` over the recorded OOM corpus (testdata/oom-corpus: real H100 runs
//! of JAX, PyTorch and CuPy): every scenario's verdict — kind, when, executable, HLO
//! instruction and op_name, and its key figures — must match the `expect` block of its
//! scenario.json, whose figures come from the framework's own numbers (figures.json).
//! The test reads only the files a user would have (capture, stderr, nvidia-smi samples,
//! the PyTorch snapshot the program wrote, the XLA dump, the run's environment) and the expectations; it knows no scenario by
//! name.

mod common;

use common::{diagnose_scenario as diagnose, mw, repo};
use serde_json::Value;
use std::path::Path;

/// Checks one scenario; returns what did not match.
fn check(dir: &Path) -> Vec<String> {
    let scenario: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("scenario.json")).unwrap()).unwrap();
    let want = &scenario["expect"];
    if !want.is_object() {
        return vec!["no expect block: write one from figures.json and stderr.log".into()];
    }
    let d = diagnose(dir, &scenario);
    let mut bad = Vec::new();
    let verdicts = d["verdicts"].as_array().cloned().unwrap_or_default();
    let failure = want["failure"].as_bool().unwrap_or(true);
    assert_eq!(d["schema"], 1);
    if d["failed"] != Value::Bool(failure) {
        bad.push(format!("failed {} (expected {failure})", d["failed"]));
    }
    let Some(kind) = want["kind"].as_str() else {
        // A healthy run: no verdict of a failure, nothing at all.
        if !verdicts.is_empty() {
            bad.push(format!("verdicts for a healthy run: {verdicts:?}"));
        }
        return bad;
    };
    let Some(v) = verdicts.iter().find(|v| v["kind"] == kind) else {
        bad.push(format!(
            "no {kind} verdict: {:?}",
            verdicts.iter().map(|v| &v["kind"]).collect::<Vec<_>>()
        ));
        return bad;
    };
    if failure && verdicts[0]["kind"] != kind {
        bad.push(format!(
            "first verdict {} (expected {kind})",
            verdicts[0]["kind"]
        ));
    }
    if v["failure"] != Value::Bool(failure) {
        bad.push(format!("{kind}: failure {}", v["failure"]));
    }
    let eq = |got: &Value, field: &str, bad: &mut Vec<String>| {
        if let Some(w) = want.get(field).filter(|w| !w.is_null()) {
            if got != w {
                bad.push(format!("{field} {got} (expected {w})"));
            }
        }
    };
    eq(&v["when"], "when", &mut bad);
    eq(&v["who"]["executable"], "executable", &mut bad);
    eq(&v["who"]["hlo_instruction"], "hlo", &mut bad);
    eq(&v["who"]["op_name"], "op_name", &mut bad);
    eq(
        &v["who"]["resident_executable"],
        "resident_executable",
        &mut bad,
    );
    eq(&v["what"]["allocator"], "allocator", &mut bad);
    for (name, w) in want["figures"].as_object().into_iter().flatten() {
        let tol = want["tolerance_bytes"][name].as_u64().unwrap_or(0);
        match (v["figures"][name].as_u64(), w.as_u64()) {
            (Some(g), Some(w)) if g.abs_diff(w) <= tol => {}
            (g, w) => bad.push(format!("figure {name} {g:?} (expected {w:?} ± {tol})")),
        }
    }
    // Who held the memory the verdict blames: the framework, another process, or the
    // process a figures file of the run names (a launcher's failing worker).
    let holder = &want["holder"];
    if let Some(fw) = holder["framework"].as_str() {
        if v["holder"]["framework"] != fw {
            bad.push(format!(
                "holder framework {} (expected {fw})",
                v["holder"]["framework"]
            ));
        }
    }
    if holder["other_process"] == Value::Bool(true) && v["holder"]["other_process"] != true {
        bad.push(format!("holder is not another process: {}", v["holder"]));
    }
    if let Some(f) = holder["pid_from"].as_str() {
        let figs: Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join(f)).unwrap()).unwrap();
        if v["holder"]["pid"] != figs["pid"] {
            bad.push(format!(
                "holder pid {} (expected {} from {f})",
                v["holder"]["pid"], figs["pid"]
            ));
        }
    }
    for also in want["also"].as_array().into_iter().flatten() {
        if !v["also"].as_array().is_some_and(|a| a.contains(also)) {
            bad.push(format!("also lacks {also}: {}", v["also"]));
        }
    }
    if let Some(advice) = want["advice"].as_str() {
        if !v["fix"]["advice"]
            .as_str()
            .is_some_and(|a| a.contains(advice))
        {
            bad.push(format!("advice lacks {advice}: {}", v["fix"]["advice"]));
        }
    }
    // Rows the device ledger must have (a kind, and its bytes where given).
    for row in want["ledger_has"].as_array().into_iter().flatten() {
        let found = d["ledger"]["holders"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|h| {
                h["kind"] == row["kind"] && (row["bytes"].is_null() || h["bytes"] == row["bytes"])
            });
        if !found {
            bad.push(format!(
                "the ledger has no row {row}: {}",
                d["ledger"]["holders"]
            ));
        }
    }
    // Figures add up: what is in use never exceeds the pool that holds it, in a verdict or
    // in a ledger row (the outputs of a failed execution hold no memory).
    if let (Some(u), Some(p)) = (
        v["figures"]["in_use_bytes"].as_u64(),
        v["figures"]["pool_bytes"].as_u64(),
    ) {
        if u > p {
            bad.push(format!("in_use_bytes {u} above pool_bytes {p}"));
        }
    }
    for h in d["ledger"]["holders"].as_array().into_iter().flatten() {
        if let (Some(u), Some(b)) = (h["in_use_bytes"].as_u64(), h["bytes"].as_u64()) {
            let free = h["free_inside_bytes"].as_u64();
            if u > b || free.is_some_and(|f| f + u != b) {
                bad.push(format!("ledger row does not add up: {h}"));
            }
        }
    }
    // The device ledger closes on every recorded run: every byte of the device by holder
    // adds up to its total within the stated tolerance, nothing unattributed.
    let l = &d["ledger"];
    if l["closes"] != Value::Bool(true) {
        bad.push(format!("the ledger does not close: {l}"));
    } else {
        let sum: u64 = l["holders"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|h| h["bytes"].as_u64().unwrap_or(0))
            .sum();
        let total = l["total_bytes"].as_u64().unwrap_or(0);
        if sum.abs_diff(total) > l["tolerance_bytes"].as_u64().unwrap_or(0)
            || sum != l["accounted_bytes"]
        {
            bad.push(format!("ledger holders sum to {sum} of {total}: {l}"));
        }
    }
    // Every failure verdict says something in each part and cites evidence with a file.
    if failure {
        for part in ["headline", "why"] {
            if v[part].as_str().is_none_or(str::is_empty) {
                bad.push(format!("empty {part}"));
            }
        }
        if v["fix"]["advice"].as_str().is_none_or(str::is_empty) {
            bad.push("no fix".into());
        }
        let cites = v["evidence"].as_array().cloned().unwrap_or_default();
        if cites.is_empty()
            || cites
                .iter()
                .any(|c| c["file"].as_str().is_none_or(str::is_empty))
        {
            bad.push(format!("evidence without a file: {cites:?}"));
        }
        if let Some(c) = v["fix"]["check"].as_object() {
            if c["passed"] != Value::Bool(true) {
                bad.push(format!("the fix's own check failed: {c:?}"));
            }
        }
    }
    bad
}

#[test]
fn every_corpus_scenario_gets_the_expected_verdict() {
    let root = repo("testdata/oom-corpus");
    let mut dirs: Vec<_> = std::fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("scenario.json").is_file())
        .collect();
    dirs.sort();
    assert!(dirs.len() >= 12, "{} scenarios", dirs.len());
    let failures: Vec<String> = dirs
        .iter()
        .flat_map(|d| {
            check(d)
                .into_iter()
                .map(move |b| format!("{}: {b}", d.file_name().unwrap().to_string_lossy()))
        })
        .collect();
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
}

/// A run on two devices where one runs out while the other has room: the verdict names
/// the device, and the diagnosis lists each device's peak. (No multi-GPU recording is in
/// the corpus yet: this capture is written here, with the wire format's own writer.)
#[test]
fn the_failing_device_is_named_among_several() {
    use memwatch_wire::*;
    const GIB: u64 = 1 << 30;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("two-gpus.mwcap");
    let ev = |t: u64, dev: i32, kind: EventKind, ptr: u64, size: u64, result: i32| Event {
        ts_ns: 10_000 + t,
        ptr,
        size,
        pid: 77,
        tid: 1,
        device: dev,
        result,
        kind: kind as u8,
        mem_kind: MemKind::Device as u8,
        api: Api::CuMemAlloc as u16,
        ..Event::default()
    };
    let mut w = FrameWriter::new(Vec::new()).unwrap();
    w.write_record(&Record::ProcessStart(ProcessStart {
        pid: 77,
        ppid: 1,
        mono_anchor_ns: 10_000,
        argv: vec!["python3".into(), "shard.py".into()],
        ..ProcessStart::default()
    }))
    .unwrap();
    for d in [0, 1] {
        w.write_record(&Record::DeviceInfo(DeviceInfo {
            pid: 77,
            device: d,
            vendor: 2,
            total_bytes: 80 * GIB,
            name: "GPU".into(),
            identity: None,
        }))
        .unwrap();
    }
    w.write_record(&Record::Events(vec![
        ev(1, 0, EventKind::Alloc, 0x1000, 10 * GIB, 0),
        ev(2, 1, EventKind::Alloc, 0x2000, 40 * GIB, 0),
        ev(3, 1, EventKind::Alloc, 0x3000, 35 * GIB, 0),
        ev(4, 1, EventKind::AllocFailed, 0, 20 * GIB, 2),
    ]))
    .unwrap();
    w.write_record(&Record::ProcessEnd(ProcessEnd {
        pid: 77,
        ts_ns: 20_000,
        exit_code: 1,
    }))
    .unwrap();
    std::fs::write(&path, w.into_inner().unwrap()).unwrap();
    let (code, out, err) = mw(&["diagnose", path.to_str().unwrap(), "--json"]);
    assert_eq!(code, 0, "{err}");
    let d: Value = serde_json::from_str(&out).unwrap();
    let v = &d["verdicts"][0];
    assert_eq!(v["what"]["device"], 1, "{v}");
    assert_eq!(v["kind"], "pool_too_small", "{v}");
    assert_eq!(v["figures"]["in_use_bytes"], 75 * GIB);
    assert_eq!(v["figures"]["pool_bytes"], 80 * GIB);
    let peaks: Vec<(i64, u64)> = d["devices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["device"].as_i64().unwrap(),
                p["peak_bytes"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(peaks, vec![(0, 10 * GIB), (1, 75 * GIB)]);
    let (_, text, _) = mw(&["diagnose", path.to_str().unwrap()]);
    assert!(text.contains("per device (driver-level peaks):"), "{text}");
}

/// The text shows the ledger under the verdicts: a row per holder with its share, and the
/// closing line; without device samples (the capture alone), it says it does not close
/// and what is missing, and shows no free memory rather than 0 B.
#[test]
fn the_text_shows_the_ledger_and_whether_it_closes() {
    let dir = repo("testdata/oom-corpus/h200_jax_torch_same");
    let cap = dir.join("capture.mwcap").display().to_string();
    let log = dir.join("stderr.log").display().to_string();
    let csv = dir.join("nvsmi.csv").display().to_string();
    let (code, out, err) = mw(&["diagnose", &cap, &log, &csv]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("[1] other_framework_pool — failure"), "{out}");
    let table: Vec<&str> = out
        .lines()
        .skip_while(|l| !l.starts_with("device 0 ledger (at the failure"))
        .take_while(|l| !l.is_empty())
        .collect();
    assert!(
        table
            .iter()
            .any(|l| l.contains("XLA BFC pool") && l.contains("75.0%")),
        "{out}"
    );
    assert!(
        table.iter().any(|l| l.trim_start().starts_with("free ")),
        "{out}"
    );
    assert!(table.last().unwrap().contains("sums to"), "{out}");
    let (code, out, err) = mw(&["diagnose", &cap]);
    assert_eq!(code, 0, "{err}");
    let close = out
        .lines()
        .find(|l| l.contains("does not close") || l.contains("sums to"))
        .unwrap();
    assert!(
        close.contains("does not close") && close.contains("missing: device samples"),
        "{out}"
    );
    assert!(
        !out.lines().any(|l| l.trim_start().starts_with("free ")),
        "{out}"
    );
}
