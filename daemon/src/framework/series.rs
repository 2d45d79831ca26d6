//! The framework view's series: what each `framework_rollups.series` number means. The
//! one definition the builder writes and the readers draw from.

/// Allocator bytes in use (PJRT memory statistics, summed over the device's processes).
pub const IN_USE: i64 = 0;
/// Allocator pool bytes (what the allocator reserved from the driver).
pub const POOL: i64 = 1;
/// Allocator limit.
pub const LIMIT: i64 = 2;
/// Bytes of all live PJRT buffers (`jax.Array`s and other device buffers).
pub const LIVE_BUFFERS: i64 = 3;
/// PyTorch's allocated bytes (live caching-allocator blocks) of a snapshot run.
pub const TORCH_ALLOCATED: i64 = 4;
/// Executions started (a count series: `lo` = executions, `hi` = their busy ns).
pub const EXECUTIONS: i64 = 5;
/// Live buffer bytes of producer `idx` (`framework_producers`): `PRODUCER_LIVE + idx`.
pub const PRODUCER_LIVE: i64 = 1_000;
/// Executions of producer `idx`: `PRODUCER_EXECS + idx` (a count series).
pub const PRODUCER_EXECS: i64 = 1_000_000;

/// One process's own allocator figures (PJRT memory statistics of that pid alone):
/// `PROCESS_POOLS + 4 * pid + k`, `k` one of [`PROCESS_IN_USE`], [`PROCESS_POOL`],
/// [`PROCESS_LIMIT`]. Each process's pool is its own line; [`POOL`] is their sum.
pub const PROCESS_POOLS: i64 = 1 << 40;
pub const PROCESS_IN_USE: i64 = 0;
pub const PROCESS_POOL: i64 = 1;
pub const PROCESS_LIMIT: i64 = 2;

/// The series of process `pid`'s figure `k`.
pub fn of_process(pid: i64, k: i64) -> i64 {
    PROCESS_POOLS + 4 * pid.max(0) + k
}

/// The (pid, figure) of a per-process series.
pub fn process_of(series: i64) -> Option<(i64, i64)> {
    (series >= PROCESS_POOLS).then(|| ((series - PROCESS_POOLS) / 4, (series - PROCESS_POOLS) % 4))
}

/// Whether a series counts things per bucket (summed, not carried) rather than holding a
/// value (carried from bucket to bucket).
pub fn is_count(series: i64) -> bool {
    series == EXECUTIONS || (PRODUCER_EXECS..PROCESS_POOLS).contains(&series)
}

/// The producer index of a per-producer live series.
pub fn producer_of_live(series: i64) -> Option<i64> {
    (PRODUCER_LIVE..PRODUCER_EXECS)
        .contains(&series)
        .then_some(series - PRODUCER_LIVE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn series_ranges_do_not_overlap() {
        assert_eq!(producer_of_live(PRODUCER_LIVE + 7), Some(7));
        assert_eq!(producer_of_live(PRODUCER_EXECS + 7), None);
        assert!(is_count(EXECUTIONS) && is_count(PRODUCER_EXECS + 3));
        assert!(!is_count(IN_USE) && !is_count(PRODUCER_LIVE + 3));
        let s = of_process(4_194_303, PROCESS_LIMIT);
        assert!(!is_count(s) && producer_of_live(s).is_none());
        assert_eq!(process_of(s), Some((4_194_303, PROCESS_LIMIT)));
        assert_eq!(process_of(PRODUCER_EXECS + 9), None);
    }
}
