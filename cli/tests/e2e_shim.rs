//! End to end: `memwatch run` of the shim's C test program over the simulated HIP/CUDA
//! test runtime (agents/preload/tests), as a launcher starting several processes at once
//! (8 threads on 8 simulated devices each, a fork, every API once with OOM returns), then
//! `memwatch report --json` checked against numbers known from the program.

mod common;

use common::{report_json, workspace};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use serde_json::Value;

fn cc(args: &[&str]) {
    let out = Command::new("cc").args(args).output().expect("run cc");
    assert!(
        out.status.success(),
        "cc {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The shim next to the memwatch binary (built with `cargo build -p memwatch-preload`
/// if this test run did not build it), and the test runtime + program in a temp dir.
fn built() -> &'static (PathBuf, PathBuf) {
    static B: OnceLock<(PathBuf, PathBuf)> = OnceLock::new();
    B.get_or_init(|| {
        let shim = common::shim().clone();
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("e2e-run");
        std::fs::create_dir_all(&dir).unwrap();
        let src = workspace().join("agents/preload/tests");
        let rt = dir.join("libmemwatch_testrt.so");
        cc(&[
            "-O2",
            "-shared",
            "-fPIC",
            "-o",
            rt.to_str().unwrap(),
            src.join("runtime/memwatch_testrt.c").to_str().unwrap(),
            &format!(
                "-Wl,--version-script={}",
                src.join("runtime/memwatch_testrt.map").display()
            ),
            "-lpthread",
        ]);
        for n in ["libamdhip64.so", "libcuda.so", "libcudart.so"] {
            let l = dir.join(n);
            let _ = std::fs::remove_file(&l);
            std::os::unix::fs::symlink("libmemwatch_testrt.so", &l).unwrap();
        }
        let prog = dir.join("mwtest_dl");
        cc(&[
            "-O2",
            "-o",
            prog.to_str().unwrap(),
            src.join("c/mwtest.c").to_str().unwrap(),
            "-ldl",
            "-lpthread",
        ]);
        (shim, dir)
    })
}

fn find(report: &Value, pred: impl Fn(&Value) -> bool) -> Vec<&Value> {
    report["processes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| pred(p))
        .collect()
}

fn argv_is(p: &Value, args: &[&str]) -> bool {
    let cmd: Vec<&str> = p["command"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    cmd.len() == args.len() + 1 && cmd[1..] == *args
}

fn device(p: &Value, d: i64) -> &Value {
    p["devices"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["device"] == d)
        .unwrap_or_else(|| panic!("device {d} in {p}"))
}

fn api<'a>(p: &'a Value, name: &str) -> &'a Value {
    p["api"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["api"] == name)
        .unwrap_or_else(|| panic!("api {name}"))
}

/// `E api kind mem_kind result ptr size device errno=..` lines the program prints for
/// every call the shim must record.
fn expected_lines(path: &Path) -> Vec<(String, u64, u64, i64, u64, i64)> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .filter(|l| l.starts_with("E "))
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (
                f[1].to_string(),
                f[2].parse().unwrap(),
                f[3].parse().unwrap(),
                f[4].parse().unwrap(),
                f[6].parse().unwrap(),
                f[7].parse().unwrap(),
            )
        })
        .collect()
}

#[test]
fn launcher_with_workers_on_simulated_devices() {
    let (shim, dir) = built();
    let work = tempfile::tempdir().unwrap();
    let prog = dir.join("mwtest_dl");
    let script = format!(
        "P={p}; \"$P\" dlsym threads 40 > t40.txt & \"$P\" proc threads 25 > t25.txt & \
         \"$P\" dlsym fork > fork.txt & \"$P\" dlsym basic > basic.txt & wait; exit 5",
        p = prog.display()
    );
    let out = Command::new(env!("CARGO_BIN_EXE_memwatch"))
        .current_dir(work.path())
        .env("MEMWATCH_PRELOAD", shim)
        .env("MWTEST_LIBDIR", dir)
        .args([
            "run", "--json", "--out", "l.mwcap", "--", "sh", "-c", &script,
        ])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(5),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run: Value = serde_json::from_slice(&out.stdout).unwrap();
    for c in run["connections"].as_array().unwrap() {
        assert_eq!(c["clean"], true, "{c}");
    }
    let r = report_json(&work.path().join("l.mwcap"));
    assert_eq!(r["damage"].as_array().unwrap().len(), 0);
    assert_eq!(run["report"]["processes"], r["processes"]);

    // Two processes with 8 threads, thread d on device d doing N x (hipMalloc of
    // (d+1)*4096 + i bytes, hipFree): one live at a time.
    for (args, n) in [
        (&["dlsym", "threads", "40"], 40u64),
        (&["proc", "threads", "25"], 25),
    ] {
        let ps = find(&r, |p| argv_is(p, args));
        assert_eq!(ps.len(), 1, "{args:?}");
        let p = ps[0];
        assert_eq!(p["dropped_events"], 0);
        for d in 0..8u64 {
            let dev = device(p, d as i64);
            assert_eq!(dev["alloc_count"], n, "{args:?} device {d}");
            assert_eq!(dev["free_count"], n);
            assert_eq!(dev["failed_count"], 0);
            assert_eq!(dev["unmatched_frees"], 0);
            assert_eq!(dev["peak_bytes"], (d + 1) * 4096 + n - 1);
            assert_eq!(dev["live_bytes_at_exit"], 0);
            assert_eq!(
                dev["largest_allocations"][0]["size"],
                (d + 1) * 4096 + n - 1
            );
        }
        assert_eq!(api(p, "hipMalloc")["count"], 8 * n);
        assert_eq!(api(p, "hipFree")["count"], 8 * n);
        assert_eq!(api(p, "hipSetDevice")["count"], 8);
        assert_eq!(api(p, "hipMalloc")["errors"], 0);
    }

    // fork: the parent allocates 1000 then (after the child) 3000 bytes on device 0 and
    // frees neither; the child, its own process, allocates 2000 bytes on device 1.
    let parent = find(&r, |p| argv_is(p, &["dlsym", "fork"]))
        .into_iter()
        .find(|p| {
            p["devices"]
                .as_array()
                .unwrap()
                .iter()
                .any(|d| d["device"] == 0)
        })
        .expect("fork parent");
    let d0 = device(parent, 0);
    assert_eq!(
        (
            &d0["alloc_count"],
            &d0["peak_bytes"],
            &d0["live_bytes_at_exit"],
            &d0["live_allocs_at_exit"]
        ),
        (
            &Value::from(2),
            &Value::from(4000),
            &Value::from(4000),
            &Value::from(2)
        )
    );
    let child = find(&r, |p| p["ppid"] == parent["pid"]);
    assert_eq!(child.len(), 1);
    let c1 = device(child[0], 1);
    assert_eq!(
        (
            &c1["alloc_count"],
            &c1["peak_bytes"],
            &c1["live_bytes_at_exit"]
        ),
        (&Value::from(1), &Value::from(2000), &Value::from(2000))
    );

    // basic: every API once; per device, successful device-memory allocations and
    // failed allocations as the program printed them, and the OOM failures by name.
    let basic = find(&r, |p| argv_is(p, &["dlsym", "basic"]));
    assert_eq!(basic.len(), 1);
    let basic = basic[0];
    let lines = expected_lines(&work.path().join("basic.txt"));
    assert!(lines.len() > 50);
    let mut devices: Vec<i64> = lines.iter().map(|l| l.5).collect();
    devices.sort_unstable();
    devices.dedup();
    for d in devices {
        let on = |kind: u64, mems: &[u64]| {
            lines
                .iter()
                .filter(|l| l.5 == d && l.1 == kind && mems.contains(&l.2))
                .count() as u64
        };
        let allocs = on(1, &[1, 3, 4, 7]);
        let failed = on(3, &[0, 1, 2, 3, 4, 5, 6, 7, 8]);
        let host = on(1, &[2]);
        if allocs + failed + host == 0 {
            continue;
        }
        let dev = device(basic, d);
        assert_eq!(dev["alloc_count"], allocs, "device {d}");
        assert_eq!(dev["failed_count"], failed, "device {d}");
        assert_eq!(dev["host_pinned"]["alloc_count"], host, "device {d}");
    }
    let failures: Vec<(String, i64, String, u64)> = r["failures"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["pid"] == basic["pid"] && f["kind"] == "alloc_failed" && f["result"] == 2)
        .map(|f| {
            (
                f["api"].as_str().unwrap().to_string(),
                f["result"].as_i64().unwrap(),
                f["result_name"].as_str().unwrap().to_string(),
                f["size"].as_u64().unwrap(),
            )
        })
        .collect();
    let oom_lines: Vec<(String, i64, u64)> = lines
        .iter()
        .filter(|l| l.1 == 3 && l.3 == 2)
        .map(|l| (l.0.clone(), l.3, l.4))
        .collect();
    assert_eq!(failures.len(), oom_lines.len());
    for ((api, code, name, size), (eapi, ecode, esize)) in failures.iter().zip(&oom_lines) {
        assert_eq!((api, code, size), (eapi, ecode, esize));
        let want = match &api[..2] {
            "hi" => "hipErrorOutOfMemory",
            "cu" if api.starts_with("cuda") => "cudaErrorMemoryAllocation",
            _ => "CUDA_ERROR_OUT_OF_MEMORY",
        };
        assert_eq!(name, want, "{api}");
    }
    assert!(failures.iter().any(|f| f.0 == "hipMalloc"));
    assert!(failures.iter().any(|f| f.0 == "cuMemAlloc_v2"));
    assert!(failures.iter().any(|f| f.0 == "cudaMalloc"));
}

/// `exec` keeps the pid: the report shows each image as its own process, the old
/// image's unfreed 4000 bytes as released by the exec (not a leak), the new image's
/// unfreed 5000 bytes as live at exit; the trace frees the old image's allocation.
#[test]
fn exec_images_are_separate_processes() {
    let (shim, dir) = built();
    let work = tempfile::tempdir().unwrap();
    let prog = dir.join("mwtest_dl");
    let out = Command::new(env!("CARGO_BIN_EXE_memwatch"))
        .current_dir(work.path())
        .env("MEMWATCH_PRELOAD", shim)
        .env("MWTEST_LIBDIR", dir)
        .args(["run", "--quiet", "--out", "x.mwcap", "--"])
        .arg(&prog)
        .args(["dlsym", "exec"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("Y pid="), "{stdout}");
    let cap = work.path().join("x.mwcap");
    let v = report_json(&cap);
    let procs = v["processes"].as_array().unwrap();
    assert_eq!(procs.len(), 2, "{v}");
    assert_eq!(procs[0]["pid"], procs[1]["pid"]);
    let old = find(&v, |p| p["image"] == 0)[0];
    let new = find(&v, |p| p["image"] == 1)[0];
    assert!(argv_is(old, &["dlsym", "exec"]), "{old}");
    assert!(argv_is(new, &["dlsym", "exec-child"]), "{new}");
    assert_eq!(old["ended_by_exec"], true);
    assert_eq!(new["ended_by_exec"], false);
    let (d_old, d_new) = (device(old, 0), device(new, 0));
    assert_eq!(d_old["alloc_count"], 1);
    assert_eq!(d_old["live_bytes_at_exit"], 0);
    assert_eq!(d_old["live_bytes_at_exec"], 4000);
    assert_eq!(d_new["alloc_count"], 1);
    assert_eq!(d_new["live_bytes_at_exit"], 5000);
    assert_eq!(d_new["live_bytes_at_exec"], 0);

    let human = Command::new(env!("CARGO_BIN_EXE_memwatch"))
        .arg("report")
        .arg(&cap)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&human.stdout);
    let pid = old["pid"].as_u64().unwrap();
    assert!(
        text.contains(&format!("process {pid} (exec #1: {})", prog.display())),
        "{text}"
    );
    assert!(text.contains("replaced by exec"), "{text}");

    let trace = Command::new(env!("CARGO_BIN_EXE_memwatch"))
        .args(["report", "--trace"])
        .arg(&cap)
        .output()
        .unwrap();
    assert!(trace.status.success(), "{trace:?}");
    let lines: Vec<Value> = String::from_utf8_lossy(&trace.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let ops: Vec<(String, u64)> = lines
        .iter()
        .map(|l| {
            (
                l["op"].as_str().unwrap().to_string(),
                l["id"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        ops,
        vec![
            ("alloc".to_string(), 1),
            ("free".to_string(), 1),
            ("alloc".to_string(), 2)
        ],
        "{lines:?}"
    );
    assert_eq!(lines[0]["size"], 4000);
    assert_eq!(lines[2]["size"], 5000);
    assert_ne!(
        lines[0]["stream"], lines[2]["stream"],
        "one stream per image"
    );
}

/// MEMWATCH_BACKTRACE_EVERY_BYTES=1 samples every allocation's native stack; `memwatch
/// report` names the C functions of the known call chain (bt_chain.c, built with frame
/// pointers) from the executable's symbol table, innermost first.
#[test]
fn sampled_backtraces_name_the_calling_functions() {
    let (shim, dir) = built();
    let prog = dir.join("bt_chain");
    cc(&[
        "-O1",
        "-fno-omit-frame-pointer",
        "-fno-optimize-sibling-calls",
        "-o",
        prog.to_str().unwrap(),
        workspace()
            .join("agents/preload/tests/c/bt_chain.c")
            .to_str()
            .unwrap(),
        &format!("-L{}", dir.display()),
        "-lmemwatch_testrt",
        &format!("-Wl,-rpath,{}", dir.display()),
        "-lpthread",
    ]);
    let work = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_memwatch"))
        .current_dir(work.path())
        .env("MEMWATCH_PRELOAD", shim)
        .env("MEMWATCH_BACKTRACE_EVERY_BYTES", "1")
        .args(["run", "--quiet", "--out", "bt.mwcap", "--"])
        .arg(&prog)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let cap = work.path().join("bt.mwcap");
    let v = report_json(&cap);
    let p = &v["processes"][0];
    let largest = device(p, 0)["largest_allocations"].as_array().unwrap();
    assert_eq!(largest.len(), 3, "{p}");
    let names = |a: &Value| -> Vec<String> {
        a["stack"]
            .as_array()
            .unwrap_or_else(|| panic!("stack in {a}"))
            .iter()
            .map(|f| f["symbol"].as_str().unwrap_or("?").to_string())
            .collect()
    };
    // The second thread's allocation (8 MiB) is the largest.
    assert_eq!(largest[0]["size"], 8 << 20);
    assert_eq!(
        names(&largest[0])[..4],
        [
            "leaf_allocator",
            "middle_caller",
            "outer_caller",
            "thread_main"
        ]
    );
    assert_eq!(largest[1]["size"], 2 << 20);
    assert_eq!(
        names(&largest[1])[..4],
        ["leaf_allocator", "middle_caller", "outer_caller", "main"]
    );
    assert_eq!(largest[2]["size"], 4096);
    assert_eq!(names(&largest[2])[..2], ["leaf_allocator", "main"]);
    let f0 = &largest[1]["stack"][0];
    assert!(f0["module"].as_str().unwrap().ends_with("bt_chain"), "{f0}");
    assert!(f0["offset"].as_u64().unwrap() > 0);

    // All three are never freed: the leak list shows them with their stacks too.
    let leaks = device(p, 0)["largest_leaks"].as_array().unwrap();
    assert_eq!(leaks.len(), 3, "{p}");
    assert_eq!(leaks[0]["size"], 8 << 20);
    assert_eq!(names(&leaks[0])[3], "thread_main");

    let human = Command::new(env!("CARGO_BIN_EXE_memwatch"))
        .arg("report")
        .arg(&cap)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&human.stdout);
    assert!(text.contains("#1 middle_caller (bt_chain+0x"), "{text}");
    assert!(
        text.contains("largest leaks (live at exit), device 0:"),
        "{text}"
    );

    // Without the variable: no stacks.
    let out = Command::new(env!("CARGO_BIN_EXE_memwatch"))
        .current_dir(work.path())
        .env("MEMWATCH_PRELOAD", shim)
        .env_remove("MEMWATCH_BACKTRACE_EVERY_BYTES")
        .args(["run", "--quiet", "--out", "plain.mwcap", "--"])
        .arg(&prog)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let rep = Command::new(env!("CARGO_BIN_EXE_memwatch"))
        .args(["report", "--json"])
        .arg(work.path().join("plain.mwcap"))
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&rep.stdout).unwrap();
    let largest = device(&v["processes"][0], 0)["largest_allocations"].clone();
    assert!(largest[0].get("stack").is_none(), "{largest}");
}

/// A process CMD leaves behind that starts allocating only after CMD has exited (a
/// detached worker): memwatch is its subreaper and waits for it within --drain-timeout,
/// so its allocations are in the capture (before, run stopped as soon as no connection
/// was open, and the worker's calls were lost without a word). One still running at the
/// deadline is named in a warning.
#[test]
fn processes_left_behind_are_waited_for_and_reported() {
    let (shim, dir) = built();
    let work = tempfile::tempdir().unwrap();
    let prog = dir.join("mwtest_dl");
    let script = format!(
        "(sleep 0.4; exec {} dlsym exec-fail >/dev/null) & exit 0",
        prog.display()
    );
    let out = Command::new(env!("CARGO_BIN_EXE_memwatch"))
        .current_dir(work.path())
        .env("MEMWATCH_PRELOAD", shim)
        .env("MWTEST_LIBDIR", dir)
        .args([
            "run",
            "--quiet",
            "--out",
            "late.mwcap",
            "--",
            "sh",
            "-c",
            &script,
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let v = report_json(&work.path().join("late.mwcap"));
    let procs = v["processes"].as_array().unwrap();
    assert_eq!(procs.len(), 1, "the late worker is captured: {v}");
    assert_eq!(device(&procs[0], 0)["alloc_count"], 2);

    // The worker goes on only once the test lets it (the file `release`), after memwatch
    // has ended: memwatch must stop waiting for it after the drain timeout, whatever the
    // machine's speed (it would wait for ever otherwise: failed as hung).
    let script = format!(
        "(while [ ! -e release ]; do sleep 0.05; done; exec {} dlsym exec-fail) & exit 5",
        prog.display()
    );
    // stderr into a file: the worker outlives memwatch, and a pipe would be waited on.
    let log = work.path().join("stderr.txt");
    let mut memwatch = Command::new(env!("CARGO_BIN_EXE_memwatch"))
        .current_dir(work.path())
        .env("MEMWATCH_PRELOAD", shim)
        .env("MWTEST_LIBDIR", dir)
        .args([
            "run",
            "--drain-timeout",
            "0.5",
            "--out",
            "early.mwcap",
            "--",
            "sh",
            "-c",
        ])
        .arg(&script)
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let status = common::wait_or_hung(
        &mut memwatch,
        "memwatch run waited for a left-behind worker past --drain-timeout",
    );
    std::fs::write(work.path().join("release"), "").unwrap();
    assert_eq!(status.code(), Some(5));
    let err = std::fs::read_to_string(&log).unwrap();
    assert!(
        // The subshell and its sleep.
        err.contains("2 process(es) still running 0.")
            && err.contains("s after the command ended (pids "),
        "{err}"
    );
    // Descendants of a left-behind process count too.
    let out = Command::new(env!("CARGO_BIN_EXE_memwatch"))
        .current_dir(work.path())
        .env("MEMWATCH_PRELOAD", shim)
        .args([
            "run",
            "--drain-timeout",
            "0.3",
            "--out",
            "tree.mwcap",
            "--",
            "sh",
            "-c",
        ])
        .arg("sh -c 'sleep 2 & sleep 2 & wait' >/dev/null 2>&1 & exit 0")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap()
        .wait_with_output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("3 process(es) still running"), "{err}");
}

/// Two processes of one run each saw its GPU as device 0 (CUDA_VISIBLE_DEVICES=2 and =5
/// over the simulated CUDA driver): `memwatch report --json` names each process's device
/// 0 by the GPU it was — the simulated runtime's UUID and bus id of GPU 2 and GPU 5, in
/// the canonical forms (NVML's UUID, the bus id in lower case).
#[test]
fn each_process_device_is_named_by_the_gpu_it_was() {
    let (shim, dir) = built();
    let work = tempfile::tempdir().unwrap();
    let prog = dir.join("mwtest_dl");
    let script = format!(
        "P={p}; CUDA_VISIBLE_DEVICES=2 \"$P\" dlsym cu-threads 20000 1 & \
         CUDA_VISIBLE_DEVICES=5,1 \"$P\" dlsym cu-threads 20000 1 & wait",
        p = prog.display()
    );
    let out = Command::new(env!("CARGO_BIN_EXE_memwatch"))
        .current_dir(work.path())
        .env("MEMWATCH_PRELOAD", shim)
        .env("MWTEST_LIBDIR", dir)
        .args([
            "run", "--quiet", "--out", "v.mwcap", "--", "sh", "-c", &script,
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report = report_json(&work.path().join("v.mwcap"));
    let mut seen: Vec<(String, String)> = find(&report, |p| p["command"][1] == "dlsym")
        .iter()
        .map(|p| {
            let d = device(p, 0);
            (
                d["uuid"].as_str().unwrap_or("missing").to_string(),
                d["pci_bus_id"].as_str().unwrap_or("missing").to_string(),
            )
        })
        .collect();
    seen.sort();
    let want: Vec<(String, String)> = [2, 5]
        .iter()
        .map(|p| {
            (
                format!("GPU-6d777465-7374-7274-0000-0000000000{:02x}", 0xa0 + p),
                format!("0000:{:02x}:00.0", 0x1a + p),
            )
        })
        .collect();
    assert_eq!(seen, want, "{report}");
}
