//! PJRT C API interposition, end to end: a C test plugin (tests/pjrt/fake_pjrt_plugin.c)
//! driven by a C program that loads it like a framework (dlopen + dlsym("GetPjrtApi"),
//! then only the table), with and without the shim.

mod common;

use common::cc;
use memwatch_wire::{Api, Event, EventKind, MemKind, PjrtExecutable, Record};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

struct Built {
    /// The C test runtime's CUDA driver (`libcuda.so` symlink).
    cuda: PathBuf,
    plugin: PathBuf,
    driver: PathBuf,
    shim: PathBuf,
}

fn built() -> &'static Built {
    static B: OnceLock<Built> = OnceLock::new();
    B.get_or_init(|| {
        let common = common::built("pjrt");
        let shim = common.shim.clone();
        let cuda = common.dir.join("libcuda.so");
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("preload-pjrt-c");
        std::fs::create_dir_all(&dir).unwrap();
        let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/pjrt");
        let plugin = dir.join("fake_pjrt_plugin.so");
        let driver = dir.join("pjrt_driver");
        cc(&[
            "-O2",
            "-Wall",
            "-Werror",
            "-shared",
            "-fPIC",
            "-o",
            plugin.to_str().unwrap(),
            src.join("fake_pjrt_plugin.c").to_str().unwrap(),
            "-ldl",
            "-lpthread",
        ]);
        cc(&[
            "-O2",
            "-Wall",
            "-Werror",
            "-o",
            driver.to_str().unwrap(),
            src.join("pjrt_driver.c").to_str().unwrap(),
            "-ldl",
        ]);
        Built {
            cuda,
            plugin,
            driver,
            shim,
        }
    })
}

fn drive(args: &[&str], capture: Option<&Path>, env: &[(&str, &str)]) -> Output {
    let b = built();
    let mut c = Command::new(&b.driver);
    c.arg(&b.plugin)
        .args(args)
        .env_remove("LD_PRELOAD")
        .env_remove("MEMWATCH_SINK");
    if let Some(cap) = capture {
        c.env("LD_PRELOAD", &b.shim)
            .env("MEMWATCH_SINK", format!("file:{}", cap.display()));
    }
    for (k, v) in env {
        c.env(k, v);
    }
    let out = c.output().expect("run driver");
    assert!(
        out.status.success(),
        "driver {args:?}: {:?}\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// (struct size line, wrapped slots) from `pjrt_driver table`.
fn table(capture: Option<&Path>, env: &[(&str, &str)]) -> (String, Vec<usize>) {
    let out = stdout(&drive(&["table"], capture, env));
    let head = out.lines().next().unwrap_or_default().to_string();
    let wrapped = out
        .lines()
        .filter(|l| l.ends_with(" wrapped"))
        .map(|l| l.split_whitespace().nth(2).unwrap().parse().unwrap())
        .collect();
    (head, wrapped)
}

const NEW_WRAPPED: &[usize] = &[5, 7, 8, 9, 11, 16, 20, 22, 50, 55, 56, 58, 67, 69, 72, 92];

#[test]
fn newer_plugin_table_is_copied_with_known_entries_wrapped_and_the_rest_kept() {
    let dir = tempfile::tempdir().unwrap();
    let cap = dir.path().join("t.mwcap");
    let (head, wrapped) = table(Some(&cap), &[]);
    // 130 slots: 33 more than memwatch knows; all of them (and every other entry) equal
    // the plugin's own, only the wrapped entries differ.
    assert_eq!(head, "T size=1080 major=0 minor=94 copy=1");
    assert_eq!(wrapped, NEW_WRAPPED);
    let (plain, none) = table(None, &[]);
    assert_eq!(plain, "T size=1080 major=0 minor=94 copy=0");
    assert!(none.is_empty());
}

#[test]
fn older_plugin_keeps_its_struct_size_and_nothing_past_it_is_touched() {
    let dir = tempfile::tempdir().unwrap();
    let cap = dir.path().join("t.mwcap");
    // 60 slots (ends after Buffer_Destroy, slot 58 .. 59): copy has the same size.
    let (head, wrapped) = table(
        Some(&cap),
        &[("FAKE_PJRT_SLOTS", "60"), ("FAKE_PJRT_MINOR", "20")],
    );
    assert_eq!(head, "T size=520 major=0 minor=20 copy=1");
    assert_eq!(wrapped, &[5, 7, 8, 9, 11, 16, 20, 22, 50, 55, 56, 58]);
    // minor 30 with a long table: slots from 93 on (whose order settled later) are
    // neither wrapped nor called: no compiled memory stats, fingerprint from slot 57.
    let (_, wrapped) = table(Some(&cap), &[("FAKE_PJRT_MINOR", "30")]);
    assert_eq!(wrapped, NEW_WRAPPED);
    let run_cap = dir.path().join("old.mwcap");
    drive(&["run"], Some(&run_cap), &[("FAKE_PJRT_MINOR", "30")]);
    let recs = common::read_capture(&run_cap);
    let model = recs
        .iter()
        .find_map(|r| match r {
            Record::PjrtExecutable(x) if x.name == "jit_model" => Some(x.clone()),
            _ => None,
        })
        .expect("jit_model recorded");
    assert_eq!(model.flags & PjrtExecutable::FLAG_STATS, 0);
    assert_eq!(model.stats.temp, 0);
    assert_eq!(model.fingerprint, "fp-jit_model-268435456");
    // the old plugin's run is recorded like the new one's
    assert_eq!(
        pjrt_events(&recs)
            .iter()
            .filter(|e| e.api() == Api::PjrtExecute)
            .count(),
        12
    );
}

#[test]
fn unknown_major_version_or_tiny_table_passes_through() {
    let dir = tempfile::tempdir().unwrap();
    let cap = dir.path().join("t.mwcap");
    let (head, wrapped) = table(Some(&cap), &[("FAKE_PJRT_MAJOR", "1")]);
    assert!(head.ends_with("copy=0"), "{head}");
    assert!(wrapped.is_empty());
    let (head, _) = table(Some(&cap), &[("FAKE_PJRT_SLOTS", "0")]);
    assert!(head.ends_with("copy=0"), "{head}");
    let (head, _) = table(Some(&cap), &[("MEMWATCH_PJRT", "0")]);
    assert!(head.ends_with("copy=0"), "{head}");
}

/// JAX dispatches without completion events and waits on the outputs: an execute that
/// fails on the device is seen only through the outputs' ready events (Await, Error,
/// OnReady). It is recorded once per device as a failed completion carrying
/// RESOURCE_EXHAUSTED and the size, the program sees exactly what it sees without the
/// shim (its callback and argument included), and a successful execute adds nothing.
#[test]
fn execute_error_seen_only_on_output_ready_events_is_recorded_once_per_device() {
    let dir = tempfile::tempdir().unwrap();
    let cap = dir.path().join("ready.mwcap");
    let with = drive(&["ready"], Some(&cap), &[]);
    let without = drive(&["ready"], None, &[]);
    assert_eq!(stdout(&with), stdout(&without));
    let out = stdout(&with);
    assert!(out.contains("R execute jit_oom_later code=0"), "{out}");
    for how in ["await", "error", "on_ready"] {
        assert_eq!(
            out.matches(&format!("R jit_oom_later {how} code=8"))
                .count(),
            2,
            "{out}"
        );
        assert_eq!(
            out.matches(&format!("R jit_fine {how} code=0")).count(),
            2,
            "{out}"
        );
    }
    assert_eq!(out.matches("user_kept=1").count(), 4, "{out}");
    let recs = common::read_capture(&cap);
    let exe = |name: &str| {
        recs.iter()
            .find_map(|r| match r {
                Record::PjrtExecutable(x) if x.name == name => Some(x.handle),
                _ => None,
            })
            .unwrap()
    };
    let (bad, fine) = (exe("jit_oom_later"), exe("jit_fine"));
    let ev = pjrt_events(&recs);
    let done: Vec<&Event> = ev
        .iter()
        .filter(|e| e.api() == Api::PjrtExecuteComplete)
        .collect();
    assert_eq!(done.len(), 2, "{done:?}");
    let mut devices: Vec<i32> = done.iter().map(|e| e.device).collect();
    devices.sort();
    assert_eq!(devices, [0, 1]);
    for e in &done {
        assert_eq!((e.ptr, e.result, e.size), (bad, 8, 3_221_225_472));
        let start = ev
            .iter()
            .find(|x| x.api() == Api::PjrtExecute && x.ptr == bad && x.device == e.device)
            .unwrap();
        assert_eq!(e.ts_ns, start.ts_ns, "linked to its execute's span");
        assert_eq!(start.result, 0);
    }
    assert!(!done.iter().any(|e| e.ptr == fine));
}

fn pjrt_events(recs: &[Record]) -> Vec<Event> {
    common::events(recs)
        .into_iter()
        .filter(|e| e.is_framework())
        .collect()
}

#[test]
fn run_records_executables_executes_buffers_stats_and_the_oom() {
    let dir = tempfile::tempdir().unwrap();
    let cap = dir.path().join("run.mwcap");
    let cuda = built().cuda.to_str().unwrap().to_string();
    let env = [
        ("MEMWATCH_PJRT_SAMPLE_HZ", "50"),
        ("FAKE_PJRT_CUDA_LIB", cuda.as_str()),
    ];
    let with = drive(&["run"], Some(&cap), &env);
    let without = drive(&["run"], None, &env);
    // Pass-through: the program sees exactly the same results, and the plugin ran each
    // entry as often as the program called it (the shim's own calls are other entries).
    assert_eq!(stdout(&with), stdout(&without));
    assert!(stdout(&with).contains("R calls execute=6 compile=3 destroy=19"));

    let recs = common::read_capture(&cap);
    let exes: Vec<&PjrtExecutable> = recs
        .iter()
        .filter_map(|r| match r {
            Record::PjrtExecutable(x) => Some(x),
            _ => None,
        })
        .collect();
    let names: Vec<&str> = exes.iter().map(|x| x.name.as_str()).collect();
    assert_eq!(names.len(), 4, "{names:?}");
    for n in ["jit_model", "jit_small", "jit_oom", "jit_oom_async"] {
        assert!(names.contains(&n), "{names:?}");
    }
    let model = exes.iter().find(|x| x.name == "jit_model").unwrap();
    assert_eq!(model.fingerprint, "fp-jit_model-268435456");
    assert_eq!(model.flags & PjrtExecutable::FLAG_STATS, 1);
    assert_eq!(model.stats.temp, 268_435_456);
    assert_eq!(model.stats.argument, 8_388_608);
    assert_eq!(model.stats.output, 8_388_608);
    assert_eq!(model.stats.generated_code, 4096);
    assert_eq!(model.devices, vec![0, 1]);
    let small = exes.iter().find(|x| x.name == "jit_small").unwrap();
    assert_eq!(small.flags & PjrtExecutable::FLAG_DESERIALIZED, 2);

    let ev = pjrt_events(&recs);
    let count = |api: Api, pred: &dyn Fn(&Event) -> bool| {
        ev.iter().filter(|e| e.api() == api && pred(e)).count()
    };
    // 6 executes x 2 devices; each span carries the executable's handle.
    assert_eq!(count(Api::PjrtExecute, &|_| true), 12);
    assert_eq!(
        count(Api::PjrtExecute, &|e| e.ptr == model.handle
            && e.result == 0),
        6
    );
    assert_eq!(
        count(Api::PjrtExecute, &|e| e.ptr == model.handle
            && e.device == 1),
        3
    );
    let oom = exes.iter().find(|x| x.name == "jit_oom").unwrap();
    let oom_ev: Vec<&Event> = ev
        .iter()
        .filter(|e| e.api() == Api::PjrtExecute && e.ptr == oom.handle)
        .collect();
    assert_eq!(oom_ev.len(), 2);
    assert!(oom_ev
        .iter()
        .all(|e| e.result == 8 && e.size == 2_147_483_648));
    // An OOM Execute did not return (asynchronous): the execute spans succeed, the
    // completion events carry RESOURCE_EXHAUSTED and the size the message names.
    let aoom = exes.iter().find(|x| x.name == "jit_oom_async").unwrap();
    assert_eq!(
        count(Api::PjrtExecute, &|e| e.ptr == aoom.handle && e.result == 0),
        2
    );
    assert_eq!(
        count(Api::PjrtExecuteComplete, &|e| e.ptr == aoom.handle
            && e.result == 8
            && e.size == 3_221_225_472),
        2
    );
    // completion callbacks for the 3 executes that asked for events, per device
    assert_eq!(
        count(Api::PjrtExecuteComplete, &|e| e.ptr == model.handle),
        6
    );
    // outputs: jit_model 3 x 2 devices x 2 outputs of 4 MiB, jit_small 2 x 1 of 4 KiB
    assert_eq!(
        count(Api::PjrtExecuteOutput, &|e| e.aux == model.handle
            && e.size == 4_194_304
            && e.is_mem(MemKind::PjrtBuffer)
            && e.is(EventKind::Alloc)),
        12
    );
    assert_eq!(count(Api::PjrtExecuteOutput, &|e| e.size == 4096), 2);
    // each output carries its index: per call and device, jit_model's outputs 0 then 1,
    // jit_small's one output 0
    let mut calls: std::collections::BTreeMap<(u64, u64, i32), Vec<Option<u32>>> =
        Default::default();
    for e in ev.iter().filter(|e| e.api() == Api::PjrtExecuteOutput) {
        calls
            .entry((e.aux, e.ts_ns, e.device))
            .or_default()
            .push(e.pjrt_output_index());
    }
    let model_calls: Vec<_> = calls
        .iter()
        .filter(|((h, _, _), _)| *h == model.handle)
        .map(|(_, v)| v.clone())
        .collect();
    assert_eq!(model_calls, vec![vec![Some(0), Some(1)]; 6]);
    assert_eq!(
        count(Api::PjrtExecuteOutput, &|e| e.size == 4096
            && e.pjrt_output_index() == Some(0)),
        2
    );
    // buffers that are not execute outputs carry no index
    assert_eq!(
        count(Api::PjrtBufferFromHostBuffer, &|e| e
            .pjrt_output_index()
            .is_some()),
        0
    );
    assert_eq!(
        count(Api::PjrtBufferFromHostBuffer, &|e| e.size == 4_194_304),
        2
    );
    assert_eq!(count(Api::PjrtBufferFromHostBuffer, &|e| e.device == 1), 1);
    assert_eq!(
        count(Api::PjrtBufferCopyToDevice, &|e| e.device == 1
            && e.size == 4_194_304),
        1
    );
    assert_eq!(
        count(Api::PjrtBufferDestroy, &|e| e.is(EventKind::Free)),
        19
    );
    assert_eq!(count(Api::PjrtBufferDelete, &|_| true), 1);
    assert_eq!(count(Api::PjrtLoadedExecutableDestroy, &|_| true), 4);
    assert_eq!(count(Api::PjrtClientCompile, &|e| e.result == 0), 3);
    assert_eq!(
        count(Api::PjrtDeserializeAndLoad, &|e| e.ptr == small.handle),
        1
    );

    // The plugin's own driver calls inside execute are still recorded (the PJRT wrapper
    // holds no recording guard across the real call): one 256 MiB cuMemAlloc_v2 per
    // device and execute of jit_model, each inside an execute span.
    let all = common::events(&recs);
    let temps: Vec<&Event> = all
        .iter()
        .filter(|e| e.api() == Api::CuMemAlloc && e.size == 268_435_456 && e.result == 0)
        .collect();
    assert_eq!(temps.len(), 6, "driver allocations inside execute");
    let spans: Vec<&Event> = ev
        .iter()
        .filter(|e| e.api() == Api::PjrtExecute && e.ptr == model.handle)
        .collect();
    for t in &temps {
        assert!(
            spans
                .iter()
                .any(|s| s.ts_ns <= t.ts_ns && t.ts_ns <= s.ts_ns + s.duration_ns),
            "cuMemAlloc at {} outside every execute span",
            t.ts_ns
        );
    }

    // Memory statistics from the flusher: both devices, with the plugin's limit, and the
    // peak includes jit_model's 256 MiB temp on top of parameters and outputs.
    let stats: Vec<_> = recs
        .iter()
        .filter_map(|r| match r {
            Record::PjrtMemoryStats(s) => Some(*s),
            _ => None,
        })
        .collect();
    assert!(stats.iter().any(|s| s.device == 0), "{stats:?}");
    assert!(stats.iter().any(|s| s.device == 1), "{stats:?}");
    assert!(stats
        .iter()
        .all(|s| s.bytes_limit == 1 << 30 && s.flags == 0xff));
    let peak1 = stats
        .iter()
        .filter(|s| s.device == 1)
        .map(|s| s.peak_bytes_in_use)
        .max()
        .unwrap();
    // dev 1: w1 4 MiB + copy 4 MiB + 2 x 4 MiB outputs + 256 MiB temp
    assert_eq!(peak1, (4 + 4 + 8 + 256) << 20);
}

#[test]
fn no_sink_means_no_wrapping() {
    let out = stdout(&drive(
        &["table"],
        None,
        &[("LD_PRELOAD", built().shim.to_str().unwrap())],
    ));
    assert!(
        out.starts_with("T size=1080 major=0 minor=94 copy=0"),
        "{out}"
    );
}

/// Prints the ns a wrapped execute adds through the test plugin (run with --nocapture).
#[test]
fn execute_overhead_micro_benchmark() {
    let dir = tempfile::tempdir().unwrap();
    let cap = dir.path().join("b.mwcap");
    let n = "200000";
    let ns = |o: &Output| -> f64 {
        stdout(o)
            .lines()
            .find_map(|l| l.strip_prefix("B ns_per_execute "))
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    };
    let base = ns(&drive(&["bench", n], None, &[]));
    let env = [("MEMWATCH_PJRT_COMPLETION", "0")];
    let shim = ns(&drive(&["bench", n], Some(&cap), &env));
    println!(
        "pjrt execute: {base:.1} ns plain, {shim:.1} ns under the shim, +{:.1} ns per call",
        shim - base
    );
    // as a jax.jit call: one output buffer per device, destroyed by the next call
    let cap1 = dir.path().join("b1.mwcap");
    let base1 = ns(&drive(&["bench", n, "1"], None, &[]));
    let shim1 = ns(&drive(&["bench", n, "1"], Some(&cap1), &env));
    println!(
        "pjrt execute + 1 output/device + destroy: {base1:.1} ns plain, {shim1:.1} ns under the shim, +{:.1} ns per call",
        shim1 - base1
    );
    let recs1 = common::read_capture(&cap1);
    // every output carries its size, also those taken from the per-executable cache
    let outputs: Vec<u64> = pjrt_events(&recs1)
        .iter()
        .filter(|e| e.api() == Api::PjrtExecuteOutput)
        .map(|e| e.size)
        .collect();
    assert!(outputs.len() > 1000, "{}", outputs.len());
    assert!(outputs.iter().all(|&s| s == 32));
    let recs = common::read_capture(&cap);
    let n_exec = pjrt_events(&recs)
        .iter()
        .filter(|e| e.api() == Api::PjrtExecute)
        .count();
    let dropped = common::dropped_total(&recs);
    // 2 devices per execute, warm-up included; anything missing was counted as dropped
    assert_eq!(n_exec as u64 + dropped, 2 * (200_000 + 1000));
}

/// A panic in memwatch's part of any wrapped PJRT entry or callback (the fault switch,
/// before or after the real call) never reaches the framework: the driver prints the
/// same results, errors, callback arguments and call counts as without the shim, and
/// exits 0; nothing is recorded.
#[test]
fn a_panic_in_a_pjrt_wrapper_never_reaches_the_framework() {
    let plain = stdout(&drive(&["run"], None, &[]));
    assert!(plain.contains("R execute jit_oom code="), "{plain}");
    for fault in ["panic-before-call", "panic-after-call"] {
        let dir = tempfile::tempdir().unwrap();
        let cap = dir.path().join("fault.mwcap");
        let out = drive(&["run"], Some(&cap), &[("MEMWATCH_FAULT", fault)]);
        assert_eq!(plain, stdout(&out), "{fault}: output differs");
        assert!(
            out.stderr.is_empty(),
            "{fault}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let recs = common::read_capture(&cap);
        assert!(
            common::events(&recs).is_empty(),
            "{fault}: nothing recorded"
        );
        let told = drive(
            &["run"],
            Some(&cap),
            &[("MEMWATCH_FAULT", fault), ("MEMWATCH_DEBUG", "1")],
        );
        let caught = String::from_utf8_lossy(&told.stderr)
            .matches("memwatch: internal panic caught at ")
            .count();
        assert!(caught >= 20, "{fault}: only {caught} panics caught");
        assert_eq!(plain, stdout(&told));
    }
}
