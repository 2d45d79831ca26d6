//! "What was live at" inside the pool: the PJRT buffers (`jax.Array` storage) of a device
//! live at an instant, grouped by the executable that produced them and, where an
//! attached XLA dump has that executable's module, by the HLO value each output is
//! (`op_name`, instruction): output `i` of an execution is the module's output `i`
//! (`memwatch_analysis::xla::OutputValue`), joined to the executable by
//! `memwatch_analysis::runtime::find_module`. An output whose size differs from the
//! dump's says so instead of borrowing a name.

use std::collections::BTreeMap;

use memwatch_analysis::runtime::{find_module, ExecutableSummary};
use memwatch_analysis::xla::{ModuleReport, OutputValue};
use memwatch_wire::Api;
use serde::Serialize;

use crate::db::{Store, StoreError};

/// Live framework buffers of one producer: an executable, host transfers or device
/// copies.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct LiveAt {
    pub executable: String,
    /// The attached dump's module joined to the executable; "" when none.
    pub module: String,
    pub bytes: i64,
    pub count: i64,
    /// Whether the producer is an executable (its outputs have HLO values).
    pub executable_output: bool,
    /// By HLO value (only for an executable with a joined module), largest first.
    pub values: Vec<LiveValue>,
}

/// Live outputs of one executable that are one framework op's values.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct LiveValue {
    /// The framework op (`jit(update)/mul`), "argument N passed through", or what is
    /// known when neither is (`output 3`, a size that differs from the dump's).
    pub op_name: String,
    /// The instructions the module's ROOT names for them, with their output indices.
    pub instructions: Vec<String>,
    pub bytes: i64,
    pub count: i64,
}

#[derive(sqlx::FromRow)]
struct LiveRow {
    pid: i64,
    api: i64,
    producer: i64,
    output_index: Option<i64>,
    bytes: i64,
    count: i64,
    min_size: i64,
    max_size: i64,
}

/// PJRT buffers of `device` live at `at_abs` (monotonic ns), largest producer first.
pub(crate) async fn live_buffers_at(
    store: &Store,
    run: i64,
    device: i64,
    at_abs: i64,
) -> Result<Vec<LiveAt>, StoreError> {
    let rows: Vec<LiveRow> = sqlx::query_as(
        "SELECT pid, api, producer, output_index, CAST(SUM(size) AS BIGINT) AS bytes, \
         COUNT(*) AS count, MIN(size) AS min_size, MAX(size) AS max_size FROM pjrt_buffers \
         WHERE run_id = $1 AND device = $2 AND ts_ns <= $3 AND (freed_ts_ns IS NULL OR freed_ts_ns > $3) \
         GROUP BY pid, api, producer, output_index",
    )
    .bind(run)
    .bind(device)
    .bind(at_abs)
    .fetch_all(&store.pool)
    .await?;
    if rows.is_empty() {
        return Ok(Vec::new());
    }
    let exes = crate::runtime::executables(store, run, 0).await?;
    let modules = store.run_modules(run).await?;
    let mut groups: BTreeMap<String, Group> = BTreeMap::new();
    for r in rows {
        let (who, module) = match crate::codes::api(r.api as u16) {
            Api::PjrtExecuteOutput => {
                match exes
                    .iter()
                    .find(|x| i64::from(x.pid) == r.pid && x.handle as i64 == r.producer)
                {
                    Some(x) => (
                        x.name.clone(),
                        find_module(&ExecutableSummary::compiled(x), &modules).map(|(m, _)| m),
                    ),
                    None => (format!("executable {:#x}", r.producer), None),
                }
            }
            Api::PjrtBufferFromHostBuffer => ("host transfer".into(), None),
            _ => ("device copy".into(), None),
        };
        let g = groups.entry(who).or_default();
        g.executable_output |= crate::codes::api(r.api as u16) == Api::PjrtExecuteOutput;
        g.bytes += r.bytes;
        g.count += r.count;
        if let Some(m) = module {
            g.module = m.name.clone();
            let (op, instr) = value_of(m, &r);
            let v = g.values.entry(op).or_default();
            v.0.extend(instr);
            v.1 += r.bytes;
            v.2 += r.count;
        }
    }
    let mut out: Vec<LiveAt> = groups
        .into_iter()
        .map(|(executable, g)| {
            let mut values: Vec<LiveValue> = g
                .values
                .into_iter()
                .map(|(op_name, (instructions, bytes, count))| LiveValue {
                    op_name,
                    instructions,
                    bytes,
                    count,
                })
                .collect();
            values.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(a.op_name.cmp(&b.op_name)));
            LiveAt {
                executable,
                module: g.module,
                bytes: g.bytes,
                count: g.count,
                executable_output: g.executable_output,
                values,
            }
        })
        .collect();
    out.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(a.executable.cmp(&b.executable)));
    Ok(out)
}

#[derive(Default)]
struct Group {
    module: String,
    executable_output: bool,
    bytes: i64,
    count: i64,
    /// op name -> (instructions, bytes, count)
    values: BTreeMap<String, (Vec<String>, i64, i64)>,
}

/// The op name a group of live outputs of module `m` is filed under, and the
/// instruction it names (`instr [output i]`).
fn value_of(m: &ModuleReport, r: &LiveRow) -> (String, Option<String>) {
    let Some(i) = r.output_index else {
        return (
            "output not recorded (stored before output indices)".into(),
            None,
        );
    };
    let Some(v) = m.outputs.iter().find(|o| i64::from(o.index) == i) else {
        return (
            format!("output {i} (the dump's module has {})", m.outputs.len()),
            None,
        );
    };
    let instr = Some(format!("{} [output {i}]", v.instruction));
    let sizes_agree = v
        .bytes
        .is_some_and(|b| b as i64 == r.min_size && r.min_size == r.max_size);
    if !sizes_agree {
        return (
            format!(
                "output {i}: {} bytes here, {} in the dump",
                r.max_size,
                v.bytes
                    .map_or_else(|| "unknown".to_string(), |b| b.to_string())
            ),
            instr,
        );
    }
    (label(v), instr)
}

/// How an output of the dump is named: its op, or the argument it passes through.
fn label(v: &OutputValue) -> String {
    match (v.parameter, &v.op_name) {
        (Some(p), Some(n)) => format!("argument {p} ({n}) passed through"),
        (Some(p), None) => format!("argument {p} passed through"),
        (None, Some(n)) => n.clone(),
        (None, None) => format!("{} (no op_name)", v.instruction),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// jit_update of the real H100 leak run: two f32[4096,4096] outputs.
    fn jit_update() -> ModuleReport {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../testdata/oom-corpus/jax_leak_bfc/dump");
        memwatch_analysis::xla::load_dump_dir(&dir)
            .expect("the recorded dump")
            .into_iter()
            .find(|m| m.name == "jit_update")
            .expect("jit_update")
    }

    fn row(output_index: Option<i64>, min_size: i64, max_size: i64) -> LiveRow {
        LiveRow {
            pid: 1,
            api: 0,
            producer: 1,
            output_index,
            bytes: min_size + max_size,
            count: 2,
            min_size,
            max_size,
        }
    }

    #[test]
    fn an_output_is_named_only_when_its_index_and_size_agree_with_the_dump() {
        let m = jit_update();
        let mib64 = 64 << 20;
        assert_eq!(
            value_of(&m, &row(Some(0), mib64, mib64)),
            (
                "jit(update)/add".to_string(),
                Some("loop_add_multiply_fusion#1 [output 0]".to_string())
            )
        );
        assert_eq!(
            value_of(&m, &row(None, mib64, mib64)),
            (
                "output not recorded (stored before output indices)".to_string(),
                None
            )
        );
        assert_eq!(
            value_of(&m, &row(Some(5), mib64, mib64)),
            ("output 5 (the dump's module has 2)".to_string(), None)
        );
        // A buffer of another size than the dump's output (another compile of the same
        // name, or a wrong index): said, not named.
        let (op, instr) = value_of(&m, &row(Some(1), mib64, mib64 + 4096));
        assert_eq!(
            op,
            format!("output 1: {} bytes here, {mib64} in the dump", mib64 + 4096)
        );
        assert_eq!(
            instr.as_deref(),
            Some("loop_add_multiply_fusion#0 [output 1]")
        );
    }
}
