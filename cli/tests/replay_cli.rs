//! `memwatch replay` end to end: the JSON contract, exit codes, bad input.

use std::io::Write;
use std::process::Command;

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_memwatch"))
}

fn fixture(name: &str) -> String {
    format!(
        "{}/../testdata/h200/bfc/h200-jax0.11.2/{name}",
        env!("CARGO_MANIFEST_DIR")
    )
}

fn run(args: &[&str]) -> (i32, String, String) {
    let out = bin().args(args).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn jsonl(content: &str) -> tempfile::NamedTempFile {
    let mut f = tempfile::Builder::new()
        .suffix(".jsonl")
        .tempfile()
        .unwrap();
    f.write_all(content.as_bytes()).unwrap();
    f
}

#[test]
fn fixture_steps_match_the_real_allocator_through_the_cli() {
    for (seed, extra) in [
        (11, vec![]),
        (12, vec![]),
        (13, vec!["--preallocate", "false"]),
    ] {
        let path = fixture(&format!("bfc_seed{seed}.json"));
        let mut args = vec![
            "replay",
            path.as_str(),
            "--capacity",
            "150156083200",
            "--mem-fraction",
            "0.04",
            "--steps",
            "--json",
        ];
        args.extend(extra);
        let (code, out, err) = run(&args);
        assert_eq!(code, 0, "{err}");
        let got: serde_json::Value = serde_json::from_str(&out).unwrap();
        let truth: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!(got["pool_bytes"], 6006243328u64);
        assert_eq!(got["fits"], false);
        assert_eq!(got["oom_step"], truth["oom_step"]);
        let steps = got["steps"].as_array().unwrap();
        let real = truth["steps"].as_array().unwrap();
        assert_eq!(steps.len(), real.len());
        for (i, (s, r)) in steps.iter().zip(real).enumerate() {
            assert_eq!(s["bytes_in_use"], r["bytes_in_use"], "seed {seed} step {i}");
            assert_eq!(
                s["largest_free_block_bytes"], r["largest_free_block_bytes"],
                "seed {seed} step {i}"
            );
        }
    }
}

#[test]
fn fits_and_fail_on_oom_exit_codes() {
    let t = jsonl("{\"op\":\"alloc\",\"id\":1,\"size\":1000}\n{\"op\":\"alloc\",\"id\":2,\"size\":3000000,\"tag\":\"big\"}\n{\"op\":\"free\",\"id\":1}\n");
    let p = t.path().to_str().unwrap();
    let (code, out, _) = run(&["replay", p, "--capacity", "4M", "--json"]);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["fits"], true);
    assert_eq!(v["oom_step"], serde_json::Value::Null);
    assert_eq!(v["pool_bytes"], 3145728u64); // 4 MiB x 0.75
    assert!(v.get("steps").is_none());
    let (code, out, _) = run(&["replay", p, "--capacity", "2M", "--fail-on-oom"]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("OUT OF MEMORY at event 1"), "{out}");
    assert!(out.contains("tag big"), "{out}");
    let (code, _, _) = run(&["replay", p, "--capacity", "2M"]);
    assert_eq!(code, 0);
    for alloc in ["bfc", "platform", "async", "torch"] {
        let (code, out, err) = run(&[
            "replay",
            p,
            "--device",
            "h100",
            "--allocator",
            alloc,
            "--json",
            "--steps",
        ]);
        assert_eq!(code, 0, "{alloc}: {err}");
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["steps"].as_array().unwrap().len(), 3);
        assert_eq!(v["allocator"], alloc);
    }
}

#[test]
fn compare_devices_and_min_capacity() {
    let t =
        jsonl("{\"op\":\"alloc\",\"id\":1,\"size\":100000000000}\n{\"op\":\"free\",\"id\":1}\n");
    let p = t.path().to_str().unwrap();
    let (code, out, err) = run(&[
        "replay",
        p,
        "--compare-devices",
        "mi300x,h100,strix-halo:vram=96G",
        "--json",
        "--fail-on-oom",
    ]);
    assert_eq!(code, 1, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let d = v["devices"].as_array().unwrap();
    assert_eq!(d.len(), 3);
    assert_eq!(d[0]["fits"], true); // 192 GiB x 0.75 = 144 GiB
    assert_eq!(d[1]["fits"], false); // 80 GiB x 0.75
    assert_eq!(d[2]["fits"], false); // 96 GiB x 0.75 = 72 GiB
    let (code, out, err) = run(&[
        "replay",
        p,
        "--device",
        "h100",
        "--find-min-capacity",
        "--json",
    ]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let rows = v["min_capacity"].as_array().unwrap();
    assert_eq!(rows.len(), 4);
    for r in rows {
        let min = r["min_pool_bytes"].as_u64().unwrap();
        assert!(
            (100_000_000_000..100_000_000_000 + (24 << 20)).contains(&min),
            "{r}"
        );
    }
}

#[test]
fn oom_dump_log_is_a_trace_source() {
    let (code, out, err) = run(&["replay", &fixture("oom-26x4GiB.log"), "--json"]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["fits"], false);
    assert_eq!(v["pool_bytes"], 112583507968u64);
    assert_eq!(v["events"], 28);
    let (code, out, _) = run(&["replay", &fixture("bfc_seed12.log")]);
    assert_eq!(code, 0);
    assert!(out.contains("fragmentation"), "{out}");
}

#[test]
fn bad_input_exits_2_with_one_line() {
    let bad = jsonl("{\"op\":\"alloc\",\"id\":1,\"size\":10}\n{\"op\":\"free\",\"id\":1}\n{\"op\":\"alloc\",\"id\":2,\"size\":\n");
    let p = bad.path().to_str().unwrap();
    let (code, _, err) = run(&["replay", p, "--capacity", "1G"]);
    assert_eq!(code, 2);
    assert!(err.contains("line 3") && err.contains(p), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    let neg = jsonl("{\"op\":\"alloc\",\"id\":1,\"size\":-10}\n");
    let (code, _, err) = run(&["replay", neg.path().to_str().unwrap(), "--capacity", "1G"]);
    assert_eq!(code, 2);
    assert!(err.contains("line 1"), "{err}");
    let good = jsonl("{\"op\":\"alloc\",\"id\":1,\"size\":10}\n");
    let g = good.path().to_str().unwrap();
    for (args, needle) in [
        (vec!["--device", "mi999"], "unknown device"),
        (vec!["--capacity", "0"], "positive"),
        (vec!["--capacity", "-5"], "positive"),
        (vec!["--capacity", "lots"], "not a number"),
        (
            vec!["--capacity", "2305843009213693952"],
            "larger than any device",
        ),
        (vec!["--capacity", "0.5"], "less than one byte"),
        (
            vec!["--capacity", "1G", "--mem-fraction", "0"],
            "mem-fraction",
        ),
        (
            vec!["--capacity", "1G", "--mem-fraction", "1.5"],
            "mem-fraction",
        ),
        (
            vec!["--capacity", "1G", "--allocator", "jemalloc"],
            "allocator",
        ),
        (vec![], "no capacity"),
        (vec!["--compare-devices", "h100,nope"], "unknown device"),
    ] {
        let mut a = vec!["replay", g];
        a.extend(args.iter().copied());
        let (code, _, err) = run(&a);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
    }
    let (code, _, err) = run(&["replay", "/nonexistent/trace.jsonl", "--capacity", "1G"]);
    assert_eq!(code, 2);
    assert!(err.contains("/nonexistent/trace.jsonl"), "{err}");
    let log = jsonl("I1121 23:03:21.3 2220 x.cc:1] nothing to see\n");
    let (code, _, err) = run(&["replay", log.path().to_str().unwrap(), "--capacity", "1G"]);
    assert_eq!(code, 2, "{err}");
}

/// The verdict on a logged OOM is about the recorded pool, whatever pool the replay uses:
/// on an MI300X the 26 x 4 GiB live set fits, which says nothing about fragmentation on
/// the H200 that failed (before, the text said "the real failure came from fragmentation").
#[test]
fn oom_dump_verdict_is_against_the_recorded_pool_and_in_json() {
    let (code, out, err) = run(&["replay", &fixture("oom-26x4GiB.log"), "--device", "mi300x"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("the recorded pool of 104.85 GiB is short by at least 3.15 GiB")
            && out.contains("replayed   on a pool of 144.00 GiB instead")
            && !out.contains("came from fragmentation"),
        "{out}"
    );
    let (_, out, _) = run(&[
        "replay",
        &fixture("oom-26x4GiB.log"),
        "--device",
        "mi300x",
        "--json",
    ]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["fits"], true);
    assert_eq!(v["oom_dump"]["verdict"], "pool_too_small");
    assert_eq!(v["oom_dump"]["recorded_pool_bytes"], 112583507968u64);
    assert_eq!(
        v["oom_dump"]["short_by_bytes"],
        v["oom_dump"]["need_bytes"].as_u64().unwrap() - 112583507968u64
    );
    let (_, out, _) = run(&[
        "replay",
        &fixture("bfc_seed12.log"),
        "--compare-devices",
        "h100,mi300x",
        "--json",
    ]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["oom_dump"]["verdict"], "fragmentation");
    assert_eq!(v["trace_gaps"], serde_json::Value::Null);
}

/// A Strix Halo spec keeps its own commas inside --compare-devices; units up to EiB.
#[test]
fn compare_devices_keeps_a_specs_commas() {
    let t = jsonl("{\"op\":\"alloc\",\"id\":1,\"size\":50000000000}\n");
    let p = t.path().to_str().unwrap();
    let (code, out, err) = run(&[
        "replay",
        p,
        "--compare-devices",
        "h100,strix-halo:vram=64G,gtt=10G,mem=managed",
        "--compare-devices",
        "strix-halo:vram=96G",
        "--json",
    ]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let d = v["devices"].as_array().unwrap();
    assert_eq!(d.len(), 3, "{out}");
    // Managed memory on a 64 GiB carve-out is bounded by the 10 GiB GTT limit.
    assert_eq!(d[1]["capacity_bytes"], 10u64 << 30);
    assert_eq!(d[1]["fits"], false);
    assert_eq!(d[1]["device"], "strix-halo");
    let (code, out, _) = run(&[
        "replay",
        p,
        "--compare-devices",
        "strix-halo:vram=64G,strix-halo:vram=96G",
    ]);
    assert_eq!(code, 0);
    assert!(
        out.contains("strix-halo:vram=64G ") && out.contains("strix-halo:vram=96G "),
        "the table tells the two apart: {out}"
    );
    let (code, _, err) = run(&["replay", p, "--compare-devices", "h100,gtt=10G"]);
    assert_eq!(code, 2);
    assert!(err.contains("without a device"), "{err}");
    let (code, _, err) = run(&["replay", p, "--compare-devices", "h100,nosuch"]);
    assert_eq!(code, 2);
    assert!(err.contains("--compare-devices nosuch"), "{err}");
    let (code, _, err) = run(&["replay", p, "--device", "strix-halo:vram=64G,vram=32G"]);
    assert_eq!(code, 2);
    assert!(err.contains("given twice"), "{err}");
    let (code, out, err) = run(&["replay", p, "--capacity", "1T", "--json"]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["capacity_bytes"], 1u64 << 40);
}

/// `memwatch report --trace` names the device on every line: a trace of two devices is
/// refused without --trace-device (it was replayed as one pool) and split with it.
#[test]
fn jsonl_with_two_devices_needs_trace_device() {
    let t = jsonl(
        "{\"op\":\"alloc\",\"id\":1,\"size\":3000000,\"device\":0}\n\
         {\"op\":\"alloc\",\"id\":2,\"size\":3000000,\"device\":1}\n",
    );
    let p = t.path().to_str().unwrap();
    let (code, _, err) = run(&["replay", p, "--capacity", "4M"]);
    assert_eq!(code, 2);
    assert!(
        err.contains("several devices (0, 1)") && err.contains("--trace-device"),
        "{err}"
    );
    let (code, out, err) = run(&[
        "replay",
        p,
        "--capacity",
        "4M",
        "--mem-fraction",
        "1",
        "--trace-device",
        "1",
        "--json",
    ]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        (v["fits"].clone(), v["events"].clone()),
        (true.into(), 1.into())
    );
}

/// A damaged capture replays what is left, and says so: a warning on stderr and in the
/// report, `trace_gaps` in JSON (before, nothing told the figures could be off).
#[test]
fn a_damaged_capture_replays_with_a_warning() {
    let src = format!(
        "{}/../testdata/h200-captures/jax0.11.2-platform-allocator.mwcap",
        env!("CARGO_MANIFEST_DIR")
    );
    let mut bytes = std::fs::read(&src).unwrap();
    let (code, out, err) = run(&["replay", &src, "--capacity", "140G", "--json"]);
    assert_eq!(code, 0, "{err}");
    assert!(!err.contains("warning"), "{err}");
    let whole: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(whole["trace_gaps"], serde_json::Value::Null);
    let mid = bytes.len() / 2;
    for b in &mut bytes[mid..mid + 64] {
        *b ^= 0x5a;
    }
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("damaged.mwcap");
    std::fs::write(&bad, &bytes).unwrap();
    let b = bad.to_str().unwrap();
    let (code, out, err) = run(&["replay", b, "--capacity", "140G", "--json"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains("warning")
            && err.contains("damaged.mwcap")
            && err.contains("too low")
            && err.contains("too high"),
        "{err}"
    );
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(
        v["trace_gaps"]["damaged_regions"].as_u64().unwrap() >= 1,
        "{v}"
    );
    assert!(
        v["trace_gaps"]["damaged_bytes"].as_u64().unwrap() >= 64,
        "{v}"
    );
    assert!(v["events"].as_u64() <= whole["events"].as_u64());
    let (_, out, _) = run(&["replay", b, "--capacity", "140G"]);
    assert!(
        out.contains("warning    the capture is incomplete"),
        "{out}"
    );
}

/// Sizes past what the models take are refused wherever they come from (a device spec
/// got around --capacity's limit and panicked), the min-capacity search stays inside
/// the limit (it overflowed on a 2^58-byte peak), and --trace-device on a trace without
/// devices is an error listing what is there instead of being ignored.
#[test]
fn limits_hold_for_device_specs_searches_and_trace_devices() {
    let huge = jsonl(
        &(0..4)
            .map(|i| format!("{{\"op\":\"alloc\",\"id\":{i},\"size\":{}}}\n", 1u64 << 56))
            .collect::<String>(),
    );
    let h = huge.path().to_str().unwrap();
    let (code, out, err) = run(&[
        "replay",
        h,
        "--capacity",
        "1E",
        "--find-min-capacity",
        "--json",
    ]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(v["min_capacity"].is_array(), "{v}");
    let (code, _, err) = run(&[
        "replay",
        h,
        "--device",
        "strix-halo:ram=18446744073709551615,vram=18446744073709551614",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("larger than any device"), "{err}");

    let (code, _, err) = run(&["replay", &fixture("bfc_seed12.log"), "--trace-device", "5"]);
    assert_eq!(code, 2);
    assert!(
        err.contains("--trace-device 5") && err.contains("no devices"),
        "{err}"
    );
    let cap = format!(
        "{}/../testdata/h200-captures/jax0.11.2-platform-allocator.mwcap",
        env!("CARGO_MANIFEST_DIR")
    );
    let (code, _, err) = run(&["replay", &cap, "--capacity", "1T", "--trace-device", "7"]);
    assert_eq!(code, 2);
    assert!(err.contains("the trace has device 0"), "{err}");

    // The compare table and the min-capacity search show the dump's verdict too.
    let (code, out, _) = run(&[
        "replay",
        &fixture("oom-26x4GiB.log"),
        "--compare-devices",
        "h100,mi300x",
    ]);
    assert_eq!(code, 0);
    assert!(
        out.contains("verdict    the recorded pool of 104.85 GiB is short"),
        "{out}"
    );
    let (code, out, _) = run(&[
        "replay",
        &fixture("oom-26x4GiB.log"),
        "--find-min-capacity",
        "--allocator",
        "platform",
        "--json",
    ]);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["oom_dump"]["verdict"], "pool_too_small");
}

/// A growing pool that failed below its stated limit could not grow; its limit was not
/// too small (the same dump with `Limit:` raised to 108.5 GiB, above the 108 GiB need).
#[test]
fn a_pool_that_could_not_grow_is_told_from_a_limit_too_small() {
    let text = std::fs::read_to_string(fixture("oom-26x4GiB.log")).unwrap();
    let grown = text.replace(
        "Limit:                       104.85GiB",
        "Limit:                       108.50GiB",
    );
    assert_ne!(grown, text);
    let f = jsonl(&grown);
    let (code, out, err) = run(&["replay", f.path().to_str().unwrap(), "--json"]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["oom_dump"]["verdict"], "pool_could_not_grow");
    assert_eq!(v["oom_dump"]["stated_limit_bytes"], 116500987904u64);
    let (_, out, _) = run(&["replay", f.path().to_str().unwrap()]);
    assert!(out.contains("could not grow by the request"), "{out}");
}
