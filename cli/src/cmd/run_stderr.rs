//! The command's stderr under `memwatch run`: passed through unchanged and copied to a
//! file for the OOM doctor. When memwatch's own stderr is a terminal the command gets a
//! pseudo-terminal of the same size and settings (it still sees a terminal: colours and
//! progress bars stay as they are; resizes follow); otherwise a pipe. Output processing
//! is off on the pseudo-terminal, so the bytes reach the real terminal (which does its
//! own) and the copy exactly as the command wrote them. Owns the channel and the copying
//! thread; nothing else.

use anyhow::{Context, Result};
use memwatch_agent::out_pipe::OutFile;
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicI32, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The pseudo-terminal's master while one is in use (for SIGWINCH), else -1.
static PTY_MASTER: AtomicI32 = AtomicI32::new(-1);

/// The channel the command writes its stderr to.
pub struct Tee {
    /// Pseudo-terminal: (master, slave).
    pty: Option<(File, File)>,
    copy: OutFile,
    path: PathBuf,
}

/// The copying thread, running.
pub struct Running {
    thread: JoinHandle<()>,
    path: PathBuf,
}

fn is_tty(fd: i32) -> bool {
    // SAFETY: isatty only reads the descriptor's state.
    unsafe { libc::isatty(fd) == 1 }
}

/// Copies the terminal size of our stderr to the pseudo-terminal.
fn copy_winsize(master: i32) {
    // SAFETY: winsize is plain data; both ioctls take a pointer to one; failures leave
    // the size as it was.
    unsafe {
        let mut ws: libc::winsize = std::mem::zeroed();
        if libc::ioctl(2, libc::TIOCGWINSZ, &mut ws) == 0 {
            libc::ioctl(master, libc::TIOCSWINSZ, &ws);
        }
    }
}

extern "C" fn on_winch(_sig: libc::c_int) {
    let m = PTY_MASTER.load(Ordering::SeqCst);
    if m >= 0 {
        copy_winsize(m);
    }
}

/// A pseudo-terminal with our terminal's size and settings, output processing off.
fn open_pty() -> Result<(File, File)> {
    // SAFETY: the calls follow posix_openpt(3); every descriptor returned is owned by a
    // File right away, and the name buffer is large enough and NUL-terminated.
    unsafe {
        let m = libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC);
        if m < 0 {
            return Err(std::io::Error::last_os_error()).context("posix_openpt");
        }
        let master = File::from_raw_fd(m);
        if libc::grantpt(m) != 0 || libc::unlockpt(m) != 0 {
            return Err(std::io::Error::last_os_error()).context("grantpt/unlockpt");
        }
        let mut name = [0 as libc::c_char; 128];
        if libc::ptsname_r(m, name.as_mut_ptr(), name.len()) != 0 {
            return Err(std::io::Error::last_os_error()).context("ptsname_r");
        }
        let s = libc::open(
            name.as_ptr(),
            libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC,
        );
        if s < 0 {
            return Err(std::io::Error::last_os_error()).context("open the pseudo-terminal");
        }
        let slave = File::from_raw_fd(s);
        let mut t: libc::termios = std::mem::zeroed();
        if libc::tcgetattr(2, &mut t) == 0 {
            t.c_oflag &= !libc::OPOST;
            libc::tcsetattr(s, libc::TCSANOW, &t);
        }
        copy_winsize(m);
        Ok((master, slave))
    }
}

impl Tee {
    /// A channel for the command's stderr, copied to `copy_path`.
    pub fn new(copy_path: &Path) -> Result<Self> {
        // Truncated only once the command runs (`start`): a file that was there stays
        // whole when the command cannot be started.
        let copy = memwatch_agent::out_pipe::open(copy_path, false)
            .with_context(|| format!("{}: cannot write the stderr copy", copy_path.display()))?;
        let pty = if is_tty(2) { open_pty().ok() } else { None };
        Ok(Self {
            pty,
            copy,
            path: copy_path.to_path_buf(),
        })
    }

    /// What to give the command as its stderr.
    pub fn stdio(&self) -> Result<Stdio> {
        match &self.pty {
            Some((_, slave)) => Ok(Stdio::from(slave.try_clone()?)),
            None => Ok(Stdio::piped()),
        }
    }

    /// Starts copying once the command runs.
    pub fn start(self, child: &mut Child) -> Result<Running> {
        let Tee { pty, copy, path } = self;
        if copy.is_regular() {
            copy.file()
                .set_len(0)
                .with_context(|| format!("{}: cannot write the stderr copy", path.display()))?;
        }
        let source: Box<dyn Read + Send> = match pty {
            Some((master, slave)) => {
                // Only the command holds the slave now: the master reads EIO when it
                // (and everything it started) has closed it.
                drop(slave);
                PTY_MASTER.store(master.as_raw_fd(), Ordering::SeqCst);
                // SAFETY: a handler that only copies the window size (ioctl is
                // async-signal-safe).
                unsafe {
                    let mut sa: libc::sigaction = std::mem::zeroed();
                    sa.sa_sigaction = on_winch as *const () as usize;
                    sa.sa_flags = libc::SA_RESTART;
                    libc::sigemptyset(&mut sa.sa_mask);
                    libc::sigaction(libc::SIGWINCH, &sa, std::ptr::null_mut());
                }
                Box::new(master)
            }
            None => match child.stderr.take() {
                Some(e) => Box::new(e),
                None => anyhow::bail!("the command's stderr was not piped"),
            },
        };
        let thread = std::thread::Builder::new()
            .name("memwatch-stderr".into())
            .spawn(move || copy_loop(source, copy))
            .context("cannot start the stderr copy")?;
        Ok(Running { thread, path })
    }
}

fn copy_loop(mut source: Box<dyn Read + Send>, mut copy: OutFile) {
    // SAFETY: fd 2 stays open for the life of the process; ManuallyDrop keeps this
    // File from closing it.
    let mut out = std::mem::ManuallyDrop::new(unsafe { File::from_raw_fd(2) });
    let mut buf = vec![0u8; 1 << 16];
    let mut out_ok = true;
    let mut copy_ok = true;
    loop {
        match source.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                // A closed stderr of ours must not stop the command's output from
                // being copied (and a full disk must not stop it reaching the terminal).
                out_ok = out_ok && out.write_all(&buf[..n]).is_ok();
                copy_ok = copy_ok && copy.write_all(&buf[..n]).is_ok();
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            // EIO: the pseudo-terminal's last writer closed it.
            Err(_) => break,
        }
    }
    let _ = copy.flush();
}

impl Running {
    /// Waits for the copy to end (every writer closed the channel) until `deadline`;
    /// returns the copy's path and whether it is complete. Processes left running keep
    /// writing to the terminal; the copy then ends where the diagnosis reads it.
    pub fn finish(self, deadline: Instant) -> (PathBuf, bool) {
        while !self.thread.is_finished() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        let done = self.thread.is_finished();
        if done {
            let _ = self.thread.join();
            PTY_MASTER.store(-1, Ordering::SeqCst);
        }
        (self.path, done)
    }
}
