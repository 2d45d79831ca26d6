//! The harness of the attach tests: the shim, the simulated runtime and the C target
//! programs built once, a running target and its output, attaching and detaching with
//! `memwatch attach`, reading the capture back, and checking it holds exactly the
//! iterations made while attached.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use memwatch_wire::{Api, EventKind, FrameReader, ReadMode, Record};

pub fn memwatch() -> Command {
    Command::new(env!("CARGO_BIN_EXE_memwatch"))
}

pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

pub struct Built {
    pub shim: PathBuf,
    pub target: PathBuf,
    pub target_static: PathBuf,
}

pub fn cc(args: &[&str]) {
    let out = Command::new("cc").args(args).output().expect("cc runs");
    assert!(
        out.status.success(),
        "cc {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

pub fn built() -> &'static Built {
    static B: OnceLock<Built> = OnceLock::new();
    B.get_or_init(|| {
        let exe = PathBuf::from(env!("CARGO_BIN_EXE_memwatch"));
        let shim = exe.with_file_name("libmemwatch_preload.so");
        if !shim.is_file() {
            let st = Command::new(env!("CARGO"))
                .args(["build", "-p", "memwatch-preload"])
                .current_dir(repo())
                .status()
                .unwrap();
            assert!(st.success());
        }
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("attach-tests");
        std::fs::create_dir_all(&dir).unwrap();
        let rt_src = repo().join("agents/preload/tests/runtime");
        let rt = dir.join("libmemwatch_testrt.so");
        let map = format!(
            "-Wl,--version-script={}",
            rt_src.join("memwatch_testrt.map").display()
        );
        cc(&[
            "-shared",
            "-fPIC",
            "-O1",
            "-o",
            rt.to_str().unwrap(),
            rt_src.join("memwatch_testrt.c").to_str().unwrap(),
            &map,
            "-lpthread",
        ]);
        let src = repo().join("cli/tests/c/attach_loop.c");
        let target = dir.join("attach_loop");
        let rpath = format!("-Wl,-rpath,{}", dir.display());
        let libdir = format!("-L{}", dir.display());
        cc(&[
            "-O1",
            "-o",
            target.to_str().unwrap(),
            src.to_str().unwrap(),
            &libdir,
            "-lmemwatch_testrt",
            &rpath,
        ]);
        // A static program for the error path (its own tiny runtime stand-ins).
        let st_src = dir.join("static_loop.c");
        std::fs::write(
            &st_src,
            "#include <unistd.h>\nint main(void){for(int i=0;i<200;i++)usleep(10000);return 0;}\n",
        )
        .unwrap();
        let target_static = dir.join("static_loop");
        cc(&[
            "-static",
            "-O1",
            "-o",
            target_static.to_str().unwrap(),
            st_src.to_str().unwrap(),
        ]);
        Built {
            shim,
            target,
            target_static,
        }
    })
}

pub struct Target {
    pub child: Child,
    pub lines: std::sync::mpsc::Receiver<String>,
}

impl Target {
    pub fn start(iters: u32, ms: u32) -> Target {
        Self::start_mode(iters, ms, "direct")
    }

    pub fn start_mode(iters: u32, ms: u32, mode: &str) -> Target {
        let mut child = Command::new(&built().target)
            .args([iters.to_string(), ms.to_string(), mode.to_string()])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let out = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for l in BufReader::new(out).lines() {
                if tx.send(l.unwrap()).is_err() {
                    break;
                }
            }
        });
        let first = rx.recv_timeout(Duration::from_secs(120)).unwrap();
        assert!(first.starts_with("iter 0 "), "{first}");
        let mut lines = vec![first];
        let _ = &mut lines;
        Target { child, lines: rx }
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    pub fn finish(mut self) -> (String, i32) {
        let code = self.child.wait().unwrap().code().unwrap_or(-1);
        let mut all = String::from("iter 0 size 4096 r 0\n");
        for l in self.lines.iter() {
            all.push_str(&l);
            all.push('\n');
        }
        (all, code)
    }
}

pub fn undisturbed(iters: u32) -> String {
    let out = Command::new(&built().target)
        .args([iters.to_string(), "0".into()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    String::from_utf8(out.stdout).unwrap()
}

pub fn attach(pid: i32, method: &str, extra: &[&str], out: &Path) -> std::process::Output {
    memwatch()
        .args([
            "attach",
            &pid.to_string(),
            "--method",
            method,
            "--json",
            "--out",
        ])
        .arg(out)
        .arg("--shim")
        .arg(&built().shim)
        .args(extra)
        .output()
        .unwrap()
}

/// [`attach`], tried again (up to 5 times) while gdb refuses because it stopped the
/// target outside a system call: memwatch then changes nothing and says to try again
/// (the target's output and exit code, checked at the end, show it was left alone).
pub fn attach_until_placed(
    pid: i32,
    method: &str,
    extra: &[&str],
    out: &Path,
) -> std::process::Output {
    let mut tries = 0;
    loop {
        let o = attach(pid, method, extra, out);
        let refused_safely = String::from_utf8_lossy(&o.stderr)
            .contains("was running its own code, not waiting in a system call");
        if o.status.success() || !refused_safely || tries == 4 {
            return o;
        }
        tries += 1;
        std::thread::sleep(Duration::from_millis(50));
    }
}

pub struct Capture {
    /// Sizes of hipMalloc'ed iteration buffers (4096 + i), in order.
    pub iter_allocs: Vec<u64>,
    pub iter_ptrs: Vec<u64>,
    pub free_ptrs: Vec<u64>,
    pub markers: Vec<String>,
    pub ended: bool,
}

impl Capture {
    /// Whether a marker starts with `prefix` and contains `part`.
    pub fn has_marker(&self, prefix: &str, part: &str) -> bool {
        self.markers
            .iter()
            .any(|m| m.starts_with(prefix) && m.contains(part))
    }
}

pub fn read_capture(path: &Path) -> Capture {
    let f = std::fs::File::open(path).unwrap();
    let mut r = FrameReader::new(std::io::BufReader::new(f), ReadMode::Strict).unwrap();
    let mut c = Capture {
        iter_allocs: vec![],
        iter_ptrs: vec![],
        free_ptrs: vec![],
        markers: vec![],
        ended: false,
    };
    while let Some(rec) = r.next_record().unwrap() {
        match rec {
            Record::Events(evs) => {
                for e in evs {
                    match (e.kind(), e.api()) {
                        (Some(EventKind::Alloc), Api::HipMalloc) if e.size != 1 << 20 => {
                            c.iter_allocs.push(e.size);
                            c.iter_ptrs.push(e.ptr);
                        }
                        (Some(EventKind::Free), Api::HipFree) => c.free_ptrs.push(e.ptr),
                        (k, a) => panic!("unexpected event {k:?} {a:?}"),
                    }
                }
            }
            Record::Marker(m) => c.markers.push(m.text),
            Record::ProcessEnd(_) => c.ended = true,
            _ => {}
        }
    }
    c
}

/// The iterations in the capture: contiguous, each allocated once and freed, except that
/// the first free may belong to an allocation made before attach and the last allocation
/// may be freed after detach.
pub fn check_exact(c: &Capture) -> (u64, u64) {
    assert!(
        !c.iter_allocs.is_empty(),
        "no allocations captured; markers {:?}",
        c.markers
    );
    let first = c.iter_allocs[0];
    for (i, s) in c.iter_allocs.iter().enumerate() {
        assert_eq!(
            *s,
            first + i as u64,
            "iterations are contiguous: {:?}",
            c.iter_allocs
        );
    }
    let known: std::collections::HashSet<u64> = c.iter_ptrs.iter().copied().collect();
    // The 1 MiB buffer allocated before attach is the runtime's first allocation on
    // device 0 ((0 + 1) << 40 + 0x1000); its free comes at the very end.
    const KEEP: u64 = (1 << 40) + 0x1000;
    let free_ptrs: Vec<u64> = c.free_ptrs.iter().copied().filter(|p| *p != KEEP).collect();
    let foreign: Vec<&u64> = free_ptrs.iter().filter(|p| !known.contains(p)).collect();
    assert!(foreign.len() <= 1, "frees of unknown pointers: {foreign:?}");
    if let Some(p) = foreign.first() {
        assert_eq!(
            Some(*p),
            free_ptrs.first(),
            "only the first free may predate attach"
        );
    }
    let freed_known = free_ptrs.len() - foreign.len();
    assert!(
        freed_known == c.iter_ptrs.len() || freed_known + 1 == c.iter_ptrs.len(),
        "every captured allocation but the last is freed: {} allocs {:?}, frees {:?}",
        c.iter_ptrs.len(),
        c.iter_allocs,
        c.free_ptrs
    );
    assert!(
        c.has_marker("memwatch-attach start", "(main program)"),
        "{:?}",
        c.markers
    );
    let base = c
        .markers
        .iter()
        .find(|m| m.starts_with("pre-attach-baseline device=0 "))
        .expect("baseline marker for device 0");
    let used: u64 = base
        .split(" used=")
        .nth(1)
        .unwrap()
        .split(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        used >= 1 << 20,
        "the 1 MiB allocated before attach is in the baseline: {base}"
    );
    (first - 4096, *c.iter_allocs.last().unwrap() - 4096)
}

pub fn json(out: &std::process::Output) -> serde_json::Value {
    assert!(
        out.status.success(),
        "memwatch attach failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Starts `attach_loop` in `mode` (10 ms per iteration), attaches with ptrace for
/// `duration`, and reads the capture; the target is left running to its end.
pub fn attached_for(dir: &Path, mode: &str, iters: u32, duration: &str) -> (Target, Capture) {
    let t = Target::start_mode(iters, 10, mode);
    let cap = dir.join(format!("{mode}.mwcap"));
    let j = json(&attach(t.pid(), "ptrace", &["--duration", duration], &cap));
    assert_eq!(j["targets"][0]["attached"], true, "{j}");
    (t, read_capture(&cap))
}

/// Every event in a capture file.
pub fn count_events(path: &Path) -> u64 {
    let f = std::fs::File::open(path).unwrap();
    let mut r = FrameReader::new(std::io::BufReader::new(f), ReadMode::Strict).unwrap();
    let mut n = 0;
    while let Some(rec) = r.next_record().unwrap() {
        if let Record::Events(evs) = rec {
            n += evs.len() as u64;
        }
    }
    n
}
