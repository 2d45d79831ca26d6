//! Compile-time memory messages of XLA's GPU autotuner: the BFC pool declining a scratch
//! request (`… ran out of memory trying to allocate 1.02GiB … The caller indicates that
//! this is not a failure …`: the autotuner tries the next config), the instruction whose
//! configs all failed (`Could not get config for HLO: %gemm_fusion_dot_general.1 = … ,
//! metadata={op_name="jit(step)/dot_general" stack_frame_id=2} … Status:
//! RESOURCE_EXHAUSTED: Out of memory while trying to allocate 1.02GiB …`, a message that
//! spans the fused computation's lines) and `All configs failed during profiling`.
//! Pure parsing of messages; the log state machine (`parse`) feeds the lines.

use super::model::Location;
use crate::xla::text::parse_human_bytes;
use serde::Serialize;

/// A BFC out-of-memory report whose caller retries with something else (the autotuner):
/// not a failure of the program.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct ScratchRefusal {
    pub at: Location,
    /// `GPU_0_bfc`.
    pub allocator: String,
    /// The request as printed (`1.02GiB`: two decimals of its unit).
    pub requested_approx_bytes: Option<u64>,
}

/// Which autotuner message reported a failure.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum AutotuneMessage {
    /// `Could not get config for HLO: …`
    CouldNotGetConfig,
    /// `All configs failed during profiling`.
    AllConfigsFailed,
}

/// An instruction the autotuner could not configure, and why.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct AutotuneFailure {
    /// Where the message starts.
    pub at: Location,
    pub message: AutotuneMessage,
    /// `gemm_fusion_dot_general.1` (without `%`).
    pub instruction: Option<String>,
    /// Its result shape (`f32[16384,16384]{1,0}`).
    pub shape: Option<String>,
    /// Its operands' shapes, from the fused computation's signature
    /// (`(parameter_0: f32[16384,16384], …) -> …`).
    pub operand_shapes: Vec<String>,
    /// The instruction's own `op_name` (the metadata after the fused computation).
    pub op_name: Option<String>,
    /// Its `stack_frame_id` (resolve it in the module's dump).
    pub stack_frame_id: Option<u64>,
    /// `RESOURCE_EXHAUSTED`, `NOT_FOUND`, … of the status.
    pub status_code: Option<String>,
    /// The request the status names (`allocate 1.02GiB`), approximate.
    pub request_approx_bytes: Option<u64>,
    /// `with allocator GPU_0_bfc`.
    pub allocator: Option<String>,
    /// `on device N`.
    pub device: Option<i32>,
}

/// Whether a BFC out-of-memory message is a declined scratch request.
pub fn is_scratch_refusal(msg: &str) -> bool {
    msg.contains("The caller indicates that this is not a failure")
}

/// Parses a declined scratch request (call when [`is_scratch_refusal`]).
pub fn parse_scratch_refusal(msg: &str, at: &Location) -> ScratchRefusal {
    let allocator = between(msg, "Allocator (", ")").unwrap_or("").to_string();
    let human = msg
        .split_once("trying to allocate ")
        .and_then(|(_, r)| r.split([' ', '(']).next())
        .unwrap_or("");
    ScratchRefusal {
        at: at.clone(),
        allocator,
        requested_approx_bytes: parse_human_bytes(human),
    }
}

/// Lines a `Could not get config` message may span before its `Status:` (a fused
/// computation); a longer block is given up.
pub const MAX_BLOCK_LINES: usize = 4096;

/// Whether a message starts an autotuner failure report.
pub fn starts_failure(msg: &str) -> Option<AutotuneMessage> {
    if msg.contains("Could not get config for HLO") {
        Some(AutotuneMessage::CouldNotGetConfig)
    } else if msg.contains("All configs failed during profiling") {
        Some(AutotuneMessage::AllConfigsFailed)
    } else {
        None
    }
}

/// Whether a line ends the report (`… Status: CODE: …`).
pub fn ends_failure(line: &str) -> bool {
    line.contains("Status: ") || !line.contains('{') && line.contains("RESOURCE_EXHAUSTED")
}

fn between<'a>(s: &'a str, start: &str, end: &str) -> Option<&'a str> {
    let a = s.find(start)? + start.len();
    let b = s[a..].find(end).map_or(s.len(), |e| a + e);
    Some(&s[a..b])
}

/// Whether a line of the report is the fused computation's signature
/// (`(parameter_0: f32[…], parameter_1: f32[…]) -> f32[…] {`).
pub fn is_signature(line: &str) -> bool {
    line.starts_with('(') && line.contains(") -> ")
}

/// The operand shapes of a signature line.
pub fn signature_operands(line: &str) -> Vec<String> {
    let inner = line
        .strip_prefix('(')
        .and_then(|l| l.split(") -> ").next())
        .unwrap_or("");
    let mut out = Vec::new();
    let mut depth = 0i32;
    let mut start = 0;
    for (i, c) in inner.char_indices() {
        match c {
            '[' | '(' | '{' => depth += 1,
            ']' | ')' | '}' => depth -= 1,
            ',' if depth == 0 => {
                push_operand(&inner[start..i], &mut out);
                start = i + 1;
            }
            _ => {}
        }
    }
    push_operand(&inner[start..], &mut out);
    out
}

fn push_operand(p: &str, out: &mut Vec<String>) {
    if let Some((_, shape)) = p.split_once(": ") {
        out.push(shape.trim().to_string());
    }
}

/// Parses a whole report: `first` is the message of its first line, `last` the line
/// with its status (the same line for a one-line report).
pub fn parse_failure(
    kind: AutotuneMessage,
    first: &str,
    last: &str,
    at: &Location,
) -> AutotuneFailure {
    let head = first
        .split_once("for HLO: ")
        .map(|(_, h)| h.trim())
        .unwrap_or("");
    let (instruction, shape) = match head.split_once(" = ") {
        Some((name, rest)) if name.starts_with('%') || !name.contains(' ') => (
            Some(name.trim_start_matches('%').to_string()),
            rest.split_whitespace().next().map(str::to_string),
        ),
        _ => (None, None),
    };
    // The instruction's own metadata follows its fused computation: the last
    // `metadata={` of the report (the one-line form has one only).
    let meta_line = if last.contains("metadata={") {
        last
    } else {
        first
    };
    let meta = meta_line
        .rfind("metadata={")
        .map(|i| &meta_line[i..])
        .and_then(|m| between(m, "metadata={", "}"));
    let op_name = meta
        .and_then(|m| between(m, "op_name=\"", "\""))
        .map(str::to_string);
    let stack_frame_id = meta
        .and_then(|m| between(m, "stack_frame_id=", " "))
        .and_then(|v| v.trim_end_matches('}').trim().parse().ok());
    let status = last
        .rfind("Status: ")
        .map(|i| &last[i + "Status: ".len()..])
        .or_else(|| last.find("RESOURCE_EXHAUSTED").map(|i| &last[i..]))
        .unwrap_or("");
    let status_code = status
        .split(':')
        .next()
        .map(str::trim)
        .filter(|c| !c.is_empty() && c.chars().all(|ch| ch.is_ascii_uppercase() || ch == '_'))
        .map(str::to_string);
    let request_approx_bytes = status
        .split_once("trying to allocate ")
        .and_then(|(_, r)| r.split_whitespace().next())
        .and_then(|h| parse_human_bytes(h.trim_end_matches('.')));
    AutotuneFailure {
        at: at.clone(),
        message: kind,
        instruction,
        shape,
        operand_shapes: Vec::new(),
        op_name,
        stack_frame_id,
        status_code,
        request_approx_bytes,
        allocator: between(status, "with allocator ", " ").map(str::to_string),
        device: between(status, "on device ", ".")
            .and_then(|d| d.split_whitespace().next())
            .and_then(|d| d.parse().ok()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// testdata/oom-corpus/jax_autotune/stderr.log lines 21-28 (JAX 0.11.2, H100).
    #[test]
    fn declined_scratch_and_the_failed_instruction() {
        let at = Location::default();
        let m = "Allocator (GPU_0_bfc) ran out of memory trying to allocate 1.02GiB from the lower end with freed_by_count=0. The caller indicates that this is not a failure, but this may mean that there could be performance gains if more memory were available.";
        assert!(is_scratch_refusal(m));
        let r = parse_scratch_refusal(m, &at);
        assert_eq!(r.allocator, "GPU_0_bfc");
        assert_eq!(r.requested_approx_bytes, Some(1095216660));
        let first = "Could not get config for HLO: %gemm_fusion_dot_general.1 = f32[16384,16384]{1,0} fusion(%a.1, %b.1), kind=kCustom, calls=";
        assert_eq!(
            starts_failure(first),
            Some(AutotuneMessage::CouldNotGetConfig)
        );
        let inner = "  %dot_general.0 = f32[16384,16384]{1,0} dot(%parameter_0, %parameter_1), lhs_contracting_dims={1}, rhs_contracting_dims={0}, metadata={op_name=\"jit(step)/dot_general\" stack_frame_id=2}";
        assert!(!ends_failure(inner));
        let last = "}, metadata={op_name=\"jit(step)/dot_general\" stack_frame_id=2}, backend_config={\"operation_queue_id\":\"0\",\"fusion_backend_config\":{\"kind\":\"__triton_gemm\"},\"force_earliest_schedule\":false,\"reification_cost\":[],\"device_type\":\"DEVICE_TYPE_INVALID\"}. Status: RESOURCE_EXHAUSTED: Out of memory while trying to allocate 1.02GiB with allocator GPU_0_bfc on device 0. [tf-allocator-allocation-error='']";
        assert!(ends_failure(last));
        let f = parse_failure(AutotuneMessage::CouldNotGetConfig, first, last, &at);
        assert_eq!(f.instruction.as_deref(), Some("gemm_fusion_dot_general.1"));
        assert_eq!(f.shape.as_deref(), Some("f32[16384,16384]{1,0}"));
        assert_eq!(f.op_name.as_deref(), Some("jit(step)/dot_general"));
        assert_eq!(f.stack_frame_id, Some(2));
        assert_eq!(f.status_code.as_deref(), Some("RESOURCE_EXHAUSTED"));
        assert_eq!(f.request_approx_bytes, Some(1095216660));
        assert_eq!(f.allocator.as_deref(), Some("GPU_0_bfc"));
        assert_eq!(f.device, Some(0));
        let sig =
            "(parameter_0: f32[16384,16384], parameter_1: f32[16384,16384]) -> f32[16384,16384] {";
        assert!(is_signature(sig));
        assert!(!is_signature(inner));
        assert_eq!(
            signature_operands(sig),
            vec![
                "f32[16384,16384]".to_string(),
                "f32[16384,16384]".to_string()
            ]
        );
    }

    /// The form the issue quotes from an earlier H100 run: the error surfaces as the
    /// compile's status, without an instruction.
    #[test]
    fn all_configs_failed() {
        let m = "jax.errors.JaxRuntimeError: NOT_FOUND: All configs failed during profiling";
        let k = starts_failure(m).unwrap();
        assert_eq!(k, AutotuneMessage::AllConfigsFailed);
        let f = parse_failure(k, m, m, &Location::default());
        assert_eq!(f.instruction, None);
        assert_eq!(f.request_approx_bytes, None);
    }
}
