//! Parser for `*-live-range.txt` (`HloLiveRange (max N):` with the instruction sequence,
//! `BufferLiveRange` `name{index}:start-end` lines and XLA's own `Live ranges at T (peak)`
//! list). It owns only the parsed data; the peak is simulated in `peak.rs`.

use super::buffer_assignment::clip;
use super::text::{parse_u64, Lines, ParseError};
use serde::Serialize;
use std::io::BufRead;
use std::path::Path;

/// A parsed live-range file.
#[derive(Debug, Clone, Serialize, Default)]
pub struct LiveRanges {
    /// `max N`: the schedule length.
    pub max_time: u64,
    /// Scheduled instruction names, in order.
    pub sequence: Vec<String>,
    /// `(name{index}, start, end)` per buffer.
    pub ranges: Vec<(String, u64, u64)>,
    /// XLA's reported peak time step, when printed.
    pub peak_time: Option<u64>,
    /// XLA's reported live buffers at the peak: `(name{index}, bytes)`.
    pub peak_buffers: Vec<(String, u64)>,
}

/// Parses a live-range file.
pub fn parse_live_range<R: BufRead>(reader: R, file: &Path) -> Result<LiveRanges, ParseError> {
    let mut lines = Lines::new(reader, file);
    let mut out = LiveRanges::default();
    let mut saw_header = false;
    let mut section = 0u8;
    while let Some((no, line)) = lines.next_line()? {
        let err = |m: String| ParseError::new(file, no, m);
        if !saw_header {
            if line.trim().is_empty() {
                continue;
            }
            let rest = line
                .strip_prefix("HloLiveRange (max ")
                .and_then(|r| r.strip_suffix("):"))
                .ok_or_else(|| {
                    err(format!(
                        "not an XLA live-range file: expected `HloLiveRange (max N):`, found {:?}",
                        clip(line)
                    ))
                })?;
            out.max_time = parse_u64(rest, "max").map_err(err)?;
            saw_header = true;
            continue;
        }
        let t = line.trim();
        if t.is_empty() {
            continue;
        }
        if t == "InstructionSequence:" {
            section = 1;
            continue;
        }
        if t == "BufferLiveRange:" {
            section = 2;
            continue;
        }
        if let Some(r) = t.strip_prefix("Live ranges at ") {
            let r = r
                .strip_suffix(" (peak):")
                .unwrap_or(r.trim_end_matches(':'));
            out.peak_time = Some(parse_u64(r, "peak time").map_err(err)?);
            section = 3;
            continue;
        }
        if t.starts_with("Stack trace breakdown") {
            section = 4;
            continue;
        }
        match section {
            1 => {
                let (_, n) = t
                    .split_once(':')
                    .ok_or_else(|| err(format!("bad sequence line {:?}", clip(t))))?;
                out.sequence.push(n.to_string());
            }
            2 => {
                let (n, r) = t
                    .rsplit_once(':')
                    .ok_or_else(|| err(format!("bad live range line {:?}", clip(t))))?;
                let (s, e) = r
                    .split_once('-')
                    .ok_or_else(|| err(format!("bad live range {r:?} (want start-end)")))?;
                let (s, e) = (
                    parse_u64(s, "range start").map_err(err)?,
                    parse_u64(e, "range end").map_err(err)?,
                );
                out.ranges.push((n.to_string(), s, e));
            }
            3 => {
                let (n, r) = t
                    .split_once(": ")
                    .ok_or_else(|| err(format!("bad peak line {:?}", clip(t))))?;
                let bytes = r
                    .split_once(" bytes")
                    .ok_or_else(|| err(format!("bad peak line {:?}", clip(t))))?
                    .0;
                out.peak_buffers
                    .push((n.to_string(), parse_u64(bytes, "peak bytes").map_err(err)?));
            }
            4 => {}
            _ => return Err(err(format!("unexpected line {:?}", clip(t)))),
        }
    }
    if !saw_header {
        return Err(ParseError::new(
            file,
            0,
            "empty file: expected `HloLiveRange (max N):`",
        ));
    }
    Ok(out)
}

/// Reads the `Total bytes used: N (..)` line of `*-buffer-assignment-values.txt` or the
/// `Total bytes: N (..)` line of `*-memory-usage-report.txt` (integer field, never the
/// human unit). Stops reading at the first such line.
pub fn parse_total_bytes<R: BufRead>(reader: R, file: &Path) -> Result<u64, ParseError> {
    let mut lines = Lines::new(reader, file);
    while let Some((no, line)) = lines.next_line()? {
        let t = line.trim();
        let rest = t
            .strip_prefix("Total bytes used: ")
            .or_else(|| t.strip_prefix("Total bytes: "));
        if let Some(rest) = rest {
            let num = rest.split_whitespace().next().unwrap_or("");
            return parse_u64(num, "total bytes").map_err(|m| ParseError::new(file, no, m));
        }
        if no > 64 {
            break;
        }
    }
    Err(ParseError::new(
        file,
        lines.line_no(),
        "no `Total bytes used:`/`Total bytes:` line in the first 64 lines",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_sections() {
        let t = "HloLiveRange (max 2):\n  InstructionSequence:\n    0:a.1\n    1:f\n  BufferLiveRange:\n    a.1{}:0-2\n    f{}:1-2\n  Live ranges at 1 (peak):\n    a.1{}: 10 bytes (cumulative: 10 bytes)\n  Stack trace breakdown for peak usage: 10 bytes\n    main (100.0%)\n";
        let l = parse_live_range(t.as_bytes(), Path::new("l")).unwrap();
        assert_eq!(l.max_time, 2);
        assert_eq!(l.sequence, vec!["a.1", "f"]);
        assert_eq!(l.ranges[1], ("f{}".to_string(), 1, 2));
        assert_eq!(l.peak_time, Some(1));
        assert_eq!(l.peak_buffers, vec![("a.1{}".to_string(), 10)]);
        let e = parse_live_range(
            "HloLiveRange (max 2):\n  BufferLiveRange:\n    a{}:0-x\n".as_bytes(),
            Path::new("l"),
        )
        .unwrap_err();
        assert_eq!(e.line, 3);
    }

    #[test]
    fn total_bytes() {
        let t = "\nTotal bytes used: 151516480 (144.50MiB)\n";
        assert_eq!(
            parse_total_bytes(t.as_bytes(), Path::new("v")).unwrap(),
            151516480
        );
        assert!(parse_total_bytes("x\n".as_bytes(), Path::new("v")).is_err());
    }
}
