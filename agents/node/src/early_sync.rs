//! Syncing a file while it is written: a thread of its own syncs the data written so far
//! each time enough has been added since its last sync, so that the final sync (when the
//! file is complete) has little left to write. Without it a capture of hundreds of MiB
//! sits dirty in the page cache (the kernel starts writing back only at a share of
//! memory, or after 30 s) and `memwatch run` waits for all of it after the command exits.
//!
//! A sync error is kept and said by [`EarlySync::finish`]: the kernel reports a failed
//! write-back once per open file, so the owner's own final sync may no longer see it.

use std::fs::File;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// Bytes written between two syncs.
const SYNC_EVERY: u64 = 32 << 20;

/// How often the thread looks at what was written.
const POLL: Duration = Duration::from_millis(50);

/// Syncs one file's data on a thread of its own as it grows; see the module docs.
pub struct EarlySync {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

struct Shared {
    /// Bytes handed to the file so far.
    written: AtomicU64,
    /// Syncs done.
    syncs: AtomicU64,
    stop: AtomicBool,
    /// The first sync error, said by `finish`.
    failed: Mutex<Option<std::io::Error>>,
    lock: Mutex<()>,
    wake: Condvar,
}

impl EarlySync {
    /// Starts syncing `file` (a handle to the file being written) as it grows. `None`
    /// when the thread cannot start (the file is then synced only at its end).
    pub fn start(file: File) -> Option<Self> {
        let shared = Arc::new(Shared {
            written: AtomicU64::new(0),
            syncs: AtomicU64::new(0),
            stop: AtomicBool::new(false),
            failed: Mutex::new(None),
            lock: Mutex::new(()),
            wake: Condvar::new(),
        });
        let worker = shared.clone();
        let thread = std::thread::Builder::new()
            .name("memwatch-sync".into())
            .spawn(move || sync_as_it_grows(&worker, &file))
            .ok()?;
        Some(Self {
            shared,
            thread: Some(thread),
        })
    }

    /// `n` more bytes were handed to the file.
    pub fn wrote(&self, n: u64) {
        self.shared.written.fetch_add(n, Ordering::Relaxed);
    }

    /// Stops the thread (after the sync in progress, if any) and says the first sync
    /// error it met.
    pub fn finish(mut self) -> Result<(), std::io::Error> {
        self.stop();
        let failed = self
            .shared
            .failed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        failed.map_or(Ok(()), Err)
    }

    fn stop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        {
            let _guard = self.shared.lock.lock();
            self.shared.wake.notify_one();
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for EarlySync {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The thread: syncs whenever [`SYNC_EVERY`] bytes came since the last sync, until told
/// to stop or a sync fails.
fn sync_as_it_grows(shared: &Shared, file: &File) {
    let mut synced = 0u64;
    loop {
        if shared.stop.load(Ordering::Relaxed) {
            return;
        }
        let written = shared.written.load(Ordering::Relaxed);
        if written.saturating_sub(synced) >= SYNC_EVERY {
            if let Err(e) = file.sync_data() {
                *shared.failed.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
                return;
            }
            synced = written;
            shared.syncs.fetch_add(1, Ordering::Relaxed);
            continue;
        }
        let guard = shared.lock.lock().unwrap_or_else(|p| p.into_inner());
        if shared.stop.load(Ordering::Relaxed) {
            return;
        }
        let _ = shared.wake.wait_timeout(guard, POLL);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn syncs_as_the_file_grows_and_stops() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("f");
        let mut file = File::create(&path).expect("created");
        let sync = EarlySync::start(file.try_clone().expect("cloned")).expect("thread starts");
        let block = vec![7u8; 1 << 20];
        // Below the threshold: no sync.
        file.write_all(&block).expect("written");
        sync.wrote(block.len() as u64);
        std::thread::sleep(POLL * 3);
        assert_eq!(sync.shared.syncs.load(Ordering::Relaxed), 0);
        // Past it, twice over: a sync each time it is crossed (the thread looks every
        // POLL, so two crossings between two looks make one sync).
        for _ in 0..(SYNC_EVERY >> 20) {
            file.write_all(&block).expect("written");
            sync.wrote(block.len() as u64);
        }
        // (Generous deadlines: they only keep a broken thread from hanging the test.)
        let deadline = std::time::Instant::now() + Duration::from_secs(120);
        while sync.shared.syncs.load(Ordering::Relaxed) < 1 {
            assert!(std::time::Instant::now() < deadline, "never synced");
            std::thread::sleep(Duration::from_millis(5));
        }
        for _ in 0..(SYNC_EVERY >> 20) {
            file.write_all(&block).expect("written");
            sync.wrote(block.len() as u64);
        }
        while sync.shared.syncs.load(Ordering::Relaxed) < 2 {
            assert!(std::time::Instant::now() < deadline, "never synced again");
            std::thread::sleep(Duration::from_millis(5));
        }
        // finish wakes the thread and joins it (a generous deadline only catches a hang),
        // without a sync of its own: the rest is the owner's final sync.
        let shared = sync.shared.clone();
        let (done, finished) = std::sync::mpsc::channel();
        std::thread::spawn(move || done.send(sync.finish()));
        finished
            .recv_timeout(Duration::from_secs(120))
            .expect("finish hung")
            .expect("no sync error");
        assert_eq!(shared.syncs.load(Ordering::Relaxed), 2);
        assert_eq!(
            std::fs::metadata(&path).expect("exists").len(),
            2 * SYNC_EVERY + (1 << 20)
        );
    }

    #[test]
    fn a_sync_error_is_said_at_finish() {
        // A socket cannot be synced (EINVAL): the thread's first sync fails, it stops,
        // and finish says why.
        let (a, _b) = std::os::unix::net::UnixStream::pair().expect("socket pair");
        let file = File::from(std::os::fd::OwnedFd::from(a));
        let sync = EarlySync::start(file).expect("thread starts");
        sync.wrote(SYNC_EVERY);
        let deadline = std::time::Instant::now() + Duration::from_secs(120);
        while sync
            .shared
            .failed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_none()
        {
            assert!(std::time::Instant::now() < deadline, "never synced");
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(sync.finish().is_err());
    }
}
