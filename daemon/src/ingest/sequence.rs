//! The numbering rule of ingest streams: which numbered batch is stored, which is
//! acknowledged as stored already, and which is refused so that its sender resends from
//! the gap. One rule for every ingest path; the [`super::Ingestor`] applies it inside the
//! transaction that stores the batch, against the stream's last stored number.
//!
//! "Stored already" must mean stored: a batch numbered at or below the stream's last
//! stored batch is a duplicate only because nothing after a gap is ever stored. So an
//! agent's batch must be the last stored + 1, and after a failed commit every later batch
//! of that stream is refused until the failed one is stored (the agent resends from it).

use std::collections::HashMap;

use memwatch_wire::ingest::resend_request;

/// How a stream numbers its batches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sequencing {
    /// 1, 2, 3, … (agents over TCP): a batch must follow the last stored one; a stream
    /// the database has never seen may start anywhere (an agent replaying its spool into
    /// a new database).
    Consecutive,
    /// Numbers only grow, with gaps (`memwatch import` numbers batches by records).
    Increasing,
}

/// What to do with one numbered batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Verdict {
    Store,
    /// Stored before: acknowledge, store nothing.
    Duplicate,
    /// Not stored and not acknowledged; the message tells the sender where to resend from.
    Refuse(String),
}

/// Decides batch `seq` of `stream`, whose last stored batch is `last` (`None`: no batch of
/// it is stored) and whose batch `failed` (if any) failed to commit and was not stored
/// since.
pub(super) fn verdict(
    stream: u64,
    seq: u64,
    rule: Sequencing,
    last: Option<u64>,
    failed: Option<u64>,
) -> Verdict {
    if let Some(f) = failed {
        if seq > f {
            return Verdict::Refuse(format!(
                "stream {stream}: batch {seq} follows batch {f}, whose commit failed; {}",
                resend_request(stream, f)
            ));
        }
    }
    match last {
        Some(l) if seq <= l => Verdict::Duplicate,
        Some(l) if rule == Sequencing::Consecutive && seq != l + 1 => Verdict::Refuse(format!(
            "stream {stream}: batch {seq} does not follow batch {l}, the last one stored; {}",
            resend_request(stream, l + 1)
        )),
        _ => Verdict::Store,
    }
}

/// Most streams remembered with a failed commit (a sender that never comes back leaves
/// its entry; beyond this the oldest failures are forgotten, and the consecutive rule
/// alone guards those streams).
const MAX_FAILED: usize = 65_536;

/// Streams with a failed commit: (node, stream) → the first batch number not stored.
/// Kept across the ingestor's resets (its cache of stored state is dropped after a
/// failure; this is what it must not forget).
#[derive(Debug, Default)]
pub(super) struct FailedStreams {
    first_failed: HashMap<(String, u64), (u64, u64)>,
    /// Order of failures, to forget the oldest when full.
    counter: u64,
}

impl FailedStreams {
    pub(super) fn get(&self, node: &str, stream: u64) -> Option<u64> {
        if self.first_failed.is_empty() {
            return None;
        }
        self.first_failed
            .get(&(node.to_string(), stream))
            .map(|&(seq, _)| seq)
    }

    /// Batch `seq` of `stream` failed to commit.
    pub(super) fn failed(&mut self, node: &str, stream: u64, seq: u64) {
        if self.first_failed.len() >= MAX_FAILED {
            if let Some(oldest) = self
                .first_failed
                .iter()
                .min_by_key(|(_, &(_, order))| order)
                .map(|(k, _)| k.clone())
            {
                self.first_failed.remove(&oldest);
            }
        }
        self.counter += 1;
        let order = self.counter;
        self.first_failed
            .entry((node.to_string(), stream))
            .and_modify(|e| e.0 = e.0.min(seq))
            .or_insert((seq, order));
    }

    /// `stream`'s batches up to `last` are stored now.
    pub(super) fn stored_through(&mut self, node: &str, stream: u64, last: u64) {
        if self.first_failed.is_empty() {
            return;
        }
        let key = (node.to_string(), stream);
        if self.first_failed.get(&key).is_some_and(|&(f, _)| f <= last) {
            self.first_failed.remove(&key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use memwatch_wire::ingest::parse_resend_request;
    use Sequencing::*;

    #[test]
    fn consecutive_streams_refuse_gaps_and_resends_below_are_duplicates() {
        assert_eq!(verdict(1, 1, Consecutive, None, None), Verdict::Store);
        assert_eq!(verdict(1, 7, Consecutive, None, None), Verdict::Store);
        assert_eq!(verdict(1, 5, Consecutive, Some(4), None), Verdict::Store);
        assert_eq!(
            verdict(1, 4, Consecutive, Some(4), None),
            Verdict::Duplicate
        );
        assert_eq!(
            verdict(1, 1, Consecutive, Some(4), None),
            Verdict::Duplicate
        );
        match verdict(1, 6, Consecutive, Some(4), None) {
            Verdict::Refuse(m) => assert_eq!(parse_resend_request(&m), Some((1, 5)), "{m}"),
            v => panic!("{v:?}"),
        }
        // Increasing streams skip numbers.
        assert_eq!(verdict(1, 9, Increasing, Some(4), None), Verdict::Store);
        assert_eq!(verdict(1, 3, Increasing, Some(4), None), Verdict::Duplicate);
    }

    #[test]
    fn after_a_failed_commit_later_batches_wait_for_the_failed_one() {
        for rule in [Consecutive, Increasing] {
            // Batch 2 of a new stream failed: 3 must not be stored, even with no row.
            match verdict(1, 3, rule, None, Some(2)) {
                Verdict::Refuse(m) => assert_eq!(parse_resend_request(&m), Some((1, 2)), "{m}"),
                v => panic!("{v:?}"),
            }
            assert_eq!(verdict(1, 2, rule, None, Some(2)), Verdict::Store);
            assert_eq!(verdict(1, 2, rule, Some(1), Some(2)), Verdict::Store);
        }
        let mut f = FailedStreams::default();
        f.failed("n", 1, 5);
        f.failed("n", 1, 3);
        f.failed("m", 1, 9);
        assert_eq!(f.get("n", 1), Some(3));
        f.stored_through("n", 1, 2);
        assert_eq!(f.get("n", 1), Some(3));
        f.stored_through("n", 1, 3);
        assert_eq!(f.get("n", 1), None);
        assert_eq!(f.get("m", 1), Some(9));
    }
}
