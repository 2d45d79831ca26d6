//! The JSON-lines interchange format (DESIGN.md "Trace interchange"): one event object
//! per line (`op`, `id`, `size`, `tag`, `device`); a trace of several devices keeps the
//! events of one.

use std::io::BufRead;

use serde::Deserialize;

use super::{pick_device, Builder, Trace, TraceError};

/// One JSON-lines event (DESIGN.md "Trace interchange").
#[derive(Deserialize)]
struct LineEvent {
    op: String,
    id: u64,
    #[serde(default)]
    size: Option<u64>,
    #[serde(default)]
    tag: Option<String>,
    #[serde(default)]
    device: Option<i32>,
}

/// Keeps the events of one device. Lines name their device on every line or on none; a
/// trace of several devices needs `device` (`--trace-device`), like a capture.
fn select_device(
    lines: Vec<(usize, LineEvent)>,
    device: Option<i32>,
) -> Result<Vec<(usize, LineEvent)>, TraceError> {
    let named = lines
        .iter()
        .find(|(_, e)| e.device.is_some())
        .map(|(n, _)| *n);
    let Some(named) = named else {
        return match device {
            None => Ok(lines),
            Some(d) => Err(TraceError::NoSuchDevice {
                device: d,
                present: "no `device` field".into(),
            }),
        };
    };
    if let Some((line, _)) = lines.iter().find(|(_, e)| e.device.is_none()) {
        return Err(TraceError::DeviceOnSomeLines { line: *line, named });
    }
    let want = pick_device(
        lines.iter().filter_map(|(_, e)| e.device),
        device,
        |devices| TraceError::SeveralTraceDevices { devices },
    )?;
    Ok(lines
        .into_iter()
        .filter(|(_, e)| e.device == Some(want))
        .collect())
}

/// Reads the JSON-lines interchange format (all of it, or the events of `device`). Blank
/// lines are skipped.
pub fn read_jsonl<R: BufRead>(src: R, device: Option<i32>) -> Result<Trace, TraceError> {
    let mut lines = Vec::new();
    for (i, line) in src.lines().enumerate() {
        let line_no = i + 1;
        let line = line?;
        let text = line.trim();
        if text.is_empty() {
            continue;
        }
        let ev: LineEvent = serde_json::from_str(text).map_err(|e| json_err(line_no, &e))?;
        lines.push((line_no, ev));
    }
    let mut b = Builder::default();
    for (line_no, ev) in select_device(lines, device)? {
        match ev.op.as_str() {
            "alloc" => {
                let size = ev.size.ok_or(TraceError::Field {
                    line: line_no,
                    field: "size",
                    msg: "missing (an alloc needs a size in bytes)".into(),
                })?;
                b.alloc(ev.id, size, ev.tag, line_no)?;
            }
            "free" => b.free(ev.id, line_no)?,
            other => {
                return Err(TraceError::UnknownOp {
                    line: line_no,
                    op: other.to_string(),
                })
            }
        }
    }
    if b.ops.is_empty() {
        return Err(TraceError::Empty);
    }
    Ok(b.finish("jsonl"))
}

fn json_err(line: usize, e: &serde_json::Error) -> TraceError {
    let msg = e.to_string();
    // serde reports "missing field `size`" / "invalid type ..." as data errors: name the field.
    if e.is_data() {
        for field in ["op", "id", "size", "tag", "device"] {
            if msg.contains(&format!("`{field}`")) {
                return TraceError::Field { line, field, msg };
            }
        }
    }
    TraceError::Json { line, msg }
}
