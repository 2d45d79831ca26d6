//! Writing a frame stream to any `std::io::Write` (capture files, sockets).
//!
//! Owns the preamble-then-frames order. Buffering and flushing policy belong to the
//! caller (wrap the sink in a `BufWriter`).

use std::io::Write;

use crate::frame::{encode_preamble, encode_record, Record};
use crate::WireError;

/// Writes the preamble on creation, then one frame per [`FrameWriter::write_record`].
pub struct FrameWriter<W: Write> {
    sink: W,
    scratch: Vec<u8>,
    frames_written: u64,
}

impl<W: Write> FrameWriter<W> {
    /// Writes the preamble to `sink`.
    pub fn new(mut sink: W) -> Result<Self, WireError> {
        sink.write_all(&encode_preamble())?;
        Ok(Self {
            sink,
            scratch: Vec::with_capacity(64 * 1024),
            frames_written: 0,
        })
    }

    /// Wraps a sink whose preamble was already written (appending to a stream).
    pub fn continue_stream(sink: W) -> Self {
        Self {
            sink,
            scratch: Vec::with_capacity(64 * 1024),
            frames_written: 0,
        }
    }

    /// Encodes and writes one record as a frame.
    pub fn write_record(&mut self, record: &Record) -> Result<(), WireError> {
        self.scratch.clear();
        encode_record(record, &mut self.scratch)?;
        self.sink.write_all(&self.scratch)?;
        self.frames_written += 1;
        Ok(())
    }

    /// Writes bytes that already form whole frames (e.g. relayed from a shim).
    pub fn write_raw_frames(&mut self, frames: &[u8]) -> Result<(), WireError> {
        self.sink.write_all(frames)?;
        Ok(())
    }

    pub fn frames_written(&self) -> u64 {
        self.frames_written
    }

    pub fn flush(&mut self) -> Result<(), WireError> {
        self.sink.flush()?;
        Ok(())
    }

    /// Flushes and returns the sink.
    pub fn into_inner(mut self) -> Result<W, WireError> {
        self.sink.flush()?;
        Ok(self.sink)
    }
}
