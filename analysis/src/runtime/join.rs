//! The join of an executable to its module of an XLA dump: by name (normalised:
//! `jit_mlp`, `jit(mlp)` and `pjit_mlp` are one), among several modules of that name the
//! one whose argument/output/temp bytes equal the executable's compiled statistics. Adds
//! the joined module's peak make-up to a runtime report's peaks and OOM incidents.

use std::collections::HashMap;

use super::report::{DumpJoin, ExecutableSummary, RuntimeReport};
use crate::xla::ModuleReport;

/// `jit_mlp`, `jit(mlp)`, `pjit_mlp`, `jit__mlp` ... -> comparable key.
pub fn normalise(name: &str) -> String {
    name.chars()
        .filter(|c| c.is_ascii_alphanumeric())
        .collect::<String>()
        .to_ascii_lowercase()
        .trim_start_matches("pjit")
        .trim_start_matches("jit")
        .to_string()
}

/// Finds `exe`'s module among `mods`: same normalised name; among several, the one whose
/// argument/output/temp bytes equal the compiled statistics.
pub fn find_module<'a>(
    exe: &ExecutableSummary,
    mods: &'a [ModuleReport],
) -> Option<(&'a ModuleReport, &'static str)> {
    let key = normalise(&exe.name);
    let same: Vec<&ModuleReport> = mods.iter().filter(|m| normalise(&m.name) == key).collect();
    let stats_match = |m: &&&ModuleReport| {
        exe.temp_bytes == Some(m.temp_bytes)
            && exe.argument_bytes == Some(m.argument_bytes)
            && exe.output_bytes == Some(m.output_bytes)
    };
    if let Some(m) = same.iter().find(stats_match) {
        return Some((m, "name+stats"));
    }
    same.last().map(|m| (*m, "name"))
}

fn join(exe: &ExecutableSummary, mods: &[ModuleReport], top: usize) -> Option<DumpJoin> {
    let (m, how) = find_module(exe, mods)?;
    Some(DumpJoin {
        module: m.name.clone(),
        file: m.file.clone(),
        matched_by: how.to_string(),
        argument_bytes: m.argument_bytes,
        output_bytes: m.output_bytes,
        temp_bytes: m.temp_bytes,
        peak_buffers: m.peak_buffers.iter().take(top).cloned().collect(),
        by_op_name: m.by_op_name.iter().take(top).cloned().collect(),
        by_category: m.by_category.clone(),
    })
}

/// Adds the dump join to every peak and OOM of `report`. Each executable is joined once
/// (a run's thousands of failed executes of one executable share its join).
pub fn join_dump(report: &mut RuntimeReport, mods: &[ModuleReport], top: usize) {
    for p in &mut report.processes {
        // The first executable of each handle, as a search in order finds it.
        let mut first: HashMap<u64, usize> = HashMap::new();
        for (i, x) in p.executables.iter().enumerate() {
            first.entry(x.handle).or_insert(i);
        }
        let mut joined: HashMap<u64, Option<DumpJoin>> = HashMap::new();
        let exes = &p.executables;
        let mut of = |h: u64| -> Option<DumpJoin> {
            joined
                .entry(h)
                .or_insert_with(|| first.get(&h).and_then(|&i| join(&exes[i], mods, top)))
                .clone()
        };
        for d in &mut p.devices {
            if let Some(peak) = &mut d.peak {
                let main = peak
                    .running
                    .iter()
                    .max_by_key(|r| (r.temp_bytes.unwrap_or(0), r.start_ns))
                    .map(|r| r.handle);
                peak.xla = main.and_then(&mut of);
            }
        }
        for o in &mut p.ooms {
            o.xla = of(o.handle);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_normalise() {
        assert_eq!(normalise("jit_mlp"), "mlp");
        assert_eq!(normalise("jit(mlp)"), "mlp");
        assert_eq!(normalise("pjit_mlp"), "mlp");
        assert_ne!(normalise("jit_mlp"), normalise("jit_padf"));
    }
}
