//! End-to-end checks of `memwatch runtime`: a capture holding PJRT records (written with
//! memwatch-wire, the shape the shim writes) joined to the real H200 dump; bad input
//! exits 2 naming the file.

use memwatch_wire::frame::encode_preamble;
use memwatch_wire::*;
use std::path::Path;

mod common;

use common::mw;

/// A process that ran `jit_mlp` (compiled statistics, one buffer, one execute) with one
/// allocator sample.
fn records() -> Vec<Record> {
    vec![
        Record::ProcessStart(ProcessStart {
            pid: 9,
            mono_anchor_ns: 1_000,
            ..ProcessStart::default()
        }),
        Record::PjrtExecutable(PjrtExecutable {
            pid: 9,
            handle: 0xb,
            flags: PjrtExecutable::FLAG_STATS,
            stats: CompiledMemoryStats {
                argument: 71_303_168,
                output: 67_108_938,
                temp: 239_103_760,
                ..CompiledMemoryStats::default()
            },
            devices: vec![0],
            name: "jit_mlp".into(),
            ..PjrtExecutable::default()
        }),
        Record::Events(vec![
            Event {
                ts_ns: 2_000,
                duration_ns: 100,
                pid: 9,
                ptr: 0x100,
                size: 71_303_168,
                ..Event::new(
                    EventKind::Alloc,
                    MemKind::PjrtBuffer,
                    Api::PjrtBufferFromHostBuffer,
                )
            },
            Event {
                ts_ns: 3_000,
                duration_ns: 500,
                pid: 9,
                ptr: 0xb,
                ..Event::new(EventKind::ApiSpan, MemKind::None, Api::PjrtExecute)
            },
        ]),
        Record::PjrtMemoryStats(PjrtMemoryStats {
            pid: 9,
            ts_ns: 4_000,
            flags: 0xff,
            bytes_in_use: 138_412_106,
            peak_bytes_in_use: 377_515_866,
            pool_bytes: 1 << 32,
            bytes_limit: 1 << 34,
            ..PjrtMemoryStats::default()
        }),
    ]
}

fn write_capture(path: &Path, recs: &[Record]) {
    let mut b = encode_preamble().to_vec();
    for r in recs {
        encode_record(r, &mut b).unwrap();
    }
    std::fs::write(path, b).unwrap();
}

fn capture(path: &Path) {
    write_capture(path, &records());
}

#[test]
fn runtime_json_names_the_executable_and_joins_the_dump() {
    let dir = tempfile::tempdir().unwrap();
    let cap = dir.path().join("run.mwcap");
    capture(&cap);
    let dump =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/h200/xla/h200-jax0.11.2-mlp");
    let (code, out, err) = mw(&[
        "runtime",
        cap.to_str().unwrap(),
        "--xla-dump",
        dump.to_str().unwrap(),
        "--top",
        "3",
        "--json",
    ]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let pk = &v["processes"][0]["devices"][0]["peak"];
    assert_eq!(pk["executable"], "jit_mlp");
    assert_eq!(pk["peak_bytes_in_use"], 377_515_866u64);
    assert_eq!(pk["live_buffer_bytes"], 71_303_168u64);
    assert_eq!(pk["running_temp_bytes"], 239_103_760u64);
    assert_eq!(pk["xla"]["module"], "jit_mlp");
    assert_eq!(pk["xla"]["matched_by"], "name+stats");
    assert_eq!(pk["xla"]["peak_buffers"].as_array().unwrap().len(), 3);
    let (code, out, _) = mw(&["runtime", cap.to_str().unwrap()]);
    assert_eq!(code, 0);
    assert!(out.contains("running: jit_mlp"), "{out}");
    assert!(out.contains("runtime peak 360.03 MiB"), "{out}");
}

#[test]
fn runtime_bad_input_exits_2_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("junk.mwcap");
    std::fs::write(&bad, b"\x00\x01garbage garbage garbage").unwrap();
    let (code, _, err) = mw(&["runtime", bad.to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(
        err.contains("junk.mwcap") && err.lines().count() == 1,
        "{err}"
    );
    let (code, _, err) = mw(&["runtime", "/nonexistent/x.mwcap"]);
    assert_eq!(code, 2);
    assert!(err.contains("x.mwcap"), "{err}");
}

#[test]
fn report_carries_the_runtime_section_only_when_there_are_pjrt_records() {
    let dir = tempfile::tempdir().unwrap();
    let cap = dir.path().join("run.mwcap");
    capture(&cap);
    let (code, out, err) = mw(&["report", cap.to_str().unwrap(), "--json"]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        v["runtime"]["processes"][0]["devices"][0]["peak"]["executable"],
        "jit_mlp"
    );
    assert!(v["processes"].is_array());
    let (code, out, _) = mw(&["report", cap.to_str().unwrap()]);
    assert_eq!(code, 0);
    assert!(out.contains("PJRT runtime"), "{out}");

    let plain = dir.path().join("plain.mwcap");
    let mut b = encode_preamble().to_vec();
    encode_record(
        &Record::ProcessStart(ProcessStart {
            pid: 3,
            ..ProcessStart::default()
        }),
        &mut b,
    )
    .unwrap();
    std::fs::write(&plain, b).unwrap();
    let (code, out, err) = mw(&["report", plain.to_str().unwrap(), "--json"]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(v.get("runtime").is_none());
}

/// `memwatch import --db --xla-dump`: the daemon's stored attribution equals what
/// `memwatch runtime` computes on the capture file (same analysis, records read back
/// from the database), joined to the same dump module.
#[test]
fn import_with_xla_dump_stores_the_same_attribution_as_runtime() {
    let dir = tempfile::tempdir().unwrap();
    let cap = dir.path().join("run.mwcap");
    capture(&cap);
    let dump =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/h200/xla/h200-jax0.11.2-mlp");
    let db = dir.path().join("mw.db");
    let (code, out, err) = mw(&[
        "import",
        cap.to_str().unwrap(),
        "--db",
        db.to_str().unwrap(),
        "--xla-dump",
        dump.to_str().unwrap(),
        "--json",
    ]);
    assert_eq!(code, 0, "{err}");
    let s: serde_json::Value = serde_json::from_str(&out).unwrap();
    let run = s["run_id"].as_i64().unwrap();
    assert!(s["xla_modules"].as_u64().unwrap() >= 1, "{s}");
    let (_, out, _) = mw(&[
        "runtime",
        cap.to_str().unwrap(),
        "--xla-dump",
        dump.to_str().unwrap(),
        "--json",
    ]);
    let file: serde_json::Value = serde_json::from_str(&out).unwrap();
    let want = &file["processes"][0]["devices"][0]["peak"];
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let got = rt.block_on(async {
        let store = memwatch_daemon::Store::open(db.to_str().unwrap())
            .await
            .unwrap();
        memwatch_daemon::peak_runtime(&store, run, 0, 20)
            .await
            .unwrap()
            .unwrap()
    });
    assert_eq!(got.basis, "allocator statistics");
    assert_eq!(
        Some(got.executable.as_deref().unwrap()),
        want["executable"].as_str()
    );
    assert_eq!(
        got.peak_bytes_in_use,
        want["peak_bytes_in_use"].as_u64().unwrap()
    );
    assert_eq!(
        got.live_buffer_bytes,
        want["live_buffer_bytes"].as_u64().unwrap()
    );
    assert_eq!(
        got.running_temp_bytes,
        want["running_temp_bytes"].as_u64().unwrap()
    );
    assert_eq!(got.xla_module.as_deref(), want["xla"]["module"].as_str());
    assert_eq!(got.matched_by.as_deref(), Some("name+stats"));
    assert!(!got.by_hlo_op.is_empty());
    assert_eq!(got.by_xla_module[0].module, "jit_mlp");
}

#[test]
fn import_with_a_bad_xla_dump_exits_2_and_stores_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let cap = dir.path().join("run.mwcap");
    capture(&cap);
    let db = dir.path().join("mw.db");
    let empty = dir.path().join("not-a-dump");
    std::fs::create_dir(&empty).unwrap();
    for bad in [empty.to_str().unwrap(), "/nonexistent/dump"] {
        let (code, _, err) = mw(&[
            "import",
            cap.to_str().unwrap(),
            "--db",
            db.to_str().unwrap(),
            "--xla-dump",
            bad,
        ]);
        assert_eq!(code, 2, "{err}");
        assert!(err.contains(bad) && err.lines().count() == 1, "{err}");
    }
    assert!(!db.exists(), "nothing was stored");
}

#[test]
fn a_damaged_capture_is_warned_about_on_stderr_and_stdout_stays_the_report() {
    let dir = tempfile::tempdir().unwrap();
    let cap = dir.path().join("cut.mwcap");
    capture(&cap);
    // Corrupt the events frame (its checksum no longer matches): the records around it
    // are still read.
    let mut b = std::fs::read(&cap).unwrap();
    let size = 71_303_168u64.to_le_bytes();
    // The last copy of that size is the buffer event's (the first is the executable's
    // argument statistics).
    let at = b
        .windows(8)
        .rposition(|w| w == size)
        .expect("the allocation's size is in the file");
    b[at] ^= 0xff;
    std::fs::write(&cap, &b).unwrap();
    let (code, out, err) = mw(&["runtime", cap.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert!(!out.contains("warning"), "stdout: {out}");
    // The executable and the memory statistics around the lost frame are still there.
    assert!(
        out.contains("jit_mlp") && out.contains("runtime peak 360.03 MiB"),
        "{out}"
    );
    assert!(
        err.contains("cut.mwcap: damaged capture") && err.trim().lines().count() == 1,
        "{err}"
    );
    let (code, out, err) = mw(&["runtime", cap.to_str().unwrap(), "--json"]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("stdout is one JSON document");
    assert!(v["damaged_regions"].as_u64().unwrap() >= 1, "{v}");
    assert!(err.contains("damaged capture"), "{err}");
}

#[test]
fn a_capture_without_allocator_samples_says_so() {
    // XLA's platform allocator keeps no statistics: executables are recorded but no
    // PJRT_Device_MemoryStats sample, so there is no runtime peak, and the report says
    // why instead of ending after the executables' table.
    let dir = tempfile::tempdir().unwrap();
    let cap = dir.path().join("platform.mwcap");
    let without_samples: Vec<Record> = records()
        .into_iter()
        .filter(|r| !matches!(r, Record::PjrtMemoryStats(_)))
        .collect();
    write_capture(&cap, &without_samples);
    let (code, out, err) = mw(&["runtime", cap.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("jit_mlp"), "{out}");
    assert!(out.contains("no allocator samples"), "{out}");
}

/// A loop whose executes keep failing once its pool is full: `report --json` and
/// `runtime --json` list the first 20 OOMs of the process and count them all; with
/// `--all-ooms` they list every one (and the text says how many it left out).
#[test]
fn many_ooms_are_listed_first_twenty_and_counted() {
    let dir = tempfile::tempdir().unwrap();
    for failures in [3u64, 20, 21, 500] {
        let mut recs = records();
        let evs = (0..failures)
            .map(|i| Event {
                ts_ns: 10_000 + i * 1_000,
                duration_ns: 100,
                pid: 9,
                ptr: 0xb,
                result: 8,
                size: 239_103_760,
                ..Event::new(EventKind::ApiSpan, MemKind::None, Api::PjrtExecute)
            })
            .collect();
        recs.push(Record::Events(evs));
        let cap = dir.path().join(format!("oom{failures}.mwcap"));
        write_capture(&cap, &recs);
        let c = cap.to_str().unwrap();
        for (args, at) in [
            (vec!["report", c, "--json"], "/runtime/processes/0"),
            (vec!["runtime", c, "--json"], "/processes/0"),
        ] {
            for all in [false, true] {
                let mut a = args.clone();
                if all {
                    a.push("--all-ooms");
                }
                let (code, out, err) = mw(&a);
                assert_eq!(code, 0, "{err}");
                let v: serde_json::Value = serde_json::from_str(&out).unwrap();
                let p = v.pointer(at).unwrap();
                let listed = p["ooms"].as_array().unwrap();
                assert_eq!(p["ooms_total"], failures, "{a:?}");
                let want = if all { failures } else { failures.min(20) };
                assert_eq!(listed.len() as u64, want, "{a:?}");
                // The first ones, in time order (ns since the process's start, 1,000).
                let ts: Vec<u64> = listed
                    .iter()
                    .map(|o| o["ts_ns"].as_u64().unwrap())
                    .collect();
                let first: Vec<u64> = (0..want).map(|i| 9_000 + i * 1_000).collect();
                assert_eq!(ts, first, "{a:?}");
            }
        }
        let (code, out, _) = mw(&["runtime", c]);
        assert_eq!(code, 0);
        let more = format!(
            "... {} more OOMs in execute ({failures} in all",
            failures.saturating_sub(20)
        );
        assert_eq!(out.contains(&more), failures > 20, "{out}");
        assert_eq!(
            out.matches("OOM in execute of").count() as u64,
            failures.min(20)
        );
    }
}
