//! Device-memory samples of a run's node (`device_samples`, from the node agent): the
//! overview's sparklines (last hour, highest use kept) and the run chart's "device used"
//! series (bucketed like the timeline).

use super::devices::SampleKey;
use crate::db::{Store, StoreError};
use crate::render::Point;

/// A device-sample point: (wall-clock ns, used bytes, total bytes).
pub type SamplePoint = (i64, i64, i64);

#[derive(sqlx::FromRow)]
struct Sample {
    ts_ns: i64,
    used_bytes: i64,
    total_bytes: i64,
}

#[derive(sqlx::FromRow)]
struct RunClock {
    node_id: i64,
    t0_mono_ns: i64,
}

#[derive(sqlx::FromRow)]
struct Used {
    ts_ns: i64,
    used_bytes: i64,
}

impl Store {
    /// Device samples of one node/device index/memory with a sample time (`ts_ns`, the
    /// node's clock) at or after `since_ts_ns`, oldest first, reduced to at most
    /// `points` by keeping each bucket's highest use. (ts_ns, used, total). Every
    /// sample at that index: [`Store::device_sample_history`] keeps one device's.
    pub async fn sample_history(
        &self,
        node: i64,
        device: i64,
        memory: i64,
        since_ts_ns: i64,
        points: usize,
    ) -> Result<Vec<SamplePoint>, StoreError> {
        self.history(node, ("device", device), memory, since_ts_ns, points)
            .await
    }

    /// [`Store::sample_history`] of the samples stored against one `devices` row (two
    /// machines' device 0 imported under one node name apart).
    pub async fn device_sample_history(
        &self,
        node: i64,
        device_id: i64,
        memory: i64,
        since_ts_ns: i64,
        points: usize,
    ) -> Result<Vec<SamplePoint>, StoreError> {
        self.history(node, ("device_id", device_id), memory, since_ts_ns, points)
            .await
    }

    async fn history(
        &self,
        node: i64,
        (column, device): (&str, i64),
        memory: i64,
        since_ts_ns: i64,
        points: usize,
    ) -> Result<Vec<SamplePoint>, StoreError> {
        let rows: Vec<Sample> = sqlx::query_as(&format!(
            "SELECT ts_ns, used_bytes, total_bytes FROM device_samples \
             WHERE node_id = $1 AND {column} = $2 AND memory = $3 AND ts_ns >= $4 \
             ORDER BY ts_ns LIMIT 100000"
        ))
        .bind(node)
        .bind(device)
        .bind(memory)
        .bind(since_ts_ns)
        .fetch_all(&self.pool)
        .await?;
        let v = rows
            .into_iter()
            .map(|r| (r.ts_ns, r.used_bytes, r.total_bytes))
            .collect();
        Ok(reduce_max(v, points))
    }

    /// Device-level used bytes sampled on a run's node for the run's device `device`
    /// (the node device it is by identity, `super::devices::sample_index`; nothing when
    /// it is none of the node's) and `memory` (0 VRAM, 1 GTT) over `[from, to)` ns since the run's start, bucketed into `n` buckets of
    /// `bucket_ns` (each bucket's min/max/last; a bucket without a sample carries the
    /// previous value). Empty when the node sent no sample in or before the range.
    pub async fn run_samples(
        &self,
        run: i64,
        device: i64,
        memory: i64,
        from: u64,
        bucket_ns: u64,
        n: usize,
    ) -> Result<Vec<Point>, StoreError> {
        let Some(RunClock {
            node_id: node,
            t0_mono_ns: t0,
        }) = sqlx::query_as("SELECT node_id, t0_mono_ns FROM runs WHERE id = $1")
            .bind(run)
            .fetch_optional(&self.pool)
            .await?
        else {
            return Ok(Vec::new());
        };
        let (column, device) = match super::devices::sample_key(self, run, device).await? {
            Some(SampleKey::Row(id)) => ("device_id", id),
            Some(SampleKey::Index(i)) => ("device", i),
            None => return Ok(Vec::new()),
        };
        let bucket_ns = bucket_ns.max(1);
        let lo = t0.saturating_add(from.min(i64::MAX as u64) as i64);
        let hi = lo.saturating_add(bucket_ns.saturating_mul(n as u64).min(i64::MAX as u64) as i64);
        let before: Option<i64> = sqlx::query_scalar(&format!(
            "SELECT used_bytes FROM device_samples WHERE node_id = $1 AND {column} = $2 \
             AND memory = $3 AND ts_ns < $4 AND ts_ns >= $5 ORDER BY ts_ns DESC LIMIT 1"
        ))
        .bind(node)
        .bind(device)
        .bind(memory)
        .bind(lo)
        // A sample older than 10 s says nothing about the range (the agent samples ~1/s).
        .bind(lo.saturating_sub(10_000_000_000))
        .fetch_optional(&self.pool)
        .await?;
        let rows: Vec<Used> = sqlx::query_as(&format!(
            "SELECT ts_ns, used_bytes FROM device_samples WHERE node_id = $1 AND {column} = $2 \
             AND memory = $3 AND ts_ns >= $4 AND ts_ns < $5 ORDER BY ts_ns LIMIT 200000"
        ))
        .bind(node)
        .bind(device)
        .bind(memory)
        .bind(lo)
        .bind(hi)
        .fetch_all(&self.pool)
        .await?;
        if rows.is_empty() && before.is_none() {
            return Ok(Vec::new());
        }
        let mut carry = before;
        let mut out = Vec::with_capacity(n);
        let mut it = rows.iter().peekable();
        for i in 0..n {
            let end = lo.saturating_add(((i as u64 + 1) * bucket_ns).min(i64::MAX as u64) as i64);
            let mut cur: Option<(i64, i64)> = carry.map(|c| (c, c));
            while let Some(r) = it.peek() {
                if r.ts_ns >= end {
                    break;
                }
                let v = r.used_bytes;
                cur = Some(cur.map_or((v, v), |(a, b)| (a.min(v), b.max(v))));
                carry = Some(v);
                it.next();
            }
            if let (Some((mn, mx)), Some(last)) = (cur, carry) {
                out.push(Point {
                    t_ns: from + i as u64 * bucket_ns,
                    min: mn,
                    max: mx,
                    last,
                });
            }
        }
        Ok(out)
    }
}

/// Keeps at most `points` samples: per equal-count bucket, the one with the most use.
pub(crate) fn reduce_max(v: Vec<SamplePoint>, points: usize) -> Vec<SamplePoint> {
    let points = points.max(1);
    if v.len() <= points {
        return v;
    }
    let per = v.len().div_ceil(points);
    v.chunks(per)
        .filter_map(|c| c.iter().max_by_key(|p| p.1).copied())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reduce_keeps_the_highest_use() {
        let v: Vec<SamplePoint> = (0..1000)
            .map(|i| (i, if i == 777 { 99 } else { 1 }, 100))
            .collect();
        let r = reduce_max(v, 100);
        assert_eq!(r.len(), 100);
        assert!(r.iter().any(|p| p.1 == 99));
    }
}
