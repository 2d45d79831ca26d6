//! The log line parser: a small state machine over prefixed lines that fills a
//! [`LogReport`]. Multi-line blocks (the BFC dump, `Stats:` and `AllocatorStats` blocks)
//! are tracked by state; every other event is one line.

use super::autotune::{self, AutotuneMessage};
use super::framework;
use super::model::*;
use super::prefix::split_prefix;
use super::traceback::TracebackReader;
use crate::xla::text::{parse_human_bytes, Lines, ParseError};
use std::collections::BTreeMap;
use std::io::BufRead;
use std::path::Path;

/// Parses one log into `report` (call once per file). Fails on binary/non-UTF-8 input
/// (file and line) and on a file with no log lines at all.
pub fn parse_log<R: BufRead>(
    reader: R,
    file: &Path,
    report: &mut LogReport,
) -> Result<(), ParseError> {
    let mut lines = Lines::new(reader, file);
    let fname = file.display().to_string();
    report.files.push(fname.clone());
    let mut oom: Option<usize> = None;
    let mut stats: Option<AllocatorStats> = None;
    let mut recognised = 0usize;
    let mut nonblank = 0usize;
    let mut traceback = TracebackReader::default();
    // An autotuner report spanning lines: (kind, its first message, where, lines read).
    let mut autotune_block: Option<(AutotuneMessage, String, Location, usize, Option<String>)> =
        None;
    while let Some((no, line)) = lines.next_line()? {
        report.lines += 1;
        // Most lines of a long log hold none of the messages read here: they only count
        // towards "is this a log at all", and only until that is known.
        let in_block = traceback.active() || autotune_block.is_some() || stats.is_some();
        if !in_block && !may_hold_a_message(line) {
            if nonblank == 0 && !line.trim().is_empty() {
                nonblank += 1;
            }
            if recognised == 0 && split_prefix(line).severity.is_some() {
                recognised += 1;
            }
            continue;
        }
        let at = Location {
            file: fname.clone(),
            line: no,
        };
        // Lines inside a Python traceback are frames, not messages; its last line (the
        // exception) is also read as a message below.
        if let Some(e) = traceback.feed(line, &at) {
            report.exceptions.push(e);
            recognised += 1;
        } else if traceback.active() {
            nonblank += 1;
            continue;
        }
        if let Some((kind, first, start, n, signature)) = autotune_block.as_mut() {
            *n += 1;
            if signature.is_none() && autotune::is_signature(line) {
                *signature = Some(line.to_string());
            }
            if autotune::ends_failure(line) {
                let mut f = autotune::parse_failure(*kind, first, line, start);
                f.operand_shapes = signature
                    .as_deref()
                    .map(autotune::signature_operands)
                    .unwrap_or_default();
                report.autotune_failures.push(f);
                autotune_block = None;
                recognised += 1;
            } else if *n > autotune::MAX_BLOCK_LINES {
                autotune_block = None;
            }
            continue;
        }
        let p = split_prefix(line);
        if p.severity.is_some() {
            recognised += 1;
        }
        let msg = p.message.trim();
        if !msg.is_empty() {
            nonblank += 1;
        }
        // Continuation of a stats block: `Key:   value` lines (or `│ key: value`).
        if let Some(st) = stats.as_mut() {
            let body = msg.trim_start_matches('│').trim();
            if p.severity.is_none() && !body.is_empty() && !body.starts_with('└') {
                if body.chars().all(|c| c == '-') {
                    continue;
                }
                if let Some((k, v)) = body.split_once(':') {
                    add_stat(st, k, v);
                    recognised += 1;
                    continue;
                }
            }
            let done = stats.take().unwrap_or_default();
            match oom {
                Some(i) if done.variant == "bfc-stats" => report.ooms[i].stats = Some(done),
                _ => report.allocator_stats.push(done),
            }
        }
        if let Some(r) = msg.find("Can't reduce memory use below") {
            let nums = paren_bytes(&msg[r..]);
            if nums.len() >= 3 {
                report.remat_warnings.push(RematWarning {
                    at,
                    target_bytes: nums[0],
                    achieved_bytes: nums[1],
                    original_bytes: nums[2],
                });
                recognised += 1;
            }
            continue;
        }
        if autotune::is_scratch_refusal(msg) {
            report
                .scratch_refusals
                .push(autotune::parse_scratch_refusal(msg, &at));
            oom = None;
            recognised += 1;
            continue;
        }
        if let Some(kind) = autotune::starts_failure(msg) {
            recognised += 1;
            if kind == AutotuneMessage::AllConfigsFailed || autotune::ends_failure(msg) {
                report
                    .autotune_failures
                    .push(autotune::parse_failure(kind, msg, msg, &at));
            } else {
                autotune_block = Some((kind, msg.to_string(), at, 0, None));
            }
            continue;
        }
        if MemoryMap::is_map(msg) {
            if let Some(i) = oom {
                report.ooms[i].memory_map = Some(MemoryMap {
                    at,
                    cells: msg.to_string(),
                });
            }
            continue;
        }
        if let Some(o) = framework::parse_torch_oom(msg, &at) {
            report.torch_ooms.push(o);
            recognised += 1;
            continue;
        }
        if let Some(o) = framework::parse_cupy_oom(msg, &at) {
            report.cupy_ooms.push(o);
            recognised += 1;
            continue;
        }
        if msg.contains("ailed to allocate") {
            if let Some(f) = framework::parse_device_alloc_failure(msg, &at) {
                report.device_alloc_failures.push(f);
                recognised += 1;
                continue;
            }
        }
        if let Some(a) = framework::parse_arguments_over_limit(msg, &at) {
            report.arguments_over_limit.push(a);
            recognised += 1;
            continue;
        }
        if let Some(rest) = msg.strip_prefix("Using ") {
            if let Some(name) = rest.strip_suffix(" allocator.") {
                report.xla_allocator = Some(name.to_string());
                continue;
            }
        }
        if msg.contains("ran out of memory trying to allocate") {
            let allocator = between(msg, "Allocator (", ")").unwrap_or("").to_string();
            let after = msg
                .split_once("trying to allocate ")
                .map(|x| x.1)
                .unwrap_or("");
            let human = after.split([' ', '(']).next().unwrap_or("");
            let rounded = between(after, "(rounded to ", ")")
                .and_then(|s| s.trim().parse().ok())
                .unwrap_or(0);
            let end = between(msg, "from the ", " end").map(str::to_string);
            report.ooms.push(BfcOom {
                at,
                allocator,
                requested_approx_bytes: parse_human_bytes(human).unwrap_or(0),
                rounded_bytes: rounded,
                end,
                ..Default::default()
            });
            oom = Some(report.ooms.len() - 1);
            recognised += 1;
            continue;
        }
        if let Some(rest) = msg.strip_prefix("Next region of size ") {
            if let (Some(i), Ok(n)) = (oom, rest.trim().parse::<u64>()) {
                report.ooms[i].regions.push(n);
                report.ooms[i].region_chunk_bytes.push(0);
            }
            continue;
        }
        if msg.starts_with("InUse at ")
            || msg.starts_with("Free  at ")
            || msg.starts_with("Free at ")
        {
            if let (Some(i), Some(c)) = (oom, parse_chunk(msg, &at)) {
                let o = &mut report.ooms[i];
                if let Some(covered) = o.region_chunk_bytes.last_mut() {
                    *covered = covered.saturating_add(c.size);
                }
                o.chunks.push(c);
            }
            continue;
        }
        if let Some((count, rest)) = msg.split_once(" Chunks of size ") {
            if let (Some(i), Ok(n)) = (oom, count.trim().parse::<u64>()) {
                let size = rest.split_whitespace().next().and_then(|s| s.parse().ok());
                if let Some(size) = size {
                    report.ooms[i].in_use_by_size.push((n, size));
                }
            }
            continue;
        }
        if let Some(rest) = msg.strip_prefix("Allocator memory summary: ") {
            if let Some(i) = oom {
                report.ooms[i].summary_approx = human_fields(rest);
            }
            continue;
        }
        if let Some(rest) = msg.strip_prefix("Spatial partitioning summary for ") {
            if let (Some(i), Some((_, fields))) = (oom, rest.split_once(": ")) {
                let fields = fields.split(". ").next().unwrap_or("");
                report.ooms[i].spatial_approx = human_fields(fields);
            }
            continue;
        }
        if msg == "Stats:" || msg.starts_with("Stats: ") && msg.trim_end() == "Stats:" {
            stats = Some(AllocatorStats {
                at,
                variant: "bfc-stats".into(),
                ..Default::default()
            });
            continue;
        }
        if msg.trim_start_matches('│').trim() == "AllocatorStats" {
            stats = Some(AllocatorStats {
                at,
                variant: "allocator-stats".into(),
                ..Default::default()
            });
            oom = None;
            continue;
        }
        if msg.contains("RESOURCE_EXHAUSTED") {
            let after = msg.split_once("allocate ").map(|x| x.1).unwrap_or("");
            let tok = after.split_whitespace().next().unwrap_or("");
            let next = after.split_whitespace().nth(1).unwrap_or("");
            let (bytes, approx) = if next.starts_with("bytes") {
                (tok.parse().ok(), None)
            } else {
                (None, parse_human_bytes(tok.trim_end_matches('.')))
            };
            report.resource_exhausted.push(ResourceExhausted {
                at,
                bytes,
                approx_bytes: approx,
                allocator: between(msg, "with allocator ", " ").map(str::to_string),
                executable: between(msg, "[executable_name='", "']").map(str::to_string),
                message: msg.to_string(),
            });
            recognised += 1;
            oom = None;
            continue;
        }
        if let Some(d) = framework::parse_driver_oom(msg, &at) {
            report.driver_errors.push(d);
            recognised += 1;
            continue;
        }
        if let Some(rest) = msg.strip_prefix("XLA backend allocating ") {
            if let Some(b) = paren_bytes(rest).first() {
                let device = between(rest, "on device ", " ").and_then(|d| d.parse().ok());
                report.pool_allocations.push(PoolAllocation {
                    at,
                    bytes: *b,
                    device,
                });
            }
            continue;
        }
        if let Some(rest) = msg.strip_prefix("StreamExecutor [") {
            if let Some((_, name)) = rest.split_once("]: ") {
                let name = name.split(',').next().unwrap_or(name).to_string();
                report.devices.push(name);
            }
            continue;
        }
        if let Some((label, json)) = msg.split_once(" {") {
            let label = label.trim();
            let body = format!("{{{json}");
            if label.starts_with("MEMORY_ANALYSIS") {
                if let Ok(serde_json::Value::Object(o)) = serde_json::from_str(&body) {
                    let m: BTreeMap<String, u64> = o
                        .into_iter()
                        .filter_map(|(k, v)| v.as_u64().map(|v| (k, v)))
                        .collect();
                    report.memory_analyses.push(m);
                    recognised += 1;
                    continue;
                }
            }
            if body.contains("'bytes_in_use'") || body.contains("'bytes_limit'") {
                let mut st = AllocatorStats {
                    at,
                    variant: "memory-stats-dict".into(),
                    label: Some(label.to_string()).filter(|l| !l.is_empty()),
                    ..Default::default()
                };
                for kv in body.trim_matches(|c| c == '{' || c == '}').split(", ") {
                    if let Some((k, v)) = kv.split_once(':') {
                        add_stat(&mut st, k.trim().trim_matches('\''), v);
                    }
                }
                report.allocator_stats.push(st);
                recognised += 1;
                continue;
            }
        }
    }
    if let Some(done) = stats.take() {
        match oom {
            Some(i) if done.variant == "bfc-stats" => report.ooms[i].stats = Some(done),
            _ => report.allocator_stats.push(done),
        }
    }
    if nonblank == 0 {
        return Err(ParseError::new(file, 0, "empty log file"));
    }
    if recognised == 0 {
        return Err(ParseError::new(
            file,
            1,
            "not an XLA/JAX/TSL log: no line has an abseil or TF-style log prefix and no memory message (XLA, PyTorch, CuPy, CUDA/HIP driver) was found",
        ));
    }
    Ok(())
}

/// Text every message this parser reads contains (one of them, at least): lines without
/// any are skipped in one pass over their bytes.
const TRIGGERS: [&str; 33] = [
    "Can't reduce memory use",
    "ran out of memory",
    "Could not get config",
    "All configs failed",
    "Next region of size",
    "InUse at",
    "Free at",
    "Free  at",
    "Chunks of size",
    "Allocator memory summary",
    "Spatial partitioning summary",
    "Stats:",
    "AllocatorStats",
    "RESOURCE_EXHAUSTED",
    "XLA backend allocating",
    "StreamExecutor [",
    "MEMORY_ANALYSIS",
    "'bytes_in_use'",
    "'bytes_limit'",
    " out of memory. Tried to allocate",
    "Out of memory allocating",
    "ailed to allocate",
    "exceeds the base limit",
    " allocator.",
    "Traceback (most recent call last)",
    "cudaErrorMemoryAllocation",
    "CUDA_ERROR_OUT_OF_MEMORY",
    "hipErrorOutOfMemory",
    "HIP_ERROR_OutOfMemory",
    "hipErrorMemoryAllocation",
    "CUDA error: out of memory",
    "HIP error: out of memory",
    "│",
];

fn may_hold_a_message(line: &str) -> bool {
    static AC: std::sync::OnceLock<Option<aho_corasick::AhoCorasick>> = std::sync::OnceLock::new();
    let ac = AC.get_or_init(|| aho_corasick::AhoCorasick::new(TRIGGERS).ok());
    // BFC's occupancy map (`****____`) has no words: its last character. (Fixed
    // patterns always build; without an automaton every line is read.)
    line.ends_with(['*', '_']) || ac.as_ref().is_none_or(|a| a.is_match(line))
}

/// `Limit:   3.50GiB` / `bytes_limit: 31804391424` / `'bytes_limit': 3753902080`.
fn add_stat(st: &mut AllocatorStats, key: &str, value: &str) {
    let key = normalise_key(key.trim());
    let v = value.trim();
    if let Ok(n) = v.parse::<u64>() {
        st.exact.insert(key, n);
    } else if let Some(n) = parse_human_bytes(v) {
        st.approx.insert(key, n);
    }
}

/// Maps TSL `Stats:` names to `memory_stats()` names (`InUse` -> `bytes_in_use`).
fn normalise_key(k: &str) -> String {
    match k {
        "Limit" => "bytes_limit".into(),
        "InUse" => "bytes_in_use".into(),
        "MaxInUse" => "peak_bytes_in_use".into(),
        "NumAllocs" => "num_allocs".into(),
        "MaxAllocSize" => "largest_alloc_size".into(),
        "Reserved" => "bytes_reserved".into(),
        "PeakReserved" => "peak_bytes_reserved".into(),
        "PeakAllocated" => "peak_bytes_allocated".into(),
        "LargestFreeBlock" => "largest_free_block_bytes".into(),
        other => other.to_lowercase().replace(' ', "_"),
    }
}

fn between<'a>(s: &'a str, start: &str, end: &str) -> Option<&'a str> {
    let a = s.find(start)? + start.len();
    let b = s[a..].find(end).map(|e| a + e).unwrap_or(s.len());
    Some(&s[a..b])
}

/// All `(N bytes)` integers in order.
fn paren_bytes(s: &str) -> Vec<u64> {
    let mut out = Vec::new();
    let mut rest = s;
    while let Some(p) = rest.find('(') {
        rest = &rest[p + 1..];
        if let Some((n, _)) = rest.split_once(" bytes)") {
            if let Ok(v) = n.trim().parse() {
                out.push(v);
            }
        }
    }
    out
}

/// `rounded request 3.25GiB, total free in pool 2.43GiB, …` -> snake_case keys.
fn human_fields(s: &str) -> BTreeMap<String, u64> {
    let mut m = BTreeMap::new();
    for part in s.trim_end_matches('.').split(", ") {
        if let Some((k, v)) = part.trim().rsplit_once(' ') {
            if let Some(b) = parse_human_bytes(v) {
                m.insert(k.replace(' ', "_"), b);
            }
        }
    }
    m
}

fn parse_chunk(msg: &str, at: &Location) -> Option<Chunk> {
    let in_use = msg.starts_with("InUse");
    let toks: Vec<&str> = msg.split_whitespace().collect();
    let mut c = Chunk {
        at: at.clone(),
        in_use,
        address: 0,
        size: 0,
        requested_size: None,
        tag: None,
        annotation: None,
        executable: None,
        op: None,
    };
    let mut i = 0;
    let mut have_size = false;
    while i < toks.len() {
        match toks[i] {
            "at" if i + 1 < toks.len() => {
                let a = toks[i + 1].trim_start_matches("0x");
                c.address = u64::from_str_radix(a, 16).ok()?;
                i += 1;
            }
            "size" if i + 1 < toks.len() && !have_size && toks[i - 1] == "of" => {
                c.size = toks[i + 1].parse().ok()?;
                have_size = true;
                i += 1;
            }
            "requested" | "requested_size" if i + 1 < toks.len() => {
                let j = if toks[i + 1] == "size" { i + 2 } else { i + 1 };
                c.requested_size = toks
                    .get(j)
                    .and_then(|t| t.trim_end_matches(',').parse().ok());
                i = j;
            }
            "tag" if i + 1 < toks.len() => {
                c.tag = Some(toks[i + 1].to_string());
                i += 1;
            }
            "allocation_annotation" if i + 1 < toks.len() => {
                let a = toks[i + 1];
                c.executable = between(a, "executable=", "}").map(str::to_string);
                c.annotation = Some(a.to_string());
                i += 1;
            }
            "op" if i > 0 && toks[i - 1] == "by" && i + 1 < toks.len() => {
                c.op = Some(toks[i + 1].to_string());
                i += 1;
            }
            _ => {}
        }
        i += 1;
    }
    have_size.then_some(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn old_format_oom_and_pjrt_error() {
        let t = "2025-08-23 09:39:11.389852: W external/xla/xla/tsl/framework/bfc_allocator.cc:501] Allocator (GPU_2_bfc) ran out of memory trying to allocate 48.16GiB (rounded to 51712165888)requested by op\nE0000 00:00:1755941951.386733 3750 pjrt_stream_executor_client.cc:3081] Execution of replica 0 failed: RESOURCE_EXHAUSTED: Out of memory while trying to allocate 51712165888 bytes. [tf-allocator-allocation-error='']\n";
        let mut r = LogReport::default();
        parse_log(t.as_bytes(), Path::new("l"), &mut r).unwrap();
        assert_eq!(r.ooms[0].rounded_bytes, 51712165888);
        assert_eq!(r.ooms[0].allocator, "GPU_2_bfc");
        assert_eq!(r.resource_exhausted[0].bytes, Some(51712165888));
    }

    #[test]
    fn chunk_variants() {
        let at = Location::default();
        let c = parse_chunk(
            "InUse at 7f5da8000000 of size 1280 by op Fill action_count 1 step 0 next 1",
            &at,
        )
        .unwrap();
        assert_eq!(
            (c.address, c.size, c.op.as_deref()),
            (0x7f5da8000000, 1280, Some("Fill"))
        );
        let c = parse_chunk("InUse at 10 of size 512 requested size 500 next 2", &at).unwrap();
        assert_eq!(c.requested_size, Some(500));
        assert!(parse_chunk("InUse at zz of size 1", &at).is_none());
    }

    #[test]
    fn rejects_non_logs() {
        let mut r = LogReport::default();
        let e = parse_log("hello\nworld\n".as_bytes(), Path::new("x"), &mut r).unwrap_err();
        assert!(e.to_string().starts_with("x:1:"));
        let e = parse_log("".as_bytes(), Path::new("x"), &mut r).unwrap_err();
        assert!(e.to_string().contains("empty"));
    }
}
