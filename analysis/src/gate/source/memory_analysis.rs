//! Reads the JSON file written by the `memwatch-jax` Python helper: JAX's
//! `compiled.memory_analysis()` of chosen jitted functions, one entry each.
//!
//! ```json
//! {"format": "memwatch-jax", "version": 1, "jax_version": "0.10.2", "backend": "cpu",
//!  "entries": [{"name": "jit_train_step", "module": "jit_train_step",
//!               "memory_analysis": {"argument_size_in_bytes": 123, "temp_size_in_bytes": 456, ...}}]}
//! ```
//! Attribute names are JAX's own; unknown attributes are ignored (newer JAX versions add
//! some), the four core sizes are required. Owns this format only.

use crate::gate::entry::GateEntry;
use crate::gate::error::GateError;
use crate::gate::metric::Metric;
use serde::Deserialize;
use std::collections::{BTreeMap, HashSet};
use std::path::Path;

/// The `format` value of memwatch-jax files.
pub const FORMAT: &str = "memwatch-jax";
/// The newest `version` this build reads.
pub const VERSION: u32 = 1;

#[derive(Deserialize)]
struct File {
    format: Option<String>,
    version: Option<u32>,
    entries: Vec<RawEntry>,
}

#[derive(Deserialize)]
struct RawEntry {
    name: String,
    memory_analysis: Analysis,
}

#[derive(Deserialize)]
struct Analysis {
    argument_size_in_bytes: Option<u64>,
    output_size_in_bytes: Option<u64>,
    alias_size_in_bytes: Option<u64>,
    temp_size_in_bytes: Option<u64>,
    #[serde(default)]
    host_temp_size_in_bytes: Option<u64>,
    #[serde(default)]
    generated_code_size_in_bytes: Option<u64>,
    #[serde(default)]
    peak_memory_in_bytes: Option<u64>,
}

/// Reads one memwatch-jax file.
pub fn load(path: &Path) -> Result<Vec<GateEntry>, GateError> {
    let text = std::fs::read_to_string(path).map_err(|source| GateError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    parse(&text, path)
}

/// Parses memwatch-jax JSON; `path` names the file in messages and in `source`.
pub fn parse(text: &str, path: &Path) -> Result<Vec<GateEntry>, GateError> {
    let input = |message: String| GateError::Input {
        path: path.to_path_buf(),
        message,
    };
    let file: File = serde_json::from_str(text).map_err(|e| GateError::InputAt {
        path: path.to_path_buf(),
        line: e.line(),
        column: e.column(),
        message: format!("not a memwatch-jax memory-analysis file: {e}"),
    })?;
    if file.format.as_deref() != Some(FORMAT) {
        return Err(input(format!(
            "`format` is {:?}, expected \"{FORMAT}\" (write it with memwatch_jax.MemoryReport)",
            file.format
        )));
    }
    match file.version {
        Some(v) if v <= VERSION && v > 0 => {}
        v => {
            return Err(input(format!(
                "unsupported `version` {v:?} (this memwatch reads 1..={VERSION})"
            )))
        }
    }
    let mut seen = HashSet::new();
    let mut out = Vec::with_capacity(file.entries.len());
    for (i, e) in file.entries.into_iter().enumerate() {
        if e.name.trim().is_empty() {
            return Err(input(format!("entries[{i}]: empty `name`")));
        }
        if !seen.insert(e.name.clone()) {
            return Err(input(format!(
                "entries[{i}]: name `{}` appears twice",
                e.name
            )));
        }
        let a = &e.memory_analysis;
        let required = [
            (
                Metric::Argument,
                a.argument_size_in_bytes,
                "argument_size_in_bytes",
            ),
            (
                Metric::Output,
                a.output_size_in_bytes,
                "output_size_in_bytes",
            ),
            (Metric::Alias, a.alias_size_in_bytes, "alias_size_in_bytes"),
            (Metric::Temp, a.temp_size_in_bytes, "temp_size_in_bytes"),
        ];
        let mut metrics = BTreeMap::new();
        for (m, v, field) in required {
            let v = v.ok_or_else(|| {
                input(format!(
                    "entries[{i}] (`{}`): memory_analysis lacks `{field}`",
                    e.name
                ))
            })?;
            metrics.insert(m, v);
        }
        let optional = [
            (Metric::HostTemp, a.host_temp_size_in_bytes),
            (Metric::GeneratedCode, a.generated_code_size_in_bytes),
            (Metric::Peak, a.peak_memory_in_bytes),
        ];
        for (m, v) in optional {
            if let Some(v) = v {
                metrics.insert(m, v);
            }
        }
        let mut entry = GateEntry {
            key: e.name,
            source: format!("memory-analysis:{}", path.display()),
            metrics,
            top_ops: Vec::new(),
            doubt: None,
        };
        entry.fill_total();
        out.push(entry);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(text: &str) -> Result<Vec<GateEntry>, GateError> {
        parse(text, Path::new("ma.json"))
    }

    #[test]
    fn reads_entries_and_computes_total() {
        let e = p(
            r#"{"format":"memwatch-jax","version":1,"jax_version":"0.10.2","entries":[
            {"name":"jit_f","module":"jit_f","memory_analysis":{"argument_size_in_bytes":10,
             "output_size_in_bytes":20,"alias_size_in_bytes":5,"temp_size_in_bytes":30,
             "host_temp_size_in_bytes":0,"peak_memory_in_bytes":55,"future_field":1}}]}"#,
        )
        .unwrap();
        assert_eq!(e.len(), 1);
        assert_eq!(e[0].key, "jit_f");
        assert_eq!(e[0].metrics[&Metric::Total], 55);
        assert_eq!(e[0].metrics[&Metric::Peak], 55);
        assert_eq!(e[0].source, "memory-analysis:ma.json");
    }

    #[test]
    fn bad_files_name_the_problem() {
        let e = p("{\"format\":\"memwatch-jax\",\n\"version\":1,\"entries\":[{\"name\":\"f\",\"memory_analysis\":{\"temp_size_in_bytes\":-1}}]}").unwrap_err();
        assert!(e.to_string().starts_with("ma.json:2:"), "{e}");
        let e = p(r#"{"format":"other","version":1,"entries":[]}"#).unwrap_err();
        assert!(e.to_string().contains("expected \"memwatch-jax\""), "{e}");
        let e = p(r#"{"format":"memwatch-jax","version":9,"entries":[]}"#).unwrap_err();
        assert!(e.to_string().contains("unsupported `version`"), "{e}");
        let e = p(r#"{"format":"memwatch-jax","version":1,"entries":[{"name":"f","memory_analysis":{"argument_size_in_bytes":1,"output_size_in_bytes":1,"alias_size_in_bytes":0}}]}"#).unwrap_err();
        assert!(e.to_string().contains("lacks `temp_size_in_bytes`"), "{e}");
        let e = p("\u{0}\u{1}garbage").unwrap_err();
        assert!(e.to_string().starts_with("ma.json:1:"), "{e}");
    }
}
