//! The typed errors of attaching, each worded to tell the user what to change.
//!
//! Owns the error enum and nothing else; the checks that produce these errors live in
//! `procfs` (before attaching) and `ptrace` / `gdb` (while injecting).

use std::path::PathBuf;

/// Why loading the shim into a process, or talking to it, failed.
#[derive(Debug, thiserror::Error)]
pub enum AttachError {
    #[error("no such process: pid {pid} (/proc/{pid} does not exist; it may have exited)")]
    NoSuchProcess { pid: i32 },
    #[error("process {pid} exited while memwatch was attaching ({what})")]
    ProcessExited { pid: i32, what: String },
    #[error("process {pid} has exited ({what})")]
    Exited { pid: i32, what: String },
    #[error(
        "process {pid} is a {arch} program; the built-in injector supports x86-64 Linux only \
         (use --method gdb on other architectures)"
    )]
    UnsupportedArch { pid: i32, arch: String },
    #[error("this memwatch was built for {arch}; the built-in ptrace injector supports x86-64 Linux only (use --method gdb)")]
    UnsupportedHost { arch: &'static str },
    #[error(
        "process {pid} ({exe}) is statically linked: it has no dynamic loader, so no shared \
         library can be loaded into it; start it under `memwatch run` instead (or relink it \
         dynamically)"
    )]
    StaticBinary { pid: i32, exe: String },
    #[error(
        "process {pid}: found no dlopen in its loaded libraries ({searched}); memwatch needs \
         glibc's or musl's dynamic loader in the target"
    )]
    NoDlopen { pid: i32, searched: String },
    #[error(
        "process {pid} is already being traced by pid {tracer} ({tracer_name}); a process can \
         have one tracer only: detach that debugger or tracer first"
    )]
    AlreadyTraced {
        pid: i32,
        tracer: i32,
        tracer_name: String,
    },
    #[error("ptrace of process {pid} is not permitted: {advice}")]
    PtraceDenied { pid: i32, advice: String },
    #[error("process {pid} is already captured by memwatch: {how}")]
    AlreadyAttached { pid: i32, how: String },
    #[error("ptrace {op} on process {pid} failed: {source}")]
    Ptrace {
        pid: i32,
        op: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: not a readable ELF file: {what}")]
    Elf { path: PathBuf, what: String },
    #[error("process {pid}: dlopen(\"{lib}\") failed inside the process: {reason}")]
    DlopenFailed {
        pid: i32,
        lib: String,
        reason: String,
    },
    #[error("process {pid}: {symbol} not found in the loaded shim {lib}; is it a memwatch shim of this version?")]
    EntryMissing {
        pid: i32,
        symbol: String,
        lib: String,
    },
    #[error("process {pid}: the call to {what} did not return within {secs} s (the thread may be blocked on a lock); the process was left stopped in the call")]
    CallTimeout { pid: i32, what: String, secs: u64 },
    #[error("process {pid}: the call to {what} stopped with signal {signal} at {rip:#x} instead of returning")]
    CallCrashed {
        pid: i32,
        what: String,
        signal: i32,
        rip: u64,
    },
    #[error("gdb: {0}")]
    Gdb(String),
    #[error("the shim file {0} does not exist or is not readable; build it with `cargo build -p memwatch-preload` or pass --shim PATH")]
    ShimMissing(PathBuf),
}

pub type Result<T> = std::result::Result<T, AttachError>;
