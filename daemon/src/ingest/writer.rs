//! The single writer task: receives batches from all ingest paths, commits them in
//! groups (one transaction per group) and answers each submitter after the commit.
//!
//! Owns the queue and its fairness: every connection or HTTP request has its own lane,
//! its peer's (`peer`) lanes are served in turn, and peers take turns: a group takes one
//! batch from each waiting peer in turn, from that peer's next waiting lane. A peer that
//! floods, over however many connections, waits behind its own batches, not others
//! behind it. A group is sized to
//! commit in about [`GROUP_TARGET`] at the rate the writer has been storing, so a batch
//! that arrives waits at most about two groups. Also owns the queue-depth metric and the
//! stop at shutdown (the commit in progress ends first). Storage logic lives in the
//! [`Ingestor`].

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::sync::{oneshot, Notify};

use super::budget::{Budget, Charge, IngestLimits};
use super::peer::Peer;
use super::{Batch, BatchOutcome, Ingestor, Sequencing};
use crate::metrics::Metrics;

/// Most batches committed in one transaction.
const MAX_GROUP: usize = 128;
/// Most events committed in one transaction.
const MAX_GROUP_EVENTS: usize = 2_000_000;
/// Fewest events a group is cut to (when batches of that many are waiting).
const MIN_GROUP_EVENTS: usize = 8_192;
/// How long one group's commit should take.
pub const GROUP_TARGET: Duration = Duration::from_millis(100);

/// The answer to one submitted batch.
pub type Reply = Result<BatchOutcome, NotStored>;

/// Why a submitted batch was not stored (and must not be acknowledged).
#[derive(Debug, Clone, thiserror::Error)]
pub enum NotStored {
    /// It does not follow its stream's stored batches (see `sequence`); the message says
    /// where to resend from.
    #[error("{0}")]
    Refused(String),
    /// Its transaction failed.
    #[error("storage failed: {0}")]
    Failed(String),
    /// The daemon is stopping.
    #[error("the writer has stopped")]
    Stopped,
}

struct Job {
    batch: Batch,
    sequencing: Sequencing,
    reply: oneshot::Sender<Reply>,
    /// The batch's decoded bytes in the budget, given back after its commit.
    charge: Charge,
}

/// The waiting batches, by peer, and the order peers take turns in.
#[derive(Default)]
struct Queue {
    peers: HashMap<Peer, Lanes>,
    turns: VecDeque<Peer>,
    stopped: bool,
}

/// One peer's waiting batches, by lane, and the order its lanes take turns in.
#[derive(Default)]
struct Lanes {
    lanes: HashMap<u64, VecDeque<Job>>,
    turns: VecDeque<u64>,
}

struct Shared {
    queue: Mutex<Queue>,
    ready: Notify,
    next_lane: AtomicU64,
}

fn lock(m: &Mutex<Queue>) -> MutexGuard<'_, Queue> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Submits batches to the writer. Cheap to clone; clones share a lane
/// ([`WriterHandle::lane`] makes a new one).
#[derive(Clone)]
pub struct WriterHandle {
    shared: Arc<Shared>,
    metrics: Arc<Metrics>,
    budget: Budget,
    peer: Peer,
    lane: u64,
}

impl WriterHandle {
    /// A handle with a lane of its own (one per connection or request) of `peer`'s.
    pub fn lane(&self, peer: Peer) -> WriterHandle {
        WriterHandle {
            lane: self.shared.next_lane.fetch_add(1, Ordering::Relaxed),
            peer,
            ..self.clone()
        }
    }

    /// The memory budget batches are charged to before they are queued.
    pub fn budget(&self) -> &Budget {
        &self.budget
    }

    /// Queues a batch on this handle's lane; the receiver resolves after its commit.
    /// `charge` (its decoded bytes) is given back after the commit.
    pub fn submit(
        &self,
        batch: Batch,
        sequencing: Sequencing,
        charge: Charge,
    ) -> Result<oneshot::Receiver<Reply>, NotStored> {
        let (reply, rx) = oneshot::channel();
        let job = Job {
            batch,
            sequencing,
            reply,
            charge,
        };
        {
            let mut q = lock(&self.shared.queue);
            if q.stopped {
                return Err(NotStored::Stopped);
            }
            if !q.peers.contains_key(&self.peer) {
                q.turns.push_back(self.peer);
            }
            let peer = q.peers.entry(self.peer).or_default();
            let lane = peer.lanes.entry(self.lane).or_default();
            if lane.is_empty() {
                peer.turns.push_back(self.lane);
            }
            lane.push_back(job);
        }
        self.metrics.queue_depth.fetch_add(1, Ordering::Relaxed);
        self.shared.ready.notify_one();
        Ok(rx)
    }

    /// Stops the writer: the commit in progress ends, waiting and later batches are
    /// answered [`NotStored::Stopped`].
    pub fn stop(&self) {
        let dropped = {
            let mut q = lock(&self.shared.queue);
            q.stopped = true;
            q.turns.clear();
            std::mem::take(&mut q.peers)
        };
        for job in dropped
            .into_values()
            .flat_map(|p| p.lanes.into_values().flatten())
        {
            self.metrics.queue_depth.fetch_sub(1, Ordering::Relaxed);
            let _ = job.reply.send(Err(NotStored::Stopped));
        }
        self.shared.ready.notify_one();
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
/// Keeps blocks up to 16 MiB in the heap and up to 128 MiB of free heap. One heap
/// (arena) for every thread: with one per thread, each kept what its thread had freed
/// for that thread alone (3M live allocations ingested: peak RSS 598 MiB with one
/// arena per thread, 528 MiB with one). Process-wide, set once, by the process that
/// runs the writer, before the threads that allocate are started (an arena a thread
/// took stays its own): `memwatch serve` before its runtime, the daemon at its start.
pub fn tune_allocator() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        static ONCE: std::sync::Once = std::sync::Once::new();
        ONCE.call_once(|| {
            // SAFETY: mallopt only changes allocator parameters; called before the
            // writer allocates, and glibc serialises it against other allocations.
            unsafe {
                libc::mallopt(libc::M_MMAP_THRESHOLD, 16 << 20);
                libc::mallopt(libc::M_TRIM_THRESHOLD, 128 << 20);
                libc::mallopt(libc::M_ARENA_MAX, 1);
            }
        });
    }
}

/// Takes the next group: one batch per waiting peer in turn (from its lanes in turn),
/// until the group holds
/// `max_events` events or [`MAX_GROUP`] batches, or nothing waits. `None` once stopped.
fn take_group(shared: &Shared, max_events: usize) -> Option<Vec<Job>> {
    let mut q = lock(&shared.queue);
    if q.stopped {
        return None;
    }
    let mut jobs = Vec::new();
    let mut events = 0usize;
    while jobs.len() < MAX_GROUP && events < max_events {
        let Some(peer) = q.turns.pop_front() else {
            break;
        };
        let Some(lanes) = q.peers.get_mut(&peer) else {
            continue;
        };
        if let Some(lane) = lanes.turns.pop_front() {
            if let Some(waiting) = lanes.lanes.get_mut(&lane) {
                if let Some(job) = waiting.pop_front() {
                    events += events_in(&job.batch);
                    jobs.push(job);
                }
                if waiting.is_empty() {
                    lanes.lanes.remove(&lane);
                } else {
                    lanes.turns.push_back(lane);
                }
            }
        }
        if lanes.turns.is_empty() {
            q.peers.remove(&peer);
        } else {
            q.turns.push_back(peer);
        }
    }
    Some(jobs)
}

/// Starts the writer with the memory budget `limits` for received data. It runs until
/// [`WriterHandle::stop`].
pub fn spawn_writer(
    mut ingestor: Ingestor,
    metrics: Arc<Metrics>,
    limits: IngestLimits,
) -> (WriterHandle, tokio::task::JoinHandle<()>) {
    tune_allocator();
    let shared = Arc::new(Shared {
        queue: Mutex::new(Queue::default()),
        ready: Notify::new(),
        next_lane: AtomicU64::new(1),
    });
    let handle = WriterHandle {
        shared: shared.clone(),
        metrics: metrics.clone(),
        budget: Budget::new(limits),
        peer: Peer::LOCAL,
        lane: 0,
    };
    let task = tokio::spawn(async move {
        // Events per second the writer has been storing (a moving average).
        let mut rate = 0f64;
        loop {
            let max_events = if rate > 0.0 {
                ((rate * GROUP_TARGET.as_secs_f64()) as usize)
                    .clamp(MIN_GROUP_EVENTS, MAX_GROUP_EVENTS)
            } else {
                MIN_GROUP_EVENTS
            };
            let Some(jobs) = take_group(&shared, max_events) else {
                return;
            };
            if jobs.is_empty() {
                shared.ready.notified().await;
                continue;
            }
            metrics
                .queue_depth
                .fetch_sub(jobs.len() as i64, Ordering::Relaxed);
            let n_events: usize = jobs.iter().map(|j| events_in(&j.batch)).sum();
            let mut batches = Vec::with_capacity(jobs.len());
            let mut answers = Vec::with_capacity(jobs.len());
            for j in jobs {
                batches.push((j.batch, j.sequencing));
                answers.push((j.reply, j.charge));
            }
            let started = Instant::now();
            let result = ingestor.commit_checked(&batches).await;
            let took = started.elapsed().as_secs_f64().max(1e-6);
            if n_events >= 4096 && result.is_ok() {
                let r = n_events as f64 / took;
                rate = if rate == 0.0 { r } else { 0.7 * rate + 0.3 * r };
            }
            drop(batches);
            match result {
                Ok(outcomes) => {
                    Metrics::add(&metrics.commits_total, 1);
                    for (o, (r, _charge)) in outcomes.into_iter().zip(answers) {
                        if let Some(why) = o.refused {
                            Metrics::add(&metrics.refused_batches_total, 1);
                            tracing::warn!("refused a batch: {why}");
                            let _ = r.send(Err(NotStored::Refused(why)));
                            continue;
                        }
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
                    for (r, _charge) in answers {
                        let _ = r.send(Err(NotStored::Failed(e.to_string())));
                    }
                }
            }
            ingestor.evict_idle_runs();
        }
    });
    (handle, task)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn handle() -> WriterHandle {
        WriterHandle {
            shared: Arc::new(Shared {
                queue: Mutex::new(Queue::default()),
                ready: Notify::new(),
                next_lane: AtomicU64::new(1),
            }),
            metrics: Arc::default(),
            budget: Budget::new(IngestLimits::default()),
            peer: Peer::LOCAL,
            lane: 0,
        }
    }

    fn peer(last: u8) -> Peer {
        Peer {
            ip: std::net::IpAddr::from([127, 0, 0, last]),
            uid: Some(1000),
        }
    }

    fn submit(lane: &WriterHandle, node: &str, seq: u64) {
        let batch = Batch {
            node: node.into(),
            stream: 1,
            seq,
            run_key: String::new(),
            records: Vec::new(),
        };
        lane.submit(batch, Sequencing::Consecutive, Charge::default())
            .unwrap();
    }

    #[test]
    fn peers_take_turns_then_their_lanes() {
        let w = handle();
        // Peer 2 floods over 10 connections, 3 batches each, before peer 3's 3 batches.
        let flood: Vec<_> = (0..10).map(|_| w.lane(peer(2))).collect();
        for seq in 1..=3 {
            for (i, lane) in flood.iter().enumerate() {
                submit(lane, &format!("a{i}"), seq);
            }
        }
        let other = w.lane(peer(3));
        for seq in 1..=3 {
            submit(&other, "b", seq);
        }
        // One group takes them all (they hold no events), in turn order.
        let order: Vec<String> = take_group(&w.shared, usize::MAX)
            .unwrap()
            .into_iter()
            .map(|j| format!("{}/{}", j.batch.node, j.batch.seq))
            .collect();
        assert_eq!(order.len(), 33);
        // Peer 3 is served every other turn while it waits; peer 2's connections in turn.
        assert_eq!(
            &order[..8],
            ["a0/1", "b/1", "a1/1", "b/2", "a2/1", "b/3", "a3/1", "a4/1"]
        );
        assert_eq!(&order[10..13], ["a7/1", "a8/1", "a9/1"]);
        assert_eq!(&order[13..15], ["a0/2", "a1/2"]);
        assert_eq!(order[32], "a9/3");
    }
}
