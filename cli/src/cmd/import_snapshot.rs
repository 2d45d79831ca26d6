//! `memwatch import SNAPSHOT.pickle --db|--daemon`: a PyTorch memory snapshot stored as
//! a run, through the same batches, stream identity and resume rules as a capture's
//! (see `import`), from the records `memwatch_analysis::torch::records` makes. The
//! records are produced and sent as the replay goes, so a snapshot of several GB is
//! imported in bounded memory; batches are stored by a second thread while the replay
//! makes the next (at most [`IN_FLIGHT`] waiting, stored together in one transaction),
//! so storing costs little wall time on top of reading.

use std::path::Path;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::thread::{Scope, ScopedJoinHandle};

use anyhow::{anyhow, Result};
use memwatch_analysis::torch;
use memwatch_daemon::Batch;
use memwatch_wire::Record;

use super::import::{
    capture_identity, weight, Destination, ImportSummary, BATCH_EVENTS, IDENTITY_RECORDS,
};
use super::store_target::Target;

/// Batches made and not yet being stored (each up to [`BATCH_EVENTS`] events), and the
/// most stored in one transaction: a store that syncs every commit to disk (SQLite's
/// `synchronous=FULL`) syncs once per group, and the replay runs on meanwhile.
const IN_FLIGHT: usize = 2;

/// What the storing thread saw.
#[derive(Default)]
struct Stored {
    run_id: Option<i64>,
    batches: u64,
    events: u64,
    duplicate_batches: u64,
}

/// Stores every batch received, in order (those already waiting in one transaction),
/// then closes the destination.
fn store_all(mut dest: Destination<'_>, batches: Receiver<Batch>) -> Result<Stored> {
    let mut s = Stored::default();
    while let Ok(first) = batches.recv() {
        let mut group = vec![first];
        while group.len() < IN_FLIGHT {
            match batches.try_recv() {
                Ok(b) => group.push(b),
                Err(_) => break,
            }
        }
        for sent in dest.send_many(group)? {
            s.batches += 1;
            s.run_id = sent.run_id.or(s.run_id);
            s.events += sent.events;
            s.duplicate_batches += u64::from(sent.duplicate);
        }
    }
    dest.close()?;
    Ok(s)
}

/// Sends records in numbered batches once the stream is named.
struct Sender<'scope> {
    node: String,
    stream: u64,
    run_key: String,
    /// Records an earlier import already stored.
    skip: u64,
    seen: u64,
    batch: Vec<Record>,
    in_batch: usize,
    summary: ImportSummary,
    to_store: SyncSender<Batch>,
    storing: ScopedJoinHandle<'scope, Result<Stored>>,
}

impl<'scope> Sender<'scope> {
    fn start<'env>(
        scope: &'scope Scope<'scope, 'env>,
        head: &[Record],
        path: &Path,
        target: Target<'env>,
        run: Option<String>,
        node: String,
    ) -> Result<Self> {
        let identity = capture_identity(head);
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let run_key = run.unwrap_or_else(|| format!("import:{name}:{identity:016x}"));
        let stream = identity ^ ((crc32fast::hash(run_key.as_bytes()) as u64) << 16);
        let dest = Destination::open(target)?;
        let (stored, stored_run) = dest.position(&node, stream, &run_key)?;
        let (to_store, batches) = sync_channel(IN_FLIGHT);
        let storing = scope.spawn(move || store_all(dest, batches));
        Ok(Sender {
            node,
            stream,
            summary: ImportSummary {
                capture: path.display().to_string(),
                run_key: run_key.clone(),
                run_id: stored_run,
                records: 0,
                records_already_stored: 0,
                batches: 0,
                duplicate_batches: 0,
                events: 0,
                damaged_regions: 0,
                bytes_skipped: 0,
                xla_modules: None,
                verdict: None,
            },
            run_key,
            skip: stored,
            seen: 0,
            batch: Vec::new(),
            in_batch: 0,
            to_store,
            storing,
        })
    }

    fn push(&mut self, r: Record) -> Result<()> {
        self.seen += 1;
        if self.seen <= self.skip {
            self.summary.records_already_stored += 1;
            return Ok(());
        }
        self.in_batch += weight(&r);
        self.batch.push(r);
        if self.in_batch >= BATCH_EVENTS {
            self.send()?;
        }
        Ok(())
    }

    /// Hands the batch to the storing thread (waits while [`IN_FLIGHT`] are waiting).
    /// Fails when that thread stopped: [`Sender::finish`] has its error.
    fn send(&mut self) -> Result<()> {
        if self.batch.is_empty() {
            return Ok(());
        }
        let batch = Batch {
            node: self.node.clone(),
            stream: self.stream,
            seq: self.seen,
            run_key: self.run_key.clone(),
            records: std::mem::take(&mut self.batch),
        };
        self.in_batch = 0;
        self.to_store
            .send(batch)
            .map_err(|_| anyhow!("storing stopped"))
    }

    /// Sends the last batch and waits until everything is stored. `made`: how making
    /// the records ended (its error comes first unless storing failed).
    fn finish(mut self, made: Result<()>) -> Result<ImportSummary> {
        let last = made.and_then(|()| self.send());
        let Sender {
            to_store,
            storing,
            mut summary,
            seen,
            ..
        } = self;
        drop(to_store);
        let stored = storing
            .join()
            .map_err(|_| anyhow!("the thread storing the records panicked"))?;
        let stored = match (last, stored) {
            // The storing thread's error is why sending stopped.
            (_, Err(e)) => return Err(e.context(format!("storing {}", summary.capture))),
            (Err(e), Ok(_)) => return Err(e),
            (Ok(()), Ok(s)) => s,
        };
        summary.records = seen;
        summary.run_id = stored.run_id.or(summary.run_id);
        summary.batches = stored.batches;
        summary.events = stored.events;
        summary.duplicate_batches = stored.duplicate_batches;
        Ok(summary)
    }
}

/// Reads the snapshot at `path` and stores it at `target` (run key by default
/// `import:<file name>:<content id>`, node `--node` or `import`).
pub fn import(
    path: &Path,
    target: Target<'_>,
    run: Option<String>,
    node: Option<String>,
) -> Result<ImportSummary> {
    let scan = super::report_snapshot::scan(path)?;
    let host = node.clone().unwrap_or_default();
    let node = node
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| "import".into());
    std::thread::scope(|scope| {
        let mut head: Vec<Record> = Vec::new();
        let mut sender: Option<Sender> = None;
        let mut run = Some(run);
        let made = torch::to_records(&scan, &host, &mut |r| -> Result<()> {
            if let Some(s) = &mut sender {
                return s.push(r);
            }
            head.push(r);
            if head.len() == IDENTITY_RECORDS {
                let mut s = Sender::start(
                    scope,
                    &head,
                    path,
                    target,
                    run.take().flatten(),
                    node.clone(),
                )?;
                for r in head.drain(..) {
                    s.push(r)?;
                }
                sender = Some(s);
            }
            Ok(())
        })
        .map_err(|e| match e {
            torch::ConvertError::Io(e) => anyhow::Error::new(e)
                .context(format!("{}: reading the stored trace", path.display())),
            torch::ConvertError::Emit(e) => e,
        })
        .map(|_| ());
        let (sender, made) = match sender {
            Some(s) => (s, made),
            None => {
                // Fewer records than the identity needs (or the replay failed first).
                made?;
                let mut s = Sender::start(scope, &head, path, target, run.take().flatten(), node)?;
                let pushed = head.drain(..).try_for_each(|r| s.push(r));
                (s, pushed)
            }
        };
        sender.finish(made)
    })
}
