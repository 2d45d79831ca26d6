//! memwatch-attach: loads the memwatch shim (`libmemwatch_preload.so`) into a process
//! that is already running and calls its attach entry points.
//!
//! Two injectors: `gdb` in batch mode driven by the data file `gdb/inject.gdb` ([`gdb`]),
//! and a built-in ptrace injector for x86-64 Linux ([`ptrace`]) for hosts without gdb.
//! Both do the same thing: `dlopen(shim, RTLD_NOW)` inside the target, then call
//! `int memwatch_attach_start(const char *sink)` or `int memwatch_attach_stop(const char
//! *reason)` in the shim. The shim is never unloaded (its hooks may be in use).
//!
//! Modules: `procfs` (what /proc says: existence, tracer, yama, caps, maps, children),
//! `elfsym` (symbol addresses in another process), `ptrace` (the remote-call session),
//! `gdb`, `smi` (nvidia-smi per-process figures), `error`. Nothing here receives events:
//! the CLI does that.
#![doc = include_str!("../README.md")]

pub mod elfsym;
pub mod error;
pub mod gdb;
pub mod procfs;
pub mod ptrace;
pub mod smi;

use std::path::Path;
use std::time::Duration;

pub use error::{AttachError, Result};
use procfs::Proc;

/// The shim's entry point that starts capturing: `int memwatch_attach_start(const char
/// *sink)`; returns 0 when capture started, 1 when the process is already captured,
/// negative on failure.
pub const START_ENTRY: &str = "memwatch_attach_start";
/// The shim's entry point that stops capturing and unpatches its hooks:
/// `int memwatch_attach_stop(const char *reason)`; 0 stopped, 1 was not capturing.
pub const STOP_ENTRY: &str = "memwatch_attach_stop";

/// `RTLD_NOW`.
const RTLD_NOW: u64 = 2;
/// glibc's private flag that `__libc_dlopen_mode` callers pass (glibc < 2.34).
const RTLD_DLOPEN_PRIVATE: u64 = 0x8000_0000;

/// How to inject.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    Gdb,
    Ptrace,
}

impl Method {
    pub fn name(self) -> &'static str {
        match self {
            Method::Gdb => "gdb",
            Method::Ptrace => "ptrace",
        }
    }
}

/// The user's choice. `Auto` is the built-in injector on x86-64 Linux (it pauses one
/// thread for ~10-50 ms; gdb stops every thread for ~0.8 s while it reads symbols), and
/// gdb on other architectures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MethodChoice {
    Auto,
    Gdb,
    Ptrace,
}

impl MethodChoice {
    pub fn resolve(self) -> Method {
        match self {
            MethodChoice::Gdb => Method::Gdb,
            MethodChoice::Ptrace => Method::Ptrace,
            MethodChoice::Auto if cfg!(all(target_arch = "x86_64", target_os = "linux")) => {
                Method::Ptrace
            }
            MethodChoice::Auto => Method::Gdb,
        }
    }
}

/// What one injection did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Injected {
    pub method: Method,
    /// The entry point's return value.
    pub entry_result: i32,
    /// How long the target (its stopped thread; with gdb all threads) was paused.
    pub pause: Duration,
    /// ptrace only: whether the thread was caught at a system-call boundary.
    pub at_syscall: Option<bool>,
}

/// Checks that can fail before touching the process: it exists, nobody traces it, and it
/// is dynamically linked.
pub fn preflight(proc_: &Proc, pid: i32) -> Result<()> {
    proc_.require_process(pid)?;
    proc_.require_untraced(pid)?;
    let maps = proc_.maps(pid)?;
    let has_loader = elfsym::loaded_objects(&maps)
        .iter()
        .any(|(p, _)| elfsym::is_libc_like(elfsym::file_name(p)));
    if !has_loader {
        let exe = std::fs::read_link(format!("/proc/{pid}/exe"))
            .map(|p| p.display().to_string())
            .unwrap_or_else(|_| "?".into());
        return Err(AttachError::StaticBinary { pid, exe });
    }
    Ok(())
}

/// Loads `shim` into `pid` and calls `entry(arg)` there.
pub fn call_entry(
    pid: i32,
    shim: &Path,
    entry: &str,
    arg: &str,
    method: Method,
) -> Result<Injected> {
    let proc_ = Proc::default();
    preflight(&proc_, pid)?;
    if std::fs::metadata(shim).is_err() {
        return Err(AttachError::ShimMissing(shim.to_path_buf()));
    }
    match method {
        Method::Gdb => gdb::inject(&proc_, pid, shim, entry, arg),
        Method::Ptrace => ptrace_inject(&proc_, pid, shim, entry, arg),
    }
}

fn ptrace_inject(proc_: &Proc, pid: i32, shim: &Path, entry: &str, arg: &str) -> Result<Injected> {
    proc_.require_x86_64(pid)?;
    let maps = proc_.maps(pid)?;
    let (dlopen, mode) =
        match elfsym::find_symbol(proc_, pid, &maps, elfsym::is_libc_like, "dlopen")? {
            Some(r) => (r, RTLD_NOW),
            None => match elfsym::find_symbol(
                proc_,
                pid,
                &maps,
                |f| f.starts_with("libc.so") || f.starts_with("libc-"),
                "__libc_dlopen_mode",
            )? {
                Some(r) => (r, RTLD_NOW | RTLD_DLOPEN_PRIVATE),
                None => {
                    let searched: Vec<String> = elfsym::loaded_objects(&maps)
                        .into_iter()
                        .map(|(p, _)| elfsym::file_name(&p).to_string())
                        .filter(|f| elfsym::is_libc_like(f))
                        .collect();
                    return Err(AttachError::NoDlopen {
                        pid,
                        searched: searched.join(", "),
                    });
                }
            },
        };
    let dlerror = elfsym::find_symbol(proc_, pid, &maps, elfsym::is_libc_like, "dlerror")?;
    let shim_str = shim.to_string_lossy().into_owned();

    let mut session = ptrace::Session::attach(proc_, pid, &maps)?;
    let at_syscall = session.at_syscall;
    let handle = session.call(
        "dlopen",
        dlopen.addr,
        &[ptrace::Arg::Str(0), ptrace::Arg::Int(mode)],
        &[&shim_str],
    )?;
    if handle == 0 {
        let reason = match dlerror {
            Some(d) if mode == RTLD_NOW => {
                let msg = session.call("dlerror", d.addr, &[], &[])?;
                if msg == 0 {
                    "no reason given".to_string()
                } else {
                    session.read_cstr(msg)
                }
            }
            _ => "no reason available".to_string(),
        };
        session.detach()?;
        return Err(AttachError::DlopenFailed {
            pid,
            lib: shim_str,
            reason,
        });
    }
    // The shim is mapped now: find its entry point the same way as dlopen.
    let maps = proc_.maps(pid)?;
    let canon = std::fs::canonicalize(shim).unwrap_or_else(|_| shim.to_path_buf());
    let canon = canon.to_string_lossy().into_owned();
    // Only the shim's own mapping is searched: other mapped files are irrelevant and may
    // not be readable ELF objects at all.
    let shim_file = elfsym::file_name(&canon).to_string();
    let entry_addr = elfsym::find_symbol(proc_, pid, &maps, |f| f == shim_file, entry)
        .ok()
        .flatten()
        .filter(|r| r.object == canon || r.object == shim_str);
    let entry_addr = match entry_addr {
        Some(r) => r.addr,
        None => {
            // Look in the shim's own mapping only (another object may export the name).
            let objs = elfsym::loaded_objects(&maps);
            let found = objs
                .iter()
                .find(|(p, _)| *p == canon || *p == shim_str)
                .map(|(p, start)| elfsym::symbol_in_object(proc_, pid, p, *start, entry))
                .transpose()?
                .flatten();
            match found {
                Some(a) => a,
                None => {
                    session.detach()?;
                    return Err(AttachError::EntryMissing {
                        pid,
                        symbol: entry.into(),
                        lib: shim_str,
                    });
                }
            }
        }
    };
    let ret = session.call(entry, entry_addr, &[ptrace::Arg::Str(0)], &[arg])?;
    let pause = session.detach()?;
    Ok(Injected {
        method: Method::Ptrace,
        entry_result: ret as u32 as i32,
        pause: pause.stopped,
        at_syscall: Some(at_syscall),
    })
}
