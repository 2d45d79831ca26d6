//! `memwatch attach` to a running PJRT job (issue 23 item 4): the job took its
//! `PJRT_Api` table long before the attach (agents/preload/tests/pjrt/
//! pjrt_attach_job.c over the C test plugin fake_pjrt_plugin.c), so the shim wraps that
//! live table in place. While attached the job leaks executable outputs until an
//! execute fails for lack of device memory; the capture must hold what `memwatch run`
//! would have recorded from then on — the executables (compiled before the attach),
//! every execute and output, the failing execute with its RESOURCE_EXHAUSTED code and
//! request, allocator samples showing the growth — plus the pre-attach baseline: one
//! allocator sample per device and the live buffers the first executes named. The job's
//! output and exit code must equal a plain run's, and after the detach every entry of
//! its table must be the plugin's again.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

use memwatch_wire::{Api, EventKind, FrameReader, MemKind, ReadMode, Record};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn cc(args: &[&str]) {
    let out = Command::new("cc").args(args).output().expect("cc runs");
    assert!(
        out.status.success(),
        "cc {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

struct Built {
    shim: PathBuf,
    plugin: PathBuf,
    job: PathBuf,
}

fn built() -> Built {
    // The shim as this checkout builds it (a no-op when fresh).
    let st = Command::new(env!("CARGO"))
        .args(["build", "-p", "memwatch-preload"])
        .current_dir(repo())
        .status()
        .unwrap();
    assert!(st.success(), "cargo build -p memwatch-preload");
    let shim =
        PathBuf::from(env!("CARGO_BIN_EXE_memwatch")).with_file_name("libmemwatch_preload.so");
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("attach-pjrt");
    std::fs::create_dir_all(&dir).unwrap();
    let src = repo().join("agents/preload/tests/pjrt");
    let plugin = dir.join("fake_pjrt_plugin.so");
    let job = dir.join("pjrt_attach_job");
    let plugin_src = src.join("fake_pjrt_plugin.c");
    let job_src = src.join("pjrt_attach_job.c");
    cc(&[
        "-O2",
        "-Wall",
        "-Werror",
        "-shared",
        "-fPIC",
        "-o",
        plugin.to_str().unwrap(),
        plugin_src.to_str().unwrap(),
        "-ldl",
        "-lpthread",
    ]);
    cc(&[
        "-O2",
        "-Wall",
        "-Werror",
        "-o",
        job.to_str().unwrap(),
        job_src.to_str().unwrap(),
        "-ldl",
    ]);
    Built { shim, plugin, job }
}

struct Job {
    child: Child,
    lines: Receiver<String>,
    out: Vec<String>,
    dir: PathBuf,
}

impl Job {
    fn start(b: &Built, dir: &Path) -> Job {
        let mut child = Command::new(&b.job)
            .arg(&b.plugin)
            .arg(dir)
            .env_remove("LD_PRELOAD")
            .env_remove("MEMWATCH_SINK")
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for l in BufReader::new(stdout).lines() {
                if tx.send(l.unwrap()).is_err() {
                    break;
                }
            }
        });
        let mut j = Job {
            child,
            lines,
            out: Vec::new(),
            dir: dir.to_path_buf(),
        };
        j.wait_for("ready");
        j
    }

    /// Reads lines until one starts with `prefix` (bounded: 30 s).
    fn wait_for(&mut self, prefix: &str) {
        let deadline = Instant::now() + Duration::from_secs(120);
        while !self.out.last().is_some_and(|l| l.starts_with(prefix)) {
            let left = deadline.saturating_duration_since(Instant::now());
            let l = self
                .lines
                .recv_timeout(left)
                .unwrap_or_else(|_| panic!("no {prefix:?} line; got {:?}", self.out));
            self.out.push(l);
        }
    }

    fn touch(&self, name: &str) {
        std::fs::write(self.dir.join(name), "").unwrap();
    }

    fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// Lets the job finish; its whole output and exit code.
    fn finish(mut self) -> (Vec<String>, Option<i32>) {
        self.touch("detached");
        let code = self.child.wait().unwrap().code();
        self.out.extend(self.lines.iter());
        (self.out, code)
    }
}

/// Every record of a capture (salvage: the attach may still be writing).
fn records(path: &Path) -> Vec<Record> {
    let Ok(f) = std::fs::File::open(path) else {
        return Vec::new();
    };
    let Ok(mut r) = FrameReader::new(BufReader::new(f), ReadMode::Salvage) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    while let Ok(Some(rec)) = r.next_record() {
        out.push(rec);
    }
    out
}

fn markers(recs: &[Record]) -> Vec<String> {
    recs.iter()
        .filter_map(|r| match r {
            Record::Marker(m) => Some(m.text.clone()),
            _ => None,
        })
        .collect()
}

/// The number after `key=` in `text`.
fn field(text: &str, key: &str) -> u64 {
    text.split(&format!("{key}="))
        .nth(1)
        .and_then(|r| r.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {key}= in {text:?}"))
}

#[test]
fn attach_wraps_a_running_jobs_pjrt_table_and_detach_restores_it() {
    let b = built();
    let tmp = tempfile::tempdir().unwrap();

    // The job on its own.
    let plain_dir = tmp.path().join("plain");
    std::fs::create_dir_all(&plain_dir).unwrap();
    let mut plain = Job::start(&b, &plain_dir);
    plain.touch("go");
    plain.wait_for("oom at");
    let (plain_out, plain_code) = plain.finish();
    assert_eq!(plain_code, Some(5), "{plain_out:?}");
    assert!(plain_out.iter().any(|l| l == "table entries changed=0"));

    // The same job, attached to while it runs.
    let dir = tmp.path().join("attached");
    std::fs::create_dir_all(&dir).unwrap();
    let mut job = Job::start(&b, &dir);
    let cap = tmp.path().join("attach.mwcap");
    let mut attach = Command::new(env!("CARGO_BIN_EXE_memwatch"))
        .args([
            "attach",
            &job.pid().to_string(),
            "--method",
            "ptrace",
            "--json",
        ])
        .arg("--out")
        .arg(&cap)
        .arg("--shim")
        .arg(&b.shim)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    while !markers(&records(&cap))
        .iter()
        .any(|m| m.starts_with("memwatch-attach start"))
    {
        if let Some(st) = attach.try_wait().unwrap() {
            let out = attach.wait_with_output().unwrap();
            panic!(
                "attach ended early ({st}): {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        assert!(Instant::now() < deadline, "no attach start marker");
        std::thread::sleep(Duration::from_millis(50));
    }
    job.touch("go");
    job.wait_for("oom at");
    // Let the flusher take a sample after the failed execute, then detach.
    std::thread::sleep(Duration::from_millis(400));
    let st = Command::new("kill")
        .args(["-INT", &attach.id().to_string()])
        .status()
        .unwrap();
    assert!(st.success());
    let out = attach.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "attach: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (job_out, job_code) = job.finish();

    // The job saw nothing: same output, same exit code, its table as it was.
    assert_eq!(job_out, plain_out);
    assert_eq!(job_code, Some(5));

    let recs = records(&cap);
    let marks = markers(&recs);
    let start = marks
        .iter()
        .find(|m| m.starts_with("memwatch-attach start"))
        .unwrap();
    assert!(start.contains("pjrt_table=wrapped"), "{start}");
    let wrapped = field(start, "pjrt_slots");
    assert!(wrapped >= 12, "{start}");
    let stop = marks
        .iter()
        .find(|m| m.starts_with("memwatch-attach stop"))
        .expect("stop marker");
    assert_eq!(field(stop, "restored_pjrt_slots"), wrapped, "{stop}");

    // The executables, compiled before the attach, described at their first execute.
    let exes: Vec<(String, u64)> = recs
        .iter()
        .filter_map(|r| match r {
            Record::PjrtExecutable(x) => Some((x.name.clone(), x.handle)),
            _ => None,
        })
        .collect();
    let leak = exes
        .iter()
        .find(|(n, _)| n == "jit_leak_step")
        .unwrap_or_else(|| panic!("jit_leak_step described: {exes:?}"))
        .1;
    assert!(exes.iter().any(|(n, _)| n == "jit_step"), "{exes:?}");

    let events: Vec<memwatch_wire::Event> = recs
        .iter()
        .filter_map(|r| match r {
            Record::Events(e) => Some(e.clone()),
            _ => None,
        })
        .flatten()
        .collect();
    let oom_step: u64 = plain_out
        .iter()
        .find_map(|l| l.strip_prefix("oom at step "))
        .and_then(|r| r.split(' ').next()?.parse().ok())
        .expect("the job's OOM line");
    // Every leak step's execute on both devices, the last one failing for lack of memory
    // with the request its message names.
    let leak_execs: Vec<_> = events
        .iter()
        .filter(|e| e.is_api(Api::PjrtExecute) && e.ptr == leak)
        .collect();
    assert_eq!(
        leak_execs.len() as u64,
        2 * (oom_step + 1),
        "{leak_execs:?}"
    );
    let failed: Vec<_> = leak_execs.iter().filter(|e| e.result != 0).collect();
    assert_eq!(failed.len(), 2, "one span per device: {failed:?}");
    assert!(
        failed.iter().all(|e| e.result == 8 && e.size == 64 << 20),
        "RESOURCE_EXHAUSTED for the 64 MiB output: {failed:?}"
    );
    // Their outputs: 64 MiB on each device per successful step.
    let outputs = events
        .iter()
        .filter(|e| e.is_api(Api::PjrtExecuteOutput) && e.aux == leak && e.is(EventKind::Alloc))
        .count() as u64;
    assert_eq!(
        outputs,
        2 * oom_step,
        "outputs of {oom_step} successful steps"
    );

    // The baseline: the six parameter buffers (3 per device, 8 MiB each) made before the
    // attach, named by the first executes, each once.
    let pre: Vec<_> = events
        .iter()
        .filter(|e| e.is_api(Api::PjrtBufferPreAttach))
        .collect();
    assert_eq!(pre.len(), 6, "{pre:?}");
    assert!(pre
        .iter()
        .all(|e| e.is(EventKind::Alloc) && e.is_mem(MemKind::PjrtBuffer) && e.size == 8 << 20));
    let bufs = marks
        .iter()
        .rfind(|m| m.starts_with("pre-attach-pjrt-buffers"))
        .unwrap_or_else(|| panic!("{marks:?}"));
    assert_eq!(field(bufs, "count"), 6, "{bufs}");
    assert_eq!(field(bufs, "bytes"), 6 * (8 << 20), "{bufs}");
    for dev in 0..2 {
        let s = marks
            .iter()
            .find(|m| m.starts_with(&format!("pre-attach-pjrt-sample device={dev} ")))
            .unwrap_or_else(|| panic!("sample marker for device {dev}: {marks:?}"));
        assert!(field(s, "bytes_in_use") >= 3 * (8 << 20), "{s}");
    }

    // Allocator samples show the leak's growth on a device.
    let in_use: Vec<(i32, i64)> = recs
        .iter()
        .filter_map(|r| match r {
            Record::PjrtMemoryStats(s) => Some((s.device, s.bytes_in_use)),
            _ => None,
        })
        .collect();
    let growth = (0..2)
        .map(|d| {
            let v: Vec<i64> = in_use.iter().filter(|s| s.0 == d).map(|s| s.1).collect();
            v.iter().max().unwrap_or(&0) - v.iter().min().unwrap_or(&0)
        })
        .max()
        .unwrap_or(0);
    assert!(
        growth >= 10 * (64 << 20),
        "samples grew by {growth} bytes ({} samples)",
        in_use.len()
    );
}
