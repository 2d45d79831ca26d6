//! A [`FrameSink`] in front of another that fires the sampler's [`Trigger`] when a frame
//! holds a failed allocation (`alloc_failed` event), before passing the frame on
//! unchanged: the device and its processes are read at the failure, not up to a period
//! later.

use std::sync::Arc;

use memwatch_wire::{EventKind, Record};

use super::sampling::Trigger;
use crate::sink::{CloseReason, ConnId, FrameSink, SinkError};

pub struct FailureTap {
    inner: Arc<dyn FrameSink>,
    trigger: Option<Trigger>,
}

impl FailureTap {
    /// `trigger` `None`: no sampler runs; frames pass as they are.
    pub fn new(inner: Arc<dyn FrameSink>, trigger: Option<Trigger>) -> Self {
        Self { inner, trigger }
    }
}

/// Whether a frame reports a failed allocation.
pub fn holds_failure(record: &Record) -> bool {
    match record {
        Record::Events(events) => events.iter().any(|e| e.is(EventKind::AllocFailed)),
        _ => false,
    }
}

impl FrameSink for FailureTap {
    fn frame(&self, conn: ConnId, record: &Record, bytes: &[u8]) -> Result<(), SinkError> {
        if let Some(t) = &self.trigger {
            if holds_failure(record) {
                t.fire();
            }
        }
        self.inner.frame(conn, record, bytes)
    }

    fn closed(&self, conn: ConnId, reason: &CloseReason) {
        self.inner.closed(conn, reason)
    }
}
