//! Parser for HLO text (`*after_optimizations.txt`, also `before_optimizations`): module
//! name, computations, and per instruction its opcode, shape, fusion kind, called
//! computation, custom-call target and `metadata={op_name=.. op_type=.. source_file=..
//! source_line=.. stack_frame_id=..}` (quoted strings unescaped; stack frames resolved
//! through the `FileNames`/`FileLocations`/`StackFrames` tables). It keeps only what memory
//! reports need; it does not evaluate or validate HLO semantics.

use super::buffer_assignment::clip;
use super::text::{Lines, ParseError};
use serde::Serialize;
use std::collections::HashMap;
use std::io::BufRead;
use std::path::Path;

/// One HLO instruction, reduced to what memory reports need.
#[derive(Debug, Clone, Serialize, Default, PartialEq, Eq)]
pub struct Instruction {
    /// Opcode (`fusion`, `parameter`, `custom-call`, `copy`, ...).
    pub opcode: String,
    /// Result shape as printed.
    pub shape: String,
    /// Fusion kind (`kLoop`, `kInput`, `kOutput`, `kCustom`) for fusions.
    pub fusion_kind: Option<String>,
    /// `calls=` target (fusion computation) when present.
    pub calls: Option<String>,
    /// `custom_call_target=` when present.
    pub custom_call_target: Option<String>,
    /// Framework op name from metadata (`jit(f)/jit(_pad)/pad`).
    pub op_name: Option<String>,
    /// Framework op type from metadata.
    pub op_type: Option<String>,
    /// Source file (metadata or resolved stack frame).
    pub source_file: Option<String>,
    /// Source line (metadata or resolved stack frame).
    pub source_line: Option<u64>,
    /// Index into [`HloModule::computations`] of the computation that holds it.
    pub computation: u32,
    /// Whether that computation is the ENTRY computation.
    pub in_entry: bool,
    /// Line in the HLO file.
    pub line: usize,
    #[serde(skip)]
    stack_frame_id: Option<u64>,
}

impl Instruction {
    /// The report category: `param` for parameters, the instruction name without its
    /// numeric suffix for fusions (`loop_add_fusion.4` -> `loop_add_fusion`; a bare
    /// `fusion` becomes `<kind>_fusion`), else the opcode (`copy`, `custom-call`).
    pub fn category(&self, name: &str) -> String {
        match self.opcode.as_str() {
            "parameter" => "param".to_string(),
            "fusion" => {
                let base = super::text::strip_numeric_suffix(name);
                if base == "fusion" || base.is_empty() {
                    match &self.fusion_kind {
                        Some(k) => format!("{}_fusion", k.trim_start_matches('k').to_lowercase()),
                        None => "fusion".to_string(),
                    }
                } else {
                    base.to_string()
                }
            }
            op => op.to_string(),
        }
    }
}

/// A parsed HLO module.
#[derive(Debug, Clone, Serialize, Default)]
pub struct HloModule {
    /// `HloModule NAME`.
    pub name: String,
    /// Instructions by name (names are unique within a module).
    pub instructions: HashMap<String, Instruction, foldhash::fast::RandomState>,
    /// Name of the ENTRY computation.
    pub entry: Option<String>,
    /// Computation names, in file order.
    pub computations: Vec<String>,
    /// The ENTRY computation's ROOT instruction.
    pub entry_root: Option<String>,
    /// Every instruction of the ENTRY computation with its operands (kept whatever the
    /// filter): what follows an output back to the value that made it.
    #[serde(skip)]
    pub entry_values: HashMap<String, EntryValue, foldhash::fast::RandomState>,
    /// Per computation other than ENTRY whose ROOT is a tuple (a multi-output fusion's
    /// body): the `op_name` of each tuple element's instruction, in element order. What
    /// names element `k` of a fusion (`fusion.3#k`) by the op that computes it rather than
    /// by the fusion's own metadata.
    #[serde(skip)]
    pub tuple_root_op_names: HashMap<String, Vec<Option<String>>, foldhash::fast::RandomState>,
}

/// What an ENTRY instruction reads. The instruction itself is in
/// [`HloModule::instructions`], or here when the parse filter left it out; read both with
/// [`HloModule::entry_value`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EntryValue {
    /// Operand names as written (`%` dropped; `name#k` is element k of a tuple-shaped
    /// instruction; a parameter's operand is its number), for the opcodes whose operands
    /// are followed ([`super::outputs::follows_operands`]); empty for the others.
    pub operands: Vec<String>,
    /// The instruction, when the parse filter did not keep it in `instructions`.
    unkept: Option<Box<Instruction>>,
}

impl HloModule {
    /// ENTRY instruction `name` and what it reads.
    pub fn entry_value(&self, name: &str) -> Option<(&Instruction, &EntryValue)> {
        let v = self.entry_values.get(name)?;
        let instr = match &v.unkept {
            Some(i) => i,
            None => self.instructions.get(name)?,
        };
        Some((instr, v))
    }
}

#[derive(Default)]
struct FrameTables {
    file_names: HashMap<u64, String>,
    locations: HashMap<u64, (u64, u64)>,
    frames: HashMap<u64, u64>,
}

/// Parses HLO text, keeping every instruction.
pub fn parse_hlo<R: BufRead>(reader: R, file: &Path) -> Result<HloModule, ParseError> {
    parse_hlo_filtered(reader, file, None)
}

/// Parses HLO text, keeping only the instructions named in `keep` (when given): the file
/// is still read and checked line by line, but memory stays proportional to `keep`.
pub fn parse_hlo_filtered<R: BufRead>(
    reader: R,
    file: &Path,
    keep: Option<&foldhash::HashSet<String>>,
) -> Result<HloModule, ParseError> {
    let mut lines = Lines::new(reader, file);
    let mut m = HloModule::default();
    let mut tables = FrameTables::default();
    let mut section = "";
    let mut current: Option<(u32, bool)> = None;
    // The lines of the computation being read (not ENTRY) by instruction name, until its
    // ROOT says which a tuple root returns; only those are parsed again.
    let mut body_lines: HashMap<String, String> = HashMap::new();
    while let Some((no, line)) = lines.next_line()? {
        if m.name.is_empty() {
            if line.trim().is_empty() {
                continue;
            }
            let rest = line.strip_prefix("HloModule ").ok_or_else(|| {
                ParseError::new(
                    file,
                    no,
                    format!(
                        "not an HLO text dump: expected `HloModule NAME`, found {:?}",
                        clip(line)
                    ),
                )
            })?;
            let end = rest.find([',', ' ']).unwrap_or(rest.len());
            m.name = rest[..end].to_string();
            if m.name.is_empty() {
                return Err(ParseError::new(file, no, "`HloModule` without a name"));
            }
            continue;
        }
        if line.is_empty() {
            continue;
        }
        if current.is_none() {
            match line {
                "FileNames" | "FunctionNames" | "FileLocations" | "StackFrames" => {
                    section = match line {
                        "FileNames" => "files",
                        "FileLocations" => "locations",
                        "StackFrames" => "frames",
                        _ => "functions",
                    };
                    continue;
                }
                _ => {}
            }
            if line.ends_with('{') && !line.starts_with(' ') {
                let entry = line.starts_with("ENTRY ");
                let head = line.trim_start_matches("ENTRY ").trim_start_matches('%');
                let end = head.find([' ', '(']).unwrap_or(head.len());
                let cname = head[..end].to_string();
                if entry {
                    m.entry = Some(cname.clone());
                }
                m.computations.push(cname);
                current = Some(((m.computations.len() - 1) as u32, entry));
                section = "";
                continue;
            }
            if !section.is_empty() && line.as_bytes()[0].is_ascii_digit() {
                parse_table_line(section, line, &mut tables)
                    .map_err(|e| ParseError::new(file, no, e))?;
                continue;
            }
            return Err(ParseError::new(
                file,
                no,
                format!("unexpected line outside a computation: {:?}", clip(line)),
            ));
        }
        if line.trim_start() == "}" || line == "}" {
            current = None;
            body_lines.clear();
            continue;
        }
        let Some((cidx, entry)) = current else {
            continue;
        };
        let is_root = line.trim_start().starts_with("ROOT ");
        if entry {
            // Every ENTRY instruction is a value (whatever the filter); parsed once, kept
            // once.
            let (name, instr) = parse_instruction(line, cidx, entry, no)
                .map_err(|e| ParseError::new(file, no, e))?;
            if is_root {
                m.entry_root = Some(name.clone());
            }
            let operands = if super::outputs::follows_operands(&instr.opcode) {
                operands(line)
            } else {
                Vec::new()
            };
            if keep.is_none_or(|k| k.contains(&name)) {
                m.entry_values.insert(
                    name.clone(),
                    EntryValue {
                        operands,
                        unkept: None,
                    },
                );
                m.instructions.insert(name, instr);
            } else {
                let unkept = Some(Box::new(instr));
                m.entry_values.insert(name, EntryValue { operands, unkept });
            }
            continue;
        } else if is_root {
            // Only a tuple ROOT is parsed here (the text test spares parsing the others).
            if line.contains(" tuple(") {
                let (_, instr) = parse_instruction(line, cidx, entry, no)
                    .map_err(|e| ParseError::new(file, no, e))?;
                if instr.opcode == "tuple" {
                    let elements = operands(line)
                        .iter()
                        .map(|o| {
                            let l = body_lines.get(o)?;
                            parse_instruction(l, cidx, false, no).ok()?.1.op_name
                        })
                        .collect();
                    m.tuple_root_op_names
                        .insert(m.computations[cidx as usize].clone(), elements);
                }
            }
        } else if let Some((name, _)) = line.trim_start().split_once(" = ") {
            // Only a line with an op_name can name a tuple element.
            if line.contains("op_name=") {
                body_lines.insert(name.trim_start_matches('%').to_string(), line.to_string());
            }
        }
        if let Some(keep) = keep {
            let t = line.trim_start();
            let t = t.strip_prefix("ROOT ").unwrap_or(t);
            let Some((name, _)) = t.split_once(" = ") else {
                return Err(ParseError::new(
                    file,
                    no,
                    format!(
                        "expected an instruction `name = shape opcode(...)`, found {:?}",
                        clip(line)
                    ),
                ));
            };
            if !keep.contains(name.trim_start_matches('%')) {
                continue;
            }
        }
        let (name, instr) =
            parse_instruction(line, cidx, entry, no).map_err(|e| ParseError::new(file, no, e))?;
        m.instructions.insert(name, instr);
    }
    if m.name.is_empty() {
        return Err(ParseError::new(
            file,
            0,
            "empty file: expected `HloModule NAME`",
        ));
    }
    if let Some((c, _)) = current {
        let c = &m.computations[c as usize];
        return Err(ParseError::new(
            file,
            lines.line_no(),
            format!("computation {c} is not closed with `}}` (truncated file?)"),
        ));
    }
    for instr in m.instructions.values_mut() {
        if instr.source_file.is_none() {
            if let Some(fid) = instr.stack_frame_id {
                if let Some((file_id, line)) = tables
                    .frames
                    .get(&fid)
                    .and_then(|loc| tables.locations.get(loc))
                {
                    instr.source_file = tables.file_names.get(file_id).cloned();
                    instr.source_line = Some(*line);
                }
            }
        }
    }
    Ok(m)
}

fn parse_table_line(section: &str, line: &str, t: &mut FrameTables) -> Result<(), String> {
    let (id, rest) = line
        .split_once(' ')
        .ok_or_else(|| format!("bad {section} table line {:?}", clip(line)))?;
    let id: u64 = id
        .parse()
        .map_err(|_| format!("bad {section} table id {id:?}"))?;
    match section {
        "files" => {
            t.file_names.insert(id, unquote(rest.trim()));
        }
        "locations" => {
            let f = kv_u64(rest, "file_name_id");
            let l = kv_u64(rest, "line");
            if let (Some(f), Some(l)) = (f, l) {
                t.locations.insert(id, (f, l));
            }
        }
        "frames" => {
            if let Some(loc) = kv_u64(rest, "file_location_id") {
                t.frames.insert(id, loc);
            }
        }
        _ => {}
    }
    Ok(())
}

fn kv_u64(s: &str, key: &str) -> Option<u64> {
    let mut from = 0;
    while let Some(p) = s[from..].find(key) {
        let at = from + p;
        let before_ok = at == 0 || matches!(s.as_bytes()[at - 1], b' ' | b'{' | b',');
        let rest = &s[at + key.len()..];
        if before_ok {
            if let Some(v) = rest.strip_prefix('=') {
                let end = v.find(|c: char| !c.is_ascii_digit()).unwrap_or(v.len());
                return v[..end].parse().ok();
            }
        }
        from = at + key.len();
    }
    None
}

/// Removes surrounding quotes and C escapes (`\'`, `\"`, `\\`, `\n`).
pub fn unquote(s: &str) -> String {
    let s = s.strip_prefix('"').unwrap_or(s);
    let s = s.strip_suffix('"').unwrap_or(s);
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            match chars.next() {
                Some('n') => out.push('\n'),
                Some('t') => out.push('\t'),
                Some(o) => out.push(o),
                None => out.push('\\'),
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Index just past the bracket closing the one at `open` (`(`/`{`/`[`), skipping quoted
/// strings; `None` if unbalanced.
fn matching_close(s: &str, open: usize) -> Option<usize> {
    let b = s.as_bytes();
    let mut depth = 0i32;
    let mut i = open;
    let mut in_str = false;
    while i < b.len() {
        let c = b[i];
        if in_str {
            if c == b'\\' {
                i += 1;
            } else if c == b'"' {
                in_str = false;
            }
        } else {
            match c {
                b'"' => in_str = true,
                b'(' | b'{' | b'[' => depth += 1,
                b')' | b'}' | b']' => {
                    depth -= 1;
                    if depth == 0 {
                        return Some(i + 1);
                    }
                }
                _ => {}
            }
        }
        i += 1;
    }
    None
}

/// Splits `a=1, b={x, y}, c="p, q"` at top-level `, `.
fn split_top_level(s: &str) -> Vec<&str> {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let (mut depth, mut in_str, mut start, mut i) = (0i32, false, 0usize, 0usize);
    while i < b.len() {
        let c = b[i];
        if in_str {
            if c == b'\\' {
                i += 1;
            } else if c == b'"' {
                in_str = false;
            }
        } else {
            match c {
                b'"' => in_str = true,
                b'(' | b'{' | b'[' => depth += 1,
                b')' | b'}' | b']' => depth -= 1,
                b',' if depth == 0 => {
                    out.push(s[start..i].trim());
                    start = i + 1;
                }
                _ => {}
            }
        }
        i += 1;
    }
    if start < s.len() {
        out.push(s[start..].trim());
    }
    out
}

fn push_kv<'a>(item: &'a str, out: &mut Vec<(&'a str, &'a str)>) {
    if let Some((k, v)) = item.split_once('=') {
        out.push((k, v));
    }
}

/// Splits metadata `op_name="a b" op_type="x" source_line=3` at top-level spaces.
fn split_metadata(s: &str) -> Vec<(&str, &str)> {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let (mut in_str, mut start, mut i) = (false, 0usize, 0usize);
    while i < b.len() {
        let c = b[i];
        if in_str {
            if c == b'\\' {
                i += 1;
            } else if c == b'"' {
                in_str = false;
            }
        } else if c == b'"' {
            in_str = true;
        } else if c == b' ' {
            push_kv(&s[start..i], &mut out);
            start = i + 1;
        }
        i += 1;
    }
    if start < s.len() {
        push_kv(&s[start..], &mut out);
    }
    out
}

/// The operand names of an instruction's line (see [`EntryValue::operands`]).
fn operands(line: &str) -> Vec<String> {
    let t = line.trim_start();
    let rhs = t.split_once(" = ").map_or("", |(_, r)| r);
    let rest = if rhs.starts_with('(') {
        matching_close(rhs, 0).map_or("", |end| rhs[end..].trim_start())
    } else {
        rhs.split_once(' ').map_or("", |(_, r)| r)
    };
    let Some(open) = rest.find('(') else {
        return Vec::new();
    };
    let Some(close) = matching_close(rest, open) else {
        return Vec::new();
    };
    split_top_level(&rest[open + 1..close - 1])
        .into_iter()
        .filter(|o| !o.is_empty())
        // `f32[4]{0} %a.1` (older dumps print operand shapes) or `%a.1`
        .map(|o| {
            let last = o.rsplit(' ').next().unwrap_or(o);
            // `/*index=5*/%x`: XLA numbers every fifth operand in a comment
            let last = last.split_once("*/").map_or(last, |(_, r)| r);
            last.trim_start_matches('%').to_string()
        })
        .collect()
}

fn parse_instruction(
    line: &str,
    computation: u32,
    in_entry: bool,
    no: usize,
) -> Result<(String, Instruction), String> {
    let t = line.trim_start();
    let t = t.strip_prefix("ROOT ").unwrap_or(t);
    let (name, rhs) = t.split_once(" = ").ok_or_else(|| {
        format!(
            "expected an instruction `name = shape opcode(...)`, found {:?}",
            clip(line)
        )
    })?;
    let name = name.trim_start_matches('%').to_string();
    let (shape, rest) = if rhs.starts_with('(') {
        let end = matching_close(rhs, 0)
            .ok_or_else(|| "unbalanced tuple shape (truncated line?)".to_string())?;
        (&rhs[..end], rhs[end..].trim_start())
    } else {
        rhs.split_once(' ')
            .ok_or_else(|| format!("instruction {name}: no opcode after the shape"))?
    };
    let open = rest
        .find('(')
        .ok_or_else(|| format!("instruction {name}: no operand list"))?;
    let opcode = rest[..open].trim().to_string();
    if opcode.is_empty() || opcode.contains(' ') {
        return Err(format!(
            "instruction {name}: bad opcode {:?}",
            clip(&rest[..open])
        ));
    }
    let close = matching_close(rest, open)
        .ok_or_else(|| format!("instruction {name}: unbalanced operand list (truncated line?)"))?;
    let mut instr = Instruction {
        opcode,
        shape: shape.to_string(),
        computation,
        in_entry,
        line: no,
        ..Default::default()
    };
    let attrs = rest[close..].trim_start_matches(',').trim();
    for attr in split_top_level(attrs) {
        let Some((k, v)) = attr.split_once('=') else {
            continue;
        };
        match k {
            "kind" => instr.fusion_kind = Some(v.to_string()),
            "calls" => instr.calls = Some(v.trim_start_matches('%').to_string()),
            "custom_call_target" => instr.custom_call_target = Some(unquote(v)),
            "metadata" => {
                let inner = v
                    .strip_prefix('{')
                    .and_then(|v| v.strip_suffix('}'))
                    .unwrap_or(v);
                for (mk, mv) in split_metadata(inner) {
                    match mk {
                        "op_name" => instr.op_name = Some(unquote(mv)),
                        "op_type" => instr.op_type = Some(unquote(mv)),
                        "source_file" => instr.source_file = Some(unquote(mv)),
                        "source_line" => instr.source_line = mv.parse().ok(),
                        "stack_frame_id" => instr.stack_frame_id = mv.parse().ok(),
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    Ok((name, instr))
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: &str = r#"HloModule jit_f, is_scheduled=true

FileNames
1 "/tmp/model.py"

FileLocations
1 {file_name_id=1 function_name_id=1 line=21 end_line=21 column=6 end_column=22}

StackFrames
1 {file_location_id=1 parent_frame_id=1}

%fused_pad (param_0.2: f32[4]) -> f32[8] {
  %param_0.2 = f32[4]{0} parameter(0), metadata={scheduling_name="param_0.2"}
  ROOT %pad.0.1 = f32[8]{0} pad(%param_0.2, %c), padding=0_4, metadata={op_name="jit(f)/pad" stack_frame_id=1}
}

ENTRY %main.2 (a.1: f32[4]) -> (f32[8], s8[16]) {
  %a.1 = f32[4]{0} parameter(0), metadata={op_name="params[0][\'w1\']"}
  %loop_pad_fusion = f32[8]{0} fusion(%a.1), kind=kLoop, calls=%fused_pad, metadata={op_name="a \"q\" b=c" source_file="x.py" source_line=7}, backend_config={"k":"v, w"}
  %fusion.3 = f32[8]{0} fusion(%a.1), kind=kInput, calls=%fused_pad
  ROOT %cc = (f32[8]{0}, s8[16]{0}) custom-call(%a.1), custom_call_target="__cublas$lt$matmul"
}
"#;

    #[test]
    fn parses_instructions_metadata_and_frames() {
        let m = parse_hlo(T.as_bytes(), Path::new("m.txt")).unwrap();
        assert_eq!(m.name, "jit_f");
        assert_eq!(m.entry.as_deref(), Some("main.2"));
        let a = &m.instructions["a.1"];
        assert_eq!(a.op_name.as_deref(), Some("params[0]['w1']"));
        assert_eq!(a.category("a.1"), "param");
        let f = &m.instructions["loop_pad_fusion"];
        assert_eq!(f.fusion_kind.as_deref(), Some("kLoop"));
        assert_eq!(f.calls.as_deref(), Some("fused_pad"));
        assert_eq!(f.op_name.as_deref(), Some("a \"q\" b=c"));
        assert_eq!(
            (f.source_file.as_deref(), f.source_line),
            (Some("x.py"), Some(7))
        );
        assert_eq!(f.category("loop_pad_fusion"), "loop_pad_fusion");
        assert_eq!(
            m.instructions["fusion.3"].category("fusion.3"),
            "input_fusion"
        );
        let p = &m.instructions["pad.0.1"];
        assert_eq!(
            (p.source_file.as_deref(), p.source_line),
            (Some("/tmp/model.py"), Some(21))
        );
        let cc = &m.instructions["cc"];
        assert_eq!(cc.shape, "(f32[8]{0}, s8[16]{0})");
        assert_eq!(cc.custom_call_target.as_deref(), Some("__cublas$lt$matmul"));
    }

    #[test]
    fn truncated_and_wrong_type() {
        let cut = &T[..T.len() - 40];
        let e = parse_hlo(cut.as_bytes(), Path::new("m.txt")).unwrap_err();
        assert!(e.line > 0, "{e}");
        let e = parse_hlo("BufferAssignment:\n".as_bytes(), Path::new("m.txt")).unwrap_err();
        assert_eq!(e.line, 1);
    }
}
