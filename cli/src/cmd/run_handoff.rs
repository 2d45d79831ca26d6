//! `memwatch run --db/--daemon`: the hand-off of the finished capture and its diagnosis
//! to the store. It runs on a thread of its own so that memwatch never waits on the store
//! without end: the daemon's HTTP calls have I/O deadlines (`store_target::http`), and a
//! SIGINT/SIGTERM to memwatch abandons the hand-off at once. The capture file is complete
//! on disk by then, so nothing is lost: `memwatch import` stores it later.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::Duration;

use memwatch_analysis::doctor::Diagnosis;

use super::import::StoreArgs;

/// Stores the capture `out` under `run_key` (when `store` names a target) and then its
/// diagnosis with the run it became. Returns early, saying so, once `interrupted` is set.
pub fn store_and_attach(
    store: &StoreArgs,
    out: &Path,
    run_key: Option<String>,
    diagnosis: &Diagnosis,
    interrupted: &'static AtomicBool,
) {
    if store.target().is_none() {
        return;
    }
    let (tx, rx) = mpsc::channel::<()>();
    let job = Job {
        store: store.clone(),
        out: out.to_path_buf(),
        run_key,
        diagnosis: diagnosis.clone(),
    };
    let spawned = std::thread::Builder::new()
        .name("memwatch-store".into())
        .spawn(move || {
            job.run();
            let _ = tx.send(());
        });
    if let Err(e) = spawned {
        eprintln!("memwatch: error: cannot start storing the capture: {e}");
        return;
    }
    loop {
        match rx.recv_timeout(Duration::from_millis(100)) {
            Ok(()) | Err(mpsc::RecvTimeoutError::Disconnected) => return,
            Err(mpsc::RecvTimeoutError::Timeout) => {}
        }
        if interrupted.load(Ordering::SeqCst) {
            let how = match (&store.db, &store.daemon) {
                (Some(db), _) => format!("--db {}", memwatch_daemon::redact(db)),
                (None, Some(url)) => format!("--daemon {url}"),
                (None, None) => String::new(),
            };
            eprintln!(
                "memwatch: interrupted while storing the capture: it may not be stored; \
                 {} is complete (`memwatch import {} {how}` stores it)",
                out.display(),
                out.display()
            );
            return;
        }
    }
}

/// What the storing thread owns.
struct Job {
    store: StoreArgs,
    out: PathBuf,
    run_key: Option<String>,
    diagnosis: Diagnosis,
}

impl Job {
    fn run(self) {
        let run = match self.store.store(&self.out, self.run_key) {
            Ok(s) => s.and_then(|s| s.run_id),
            Err(e) => {
                eprintln!("memwatch: error: {}", super::one_line(&e));
                None
            }
        };
        // The verdict is stored with the run (the dashboard shows it, `GET
        // /api/runs/{id}/diagnosis` answers it).
        if let (Some(target), Some(run)) = (self.store.target(), run) {
            if let Err(e) =
                super::import::attach_diagnosis(&target, run, &self.diagnosis, "memwatch run")
            {
                eprintln!("memwatch: error: {}", super::one_line(&e));
            }
        }
    }
}
