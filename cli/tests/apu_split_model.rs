//! The split-model case on an APU, end to end: a HIP program (`c/split_model_load.c`)
//! that hipMallocs a whole model file larger than the device, then loads only the split
//! it needed, runs under `memwatch run` over the simulated runtime reporting
//! `integrated=1` and an APU-sized capacity, with the amdgpu sysfs tree of a Strix Halo
//! (`testdata/amdgpu-sysfs`, via MEMWATCH_SYSFS_ROOT); `memwatch report` must name the
//! oversized request, what the device could give and the shortfall, account the memory
//! by kind and say that the static GTT counter disagrees with the shim. The same program
//! over the real ROCm 5.2 libamdhip64 (no AMD GPU here: hipErrorInvalidDevice) prints
//! the same with and without memwatch and gets no APU section. No AMD GPU is involved.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use serde_json::Value;

const GIB: u64 = 1 << 30;

fn cc(args: &[&str]) {
    let out = Command::new("cc").args(args).output().expect("run cc");
    assert!(
        out.status.success(),
        "cc {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// (directory with the simulated runtime as libamdhip64.so, the program linked to it,
/// the program linked to the system's real libamdhip64).
fn built() -> &'static (PathBuf, PathBuf, PathBuf) {
    static B: OnceLock<(PathBuf, PathBuf, PathBuf)> = OnceLock::new();
    B.get_or_init(|| {
        common::shim();
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("apu-split-model");
        std::fs::create_dir_all(&dir).unwrap();
        let rt_src = common::repo("agents/preload/tests/runtime");
        let rt = dir.join("libmemwatch_testrt.so");
        cc(&[
            "-O2",
            "-shared",
            "-fPIC",
            "-o",
            rt.to_str().unwrap(),
            rt_src.join("memwatch_testrt.c").to_str().unwrap(),
            &format!(
                "-Wl,--version-script={}",
                rt_src.join("memwatch_testrt.map").display()
            ),
            "-lpthread",
        ]);
        let link = dir.join("libamdhip64.so");
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink("libmemwatch_testrt.so", &link).unwrap();
        let src = common::repo("cli/tests/c/split_model_load.c");
        let simulated = dir.join("split_model_load_sim");
        cc(&[
            "-O2",
            "-Wall",
            "-D__HIP_PLATFORM_AMD__",
            "-o",
            simulated.to_str().unwrap(),
            src.to_str().unwrap(),
            &format!("-L{}", dir.display()),
            "-lamdhip64",
            &format!("-Wl,-rpath,{}", dir.display()),
        ]);
        let real = dir.join("split_model_load_rocm");
        cc(&[
            "-O2",
            "-Wall",
            "-D__HIP_PLATFORM_AMD__",
            "-o",
            real.to_str().unwrap(),
            src.to_str().unwrap(),
            "-lamdhip64",
        ]);
        (dir, simulated, real)
    })
}

/// `memwatch run --out CAP -- PROG ARGS` with `env`; the run's output.
fn run(cap: &Path, prog: &Path, args: &[String], env: &[(&str, String)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_memwatch"));
    cmd.env("MEMWATCH_PRELOAD", common::shim())
        .arg("run")
        .arg("--quiet")
        .arg("--out")
        .arg(cap)
        .arg("--")
        .arg(prog)
        .args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run memwatch");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn report_human(cap: &Path) -> String {
    let out = common::run_memwatch(&["report", cap.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn sysfs(name: &str) -> String {
    common::repo("testdata/amdgpu-sysfs")
        .join(name)
        .display()
        .to_string()
}

fn kind<'a>(d: &'a Value, k: &str) -> &'a Value {
    d["kinds"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["kind"] == k)
        .unwrap_or_else(|| panic!("kind {k} in {d}"))
}

#[test]
fn a_whole_160_gib_model_on_a_128_gib_apu() {
    let (_, prog, _) = built();
    let tmp = tempfile::tempdir().unwrap();
    let cap = tmp.path().join("split.mwcap");
    let args = [160 * GIB, 75 * GIB, 3, 0, 1300].map(|v| v.to_string());
    let out = run(
        &cap,
        prog,
        &args,
        &[
            ("MEMWATCH_TESTRT_CAPACITY", (128 * GIB).to_string()),
            ("MEMWATCH_TESTRT_INTEGRATED", "1".into()),
            ("MEMWATCH_SYSFS_ROOT", sysfs("strix-halo-uma512m-gtt120g")),
        ],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("value=1") && stdout.contains("hipErrorOutOfMemory"),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!("loaded {} of", 75 * GIB)),
        "{stdout}"
    );

    let v = common::report_json(&cap);
    let devices = v["apu"]["devices"].as_array().expect("an apu section");
    assert_eq!(devices.len(), 1, "{}", v["apu"]);
    let d = &devices[0];
    assert_eq!(d["device"], 0);
    assert_eq!(d["evidence"], "hip_integrated");
    assert_eq!(d["hip_total_bytes"], 128 * GIB);
    assert!(d["host_memory_bytes"].as_u64().unwrap() > 0);
    assert_eq!(d["sysfs"]["vram_total_bytes"], 536_870_912u64);
    assert_eq!(d["sysfs"]["gtt_total_bytes"], 128_849_018_880u64);
    assert!(d["sysfs"]["readings"].as_u64().unwrap() >= 3, "{d}");
    assert_eq!(kind(d, "device")["peak_bytes"], 75 * GIB);
    assert_eq!(kind(d, "device")["allocs"], 3);
    assert_eq!(kind(d, "host_pinned")["peak_bytes"], 64u64 << 20);
    assert_eq!(kind(d, "host_registered")["peak_bytes"], 16u64 << 20);
    assert_eq!(kind(d, "managed")["allocs"], 0);
    assert!(d["kinds"]
        .as_array()
        .unwrap()
        .iter()
        .all(|k| k["live_bytes_at_end"] == 0));
    // The fixture's counters do not move while 75 GiB are held.
    assert_eq!(
        d["comparison"]["status"], "sysfs_under",
        "{}",
        d["comparison"]
    );
    assert_eq!(
        d["comparison"]["shim_growth_bytes"],
        75 * GIB + (64 << 20) + (16 << 20)
    );
    let o = &d["oversized_requests"].as_array().unwrap()[0];
    assert_eq!(o["api"], "hipMalloc");
    assert_eq!(o["size"], 160 * GIB);
    assert_eq!(o["result_name"], "hipErrorOutOfMemory");
    assert_eq!(o["capacity_bytes"], 128 * GIB);
    assert_eq!(o["in_use_bytes"], 0);
    assert_eq!(o["could_give_bytes"], 128 * GIB);
    assert_eq!(o["shortfall_bytes"], 32 * GIB);
    assert_eq!(o["exceeds_capacity"], true);
    assert_eq!(o["os_limit_bytes"], 128_849_018_880u64);
    assert_eq!(o["peak_after_bytes"], 75 * GIB);

    let human = report_human(&cap);
    for part in [
        "APU device 0 (memwatch simulated GPU 0)",
        "the HIP runtime reports an integrated GPU",
        "HIP reports 128.00 GiB",
        "VRAM carve-out 512.00 MiB, GTT limit 120.00 GiB",
        "device (hipMalloc)",
        "DISAGREE (sysfs under-reports)",
        "OVERSIZED REQUEST",
        "hipMalloc of 160.00 GiB failed (hipErrorOutOfMemory)",
        "the device could give 128.00 GiB",
        "32.00 GiB short",
        "larger than the whole device",
        "held at most 75.00 GiB",
    ] {
        assert!(human.contains(part), "{part:?} in\n{human}");
    }
}

#[test]
fn other_sizes_a_short_run_and_memory_already_in_use() {
    // 100 GiB asked on a 96 GiB APU (the 16 GiB-carve-out tree); 40 GiB needed, in 5
    // parts, then 8 GiB of managed memory; the run (100 ms of holding) is shorter than
    // the sampling period, so no reading falls while memory is held. The hold lets a
    // flusher pass name the device (`integrated`): the shim never asks the runtime at exit.
    let (_, prog, _) = built();
    let tmp = tempfile::tempdir().unwrap();
    let cap = tmp.path().join("short.mwcap");
    let args = [100 * GIB, 40 * GIB, 5, 8 * GIB, 100].map(|v| v.to_string());
    run(
        &cap,
        prog,
        &args,
        &[
            ("MEMWATCH_TESTRT_CAPACITY", (96 * GIB).to_string()),
            ("MEMWATCH_TESTRT_INTEGRATED", "1".into()),
            ("MEMWATCH_SYSFS_ROOT", sysfs("strix-halo-uma16g-gtt96g")),
        ],
    );
    let v = common::report_json(&cap);
    let d = &v["apu"]["devices"][0];
    assert_eq!(kind(d, "device")["peak_bytes"], 40 * GIB);
    assert_eq!(kind(d, "device")["allocs"], 5);
    assert_eq!(kind(d, "managed")["peak_bytes"], 8 * GIB);
    assert_eq!(
        d["comparison"]["status"], "not_compared",
        "{}",
        d["comparison"]
    );
    let o = &d["oversized_requests"][0];
    assert_eq!(o["size"], 100 * GIB);
    assert_eq!(o["shortfall_bytes"], 4 * GIB);
    // 16 GiB carve-out, 96 GiB GTT: the driver lets hipMalloc map GTT.
    assert_eq!(o["os_limit_bytes"], 103_079_215_104u64);
    // What it went on to hold: its split plus the managed memory.
    assert_eq!(o["peak_after_bytes"], 48 * GIB);

    // Not an APU (the runtime says integrated=0): no APU section, whatever sysfs shows.
    let cap = tmp.path().join("dgpu.mwcap");
    // The shim asks the runtime about a device (its name, `integrated`) on a flusher pass
    // while the program runs, never in the exit handler: the program holds its memory for
    // 100 ms so that a pass sees the device (with 0 ms the capture may end before one, and
    // then only sysfs speaks for the device).
    let args = [100 * GIB, 40 * GIB, 2, 0, 100].map(|v| v.to_string());
    run(
        &cap,
        prog,
        &args,
        &[
            ("MEMWATCH_TESTRT_CAPACITY", (96 * GIB).to_string()),
            ("MEMWATCH_TESTRT_INTEGRATED", "0".into()),
            ("MEMWATCH_SYSFS_ROOT", sysfs("strix-halo-uma512m-gtt120g")),
        ],
    );
    let v = common::report_json(&cap);
    assert!(v.get("apu").is_none(), "{}", v["apu"]);
    assert!(!report_human(&cap).contains("APU device"));
}

#[test]
fn over_the_real_rocm_5_2_runtime_nothing_changes_and_there_is_no_apu() {
    let (_, _, prog) = built();
    let args = [160 * GIB, 75 * GIB, 3, 0, 0].map(|v| v.to_string());
    let plain = Command::new(prog)
        .args(&args)
        .env_remove("LD_PRELOAD")
        .output()
        .unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let empty = tempfile::tempdir().unwrap();
    let cap = tmp.path().join("rocm.mwcap");
    let shimmed = run(
        &cap,
        prog,
        &args,
        &[("MEMWATCH_SYSFS_ROOT", empty.path().display().to_string())],
    );
    assert_eq!(plain.status.code(), Some(0));
    assert_eq!(
        String::from_utf8_lossy(&plain.stdout),
        String::from_utf8_lossy(&shimmed.stdout)
    );
    let text = String::from_utf8_lossy(&plain.stdout);
    // Without an AMD GPU the runtime refuses every call (hipErrorInvalidDevice).
    assert!(text.contains("r=101 hipErrorInvalidDevice"), "{text}");
    let v = common::report_json(&cap);
    assert!(v.get("apu").is_none());
    let failed: Vec<&Value> = v["failures"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["api"] == "hipMalloc")
        .collect();
    assert_eq!(failed.len(), 4, "{}", v["failures"]);
    assert!(failed
        .iter()
        .all(|f| f["result_name"] == "hipErrorInvalidDevice"));
    assert_eq!(failed[0]["size"], 160 * GIB);
}
