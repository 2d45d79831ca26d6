//! The exec images of a run's pids as stored (`process_images`, migration 0006), for the
//! readers that replay stored events: which image of its pid an event belongs to, judged
//! by time (an event at or after image N's start is image N's), and which images had
//! ended (their successor started) by an instant. Ingest itself follows the images in
//! arrival order (`memwatch_analysis::live::ImageClock`) and writes the rows.

use std::collections::HashMap;

use memwatch_analysis::live::ProcKey;
use sqlx::Any;

use super::StoreError;

/// Image starts per pid: the start time of image 1, 2, ... in order.
#[derive(Debug, Clone, Default)]
pub(crate) struct StoredImages {
    starts: HashMap<u32, Vec<u64>>,
}

#[derive(sqlx::FromRow)]
struct ImageStart {
    pid: i64,
    start_ts_ns: i64,
}

impl StoredImages {
    /// The images of run `run`.
    pub(crate) async fn load<'e, E>(ex: E, run: i64) -> Result<Self, StoreError>
    where
        E: sqlx::Executor<'e, Database = Any>,
    {
        let rows: Vec<ImageStart> = sqlx::query_as(
            "SELECT pid, start_ts_ns FROM process_images WHERE run_id = $1 ORDER BY pid, image",
        )
        .bind(run)
        .fetch_all(ex)
        .await?;
        let mut starts: HashMap<u32, Vec<u64>> = HashMap::new();
        for r in rows {
            starts
                .entry(r.pid as u32)
                .or_default()
                .push(r.start_ts_ns.max(0) as u64);
        }
        Ok(Self { starts })
    }

    /// Whether no pid of the run exec'd (then every event is its pid's image 0).
    pub(crate) fn is_empty(&self) -> bool {
        self.starts.is_empty()
    }

    /// The process image an event of `pid` at `ts` belongs to.
    #[inline]
    pub(crate) fn proc_at(&self, pid: u32, ts: u64) -> ProcKey {
        if self.starts.is_empty() {
            // No exec in the run (the rule, and the common case on every event's path).
            return ProcKey { pid, image: 0 };
        }
        let image = self
            .starts
            .get(&pid)
            .map_or(0, |s| s.partition_point(|&start| start <= ts) as u32);
        ProcKey { pid, image }
    }

    /// The images that had ended by `ts` (the next image of their pid started at or
    /// before it).
    pub(crate) fn ended_by(&self, ts: u64) -> impl Iterator<Item = ProcKey> + '_ {
        self.starts.iter().flat_map(move |(&pid, s)| {
            let current = s.partition_point(|&start| start <= ts) as u32;
            (0..current).map(move |image| ProcKey { pid, image })
        })
    }

    /// Every exec as (start time of the new image, pid), in time order.
    pub(crate) fn exec_points(&self) -> Vec<(u64, u32)> {
        let mut v: Vec<(u64, u32)> = self
            .starts
            .iter()
            .flat_map(|(&pid, s)| s.iter().map(move |&t| (t, pid)))
            .collect();
        v.sort_unstable();
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_belong_to_the_image_running_at_their_time() {
        let mut s = StoredImages::default();
        s.starts.insert(7, vec![100, 200]);
        assert_eq!(s.proc_at(7, 99), ProcKey { pid: 7, image: 0 });
        assert_eq!(s.proc_at(7, 100), ProcKey { pid: 7, image: 1 });
        assert_eq!(s.proc_at(7, 250), ProcKey { pid: 7, image: 2 });
        assert_eq!(s.proc_at(8, 250), ProcKey { pid: 8, image: 0 });
        assert_eq!(s.ended_by(99).count(), 0);
        let mut ended: Vec<ProcKey> = s.ended_by(200).collect();
        ended.sort();
        assert_eq!(
            ended,
            vec![ProcKey { pid: 7, image: 0 }, ProcKey { pid: 7, image: 1 }]
        );
    }
}
