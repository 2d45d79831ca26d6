//! Shared helpers of the shim's integration tests: building the shim, the C test
//! runtime and the C test programs, running them with and without `LD_PRELOAD`, and
//! reading captures back with memwatch-wire's `FrameReader` (strict mode).
#![allow(dead_code)]

use memwatch_wire::{Event, EventKind, FrameReader, MemKind, ReadMode, Record};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output};
use std::sync::OnceLock;

pub struct Built {
    pub dir: PathBuf,
    pub shim: PathBuf,
    pub direct: PathBuf,
    pub dl: PathBuf,
}

pub fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `libmemwatch_preload.so` next to the test binary's profile dir, built or brought up to date.
fn shim_path() -> PathBuf {
    let exe = std::env::current_exe().expect("test exe path");
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("target/<profile>");
    let so = profile_dir.join("libmemwatch_preload.so");
    // `cargo test -p memwatch-preload` builds the crate's rlib, not its cdylib: build the
    // shim every time (a no-op when it is fresh), or an edited shim is tested stale.
    {
        let mut args = vec!["build", "-p", "memwatch-preload"];
        if profile_dir.file_name().is_some_and(|n| n == "release") {
            args.push("--release");
        }
        let st = Command::new(env!("CARGO"))
            .args(&args)
            .current_dir(crate_dir())
            .status()
            .expect("run cargo build");
        assert!(st.success(), "cargo build -p memwatch-preload failed");
    }
    assert!(so.exists(), "shim not found at {}", so.display());
    so
}

/// Runs the C compiler; fails the test with its message.
pub fn cc(args: &[&str]) {
    let out = Command::new("cc").args(args).output().expect("run cc");
    assert!(
        out.status.success(),
        "cc {:?} failed:\n{}",
        args,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Builds the shared library `out` from the C file `src`, linked with `libs`.
pub fn cc_shared(out: &Path, src: &Path, libs: &[&str]) {
    let mut args = vec![
        "-O2",
        "-Wall",
        "-shared",
        "-fPIC",
        "-o",
        out.to_str().unwrap(),
        src.to_str().unwrap(),
    ];
    args.extend_from_slice(libs);
    cc(&args);
}

/// Waits for `child`, polling; past 120 s (generous: a busy machine may take seconds for
/// what takes milliseconds) it kills it and fails the test with "`what` hung" (a test of a
/// hang must not hang itself).
pub fn wait_bounded(child: &mut Child, what: &str) -> ExitStatus {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what} hung");
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// Builds everything once per test binary into CARGO_TARGET_TMPDIR/<tag>.
pub fn built(tag: &str) -> &'static Built {
    static B: OnceLock<Built> = OnceLock::new();
    B.get_or_init(|| {
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("preload-{tag}"));
        std::fs::create_dir_all(&dir).unwrap();
        let src = crate_dir().join("tests");
        let rt_c = src.join("runtime/memwatch_testrt.c");
        let prog = src.join("c/mwtest.c");
        let rt = dir.join("libmemwatch_testrt.so");
        let map = format!(
            "-Wl,--version-script={}",
            src.join("runtime/memwatch_testrt.map").display()
        );
        cc_shared(&rt, &rt_c, &[&map, "-lpthread"]);
        for n in ["libamdhip64.so", "libcuda.so", "libcudart.so"] {
            let l = dir.join(n);
            let _ = std::fs::remove_file(&l);
            std::os::unix::fs::symlink("libmemwatch_testrt.so", &l).unwrap();
        }
        let direct = dir.join("mwtest_direct");
        let rpath = format!("-Wl,-rpath,{}", dir.display());
        let ldir = format!("-L{}", dir.display());
        cc(&[
            "-O2",
            "-Wall",
            "-DDIRECT",
            "-o",
            direct.to_str().unwrap(),
            prog.to_str().unwrap(),
            &ldir,
            "-lmemwatch_testrt",
            &rpath,
            "-lpthread",
        ]);
        let dl = dir.join("mwtest_dl");
        cc(&[
            "-O2",
            "-Wall",
            "-o",
            dl.to_str().unwrap(),
            prog.to_str().unwrap(),
            "-ldl",
            "-lpthread",
        ]);
        Built {
            shim: shim_path(),
            dir,
            direct,
            dl,
        }
    })
}

impl Built {
    pub fn program(&self, mode: &str) -> &Path {
        if mode == "direct" {
            &self.direct
        } else {
            &self.dl
        }
    }

    /// Runs the test program; `capture` = Some(path) preloads the shim with a file sink.
    pub fn run(
        &self,
        mode: &str,
        args: &[&str],
        capture: Option<&Path>,
        extra_env: &[(&str, &str)],
    ) -> Output {
        let mut c = Command::new(self.program(mode));
        c.arg(mode)
            .args(args)
            .env("MWTEST_LIBDIR", &self.dir)
            .env_remove("MEMWATCH_SINK")
            .env_remove("LD_PRELOAD");
        if let Some(cap) = capture {
            c.env("LD_PRELOAD", &self.shim)
                .env("MEMWATCH_SINK", format!("file:{}", cap.display()));
        }
        for (k, v) in extra_env {
            c.env(k, v);
        }
        let out = c.output().expect("run test program");
        assert!(
            out.status.success(),
            "program {mode} {args:?} failed: {:?}\nstdout:\n{}\nstderr:\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        out
    }
}

/// All records of a capture, read strictly (any damage fails the test).
pub fn read_capture(path: &Path) -> Vec<Record> {
    let f = std::fs::File::open(path).unwrap_or_else(|e| panic!("open {}: {e}", path.display()));
    let mut r = FrameReader::new(std::io::BufReader::new(f), ReadMode::Strict).expect("preamble");
    let mut out = Vec::new();
    while let Some(rec) = r.next_record().expect("frame") {
        out.push(rec);
    }
    assert!(r.damage().is_empty(), "damage: {:?}", r.damage());
    out
}

pub fn events(recs: &[Record]) -> Vec<Event> {
    recs.iter()
        .filter_map(|r| match r {
            Record::Events(e) => Some(e.clone()),
            _ => None,
        })
        .flatten()
        .collect()
}

/// How many of `evs` came from the API named `name` (its C name, e.g. `hipMalloc`).
/// The last cumulative dropped-events count in a capture (0 when none was written).
pub fn dropped_total(recs: &[Record]) -> u64 {
    recs.iter()
        .filter_map(|r| match r {
            Record::Dropped(d) => Some(d.dropped_total),
            _ => None,
        })
        .max()
        .unwrap_or(0)
}

pub fn count_api(evs: &[Event], name: &str) -> usize {
    evs.iter().filter(|e| e.api().name() == name).count()
}

/// The value of ` key=VALUE` in a test or bench program's output line(s).
pub fn field<T: std::str::FromStr>(text: &str, key: &str) -> T {
    text.split(&format!(" {key}="))
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {key}=VALUE in: {text}"))
}

/// One expected event as printed by mwtest (`E api kind mem_kind result ptr size device errno=..`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expected {
    pub api: String,
    pub kind: Option<EventKind>,
    pub mem_kind: Option<MemKind>,
    pub result: i32,
    pub ptr: u64,
    pub host_ptr: bool,
    pub size: u64,
    pub device: i32,
}

pub fn expected(stdout: &str) -> Vec<Expected> {
    stdout
        .lines()
        .filter(|l| l.starts_with("E "))
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let (host_ptr, ptr) = match f[5].strip_prefix('h') {
                Some(p) => (true, p),
                None => (false, f[5]),
            };
            Expected {
                api: f[1].to_string(),
                kind: EventKind::from_u8(f[2].parse().unwrap()),
                mem_kind: MemKind::from_u8(f[3].parse().unwrap()),
                result: f[4].parse().unwrap(),
                ptr: u64::from_str_radix(ptr.trim_start_matches("0x"), 16).unwrap(),
                host_ptr,
                size: f[6].parse().unwrap(),
                device: f[7].parse().unwrap(),
            }
        })
        .collect()
}

/// Turns an event into the same shape as the program's line.
pub fn as_expected(e: &Event, host_ptr: bool) -> Expected {
    Expected {
        api: e.api().name().to_string(),
        kind: e.kind(),
        mem_kind: e.mem_kind(),
        result: e.result,
        ptr: e.ptr,
        host_ptr,
        size: e.size,
        device: e.device,
    }
}

/// Program output with run-dependent host pointers masked.
pub fn normalized(stdout: &[u8]) -> String {
    String::from_utf8_lossy(stdout)
        .split_whitespace()
        .map(|w| if w.starts_with("h0x") { "h*" } else { w })
        .collect::<Vec<_>>()
        .join(" ")
}

pub fn capture_path(dir: &tempfile::TempDir, name: &str) -> PathBuf {
    dir.path().join(name)
}
