//! CMD as a child of `memwatch run`: forwarding the signals sent to memwatch itself
//! (SIGINT/SIGTERM/SIGHUP/SIGQUIT; a terminal's Ctrl-C already reaches CMD directly),
//! being the subreaper of what CMD leaves behind, reaping those, and how CMD ended.

use std::os::unix::process::ExitStatusExt;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};

use anyhow::{Context, Result};
use serde::Serialize;

static CHILD_PID: AtomicI32 = AtomicI32::new(0);
static INTERRUPTED: AtomicBool = AtomicBool::new(false);
const FORWARDED: [libc::c_int; 4] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT];

extern "C" fn on_signal(sig: libc::c_int, info: *mut libc::siginfo_t, _ctx: *mut libc::c_void) {
    let pid = CHILD_PID.load(Ordering::SeqCst);
    if pid <= 0 {
        INTERRUPTED.store(true, Ordering::SeqCst);
        // Writes to a FIFO or device nobody reads stop now (async-signal-safe).
        memwatch_agent::out_pipe::abandon();
        return;
    }
    // SAFETY: the kernel passes a valid siginfo_t for SA_SIGINFO handlers.
    let code = if info.is_null() {
        0
    } else {
        unsafe { (*info).si_code }
    };
    // A terminal's Ctrl-C (SI_KERNEL) already went to CMD's process group: sending it
    // again would deliver it twice. Signals sent with kill() are forwarded.
    if code != libc::SI_KERNEL {
        // SAFETY: kill is async-signal-safe.
        unsafe {
            libc::kill(pid, sig);
        }
    }
}

pub fn install_forwarding() -> Result<()> {
    for sig in FORWARDED {
        // SAFETY: a zeroed sigaction with a valid handler and empty mask is valid.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_signal as *const () as usize;
            sa.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
            libc::sigemptyset(&mut sa.sa_mask);
            if libc::sigaction(sig, &sa, std::ptr::null_mut()) != 0 {
                return Err(std::io::Error::last_os_error())
                    .with_context(|| format!("cannot install a handler for signal {sig}"));
            }
        }
    }
    Ok(())
}

/// How CMD ended.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct ChildEnd {
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    /// memwatch's own exit status.
    pub status: u8,
}

impl ChildEnd {
    /// CMD's exit status as memwatch reports and exits with it.
    pub fn of(status: std::process::ExitStatus) -> Self {
        match (status.code(), status.signal()) {
            (Some(c), _) => ChildEnd {
                exit_code: Some(c),
                signal: None,
                status: (c & 0xff) as u8,
            },
            (None, Some(s)) => ChildEnd {
                exit_code: None,
                signal: Some(s),
                status: (128 + s).clamp(0, 255) as u8,
            },
            (None, None) => ChildEnd {
                exit_code: None,
                signal: None,
                status: 1,
            },
        }
    }
}

/// Names CMD's pid as the one signals are forwarded to (0: none, CMD has ended).
pub fn set_child(pid: i32) {
    CHILD_PID.store(pid, Ordering::SeqCst);
}

/// Whether a forwarded signal arrived while no CMD ran.
pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}

/// The flag [`interrupted`] reads, for work that must stop when it is set (the daemon
/// hand-off).
pub fn interrupted_flag() -> &'static AtomicBool {
    &INTERRUPTED
}

/// Makes memwatch the subreaper of CMD's descendants: a process CMD leaves behind (a
/// daemon, a worker that outlives its launcher) is reparented to memwatch instead of
/// init, so the drain can wait for it and say when it is still running.
pub fn become_subreaper() {
    // SAFETY: prctl with integer arguments; failure only loses the wait for leftovers.
    unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
}

/// Reaps the left-behind processes that have exited; returns the pids of those still
/// running and of their descendants (CMD itself is reaped by then).
pub fn reap_left_behind() -> Vec<i32> {
    loop {
        let mut status = 0;
        // SAFETY: waitpid with a valid status pointer.
        let r = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
        if r > 0 {
            continue; // one exited: reaped; look for more
        }
        if r < 0 {
            return Vec::new(); // ECHILD: nobody left
        }
        break;
    }
    live_descendants(std::process::id() as i32)
}

/// Every live (not zombie) descendant of `root` (attach's /proc walk, which leaves
/// zombies out), sorted.
fn live_descendants(root: i32) -> Vec<i32> {
    let Ok(tree) = memwatch_attach::procfs::Proc::default().descendants(root, None) else {
        return Vec::new();
    };
    let mut out: Vec<i32> = tree.attachable.into_iter().filter(|&p| p != root).collect();
    out.sort_unstable();
    out
}
