//! Output files memwatch writes (the capture, the stderr copy, the JSON report) that never
//! make it wait without a deadline. A regular file is opened and written as usual. A FIFO,
//! a terminal or another device is opened without blocking: a FIFO nobody reads yet is
//! held open by memwatch itself (read and write), so the command starts at once and a
//! reader that comes later gets what was written. A write there that makes no progress
//! waits at most [`STALL_LIMIT`], or until [`abandon`] is called (a signal handler may),
//! then fails with `TimedOut`, and every later write fails at once: the output stops
//! there, the program and memwatch go on.

use std::fs::File;
use std::io::{self, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// The longest a write to a FIFO or device waits for its reader to take bytes.
pub const STALL_LIMIT: Duration = Duration::from_secs(10);

static ABANDONED: AtomicBool = AtomicBool::new(false);

/// Makes every waiting and later write to a FIFO or device fail at once (memwatch was
/// asked to stop). Async-signal-safe: one atomic store.
pub fn abandon() {
    ABANDONED.store(true, Ordering::SeqCst);
}

/// An output file opened by [`open`].
#[derive(Debug)]
pub struct OutFile {
    file: File,
    /// A FIFO or device: written without blocking, each wait bounded.
    bounded: bool,
    /// Why writes stopped (a stall or [`abandon`]); later writes fail with it at once.
    stopped: Option<String>,
}

/// Opens `path` for writing: a regular file is created (and truncated when `truncate`),
/// anything else that exists (FIFO, device) is opened without blocking.
pub fn open(path: &Path, truncate: bool) -> io::Result<OutFile> {
    let special = std::fs::metadata(path).is_ok_and(|m| !m.is_file());
    if !special {
        let file = File::options()
            .write(true)
            .create(true)
            .truncate(truncate)
            .open(path)?;
        return Ok(OutFile {
            file,
            bounded: false,
            stopped: None,
        });
    }
    let nonblocking = |read: bool| {
        File::options()
            .read(read)
            .write(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open(path)
    };
    let file = match nonblocking(false) {
        // A FIFO with no reader yet: hold it open ourselves (Linux allows read-write
        // opens of a FIFO), so opening neither blocks nor fails.
        Err(e) if e.raw_os_error() == Some(libc::ENXIO) => nonblocking(true)?,
        other => other?,
    };
    Ok(OutFile {
        file,
        bounded: true,
        stopped: None,
    })
}

impl OutFile {
    /// The open file (metadata, syncing, cloning).
    pub fn file(&self) -> &File {
        &self.file
    }

    /// Whether this is a regular file (one that can be synced and read back).
    pub fn is_regular(&self) -> bool {
        !self.bounded
    }

    fn stop(&mut self, why: String) -> io::Error {
        self.stopped = Some(why.clone());
        io::Error::new(io::ErrorKind::TimedOut, why)
    }
}

/// Waits until `fd` can take bytes, at most `d`.
fn wait_writable(fd: i32, d: Duration) {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLOUT,
        revents: 0,
    };
    // SAFETY: one valid pollfd; the result only shortens the wait.
    unsafe { libc::poll(&mut p, 1, d.as_millis().min(100) as libc::c_int) };
}

impl Write for OutFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if !self.bounded {
            return self.file.write(buf);
        }
        if let Some(why) = &self.stopped {
            return Err(io::Error::new(io::ErrorKind::TimedOut, why.clone()));
        }
        let since = Instant::now();
        loop {
            match self.file.write(buf) {
                Ok(n) => return Ok(n),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if ABANDONED.load(Ordering::SeqCst) {
                        return Err(self.stop("memwatch was asked to stop".into()));
                    }
                    let waited = since.elapsed();
                    if waited >= STALL_LIMIT {
                        return Err(self.stop(format!(
                            "nothing read it for {} s (a FIFO or device whose reader does \
                             not read): output stopped",
                            STALL_LIMIT.as_secs()
                        )));
                    }
                    wait_writable(self.file.as_raw_fd(), STALL_LIMIT - waited);
                }
                Err(e) => return Err(e),
            }
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    fn mkfifo(path: &Path) {
        let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).expect("no NUL");
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    }

    #[test]
    fn a_fifo_without_reader_opens_at_once_and_a_later_reader_gets_the_bytes() {
        let dir = tempfile::tempdir().expect("temp dir");
        let fifo = dir.path().join("f");
        mkfifo(&fifo);
        let mut out = open(&fifo, true).expect("opened without a reader");
        assert!(!out.is_regular());
        out.write_all(b"hello").expect("fits in the pipe");
        let mut r = File::open(&fifo).expect("a reader");
        drop(out);
        let mut got = String::new();
        r.read_to_string(&mut got).expect("read to EOF");
        assert_eq!(got, "hello");
    }

    #[test]
    fn a_fifo_whose_reader_never_reads_stops_the_output_instead_of_blocking() {
        let dir = tempfile::tempdir().expect("temp dir");
        let fifo = dir.path().join("f");
        mkfifo(&fifo);
        let mut out = open(&fifo, true).expect("opened");
        // More than any pipe buffer: the reader (ourselves) never reads.
        abandon_after_a_while();
        let big = vec![7u8; 8 << 20];
        let e = out.write_all(&big).expect_err("cannot all fit");
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        // Later writes fail at once.
        assert!(out.write_all(b"x").is_err());
    }

    /// Ends the wait of the test above early (the stall limit would end it too).
    fn abandon_after_a_while() {
        std::thread::spawn(|| {
            std::thread::sleep(Duration::from_millis(300));
            abandon();
        });
    }
}
