//! The per-module memory report: `memory_analysis()`-equivalent totals computed from the
//! buffer assignment, the buffers live at the module's peak joined with their HLO
//! instruction, and the peak grouped by allocation kind, op category and framework op
//! name. Pure computation over parsed files; no I/O.

use super::buffer_assignment::{AssignedValue, BufferAssignment};
use super::hlo::HloModule;
use super::live_range::LiveRanges;
use foldhash::HashMap;
use serde::{Deserialize, Serialize};

/// Totals exactly as JAX's `compiled.memory_analysis()` (XLA `CompiledMemoryStats`)
/// derives them from the buffer assignment: per allocation, an entry parameter adds to
/// argument bytes (and to alias bytes when it is also live out); a live-out allocation
/// adds to output bytes; a preallocated temp (neither parameter, live-out, constant nor
/// thread-local) adds to temp bytes; host-memory-space (`S(5)`) allocations go to the
/// `host_*` twins. `total_allocation_bytes` is the sum of every allocation's size.
#[derive(Debug, Clone, Serialize, Deserialize, Default, PartialEq, Eq)]
pub struct MemoryTotals {
    /// `argument_size_in_bytes`.
    pub argument_bytes: u64,
    /// `output_size_in_bytes`.
    pub output_bytes: u64,
    /// `temp_size_in_bytes`.
    pub temp_bytes: u64,
    /// `alias_size_in_bytes`.
    pub alias_bytes: u64,
    /// `total_allocation_bytes`.
    pub total_allocation_bytes: u64,
    /// `host_argument_size_in_bytes`.
    pub host_argument_bytes: u64,
    /// `host_output_size_in_bytes`.
    pub host_output_bytes: u64,
    /// `host_temp_size_in_bytes`.
    pub host_temp_bytes: u64,
    /// `host_alias_size_in_bytes`.
    pub host_alias_bytes: u64,
    /// Bytes of constant allocations.
    pub constant_bytes: u64,
    /// Bytes of thread-local allocations.
    pub thread_local_bytes: u64,
    /// Number of allocations.
    pub allocation_count: u64,
}

/// Computes [`MemoryTotals`] (see its docs for the rule).
pub fn memory_totals(ba: &BufferAssignment) -> MemoryTotals {
    let mut t = MemoryTotals::default();
    for a in &ba.allocations {
        let host = a.is_host();
        t.allocation_count += 1;
        t.total_allocation_bytes += a.size;
        if a.parameter.is_some() {
            *if host {
                &mut t.host_argument_bytes
            } else {
                &mut t.argument_bytes
            } += a.size;
            if a.is_parameter_aliased_with_output() {
                *if host {
                    &mut t.host_alias_bytes
                } else {
                    &mut t.alias_bytes
                } += a.size;
            }
        }
        if a.maybe_live_out {
            *if host {
                &mut t.host_output_bytes
            } else {
                &mut t.output_bytes
            } += a.size;
        }
        if a.is_preallocated_temp() {
            *if host {
                &mut t.host_temp_bytes
            } else {
                &mut t.temp_bytes
            } += a.size;
        }
        if a.constant {
            t.constant_bytes += a.size;
        }
        if a.thread_local {
            t.thread_local_bytes += a.size;
        }
    }
    t
}

/// One buffer live at the module's peak.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct PeakBuffer {
    /// Defining HLO instruction.
    pub instruction: String,
    /// Shape index (`{}`, `{0}`).
    pub index: String,
    /// Bytes.
    pub bytes: u64,
    /// Shape with layout.
    pub shape: String,
    /// Allocation index, when the buffer assignment has it.
    pub allocation: Option<u64>,
    /// `parameter`, `parameter+output`, `output`, `temp`, `constant`, `thread-local`.
    pub allocation_kind: String,
    /// Offset inside the allocation.
    pub offset: Option<u64>,
    /// HLO opcode.
    pub opcode: String,
    /// Fusion kind for fusions.
    pub fusion_kind: Option<String>,
    /// Report category (`param`, `loop_add_fusion`, `copy`, ...).
    pub category: String,
    /// Framework op name from metadata.
    pub op_name: Option<String>,
    /// `file:line` of the framework source, when known.
    pub source: Option<String>,
}

/// Bytes of the peak attributed to one key.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Group {
    /// Allocation kind, category or op name.
    pub key: String,
    /// Bytes.
    pub bytes: u64,
    /// Number of buffers.
    pub count: u64,
}

/// The full report for one module.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ModuleReport {
    /// Normalised module name (`jit_f`).
    pub name: String,
    /// The dump's numeric module id.
    pub id: Option<u64>,
    /// Platform tag from the file name (`sm_9.0a_gpu`, `cpu`).
    pub platform: String,
    /// Path of the buffer-assignment file.
    pub file: String,
    /// `argument_size_in_bytes`.
    pub argument_bytes: u64,
    /// `output_size_in_bytes`.
    pub output_bytes: u64,
    /// `temp_size_in_bytes`.
    pub temp_bytes: u64,
    /// `alias_size_in_bytes`.
    pub alias_bytes: u64,
    /// `total_allocation_bytes`.
    pub total_allocation_bytes: u64,
    /// Every memory_analysis() field, host twins included.
    pub totals: MemoryTotals,
    /// `Total bytes used` of the values/usage report, when present (cross-check).
    pub dump_total_bytes: Option<u64>,
    /// Bytes live at the peak (XLA's live-range accounting); `None` without a live-range file.
    pub peak_bytes: Option<u64>,
    /// Schedule step of the peak.
    pub peak_time: Option<u64>,
    /// Buffers live at the peak, largest first.
    pub peak_buffers: Vec<PeakBuffer>,
    /// Peak bytes by allocation kind.
    pub by_allocation_kind: Vec<Group>,
    /// Peak bytes by op category.
    pub by_category: Vec<Group>,
    /// Peak bytes by framework op name.
    pub by_op_name: Vec<Group>,
    /// Most bytes ever live at once inside the preallocated temp allocation(s).
    pub temp_live_peak_bytes: Option<u64>,
    /// Temp allocation bytes never live at once (heap fragmentation/padding).
    pub temp_fragmentation_bytes: Option<u64>,
    /// Largest temp values overall (what the temp buffer holds), largest first.
    pub top_temp_values: Vec<PeakBuffer>,
    /// What each output of an execution is (ENTRY ROOT element, its `op_name`), from the
    /// HLO; empty without it (and in reports stored before this field).
    #[serde(default)]
    pub outputs: Vec<super::OutputValue>,
}

impl ModuleReport {
    /// Peak bytes per op category, the figure `xla diff` compares.
    pub fn category_bytes(&self) -> HashMap<&str, u64> {
        self.by_category
            .iter()
            .map(|g| (g.key.as_str(), g.bytes))
            .collect()
    }
}

/// Inputs for [`build_report`].
pub struct ReportInputs<'a> {
    /// Normalised name (overridden by the HLO module name when the HLO is present).
    pub name: String,
    /// Numeric id.
    pub id: Option<u64>,
    /// Platform tag.
    pub platform: String,
    /// Buffer-assignment path as text.
    pub file: String,
    /// Parsed buffer assignment.
    pub ba: &'a BufferAssignment,
    /// Parsed HLO, if found.
    pub hlo: Option<&'a HloModule>,
    /// Parsed live ranges, if found.
    pub live: Option<&'a LiveRanges>,
    /// `Total bytes used`, if found.
    pub dump_total_bytes: Option<u64>,
}

fn describe(
    key_instr: &str,
    index: &str,
    bytes: u64,
    located: Option<(u64, &str, &AssignedValue)>,
    hlo: Option<&HloModule>,
) -> PeakBuffer {
    let instr = hlo.and_then(|h| h.instructions.get(key_instr));
    PeakBuffer {
        instruction: key_instr.to_string(),
        index: index.to_string(),
        bytes,
        shape: located
            .map(|(_, _, v)| v.shape.clone())
            .or_else(|| instr.map(|i| i.shape.clone()))
            .unwrap_or_default(),
        allocation: located.map(|(a, _, _)| a),
        allocation_kind: located
            .map(|(_, k, _)| k)
            .unwrap_or("unassigned")
            .to_string(),
        offset: located.map(|(_, _, v)| v.offset),
        opcode: instr.map(|i| i.opcode.clone()).unwrap_or_default(),
        fusion_kind: instr.and_then(|i| i.fusion_kind.clone()),
        category: match instr {
            Some(i) => i.category(key_instr),
            None => super::text::strip_numeric_suffix(key_instr).to_string(),
        },
        op_name: instr.and_then(|i| i.op_name.clone()),
        source: instr.and_then(|i| {
            i.source_file
                .as_ref()
                .map(|f| format!("{f}:{}", i.source_line.unwrap_or(0)))
        }),
    }
}

fn split_key(key: &str) -> (&str, &str) {
    match key.find('{') {
        Some(p) if key.ends_with('}') => (&key[..p], &key[p..]),
        _ => (key, "{}"),
    }
}

/// Sweeps live ranges, counting each distinct (allocation, offset, size) slice once while
/// any value in it is live. Returns (peak bytes, first step reaching it).
type RangeMap<'a> = HashMap<(&'a str, &'a str), (u64, u64)>;

fn range_map(live: &LiveRanges) -> RangeMap<'_> {
    live.ranges
        .iter()
        .map(|(k, s, e)| (split_key(k), (*s, *e)))
        .collect()
}

fn simulate<'v>(
    values: impl Iterator<Item = (&'v AssignedValue, u64)>,
    ranges: &RangeMap<'_>,
) -> Option<(u64, u64)> {
    let mut events: Vec<(u64, bool, (u64, u64, u64))> = Vec::new();
    for (v, alloc) in values {
        if let Some(&(s, e)) = ranges.get(&(v.instruction.as_str(), v.index.as_str())) {
            let slice = (alloc, v.offset, v.size);
            events.push((s, true, slice));
            events.push((e.saturating_add(1), false, slice));
        }
    }
    if events.is_empty() {
        return None;
    }
    // Frees before allocations at the same step.
    events.sort_by_key(|&(t, is_alloc, _)| (t, is_alloc));
    let mut refs: HashMap<(u64, u64, u64), u32> = HashMap::default();
    let (mut live, mut peak, mut peak_t) = (0u64, 0u64, 0u64);
    let mut i = 0;
    while i < events.len() {
        let t = events[i].0;
        while i < events.len() && events[i].0 == t {
            let (_, is_alloc, slice) = events[i];
            let r = refs.entry(slice).or_insert(0);
            if is_alloc {
                if *r == 0 {
                    live += slice.2;
                }
                *r += 1;
            } else {
                *r = r.saturating_sub(1);
                if *r == 0 {
                    live = live.saturating_sub(slice.2);
                }
            }
            i += 1;
        }
        if live > peak {
            peak = live;
            peak_t = t;
        }
    }
    Some((peak, peak_t))
}

fn group(buffers: &[PeakBuffer], key: impl Fn(&PeakBuffer) -> String) -> Vec<Group> {
    let mut m: HashMap<String, (u64, u64)> = HashMap::default();
    for b in buffers {
        let e = m.entry(key(b)).or_insert((0, 0));
        e.0 += b.bytes;
        e.1 += 1;
    }
    let mut v: Vec<Group> = m
        .into_iter()
        .map(|(key, (bytes, count))| Group { key, bytes, count })
        .collect();
    v.sort_by(|a, b| b.bytes.cmp(&a.bytes).then_with(|| a.key.cmp(&b.key)));
    v
}

/// Builds the module report from parsed files.
pub fn build_report(inp: ReportInputs<'_>) -> ModuleReport {
    let totals = memory_totals(inp.ba);
    let mut by_key: HashMap<(&str, &str), (u64, &str, &AssignedValue)> = HashMap::default();
    for a in &inp.ba.allocations {
        for v in &a.values {
            by_key.insert(
                (v.instruction.as_str(), v.index.as_str()),
                (a.index, a.kind(), v),
            );
        }
    }
    let locate = |key: &str| by_key.get(&split_key(key)).map(|&(a, k, v)| (a, k, v));
    let locate_v = |v: &AssignedValue| {
        by_key
            .get(&(v.instruction.as_str(), v.index.as_str()))
            .map(|&(a, k, v)| (a, k, v))
    };

    let mut peak_bytes = None;
    let mut peak_time = None;
    let mut peak_buffers = Vec::new();
    let mut temp_live_peak = None;
    if let Some(live) = inp.live {
        let ranges = range_map(live);
        if !live.peak_buffers.is_empty() {
            // XLA's own answer: the list printed under `Live ranges at T (peak)`.
            peak_time = live.peak_time;
            peak_bytes = Some(live.peak_buffers.iter().map(|(_, b)| b).sum());
            for (key, bytes) in &live.peak_buffers {
                let (instr, index) = split_key(key);
                peak_buffers.push(describe(instr, index, *bytes, locate(key), inp.hlo));
            }
        } else if let Some((bytes, t)) = simulate(
            inp.ba
                .allocations
                .iter()
                .filter(|a| !a.thread_local)
                .flat_map(|a| a.values.iter().map(move |v| (v, a.index))),
            &ranges,
        ) {
            peak_bytes = Some(bytes);
            peak_time = Some(t);
            for a in inp.ba.allocations.iter().filter(|a| !a.thread_local) {
                for v in &a.values {
                    if let Some(&(s, e)) = ranges.get(&(v.instruction.as_str(), v.index.as_str())) {
                        if s <= t && t <= e {
                            peak_buffers.push(describe(
                                &v.instruction,
                                &v.index,
                                v.size,
                                locate_v(v),
                                inp.hlo,
                            ));
                        }
                    }
                }
            }
        }
        temp_live_peak = simulate(
            inp.ba
                .allocations
                .iter()
                .filter(|a| a.is_preallocated_temp())
                .flat_map(|a| a.values.iter().map(move |v| (v, a.index))),
            &ranges,
        )
        .map(|(b, _)| b);
    }
    peak_buffers.sort_by(|a, b| {
        b.bytes
            .cmp(&a.bytes)
            .then_with(|| a.instruction.cmp(&b.instruction))
    });

    let mut temp_refs: Vec<&AssignedValue> = inp
        .ba
        .allocations
        .iter()
        .filter(|a| a.is_preallocated_temp())
        .flat_map(|a| a.values.iter())
        .filter(|v| !v.shape.starts_with('('))
        .collect();
    temp_refs.sort_by(|a, b| {
        b.size
            .cmp(&a.size)
            .then_with(|| a.instruction.cmp(&b.instruction))
    });
    let top_temp_values: Vec<PeakBuffer> = temp_refs
        .iter()
        .take(TOP_TEMP_VALUES)
        .map(|v| describe(&v.instruction, &v.index, v.size, locate_v(v), inp.hlo))
        .collect();

    let name = inp
        .hlo
        .map(|h| h.name.clone())
        .filter(|n| !n.is_empty())
        .unwrap_or(inp.name);
    ModuleReport {
        name,
        id: inp.id,
        platform: inp.platform,
        file: inp.file,
        argument_bytes: totals.argument_bytes,
        output_bytes: totals.output_bytes,
        temp_bytes: totals.temp_bytes,
        alias_bytes: totals.alias_bytes,
        total_allocation_bytes: totals.total_allocation_bytes,
        dump_total_bytes: inp.dump_total_bytes,
        peak_bytes,
        peak_time,
        by_allocation_kind: group(&peak_buffers, |b| b.allocation_kind.clone()),
        by_category: group(&peak_buffers, |b| b.category.clone()),
        by_op_name: group(&peak_buffers, |b| {
            b.op_name
                .clone()
                .unwrap_or_else(|| "(no op_name)".to_string())
        }),
        temp_live_peak_bytes: temp_live_peak,
        temp_fragmentation_bytes: temp_live_peak
            .map(|p| (totals.temp_bytes + totals.host_temp_bytes).saturating_sub(p)),
        peak_buffers,
        top_temp_values,
        outputs: inp.hlo.map(super::entry_outputs).unwrap_or_default(),
        totals,
    }
}

/// Names of the HLO instructions a report will describe (the buffers at the peak and the
/// largest temp values), so the HLO file can be parsed keeping only those.
pub fn instructions_needed(
    ba: &BufferAssignment,
    live: Option<&LiveRanges>,
) -> foldhash::HashSet<String> {
    let mut out = foldhash::HashSet::default();
    if let Some(live) = live {
        if !live.peak_buffers.is_empty() {
            for (k, _) in &live.peak_buffers {
                out.insert(split_key(k).0.to_string());
            }
        } else if let Some((_, t)) = simulated_peak(ba, live) {
            let ranges = range_map(live);
            for a in ba.allocations.iter().filter(|a| !a.thread_local) {
                for v in &a.values {
                    if let Some(&(s, e)) = ranges.get(&(v.instruction.as_str(), v.index.as_str())) {
                        if s <= t && t <= e {
                            out.insert(v.instruction.clone());
                        }
                    }
                }
            }
        }
    }
    let mut temp_refs: Vec<&AssignedValue> = ba
        .allocations
        .iter()
        .filter(|a| a.is_preallocated_temp())
        .flat_map(|a| a.values.iter())
        .filter(|v| !v.shape.starts_with('('))
        .collect();
    temp_refs.sort_by(|a, b| {
        b.size
            .cmp(&a.size)
            .then_with(|| a.instruction.cmp(&b.instruction))
    });
    for v in temp_refs.iter().take(TOP_TEMP_VALUES) {
        out.insert(v.instruction.clone());
    }
    out
}

/// How many of the largest temp values a report lists.
pub const TOP_TEMP_VALUES: usize = 64;

/// Our own sweep over the live ranges (each distinct allocation slice counted while any
/// value in it is live). Used only when the live-range file prints no peak list; it counts
/// short-lived workspace buffers that XLA's printed `HloLiveRange` peak omits, so it can
/// be higher than XLA's figure.
pub fn simulated_peak(ba: &BufferAssignment, live: &LiveRanges) -> Option<(u64, u64)> {
    let ranges = range_map(live);
    simulate(
        ba.allocations
            .iter()
            .filter(|a| !a.thread_local)
            .flat_map(|a| a.values.iter().map(move |v| (v, a.index))),
        &ranges,
    )
}
