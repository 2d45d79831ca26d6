//! What each output of a compiled module is: output `i` of an execution (PJRT hands a
//! tuple-shaped result back as one buffer per element) is element `i` of the ENTRY
//! computation's ROOT tuple, or the ROOT itself when it is not a tuple. Each is followed
//! back through `bitcast`, `copy`, `get-tuple-element` and `name#k` (element k of a
//! multi-output instruction) to the first instruction with an `op_name`, or to the
//! parameter it passes through (an argument aliased or returned as is).

use serde::{Deserialize, Serialize};

use super::hlo::{HloModule, Instruction};
use crate::doctor::evidence::shape_bytes;

/// One output of a module's executions.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct OutputValue {
    /// Which output (0-based).
    pub index: u32,
    /// The instruction the ROOT names for it (`loop_add_fusion#1`, `custom-call.23#0`),
    /// or the ROOT itself.
    pub instruction: String,
    /// Its shape as printed.
    pub shape: String,
    /// Bytes of that shape (`None` for a type the size rule does not know).
    pub bytes: Option<u64>,
    /// The framework op that made it: the first `op_name` metadata found following it
    /// back through bitcasts, copies and tuple elements.
    pub op_name: Option<String>,
    /// The entry parameter it is, when the output passes an argument through.
    pub parameter: Option<u64>,
}

/// The outputs of `m`'s executions, in order; empty when the HLO has no ENTRY ROOT.
pub fn entry_outputs(m: &HloModule) -> Vec<OutputValue> {
    let Some(root_name) = m.entry_root.as_deref() else {
        return Vec::new();
    };
    let Some((root, root_reads)) = m.entry_value(root_name) else {
        return Vec::new();
    };
    let elements: Vec<(String, String)> = if root.shape.starts_with('(') {
        let shapes = tuple_elements(&root.shape);
        shapes
            .into_iter()
            .enumerate()
            .map(|(i, shape)| {
                let name = match root.opcode.as_str() {
                    "tuple" => root_reads.operands.get(i).cloned().unwrap_or_default(),
                    _ => format!("{root_name}#{i}"),
                };
                (name, shape.to_string())
            })
            .collect()
    } else {
        vec![(root_name.to_string(), root.shape.clone())]
    };
    elements
        .into_iter()
        .enumerate()
        .map(|(i, (instruction, shape))| {
            let (op_name, parameter) = origin(m, &instruction);
            OutputValue {
                index: i as u32,
                bytes: shape_bytes(&shape),
                instruction,
                shape,
                op_name,
                parameter,
            }
        })
        .collect()
}

/// Instructions followed back to find where a value came from.
const PASS_THROUGH: [&str; 3] = ["bitcast", "copy", "get-tuple-element"];

/// Whether the operands of an instruction of `opcode` are read here (a tuple ROOT's
/// elements, what a pass-through reads, a parameter's number): the parser keeps no
/// others.
pub(crate) fn follows_operands(opcode: &str) -> bool {
    opcode == "tuple" || opcode == "parameter" || PASS_THROUGH.contains(&opcode)
}

/// The `op_name` and the parameter number behind the value `name`.
fn origin(m: &HloModule, name: &str) -> (Option<String>, Option<u64>) {
    let mut name = name;
    let mut op_name: Option<String> = None;
    // A chain is as long as the computation at most; the bound only guards a cycle in a
    // malformed file.
    for _ in 0..=m.entry_values.len() {
        let base = name.split_once('#').map_or(name, |(b, _)| b);
        let Some((v, reads)) = m.entry_value(base) else {
            break;
        };
        if op_name.is_none() {
            op_name = element_op_name(m, v, name).or_else(|| v.op_name.clone());
        }
        if v.opcode == "parameter" {
            let number = reads.operands.first().and_then(|n| n.parse().ok());
            return (op_name, number);
        }
        if op_name.is_some() || !PASS_THROUGH.contains(&v.opcode.as_str()) {
            break;
        }
        match reads.operands.first() {
            Some(next) => name = next,
            None => break,
        }
    }
    (op_name, None)
}

/// For `name#k`, element `k` of a multi-output fusion: the `op_name` of the instruction
/// its body returns as element `k` (the fusion's own metadata names only one of them).
fn element_op_name(m: &HloModule, v: &Instruction, name: &str) -> Option<String> {
    let k: usize = name.split_once('#')?.1.parse().ok()?;
    let body = v.calls.as_deref()?.trim_start_matches('%');
    m.tuple_root_op_names.get(body)?.get(k)?.clone()
}

/// The element shapes of a tuple shape as printed (`(f32[], /*index=5*/bf16[2]{0})`),
/// comments dropped.
fn tuple_elements(shape: &str) -> Vec<&str> {
    let inner = shape.trim();
    let inner = inner.strip_prefix('(').unwrap_or(inner);
    let inner = inner.strip_suffix(')').unwrap_or(inner);
    let mut out = Vec::new();
    let (mut depth, mut start) = (0i32, 0usize);
    for (i, c) in inner.char_indices() {
        match c {
            '(' | '[' | '{' => depth += 1,
            ')' | ']' | '}' => depth -= 1,
            ',' if depth == 0 => {
                out.push(drop_comment(&inner[start..i]));
                start = i + 1;
            }
            _ => {}
        }
    }
    if !inner[start..].trim().is_empty() {
        out.push(drop_comment(&inner[start..]));
    }
    out
}

fn drop_comment(s: &str) -> &str {
    let s = s.trim();
    match s.strip_prefix("/*").and_then(|r| r.split_once("*/")) {
        Some((_, rest)) => rest.trim(),
        None => s,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn parse(t: &str) -> HloModule {
        super::super::hlo::parse_hlo(t.as_bytes(), Path::new("m.txt")).unwrap()
    }

    #[test]
    fn tuple_outputs_follow_elements_copies_and_parameters() {
        let m = parse(
            r#"HloModule jit_g

ENTRY %main (p.0: f32[8], p.1: s32[]) -> (f32[8], f32[8], s32[], f32[2,4]) {
  %p.0 = f32[8]{0} parameter(0), metadata={op_name="x"}
  %p.1 = s32[] parameter(1)
  %f = (f32[8]{0}, f32[8]{0}) fusion(%p.0), kind=kLoop, calls=%c, metadata={op_name="jit(g)/sin"}
  %copy.1 = f32[8]{0} copy(%f#1)
  %bitcast.2 = f32[2,4]{1,0} bitcast(%copy.1)
  ROOT %tuple = (f32[8]{0}, f32[8]{0}, s32[], /*index=3*/f32[2,4]{1,0}) tuple(%f#0, %copy.1, %p.1, %bitcast.2)
}
"#,
        );
        let o = entry_outputs(&m);
        let got: Vec<_> = o
            .iter()
            .map(|v| {
                (
                    v.instruction.as_str(),
                    v.bytes,
                    v.op_name.as_deref(),
                    v.parameter,
                )
            })
            .collect();
        assert_eq!(
            got,
            vec![
                ("f#0", Some(32), Some("jit(g)/sin"), None),
                ("copy.1", Some(32), Some("jit(g)/sin"), None),
                ("p.1", Some(4), None, Some(1)),
                ("bitcast.2", Some(32), Some("jit(g)/sin"), None),
            ]
        );
    }

    #[test]
    fn elements_of_a_multi_output_fusion_are_named_by_the_ops_its_body_returns() {
        // As XLA fused `sum(y)` and `convert(y * 2)` of a real H100 run: the fusion's own
        // metadata names only the reduction.
        let m = parse(
            r#"HloModule jit_step

%fused_computation (param_0: f32[16,8]) -> (f32[16], bf16[16,8]) {
  %param_0 = f32[16,8]{1,0} parameter(0)
  %constant_1 = f32[] constant(0)
  %reduce.1 = f32[16]{0} reduce(%param_0, %constant_1), dimensions={1}, to_apply=%add, metadata={op_name="jit(step)/reduce_sum"}
  %constant_2 = f32[] constant(2)
  %broadcast.3 = f32[16,8]{1,0} broadcast(%constant_2), dimensions={}
  %multiply.4 = f32[16,8]{1,0} multiply(%param_0, %broadcast.3), metadata={op_name="jit(step)/mul"}
  %convert.5 = bf16[16,8]{1,0} convert(%multiply.4), metadata={op_name="jit(step)/convert_element_type"}
  ROOT %tuple.6 = (f32[16]{0}, bf16[16,8]{1,0}) tuple(%reduce.1, %convert.5)
}

ENTRY %main (x: f32[16,8]) -> (f32[16,8], f32[16], bf16[16,8]) {
  %x = f32[16,8]{1,0} parameter(0)
  %tanh.7 = f32[16,8]{1,0} tanh(%x), metadata={op_name="jit(step)/tanh"}
  %input_fusion = (f32[16]{0}, bf16[16,8]{1,0}) fusion(%tanh.7), kind=kInput, calls=%fused_computation, metadata={op_name="jit(step)/reduce_sum"}
  ROOT %tuple.8 = (f32[16,8]{1,0}, f32[16]{0}, bf16[16,8]{1,0}) tuple(%tanh.7, %input_fusion#0, %input_fusion#1)
}
"#,
        );
        let o = entry_outputs(&m);
        let got: Vec<_> = o
            .iter()
            .map(|v| (v.instruction.as_str(), v.bytes, v.op_name.as_deref()))
            .collect();
        assert_eq!(
            got,
            vec![
                ("tanh.7", Some(512), Some("jit(step)/tanh")),
                ("input_fusion#0", Some(64), Some("jit(step)/reduce_sum")),
                (
                    "input_fusion#1",
                    Some(256),
                    Some("jit(step)/convert_element_type")
                ),
            ]
        );
    }

    #[test]
    fn a_non_tuple_root_is_output_zero_with_its_own_metadata() {
        let m = parse(
            r#"HloModule jit_h

ENTRY %main (a: f32[4]) -> f32[4] {
  %a = f32[4]{0} parameter(0)
  ROOT %neg = f32[4]{0} negate(f32[4]{0} %a), metadata={op_name="jit(h)/neg"}
}
"#,
        );
        let o = entry_outputs(&m);
        assert_eq!(o.len(), 1);
        assert_eq!(o[0].instruction, "neg");
        assert_eq!(o[0].op_name.as_deref(), Some("jit(h)/neg"));
        assert_eq!(o[0].bytes, Some(16));
    }
}
