//! Rebuilding a run's in-memory state from what is stored (after a restart, or when the
//! run was evicted): its processes, pool samples and exec images, and every stored event
//! replayed in arrival order — each device's chunks in their stored order, the devices
//! merged by time.

use std::collections::VecDeque;

use memwatch_wire::Event;

use super::run_state::RunState;
use super::Tx;
use crate::db::images::StoredImages;
use crate::db::{chunk, StoreError};

/// A stored chunk's events (restart rebuild).
#[derive(sqlx::FromRow)]
struct ChunkEvents {
    id: i64,
    events: Vec<u8>,
}

/// A process's dropped-events counter and whether it ended (restart rebuild).
#[derive(sqlx::FromRow)]
struct ProcessDropped {
    pid: i64,
    dropped_events: i64,
    end_ts_ns: Option<i64>,
}

/// One device's stored events, read a few chunks at a time in their stored order
/// (restart rebuild).
struct DeviceStream {
    device: i64,
    after: i64,
    done: bool,
    events: VecDeque<Event>,
}

impl DeviceStream {
    fn new(device: i64) -> Self {
        Self {
            device,
            after: 0,
            done: false,
            events: Default::default(),
        }
    }

    /// The time of the next event, reading the next chunks when the buffer is empty;
    /// `None` when the device's events are all read.
    async fn head_ts(&mut self, tx: &mut Tx, run: i64) -> Result<Option<u64>, StoreError> {
        while self.events.is_empty() && !self.done {
            let rows: Vec<ChunkEvents> = sqlx::query_as(
                "SELECT id, events FROM event_chunks WHERE run_id = $1 AND device = $2 AND id > $3 ORDER BY id LIMIT 16",
            )
            .bind(run)
            .bind(self.device)
            .bind(self.after)
            .fetch_all(&mut **tx)
            .await?;
            self.done = rows.is_empty();
            for row in &rows {
                self.after = row.id;
                self.events
                    .extend(chunk::whole_events(row.id, &row.events)?);
            }
        }
        Ok(self.events.front().map(|e| e.ts_ns))
    }
}

/// Replays a run's stored chunks to recover its live state. The
/// pids that started are announced first; a stored exec (`process_images`) releases
/// the image before it when the replay reaches its start time, and once more after
/// the replay (events of the old image stored after the new image's, on another
/// device, are released too).
pub(super) async fn rebuild(tx: &mut Tx, run: i64, t0: u64) -> Result<RunState, StoreError> {
    let mut st = RunState::new(run, t0);
    let procs: Vec<ProcessDropped> =
        sqlx::query_as("SELECT pid, dropped_events, end_ts_ns FROM processes WHERE run_id = $1")
            .bind(run)
            .fetch_all(&mut **tx)
            .await?;
    for p in &procs {
        st.replay_announce(p.pid as u32);
    }
    st.pool.load_stored(tx, run).await?;
    let images = StoredImages::load(&mut **tx, run).await?;
    let mut execs = images.exec_points();
    execs.reverse(); // popped in time order
                     // Each device's chunks hold its events in arrival order; across devices the
                     // arrival order is the events' time order (a pointer freed on one device and
                     // handed out on another must replay in that order), so the devices' streams are
                     // merged by time.
    let devices: Vec<i64> =
        sqlx::query_scalar("SELECT DISTINCT device FROM event_chunks WHERE run_id = $1")
            .bind(run)
            .fetch_all(&mut **tx)
            .await?;
    let mut streams: Vec<DeviceStream> = devices.into_iter().map(DeviceStream::new).collect();
    loop {
        let mut next: Option<(usize, u64)> = None;
        for (i, d) in streams.iter_mut().enumerate() {
            if let Some(ts) = d.head_ts(tx, run).await? {
                if next.is_none_or(|(_, t)| ts < t) {
                    next = Some((i, ts));
                }
            }
        }
        let Some((i, _)) = next else {
            break;
        };
        let Some(e) = streams[i].events.pop_front() else {
            break;
        };
        if images.is_empty() {
            st.apply(&e, false);
            continue;
        }
        while execs.last().is_some_and(|x| x.0 <= e.ts_ns) {
            if let Some((ts, pid)) = execs.pop() {
                st.replay_exec(pid, ts);
            }
        }
        st.apply_as(&e, images.proc_at(e.pid, e.ts_ns), false);
    }
    while let Some((ts, pid)) = execs.pop() {
        st.replay_exec(pid, ts);
    }
    for ended in images.ended_by(u64::MAX) {
        st.release(ended, st.last_ts, false);
    }
    for p in procs {
        st.dropped.insert(p.pid as u32, p.dropped_events as u64);
        if p.end_ts_ns.is_none() {
            st.running.insert(p.pid as u32);
        }
    }
    for d in st.devices.values_mut() {
        d.dirty = false;
    }
    st.rewrite_peaks();
    st.dirty = false;
    Ok(st)
}
