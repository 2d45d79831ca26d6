//! The single writer task: receives batches from all ingest paths, commits them in
//! groups (one transaction per group) and answers each submitter after the commit.
//!
//! Owns batching policy and the queue-depth metric. Storage logic lives in the
//! [`Ingestor`].

use std::sync::atomic::Ordering;
use std::sync::Arc;

use tokio::sync::{mpsc, oneshot};

use super::{Batch, BatchOutcome, Ingestor};
use crate::metrics::Metrics;

/// Most batches committed in one transaction.
const MAX_GROUP: usize = 128;
/// Most events committed in one transaction.
const MAX_GROUP_EVENTS: usize = 2_000_000;

/// The answer to one submitted batch (an error message when the commit failed).
pub type Reply = Result<BatchOutcome, String>;

struct Job {
    batch: Batch,
    reply: oneshot::Sender<Reply>,
}

/// Submits batches to the writer. Cheap to clone.
#[derive(Clone)]
pub struct WriterHandle {
    tx: mpsc::Sender<Job>,
    metrics: Arc<Metrics>,
}

impl WriterHandle {
    /// Queues a batch (waits while the queue is full); the receiver resolves after commit.
    pub async fn submit(&self, batch: Batch) -> Result<oneshot::Receiver<Reply>, String> {
        let (reply, rx) = oneshot::channel();
        self.metrics.queue_depth.fetch_add(1, Ordering::Relaxed);
        if self.tx.send(Job { batch, reply }).await.is_err() {
            self.metrics.queue_depth.fetch_sub(1, Ordering::Relaxed);
            return Err("the writer has stopped".into());
        }
        Ok(rx)
    }
}

fn events_in(b: &Batch) -> usize {
    b.records
        .iter()
        .map(|r| match r {
            memwatch_wire::Record::Events(e) => e.len(),
            _ => 1,
        })
        .sum()
}

/// glibc's allocator returns freed blocks above its mmap threshold (and free space at the
/// top of a heap above its trim threshold) to the kernel at once. Ingest allocates and
/// frees a 576 KiB event chunk per 8192 events and multi-MiB batches, so every one came
/// back as fresh zeroed pages: a page fault per 4 KiB, about a sixth of the daemon's CPU
/// time at 1M events/s (perf stat: 392k faults for 5M events; 109k with these settings).
/// Keeps blocks up to 16 MiB in the heap and up to 128 MiB of free heap. Process-wide,
/// set once, by the process that runs the writer.
fn tune_allocator() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        static ONCE: std::sync::Once = std::sync::Once::new();
        ONCE.call_once(|| {
            // SAFETY: mallopt only changes allocator parameters; called before the
            // writer allocates, and glibc serialises it against other allocations.
            unsafe {
                libc::mallopt(libc::M_MMAP_THRESHOLD, 16 << 20);
                libc::mallopt(libc::M_TRIM_THRESHOLD, 128 << 20);
            }
        });
    }
}

/// Starts the writer; it stops when every handle is dropped.
pub fn spawn_writer(
    mut ingestor: Ingestor,
    metrics: Arc<Metrics>,
    queue: usize,
) -> (WriterHandle, tokio::task::JoinHandle<()>) {
    tune_allocator();
    let (tx, mut rx) = mpsc::channel::<Job>(queue.max(1));
    let handle = WriterHandle {
        tx,
        metrics: metrics.clone(),
    };
    let task = tokio::spawn(async move {
        while let Some(first) = rx.recv().await {
            let mut n_events = events_in(&first.batch);
            let mut jobs = vec![first];
            while jobs.len() < MAX_GROUP && n_events < MAX_GROUP_EVENTS {
                match rx.try_recv() {
                    Ok(j) => {
                        n_events += events_in(&j.batch);
                        jobs.push(j);
                    }
                    Err(_) => break,
                }
            }
            metrics
                .queue_depth
                .fetch_sub(jobs.len() as i64, Ordering::Relaxed);
            let (batches, replies): (Vec<Batch>, Vec<_>) =
                jobs.into_iter().map(|j| (j.batch, j.reply)).unzip();
            match ingestor.commit(batches).await {
                Ok(outcomes) => {
                    Metrics::add(&metrics.commits_total, 1);
                    for (o, r) in outcomes.into_iter().zip(replies) {
                        if o.duplicate {
                            Metrics::add(&metrics.duplicate_batches_total, 1);
                        } else {
                            Metrics::add(&metrics.batches_total, 1);
                            Metrics::add(&metrics.events_total, o.events);
                        }
                        let _ = r.send(Ok(o));
                    }
                }
                Err(e) => {
                    Metrics::add(&metrics.commit_errors_total, 1);
                    tracing::error!("commit failed: {e}");
                    for r in replies {
                        let _ = r.send(Err(e.to_string()));
                    }
                }
            }
        }
    });
    (handle, task)
}
