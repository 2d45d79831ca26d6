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
    let mut peak_sum = 0u64;
    let mut stack_total = None;
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
        if let Some(r) = t.strip_prefix("Stack trace breakdown for peak usage: ") {
            // `155 189 250 bytes` (newer XLA groups digits with spaces).
            let digits: String = r
                .strip_suffix(" bytes")
                .unwrap_or(r)
                .chars()
                .filter(|c| *c != ' ')
                .collect();
            stack_total = Some((no, parse_u64(&digits, "stack trace total").map_err(err)?));
            section = 4;
            continue;
        }
        match section {
            1 => {
                let (i, n) = t
                    .split_once(':')
                    .ok_or_else(|| err(format!("bad sequence line {:?}", clip(t))))?;
                let i = parse_u64(i, "sequence number").map_err(err)?;
                if i != out.sequence.len() as u64 {
                    return Err(err(format!(
                        "sequence step {i} where step {} was expected: lines are missing or out of order",
                        out.sequence.len()
                    )));
                }
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
                if s > e || e > out.max_time {
                    return Err(err(format!(
                        "live range {s}-{e} of {n} is outside the schedule 0-{}",
                        out.max_time
                    )));
                }
                out.ranges.push((n.to_string(), s, e));
            }
            3 => {
                let (n, r) = t
                    .split_once(": ")
                    .ok_or_else(|| err(format!("bad peak line {:?}", clip(t))))?;
                let (bytes, rest) = r
                    .split_once(" bytes")
                    .ok_or_else(|| err(format!("bad peak line {:?}", clip(t))))?;
                let bytes = parse_u64(bytes, "peak bytes").map_err(err)?;
                peak_sum = peak_sum.checked_add(bytes).ok_or_else(|| {
                    err("the peak buffers add up to more than 2^64 bytes".to_string())
                })?;
                // Newer XLA prints a running total; it must be the sum so far.
                if let Some(c) = rest
                    .trim()
                    .strip_prefix("(cumulative: ")
                    .and_then(|c| c.strip_suffix(" bytes)"))
                {
                    let c = parse_u64(c, "cumulative bytes").map_err(err)?;
                    if c != peak_sum {
                        return Err(err(format!(
                            "cumulative {c} bytes, but the buffers listed so far add up to {peak_sum}"
                        )));
                    }
                }
                out.peak_buffers.push((n.to_string(), bytes));
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
    check_complete(&out, peak_sum, stack_total, file, lines.line_no())?;
    Ok(out)
}

/// The checks that tell a whole file from one cut off at a line boundary (the parser
/// already rejects a line cut in the middle): XLA prints `max` sequence steps, then every
/// value's live range, then the values live at the peak step — exactly those whose range
/// covers it — and, in newer versions, their total again.
fn check_complete(
    out: &LiveRanges,
    peak_sum: u64,
    stack_total: Option<(usize, u64)>,
    file: &Path,
    last_line: usize,
) -> Result<(), ParseError> {
    let cut = |m: String| ParseError::new(file, last_line, format!("{m}: the file is cut off"));
    if (out.sequence.len() as u64) < out.max_time {
        return Err(cut(format!(
            "the instruction sequence has {} of its {} steps",
            out.sequence.len(),
            out.max_time
        )));
    }
    let Some(t) = out.peak_time else {
        return Err(cut(
            "no `Live ranges at T (peak):` list after the live ranges".to_string(),
        ));
    };
    let mut expected: Vec<&str> = out
        .ranges
        .iter()
        .filter(|(_, s, e)| *s <= t && t <= *e)
        .map(|(k, _, _)| k.as_str())
        .collect();
    let mut listed: Vec<&str> = out.peak_buffers.iter().map(|(k, _)| k.as_str()).collect();
    expected.sort_unstable();
    listed.sort_unstable();
    if expected != listed {
        return Err(cut(format!(
            "the peak list at step {t} names {} buffers but {} live ranges cover that step",
            listed.len(),
            expected.len()
        )));
    }
    if let Some((line, total)) = stack_total {
        if total != peak_sum {
            return Err(ParseError::new(
                file,
                line,
                format!(
                    "the stack trace total {total} bytes differs from the peak list's {peak_sum}"
                ),
            ));
        }
    }
    Ok(())
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
        let t = "HloLiveRange (max 2):\n  InstructionSequence:\n    0:a.1\n    1:f\n  BufferLiveRange:\n    a.1{}:0-2\n    f{}:1-2\n  Live ranges at 1 (peak):\n    a.1{}: 10 bytes (cumulative: 10 bytes)\n    f{}: 4 bytes (cumulative: 14 bytes)\n  Stack trace breakdown for peak usage: 14 bytes\n    main (100.0%)\n";
        let l = parse_live_range(t.as_bytes(), Path::new("l")).unwrap();
        assert_eq!(l.max_time, 2);
        assert_eq!(l.sequence, vec!["a.1", "f"]);
        assert_eq!(l.ranges[1], ("f{}".to_string(), 1, 2));
        assert_eq!(l.peak_time, Some(1));
        assert_eq!(
            l.peak_buffers,
            vec![("a.1{}".to_string(), 10), ("f{}".to_string(), 4)]
        );
        // Every prefix that ends at a line boundary before the peak list is whole is
        // rejected as cut off (older XLA prints no stack trace after the list).
        let whole: Vec<&str> = t.lines().collect();
        for n in 1..whole.len() - 2 {
            let cut = whole[..n].join("\n") + "\n";
            let e = parse_live_range(cut.as_bytes(), Path::new("l"));
            assert!(e.is_err(), "{n} lines accepted");
        }
        // A wrong running total, a stack total that disagrees, a range past the end.
        for (from, to) in [
            ("cumulative: 14", "cumulative: 15"),
            ("peak usage: 14", "peak usage: 13"),
            ("f{}:1-2", "f{}:1-3"),
            ("1:f", "2:f"),
            (
                "a.1{}: 10 bytes (cumulative: 10",
                "a.1{}: 18446744073709551615 bytes (cumulative: 18446744073709551615",
            ),
        ] {
            let bad = t.replace(from, to);
            assert!(
                parse_live_range(bad.as_bytes(), Path::new("l")).is_err(),
                "{to}"
            );
        }
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
