//! The built-in injector (x86-64 Linux): stops one thread of the target with ptrace,
//! makes it call functions (dlopen, the shim's entry points) with a fake return address
//! that traps, and puts registers and memory back exactly as they were.
//!
//! Owns the ptrace session ([`Session`]): seize, interrupt, syscall-boundary selection,
//! remote calls, restoring state, detaching, and the pause measurement. It does not
//! decide what to call (see `inject`).

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::time::{Duration, Instant};

use crate::error::{AttachError, Result};
use crate::procfs::{Mapping, Proc};

/// How long a remote call may run before we give up on it.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// How long to wait for the thread to reach a system call boundary (a safe point where it
/// holds no C-library lock) before injecting wherever it stopped.
const SYSCALL_WAIT: Duration = Duration::from_millis(100);
/// Bytes below the stack pointer left untouched (the x86-64 red zone, plus margin).
const RED_ZONE: u64 = 256;

fn ptrace_err(pid: i32, op: &'static str) -> AttachError {
    AttachError::Ptrace {
        pid,
        op,
        source: std::io::Error::last_os_error(),
    }
}

/// A stopped thread under our control. Dropping it restores and detaches.
pub struct Session {
    pid: i32,
    mem: File,
    /// The registers to put back on detach.
    restore: libc::user_regs_struct,
    /// The registers calls start from (a state where no system call restarts).
    base: libc::user_regs_struct,
    /// Where called functions return to: an existing int3 byte (or 0, trapping by SIGSEGV).
    trap_addr: u64,
    /// The whole extended register state at the stop (x87, SSE, AVX, AVX-512: the
    /// kernel's XSAVE layout). Called functions clobber vector registers, which
    /// interrupted user code can have live.
    xstate: Option<Vec<u8>>,
    /// The x87/SSE state at the stop, put back where the kernel offers no XSAVE regset
    /// or refuses to write it.
    fpregs: Option<libc::user_fpregs_struct>,
    /// Stack bytes we overwrote: (address, original bytes).
    saved_mem: Vec<(u64, Vec<u8>)>,
    stopped_at: Instant,
    detached: bool,
    /// Whether we caught the thread at a system-call boundary.
    pub at_syscall: bool,
}

/// What the target experienced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pause {
    /// From the stop used for injecting until the thread ran again.
    pub stopped: Duration,
}

fn wait_stop(pid: i32, deadline: Option<Instant>) -> Result<Option<i32>> {
    loop {
        let mut status = 0;
        let flags = libc::__WALL | if deadline.is_some() { libc::WNOHANG } else { 0 };
        let r = unsafe { libc::waitpid(pid, &mut status, flags) };
        if r < 0 {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return Err(AttachError::Ptrace {
                pid,
                op: "waitpid",
                source: e,
            });
        }
        if r == 0 {
            match deadline {
                Some(d) if Instant::now() < d => {
                    std::thread::sleep(Duration::from_micros(200));
                    continue;
                }
                _ => return Ok(None),
            }
        }
        if libc::WIFEXITED(status) || libc::WIFSIGNALED(status) {
            return Err(AttachError::ProcessExited {
                pid,
                what: "while stopped for injection".into(),
            });
        }
        return Ok(Some(status));
    }
}

fn get_regs(pid: i32) -> Result<libc::user_regs_struct> {
    let mut regs: libc::user_regs_struct = unsafe { std::mem::zeroed() };
    let r = unsafe {
        libc::ptrace(
            libc::PTRACE_GETREGS,
            pid,
            std::ptr::null_mut::<libc::c_void>(),
            &mut regs as *mut _ as *mut libc::c_void,
        )
    };
    if r < 0 {
        return Err(ptrace_err(pid, "GETREGS"));
    }
    Ok(regs)
}

/// `NT_X86_XSTATE`: the regset holding the XSAVE area.
const NT_X86_XSTATE: usize = 0x202;

/// The thread's XSAVE area, as long as the kernel says (`None` without the regset).
fn get_xstate(pid: i32) -> Option<Vec<u8>> {
    // Larger than any XSAVE area (AMX tiles included, about 11 KiB).
    let mut buf = vec![0u8; 64 * 1024];
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: PTRACE_GETREGSET writes at most iov_len bytes to iov_base and sets iov_len
    // to what it wrote.
    let r = unsafe {
        libc::ptrace(
            libc::PTRACE_GETREGSET,
            pid,
            NT_X86_XSTATE as *mut libc::c_void,
            &mut iov as *mut libc::iovec as *mut libc::c_void,
        )
    };
    if r < 0 || iov.iov_len == 0 {
        return None;
    }
    buf.truncate(iov.iov_len);
    Some(buf)
}

/// Writes an XSAVE area read by [`get_xstate`] back; whether the kernel took it.
fn set_xstate(pid: i32, area: &[u8]) -> bool {
    let mut iov = libc::iovec {
        iov_base: area.as_ptr() as *mut libc::c_void,
        iov_len: area.len(),
    };
    // SAFETY: PTRACE_SETREGSET reads iov_len bytes from iov_base.
    let r = unsafe {
        libc::ptrace(
            libc::PTRACE_SETREGSET,
            pid,
            NT_X86_XSTATE as *mut libc::c_void,
            &mut iov as *mut libc::iovec as *mut libc::c_void,
        )
    };
    r == 0
}

fn get_fpregs(pid: i32) -> Option<libc::user_fpregs_struct> {
    let mut fp: libc::user_fpregs_struct = unsafe { std::mem::zeroed() };
    // SAFETY: PTRACE_GETFPREGS fills a user_fpregs_struct.
    let r = unsafe {
        libc::ptrace(
            libc::PTRACE_GETFPREGS,
            pid,
            std::ptr::null_mut::<libc::c_void>(),
            &mut fp as *mut _ as *mut libc::c_void,
        )
    };
    (r == 0).then_some(fp)
}

fn set_regs(pid: i32, regs: &libc::user_regs_struct) -> Result<()> {
    let r = unsafe {
        libc::ptrace(
            libc::PTRACE_SETREGS,
            pid,
            std::ptr::null_mut::<libc::c_void>(),
            regs as *const _ as *mut libc::c_void,
        )
    };
    if r < 0 {
        return Err(ptrace_err(pid, "SETREGS"));
    }
    Ok(())
}

fn resume(pid: i32, req: libc::c_uint, sig: i32) -> Result<()> {
    let r = unsafe {
        libc::ptrace(
            req,
            pid,
            std::ptr::null_mut::<libc::c_void>(),
            sig as usize as *mut libc::c_void,
        )
    };
    if r < 0 {
        return Err(ptrace_err(
            pid,
            if req == libc::PTRACE_SYSCALL {
                "SYSCALL"
            } else {
                "CONT"
            },
        ));
    }
    Ok(())
}

impl Session {
    /// Seizes and stops the thread `pid` (the main thread), preferring a stop at a system
    /// call boundary. Errors explain EPERM (yama, capabilities) and ESRCH.
    pub fn attach(proc_: &Proc, pid: i32, maps: &[Mapping]) -> Result<Self> {
        if !cfg!(all(target_arch = "x86_64", target_os = "linux")) {
            return Err(AttachError::UnsupportedHost {
                arch: std::env::consts::ARCH,
            });
        }
        let opts = libc::PTRACE_O_TRACESYSGOOD as usize;
        let r = unsafe {
            libc::ptrace(
                libc::PTRACE_SEIZE,
                pid,
                std::ptr::null_mut::<libc::c_void>(),
                opts as *mut libc::c_void,
            )
        };
        if r < 0 {
            let e = std::io::Error::last_os_error();
            return Err(match e.raw_os_error() {
                Some(libc::EPERM) => {
                    // A tracer that appeared since the pre-check also yields EPERM.
                    proc_.require_untraced(pid)?;
                    AttachError::PtraceDenied {
                        pid,
                        advice: proc_.explain_ptrace_denied(pid),
                    }
                }
                Some(libc::ESRCH) => AttachError::NoSuchProcess { pid },
                _ => AttachError::Ptrace {
                    pid,
                    op: "SEIZE",
                    source: e,
                },
            });
        }
        let mem_path = format!("/proc/{pid}/mem");
        let mem = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&mem_path)
            .map_err(|source| AttachError::Read {
                path: mem_path.into(),
                source,
            })?;
        let mut s = Session {
            pid,
            mem,
            restore: unsafe { std::mem::zeroed() },
            base: unsafe { std::mem::zeroed() },
            trap_addr: 0,
            xstate: None,
            fpregs: None,
            saved_mem: Vec::new(),
            stopped_at: Instant::now(),
            detached: false,
            at_syscall: false,
        };
        s.stop_at_safe_point()?;
        s.xstate = get_xstate(pid);
        s.fpregs = get_fpregs(pid);
        s.trap_addr = find_int3(&s.mem, maps);
        Ok(s)
    }

    fn interrupt(&self) -> Result<i32> {
        let r = unsafe {
            libc::ptrace(
                libc::PTRACE_INTERRUPT,
                self.pid,
                std::ptr::null_mut::<libc::c_void>(),
                std::ptr::null_mut::<libc::c_void>(),
            )
        };
        if r < 0 {
            return Err(ptrace_err(self.pid, "INTERRUPT"));
        }
        loop {
            let status = wait_stop(self.pid, None)?.unwrap_or(0);
            if libc::WIFSTOPPED(status) {
                return Ok(status);
            }
        }
    }

    /// Stops the thread where it holds no libc lock: inside a blocking system call (the
    /// usual case for a GPU job's main thread) or at the entry of its next one.
    fn stop_at_safe_point(&mut self) -> Result<()> {
        self.interrupt()?;
        let regs = get_regs(self.pid)?;
        if (regs.orig_rax as i64) >= 0 {
            // Interrupted inside a system call: restoring these registers on detach lets
            // the kernel restart it. Calls run with orig_rax = -1 (no restart).
            self.set_stopped(regs, regs);
            self.at_syscall = true;
            return Ok(());
        }
        resume(self.pid, libc::PTRACE_SYSCALL, 0)?;
        let deadline = Instant::now() + SYSCALL_WAIT;
        let status = match wait_stop(self.pid, Some(deadline))? {
            Some(s) => s,
            None => self.interrupt()?,
        };
        let regs = get_regs(self.pid)?;
        if libc::WIFSTOPPED(status) && libc::WSTOPSIG(status) == (libc::SIGTRAP | 0x80) {
            // System-call entry: put the thread back before the `syscall` instruction on
            // detach so it executes the call it was about to make.
            let mut restore = regs;
            restore.rip -= 2;
            restore.rax = regs.orig_rax;
            restore.orig_rax = u64::MAX;
            self.set_stopped(restore, regs);
            self.at_syscall = true;
        } else {
            self.set_stopped(regs, regs);
        }
        Ok(())
    }

    fn set_stopped(&mut self, restore: libc::user_regs_struct, base: libc::user_regs_struct) {
        self.restore = restore;
        self.base = base;
        self.base.orig_rax = u64::MAX;
        self.stopped_at = Instant::now();
    }

    pub fn read_mem(&self, addr: u64, len: usize) -> Result<Vec<u8>> {
        let mut buf = vec![0u8; len];
        self.mem
            .read_exact_at(&mut buf, addr)
            .map_err(|source| AttachError::Ptrace {
                pid: self.pid,
                op: "read memory",
                source,
            })?;
        Ok(buf)
    }

    /// Reads a NUL-terminated string (at most 4 KiB).
    pub fn read_cstr(&self, addr: u64) -> String {
        let mut out = Vec::new();
        for chunk in 0..16u64 {
            let mut buf = [0u8; 256];
            let Ok(n) = self.mem.read_at(&mut buf, addr + chunk * 256) else {
                break;
            };
            if let Some(z) = buf[..n].iter().position(|b| *b == 0) {
                out.extend_from_slice(&buf[..z]);
                break;
            }
            out.extend_from_slice(&buf[..n]);
            if n < buf.len() {
                break;
            }
        }
        String::from_utf8_lossy(&out).into_owned()
    }

    fn write_mem_saved(&mut self, addr: u64, bytes: &[u8]) -> Result<()> {
        let old = self.read_mem(addr, bytes.len())?;
        self.saved_mem.push((addr, old));
        self.mem
            .write_all_at(bytes, addr)
            .map_err(|source| AttachError::Ptrace {
                pid: self.pid,
                op: "write memory",
                source,
            })
    }

    /// Calls `func(args...)` (up to 6 integer/pointer arguments) in the stopped thread.
    /// `strings` are copied below the stack pointer first; argument values
    /// `Arg::Str(i)` become their addresses.
    pub fn call(&mut self, what: &str, func: u64, args: &[Arg], strings: &[&str]) -> Result<u64> {
        let mut blob = Vec::new();
        let mut offsets = Vec::new();
        for s in strings {
            offsets.push(blob.len() as u64);
            blob.extend_from_slice(s.as_bytes());
            blob.push(0);
        }
        let data_addr = (self.base.rsp - RED_ZONE - blob.len() as u64) & !0xf;
        // The call frame sits below the data; at function entry rsp % 16 == 8.
        let sp = (data_addr - 64) & !0xf;
        let ret_slot = sp - 8;
        let mut frame = self.trap_addr.to_le_bytes().to_vec();
        frame.resize((data_addr - ret_slot) as usize, 0);
        frame.extend_from_slice(&blob);
        self.write_mem_saved(ret_slot, &frame)?;

        let mut regs = self.base;
        let vals: Vec<u64> = args
            .iter()
            .map(|a| match a {
                Arg::Int(v) => *v,
                Arg::Str(i) => data_addr + offsets.get(*i).copied().unwrap_or(0),
            })
            .collect();
        let slots = [
            &mut regs.rdi,
            &mut regs.rsi,
            &mut regs.rdx,
            &mut regs.rcx,
            &mut regs.r8,
            &mut regs.r9,
        ];
        for (slot, v) in slots.into_iter().zip(vals) {
            *slot = v;
        }
        regs.rip = func;
        regs.rsp = ret_slot;
        regs.rax = 0;
        regs.orig_rax = u64::MAX;
        set_regs(self.pid, &regs)?;
        resume(self.pid, libc::PTRACE_CONT, 0)?;
        let deadline = Instant::now() + CALL_TIMEOUT;
        loop {
            let Some(status) = wait_stop(self.pid, Some(deadline))? else {
                return Err(AttachError::CallTimeout {
                    pid: self.pid,
                    what: what.into(),
                    secs: CALL_TIMEOUT.as_secs(),
                });
            };
            if !libc::WIFSTOPPED(status) {
                continue;
            }
            let sig = libc::WSTOPSIG(status);
            let event = status >> 16;
            if event != 0 {
                // A ptrace event stop (group stop / interrupt): keep going.
                resume(self.pid, libc::PTRACE_CONT, 0)?;
                continue;
            }
            if sig == libc::SIGTRAP || sig == libc::SIGSEGV {
                let now = get_regs(self.pid)?;
                let returned = if self.trap_addr == 0 {
                    now.rip == 0
                } else {
                    now.rip == self.trap_addr + 1
                };
                if returned {
                    return Ok(now.rax);
                }
                return Err(AttachError::CallCrashed {
                    pid: self.pid,
                    what: what.into(),
                    signal: sig,
                    rip: now.rip,
                });
            }
            // Any other signal belongs to the program: deliver it as the kernel would have.
            resume(self.pid, libc::PTRACE_CONT, sig)?;
        }
    }

    /// Restores memory and registers and lets the thread run; returns how long it was
    /// stopped.
    pub fn detach(mut self) -> Result<Pause> {
        self.finish()
    }

    fn finish(&mut self) -> Result<Pause> {
        if self.detached {
            return Ok(Pause {
                stopped: Duration::ZERO,
            });
        }
        self.detached = true;
        for (addr, old) in self.saved_mem.drain(..).rev() {
            // Best effort per region; a failure is reported after detaching.
            let _ = self.mem.write_all_at(&old, addr);
        }
        let xstate_back = self
            .xstate
            .as_deref()
            .is_some_and(|x| set_xstate(self.pid, x));
        if let (false, Some(fp)) = (xstate_back, &self.fpregs) {
            // SAFETY: PTRACE_SETFPREGS reads a user_fpregs_struct.
            unsafe {
                libc::ptrace(
                    libc::PTRACE_SETFPREGS,
                    self.pid,
                    std::ptr::null_mut::<libc::c_void>(),
                    fp as *const _ as *mut libc::c_void,
                );
            }
        }
        let set = set_regs(self.pid, &self.restore);
        let r = unsafe {
            libc::ptrace(
                libc::PTRACE_DETACH,
                self.pid,
                std::ptr::null_mut::<libc::c_void>(),
                std::ptr::null_mut::<libc::c_void>(),
            )
        };
        let stopped = self.stopped_at.elapsed();
        set?;
        if r < 0 {
            return Err(ptrace_err(self.pid, "DETACH"));
        }
        Ok(Pause { stopped })
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        let _ = self.finish();
    }
}

/// A remote call argument.
#[derive(Debug, Clone, Copy)]
pub enum Arg {
    Int(u64),
    /// The address of the i-th string passed to [`Session::call`].
    Str(usize),
}

/// An existing `int3` (0xCC) byte in an executable mapping of the target: returning there
/// traps without modifying any code. 0 (trap by SIGSEGV) when none is found.
fn find_int3(mem: &File, maps: &[Mapping]) -> u64 {
    for m in maps
        .iter()
        .filter(|m| m.executable() && m.path.starts_with('/'))
    {
        let len = (m.end - m.start).min(4 << 20) as usize;
        let mut buf = vec![0u8; len];
        if mem.read_exact_at(&mut buf, m.start).is_err() {
            continue;
        }
        if let Some(i) = buf.iter().position(|b| *b == 0xcc) {
            return m.start + i as u64;
        }
    }
    0
}
