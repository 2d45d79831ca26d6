//! The one rule for "did the live set plus the failed request fit the pool?": the need
//! (live bytes + request) against the pool the allocator held, and the limit it could
//! have grown to. Every OOM explanation that knows a live set uses it (the doctor's
//! kinds, `memwatch log`'s dump join, `memwatch replay` of a BFC dump).

use serde::Serialize;

/// What the need says about a failed request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum NeedVerdict {
    /// The pool's size is not known: nothing can be concluded.
    PoolUnknown,
    /// Live + request fit the pool in total: the request found no free range large
    /// enough (the pool is fragmented).
    Fragmentation,
    /// Above the pool held so far but within the limit it could grow to: the pool could
    /// not grow (the device had no room for a new region).
    PoolCouldNotGrow,
    /// Above the pool (and its limit): the pool is too small for this moment.
    PoolTooSmall,
}

impl NeedVerdict {
    /// Stable name (`pool_unknown`, `fragmentation`, `pool_could_not_grow`,
    /// `pool_too_small`).
    pub fn name(self) -> &'static str {
        match self {
            Self::PoolUnknown => "pool_unknown",
            Self::Fragmentation => "fragmentation",
            Self::PoolCouldNotGrow => "pool_could_not_grow",
            Self::PoolTooSmall => "pool_too_small",
        }
    }
}

/// The live set at a failure plus the failed request, against the pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct PoolNeed {
    /// Bytes live when the request failed (allocator-rounded where known).
    pub live_bytes: u64,
    /// The failed request (allocator-rounded where known).
    pub request_bytes: u64,
    /// `live + request`.
    pub need_bytes: u64,
    /// The pool the allocator held at the failure (BFC: the sum of its regions).
    pub pool_bytes: Option<u64>,
    /// The limit the allocator states, when above the pool it held (a growing pool).
    pub stated_limit_bytes: Option<u64>,
    /// `need - pool` when the need is above the pool.
    pub short_by_bytes: Option<u64>,
}

impl PoolNeed {
    /// The need of `live + request` against `pool` (and a stated limit above it).
    pub fn new(live: u64, request: u64, pool: Option<u64>, stated_limit: Option<u64>) -> Self {
        let need = live.saturating_add(request);
        Self {
            live_bytes: live,
            request_bytes: request,
            need_bytes: need,
            pool_bytes: pool,
            stated_limit_bytes: stated_limit.filter(|l| pool.is_none_or(|p| *l > p)),
            short_by_bytes: pool.and_then(|p| need.checked_sub(p)).filter(|&s| s > 0),
        }
    }

    /// Whether a need above the pool is still within the stated limit.
    pub fn grows_within_limit(&self) -> bool {
        self.stated_limit_bytes
            .is_some_and(|l| self.need_bytes <= l)
    }

    /// The verdict.
    pub fn verdict(&self) -> NeedVerdict {
        match (self.pool_bytes, self.short_by_bytes) {
            (None, _) => NeedVerdict::PoolUnknown,
            (Some(_), None) => NeedVerdict::Fragmentation,
            (Some(_), Some(_)) if self.grows_within_limit() => NeedVerdict::PoolCouldNotGrow,
            (Some(_), Some(_)) => NeedVerdict::PoolTooSmall,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdicts() {
        let n = PoolNeed::new(3, 2, Some(10), None);
        assert_eq!((n.need_bytes, n.verdict()), (5, NeedVerdict::Fragmentation));
        let n = PoolNeed::new(9, 2, Some(10), None);
        assert_eq!(
            (n.short_by_bytes, n.verdict()),
            (Some(1), NeedVerdict::PoolTooSmall)
        );
        let n = PoolNeed::new(9, 2, Some(10), Some(20));
        assert_eq!(n.verdict(), NeedVerdict::PoolCouldNotGrow);
        let n = PoolNeed::new(19, 2, Some(10), Some(20));
        assert_eq!(n.verdict(), NeedVerdict::PoolTooSmall);
        // a limit not above the pool is no growth room
        assert_eq!(
            PoolNeed::new(1, 1, Some(10), Some(10)).stated_limit_bytes,
            None
        );
        assert_eq!(
            PoolNeed::new(1, 1, None, None).verdict(),
            NeedVerdict::PoolUnknown
        );
        // exactly full is not short
        assert_eq!(
            PoolNeed::new(8, 2, Some(10), None).verdict(),
            NeedVerdict::Fragmentation
        );
    }
}
