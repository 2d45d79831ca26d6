//! The runner's view of an allocation trace: ordered alloc/free events with ids and sizes.
//!
//! Owns: the small event type the runner consumes, scaling a trace by an integer divisor
//! (capacity emulation of a larger device), and checking that a trace is replayable (no id
//! allocated twice while live, no free of an id that is not live). It does not parse files:
//! the CLI converts memwatch-analysis' traces into these events.

use serde::Serialize;
use thiserror::Error;

/// One trace event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "op", rename_all = "lowercase")]
pub enum TraceEvent {
    Alloc { id: u64, size: u64 },
    Free { id: u64 },
}

/// A trace the runner cannot replay.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum TraceError {
    #[error("event {index}: alloc of id {id}, which is already live")]
    DuplicateId { index: usize, id: u64 },
    #[error("event {index}: free of id {id}, which is not live")]
    UnknownFree { index: usize, id: u64 },
    #[error("event {index}: alloc of id {id} has size 0")]
    ZeroSize { index: usize, id: u64 },
}

/// Checks that every free names a live id and no live id is allocated again.
pub fn validate(events: &[TraceEvent]) -> Result<(), TraceError> {
    let mut live = std::collections::HashSet::new();
    for (index, e) in events.iter().enumerate() {
        match *e {
            TraceEvent::Alloc { id, size } => {
                if size == 0 {
                    return Err(TraceError::ZeroSize { index, id });
                }
                if !live.insert(id) {
                    return Err(TraceError::DuplicateId { index, id });
                }
            }
            TraceEvent::Free { id } => {
                if !live.remove(&id) {
                    return Err(TraceError::UnknownFree { index, id });
                }
            }
        }
    }
    Ok(())
}

/// Every size divided by `divisor`, rounded up (never to 0). `divisor` 1 returns a copy.
pub fn scale(events: &[TraceEvent], divisor: u64) -> Vec<TraceEvent> {
    let d = divisor.max(1);
    events
        .iter()
        .map(|e| match *e {
            TraceEvent::Alloc { id, size } => TraceEvent::Alloc {
                id,
                size: size.div_ceil(d).max(1),
            },
            f => f,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scale_rounds_up_and_keeps_frees() {
        let t = [
            TraceEvent::Alloc { id: 1, size: 10 },
            TraceEvent::Alloc { id: 2, size: 1 },
            TraceEvent::Free { id: 1 },
        ];
        assert_eq!(
            scale(&t, 3),
            vec![
                TraceEvent::Alloc { id: 1, size: 4 },
                TraceEvent::Alloc { id: 2, size: 1 },
                TraceEvent::Free { id: 1 },
            ]
        );
    }

    #[test]
    fn validate_names_the_bad_event() {
        let t = [
            TraceEvent::Alloc { id: 1, size: 8 },
            TraceEvent::Free { id: 2 },
        ];
        assert_eq!(
            validate(&t),
            Err(TraceError::UnknownFree { index: 1, id: 2 })
        );
        let t = [
            TraceEvent::Alloc { id: 1, size: 8 },
            TraceEvent::Alloc { id: 1, size: 8 },
        ];
        assert_eq!(
            validate(&t),
            Err(TraceError::DuplicateId { index: 1, id: 1 })
        );
        let t = [
            TraceEvent::Alloc { id: 1, size: 8 },
            TraceEvent::Free { id: 1 },
            TraceEvent::Alloc { id: 1, size: 8 },
        ];
        assert_eq!(validate(&t), Ok(()));
    }
}
