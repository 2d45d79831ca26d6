//! Parser for `*-buffer-assignment.txt`: the `BufferAssignment:` listing XLA writes per
//! module (`allocation N: size S, [color C,] [page P,] [parameter N, shape |..| at
//! ShapeIndex {..},] [output shape is |..|,] [constant,] [thread-local,] [maybe-live-out,]
//! [preallocated-temp]:` followed by ` value: <id name{index} @pos> (size=..,offset=..):
//! shape` lines). It owns the allocation/value model and the allocation predicates
//! (`IsPreallocatedTempBuffer` etc.); it computes no statistics.

use super::text::{parse_u64, Lines, ParseError};
use serde::Serialize;
use std::io::BufRead;
use std::path::Path;

/// One HLO value placed in an allocation.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct AssignedValue {
    /// The value's id (`<559 ...>`).
    pub id: u64,
    /// Defining instruction name (`loop_convert_fusion`).
    pub instruction: String,
    /// Shape index, always with braces (`{}`, `{0}`, `{1,2}`).
    pub index: String,
    /// Bytes of this value.
    pub size: u64,
    /// Offset inside the allocation.
    pub offset: u64,
    /// Shape with layout as XLA prints it (`bf16[2048,1024]{1,0}`).
    pub shape: String,
}

impl AssignedValue {
    /// `name{index}`, the key the live-range file uses.
    pub fn key(&self) -> String {
        format!("{}{}", self.instruction, self.index)
    }
}

/// One buffer allocation.
#[derive(Debug, Clone, Serialize, Default)]
pub struct Allocation {
    /// Allocation index.
    pub index: u64,
    /// Size in bytes.
    pub size: u64,
    /// Color (memory space id) when printed, else 0.
    pub color: u64,
    /// Entry parameter number, when it is an entry computation parameter.
    pub parameter: Option<u64>,
    /// `maybe-live-out` flag (an output of the module, or aliased with one).
    pub maybe_live_out: bool,
    /// `constant` flag.
    pub constant: bool,
    /// `thread-local` flag.
    pub thread_local: bool,
    /// Whether the `output shape is |..|` clause was printed (the root tuple / array).
    pub is_root_output: bool,
    /// The values assigned to it, in file order.
    pub values: Vec<AssignedValue>,
    /// Line of the `allocation` header.
    pub line: usize,
}

impl Allocation {
    /// XLA's `BufferAllocation::IsPreallocatedTempBuffer`: not a parameter, not live out,
    /// not thread-local, not a constant.
    pub fn is_preallocated_temp(&self) -> bool {
        self.parameter.is_none() && !self.maybe_live_out && !self.thread_local && !self.constant
    }

    /// A parameter buffer that is also live out (donated / input-output aliased).
    pub fn is_parameter_aliased_with_output(&self) -> bool {
        self.parameter.is_some() && self.maybe_live_out
    }

    /// Whether the allocation lives in host memory (layout memory space `S(5)`).
    pub fn is_host(&self) -> bool {
        self.values.iter().any(|v| is_host_shape(&v.shape))
    }

    /// Short kind name used in reports: `parameter`, `parameter+output`, `output`,
    /// `temp`, `constant`, `thread-local`.
    pub fn kind(&self) -> &'static str {
        if self.parameter.is_some() {
            if self.maybe_live_out {
                "parameter+output"
            } else {
                "parameter"
            }
        } else if self.maybe_live_out {
            "output"
        } else if self.constant {
            "constant"
        } else if self.thread_local {
            "thread-local"
        } else {
            "temp"
        }
    }
}

/// Whether a printed shape carries the host memory space (`S(5)`) in its layout.
pub fn is_host_shape(shape: &str) -> bool {
    shape.contains(":S(5)") || shape.contains(" S(5)") || shape.contains("{S(5)")
}

/// A parsed `*-buffer-assignment.txt`.
#[derive(Debug, Clone, Serialize, Default)]
pub struct BufferAssignment {
    /// Allocations in file order (index `i` at position `i`).
    pub allocations: Vec<Allocation>,
    /// Sum of the allocation sizes (what XLA prints as `Total bytes used`).
    pub total_bytes: u64,
}

/// Parses a buffer-assignment file.
pub fn parse_buffer_assignment<R: BufRead>(
    reader: R,
    file: &Path,
) -> Result<BufferAssignment, ParseError> {
    let mut lines = Lines::new(reader, file);
    let mut out = BufferAssignment::default();
    let mut saw_header = false;
    while let Some((no, line)) = lines.next_line()? {
        if line.trim().is_empty() {
            continue;
        }
        if !saw_header {
            if line.trim_end() == "BufferAssignment:" {
                saw_header = true;
                continue;
            }
            return Err(ParseError::new(
                file,
                no,
                format!(
                    "not an XLA buffer-assignment file: expected `BufferAssignment:`, found {:?}",
                    clip(line)
                ),
            ));
        }
        if let Some(rest) = line.strip_prefix("allocation ") {
            let a = parse_allocation_header(rest, no).map_err(|m| ParseError::new(file, no, m))?;
            // XLA numbers allocations 0, 1, 2, … in the order it prints them; a gap means
            // lines are missing.
            let expected = out.allocations.len() as u64;
            if a.index != expected {
                return Err(ParseError::new(
                    file,
                    no,
                    format!(
                        "allocation {} where allocation {expected} was expected: lines are missing or out of order",
                        a.index
                    ),
                ));
            }
            out.total_bytes = out.total_bytes.checked_add(a.size).ok_or_else(|| {
                ParseError::new(
                    file,
                    no,
                    "allocation sizes add up to more than 2^64 bytes: not a real buffer assignment",
                )
            })?;
            out.allocations.push(a);
        } else if let Some(rest) = line.strip_prefix(" value: ") {
            let v = parse_value_line(rest).map_err(|m| ParseError::new(file, no, m))?;
            match out.allocations.last_mut() {
                Some(a) => {
                    // A value is a slice of its allocation.
                    if v.offset.checked_add(v.size).is_none_or(|end| end > a.size) {
                        return Err(ParseError::new(
                            file,
                            no,
                            format!(
                                "value {} (offset {}, size {}) does not fit in allocation {} of {} bytes",
                                v.key(),
                                v.offset,
                                v.size,
                                a.index,
                                a.size
                            ),
                        ));
                    }
                    a.values.push(v)
                }
                None => {
                    return Err(ParseError::new(
                        file,
                        no,
                        "`value:` line before any allocation",
                    ))
                }
            }
        } else if out.allocations.is_empty() {
            return Err(ParseError::new(
                file,
                no,
                format!("unexpected line in buffer assignment: {:?}", clip(line)),
            ));
        } else {
            // XLA appends other sections after the allocations in some versions
            // (e.g. "Total bytes used", "Used values:"): the allocation list has ended.
            break;
        }
    }
    if !saw_header {
        return Err(ParseError::new(
            file,
            0,
            "empty file: expected `BufferAssignment:`",
        ));
    }
    Ok(out)
}

/// First 80 chars of a line, for error messages.
pub(crate) fn clip(s: &str) -> String {
    s.chars().take(80).collect()
}

fn parse_allocation_header(rest: &str, line: usize) -> Result<Allocation, String> {
    let body = rest
        .strip_suffix(':')
        .ok_or_else(|| "allocation header does not end with `:` (truncated?)".to_string())?;
    let (idx, mut tail) = body
        .split_once(": size ")
        .ok_or_else(|| "allocation header without `: size N`".to_string())?;
    let mut a = Allocation {
        index: parse_u64(idx, "allocation index")?,
        line,
        ..Default::default()
    };
    let size_end = tail.find(',').unwrap_or(tail.len());
    a.size = parse_u64(&tail[..size_end], "allocation size")?;
    tail = &tail[size_end..];
    while let Some(t) = tail.strip_prefix(", ") {
        tail = t;
        let rest = if let Some(r) = tail.strip_prefix("parameter ") {
            let end = r.find(',').unwrap_or(r.len());
            a.parameter = Some(parse_u64(&r[..end], "parameter number")?);
            let mut r = &r[end..];
            if let Some(s) = r.strip_prefix(", shape |") {
                let close = s
                    .find('|')
                    .ok_or_else(|| "unterminated `shape |` in allocation header".to_string())?;
                r = &s[close + 1..];
                if let Some(s) = r.strip_prefix(" at ShapeIndex {") {
                    let close = s.find('}').ok_or_else(|| {
                        "unterminated ShapeIndex in allocation header".to_string()
                    })?;
                    r = &s[close + 1..];
                }
            }
            r
        } else if let Some(s) = tail.strip_prefix("output shape is |") {
            let close = s.find('|').ok_or_else(|| {
                "unterminated `output shape is |` in allocation header".to_string()
            })?;
            a.is_root_output = true;
            &s[close + 1..]
        } else {
            let end = tail.find(", ").unwrap_or(tail.len());
            let flag = &tail[..end];
            match flag {
                "constant" => a.constant = true,
                "thread-local" => a.thread_local = true,
                "maybe-live-out" => a.maybe_live_out = true,
                "preallocated-temp" => {}
                f if f.starts_with("page ") => {}
                f if f.starts_with("color ") => a.color = parse_u64(&f[6..], "color")?,
                other => return Err(format!("unknown allocation attribute {other:?}")),
            }
            &tail[end..]
        };
        tail = rest;
    }
    if !tail.is_empty() {
        return Err(format!(
            "unexpected text in allocation header: {:?}",
            clip(tail)
        ));
    }
    if body.contains("preallocated-temp") && !a.is_preallocated_temp() {
        return Err(
            "allocation flagged preallocated-temp but also parameter/live-out/constant".into(),
        );
    }
    Ok(a)
}

/// ` value: <559 loop_convert_fusion @0> (size=4194304,offset=0): bf16[2048,1024]{1,0}`
fn parse_value_line(rest: &str) -> Result<AssignedValue, String> {
    let inner = rest
        .strip_prefix('<')
        .ok_or_else(|| "value line does not start with `<`".to_string())?;
    let close = inner
        .find('>')
        .ok_or_else(|| "value line without closing `>`".to_string())?;
    let desc = &inner[..close];
    let after = &inner[close + 1..];
    let (id, name_pos) = desc
        .split_once(' ')
        .ok_or_else(|| format!("bad value descriptor <{desc}>"))?;
    let name_idx = match name_pos.rfind(" @") {
        Some(p) => &name_pos[..p],
        None => name_pos,
    };
    // Loop-carried values are printed `<269 arg_tuple.5{} (phi) @0>`.
    let name_idx = name_idx.strip_suffix(" (phi)").unwrap_or(name_idx);
    let (instruction, index) = match name_idx.find('{') {
        Some(p) if name_idx.ends_with('}') => (&name_idx[..p], &name_idx[p..]),
        _ => (name_idx, "{}"),
    };
    let after = after
        .strip_prefix(" (size=")
        .ok_or_else(|| "value line without `(size=`".to_string())?;
    let (size, after) = after
        .split_once(",offset=")
        .ok_or_else(|| "value line without `,offset=`".to_string())?;
    let (offset, shape) = after
        .split_once("):")
        .ok_or_else(|| "value line without `):` (truncated?)".to_string())?;
    Ok(AssignedValue {
        id: parse_u64(id, "value id")?,
        instruction: instruction.to_string(),
        index: index.to_string(),
        size: parse_u64(size, "value size")?,
        offset: parse_u64(offset, "value offset")?,
        shape: shape.trim().to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_headers_and_values() {
        let t = "BufferAssignment:\nallocation 0: size 8, page 0, parameter 1, shape |(f32[1], f32[1])| at ShapeIndex {0}, maybe-live-out:\n value: <3 p.1{0} @0> (size=4,offset=4): f32[1]{0}\nallocation 1: size 16, color 5, preallocated-temp:\n value: <4 x @0> (size=16,offset=0): f32[4]{0:S(5)}\n";
        let ba = parse_buffer_assignment(t.as_bytes(), Path::new("a")).unwrap();
        assert_eq!(ba.allocations.len(), 2);
        let a = &ba.allocations[0];
        assert_eq!((a.parameter, a.maybe_live_out, a.size), (Some(1), true, 8));
        assert_eq!(a.values[0].key(), "p.1{0}");
        assert_eq!(a.values[0].offset, 4);
        assert!(ba.allocations[1].is_preallocated_temp());
        assert!(ba.allocations[1].is_host());
        assert_eq!(ba.allocations[1].values[0].key(), "x{}");
        let phi =
            parse_value_line("<269 arg_tuple.5{1} (phi) @0> (size=4,offset=8): s32[]").unwrap();
        assert_eq!((phi.key().as_str(), phi.offset), ("arg_tuple.5{1}", 8));
    }

    #[test]
    fn rejects_unknown_and_truncated() {
        let e = parse_buffer_assignment(
            "BufferAssignment:\nallocation 0: size 8, weird:\n".as_bytes(),
            Path::new("a"),
        )
        .unwrap_err();
        assert_eq!(e.line, 2);
        let e = parse_buffer_assignment(
            "BufferAssignment:\nallocation 0: size 8\n".as_bytes(),
            Path::new("a"),
        )
        .unwrap_err();
        assert!(e.msg.contains("truncated"), "{e}");
        let e = parse_buffer_assignment("HloModule x\n".as_bytes(), Path::new("a")).unwrap_err();
        assert_eq!(e.line, 1);
        // A gap in the numbering, sizes adding up past 2^64, a value outside its allocation.
        for (text, says) in [
            ("BufferAssignment:\nallocation 0: size 8:\nallocation 2: size 8:\n", "allocation 1 was expected"),
            ("BufferAssignment:\nallocation 0: size 18446744073709551000:\nallocation 1: size 1000:\n", "2^64"),
            ("BufferAssignment:\nallocation 0: size 8:\n value: <1 x @0> (size=8,offset=4): f32[2]{0}\n", "does not fit"),
            ("BufferAssignment:\nallocation 0: size 8:\n value: <1 x @0> (size=8,offset=18446744073709551615): f32[2]{0}\n", "does not fit"),
        ] {
            let e = parse_buffer_assignment(text.as_bytes(), Path::new("a")).unwrap_err();
            assert!(e.msg.contains(says), "{text:?}: {e}");
        }
    }
}
