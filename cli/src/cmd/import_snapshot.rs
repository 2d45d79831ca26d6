//! `memwatch import SNAPSHOT.pickle --db|--daemon`: a PyTorch memory snapshot stored as
//! a run, through the same batches, stream identity and resume rules as a capture's
//! (see `import`), from the records `memwatch_analysis::torch::records` makes. The
//! records are produced and sent as the replay goes, so a snapshot of several GB is
//! imported in bounded memory.

use std::path::Path;

use anyhow::{Context, Result};
use memwatch_analysis::torch;
use memwatch_daemon::Batch;
use memwatch_wire::Record;

use super::import::{
    capture_identity, weight, Destination, ImportSummary, BATCH_EVENTS, IDENTITY_RECORDS,
};
use super::store_target::Target;

/// Sends records in numbered batches once the stream is named.
struct Sender<'a> {
    dest: Destination<'a>,
    node: String,
    stream: u64,
    run_key: String,
    /// Records an earlier import already stored.
    skip: u64,
    seen: u64,
    batch: Vec<Record>,
    in_batch: usize,
    summary: ImportSummary,
}

impl<'a> Sender<'a> {
    fn start(
        head: &[Record],
        path: &Path,
        target: Target<'a>,
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
        Ok(Sender {
            dest,
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
            },
            run_key,
            skip: stored,
            seen: 0,
            batch: Vec::new(),
            in_batch: 0,
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

    fn send(&mut self) -> Result<()> {
        if self.batch.is_empty() {
            return Ok(());
        }
        let sent = self.dest.send(Batch {
            node: self.node.clone(),
            stream: self.stream,
            seq: self.seen,
            run_key: self.run_key.clone(),
            records: std::mem::take(&mut self.batch),
        })?;
        self.in_batch = 0;
        let s = &mut self.summary;
        s.batches += 1;
        s.run_id = sent.run_id.or(s.run_id);
        s.events += sent.events;
        s.duplicate_batches += u64::from(sent.duplicate);
        Ok(())
    }

    fn finish(mut self) -> Result<ImportSummary> {
        self.send()?;
        self.summary.records = self.seen;
        self.dest.close()?;
        Ok(self.summary)
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
    let mut head: Vec<Record> = Vec::new();
    let mut sender: Option<Sender> = None;
    let mut run = Some(run);
    torch::to_records(&scan, &host, &mut |r| -> Result<()> {
        if let Some(s) = &mut sender {
            return s.push(r);
        }
        head.push(r);
        if head.len() == IDENTITY_RECORDS {
            let mut s = Sender::start(&head, path, target, run.take().flatten(), node.clone())?;
            for r in head.drain(..) {
                s.push(r)?;
            }
            sender = Some(s);
        }
        Ok(())
    })
    .map_err(|e| match e {
        torch::ConvertError::Io(e) => {
            anyhow::Error::new(e).context(format!("{}: reading the stored trace", path.display()))
        }
        torch::ConvertError::Emit(e) => e,
    })?;
    let sender = match sender {
        Some(s) => s,
        None => {
            let mut s = Sender::start(&head, path, target, run.take().flatten(), node)?;
            for r in head.drain(..) {
                s.push(r)?;
            }
            s
        }
    };
    sender
        .finish()
        .with_context(|| format!("storing {}", path.display()))
}
