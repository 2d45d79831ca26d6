//! Parser for `*-memory-usage-report.txt`: per memory space (`Memory Space: default
//! (color=0)`), the integer `Total bytes: N (…)` and the per-allocation tables
//! (`cumulative_size; size; offset; used_by_n_values; shapes_list`). Sizes in those rows are
//! printed only in human units, so they are kept as approximations; offsets and counts are
//! exact integers. Anything else is rejected with its line.

use super::buffer_assignment::clip;
use super::text::{parse_human_bytes, parse_u64, Lines, ParseError};
use serde::Serialize;
use std::io::BufRead;
use std::path::Path;

/// One row of a usage table: a slice of an allocation.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct UsageRow {
    /// Size (human units in the file, so approximate).
    pub approx_size: u64,
    /// Offset in the allocation (exact).
    pub offset: u64,
    /// Number of values sharing the slice.
    pub used_by_n_values: u64,
    /// Shapes as printed (`2×bf16[2048,4096]`).
    pub shapes: String,
}

/// One memory space of the report.
#[derive(Debug, Clone, Serialize, PartialEq, Eq, Default)]
pub struct MemorySpaceUsage {
    /// Space name (`default`).
    pub name: String,
    /// Color number.
    pub color: u64,
    /// `Total bytes` (exact).
    pub total_bytes: u64,
    /// Tables, one per allocation, rows in file order.
    pub tables: Vec<Vec<UsageRow>>,
    /// Values left out of the tables (`The rest N values are less than …`).
    pub omitted_values: u64,
}

/// Parses a memory-usage report.
pub fn parse_usage_report<R: BufRead>(
    reader: R,
    file: &Path,
) -> Result<Vec<MemorySpaceUsage>, ParseError> {
    let mut lines = Lines::new(reader, file);
    let mut out: Vec<MemorySpaceUsage> = Vec::new();
    while let Some((no, line)) = lines.next_line()? {
        let err = |m: String| ParseError::new(file, no, m);
        let t = line.trim();
        if t.is_empty() || t.chars().all(|c| c == '-') {
            continue;
        }
        if let Some(rest) = t.strip_prefix("Memory Space: ") {
            let (name, color) = rest
                .split_once(" (color=")
                .and_then(|(n, c)| c.strip_suffix(')').map(|c| (n, c)))
                .ok_or_else(|| err(format!("bad memory space line {:?}", clip(t))))?;
            out.push(MemorySpaceUsage {
                name: name.to_string(),
                color: parse_u64(color, "color").map_err(err)?,
                ..Default::default()
            });
            continue;
        }
        let Some(space) = out.last_mut() else {
            return Err(err(format!(
                "not an XLA memory-usage report: expected `Memory Space: NAME (color=N)`, found {:?}",
                clip(t)
            )));
        };
        if let Some(rest) = t.strip_prefix("Total bytes: ") {
            let n = rest.split_whitespace().next().unwrap_or("");
            space.total_bytes = parse_u64(n, "total bytes").map_err(err)?;
            continue;
        }
        if let Some(rest) = t.strip_prefix("The rest ") {
            let n = rest.split_whitespace().next().unwrap_or("");
            space.omitted_values += parse_u64(n, "omitted value count").map_err(err)?;
            continue;
        }
        if t.starts_with("cumulative_size;") {
            space.tables.push(Vec::new());
            continue;
        }
        let f: Vec<&str> = t.splitn(5, ';').map(str::trim).collect();
        if f.len() != 5 {
            return Err(err(format!(
                "expected 5 `;`-separated fields, found {:?}",
                clip(t)
            )));
        }
        let row = UsageRow {
            approx_size: parse_human_bytes(f[1])
                .ok_or_else(|| err(format!("bad size {:?}", f[1])))?,
            offset: parse_u64(f[2], "offset").map_err(err)?,
            used_by_n_values: parse_u64(f[3], "used_by_n_values").map_err(err)?,
            shapes: f[4].to_string(),
        };
        match space.tables.last_mut() {
            Some(tb) => tb.push(row),
            None => return Err(err("table row before its `cumulative_size;` header".into())),
        }
    }
    if out.is_empty() {
        return Err(ParseError::new(
            file,
            0,
            "empty file: expected `Memory Space: …`",
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_rejects() {
        let t = "Memory Space: default (color=0)\nTotal bytes: 151516480 (144.50MiB)\n  cumulative_size;       size;       offset; used_by_n_values; shapes_list\n  ----\n  143.06MiB(100%);  143.06MiB;            0;                1; f32[3056,12272]\n";
        let r = parse_usage_report(t.as_bytes(), Path::new("u")).unwrap();
        assert_eq!(r[0].total_bytes, 151516480);
        assert_eq!(r[0].tables[0][0].used_by_n_values, 1);
        let bad = t.replace("            0;", "  x;");
        let e = parse_usage_report(bad.as_bytes(), Path::new("u")).unwrap_err();
        assert_eq!(e.line, 5);
        assert!(parse_usage_report("BufferAssignment:\n".as_bytes(), Path::new("u")).is_err());
    }
}
