//! The source-neutral input of the gate: one [`GateEntry`] per compiled module or captured
//! process/device, whatever produced it (memwatch-jax JSON, an XLA dump, a capture).
//! Owns key uniqueness across sources; knows nothing about files or baselines.

use super::error::GateError;
use super::metric::Metric;
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};

/// Bytes an op (an HLO instruction or framework op name) holds at its module's peak.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OpBytes {
    pub name: String,
    pub bytes: u64,
}

/// One gated thing and its measured figures.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GateEntry {
    /// Baseline key: the normalised module name (`jit_train_step`), or
    /// `<capture>/pid<P>/device<D>` for captures.
    pub key: String,
    /// Where the figures came from (`memory-analysis:FILE`, `xla-dump:DIR`, …), for messages.
    pub source: String,
    /// The figures this source provides; a source need not provide every metric.
    pub metrics: BTreeMap<Metric, u64>,
    /// Per-op bytes at the peak, largest first (empty when the source has none).
    pub top_ops: Vec<OpBytes>,
    /// Why the figures cannot be trusted, when the source lost data (a damaged capture,
    /// events the shim dropped): such an entry is never judged, only reported.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub doubt: Option<String>,
}

impl GateEntry {
    /// Computes [`Metric::Total`] (`argument + output + temp - alias`) from the figures
    /// present, when argument, output and temp are all there.
    pub fn fill_total(&mut self) {
        let get = |m| self.metrics.get(&m).copied();
        if let (Some(a), Some(o), Some(t)) = (
            get(Metric::Argument),
            get(Metric::Output),
            get(Metric::Temp),
        ) {
            let alias = get(Metric::Alias).unwrap_or(0);
            let total = a.saturating_add(o).saturating_add(t).saturating_sub(alias);
            self.metrics.insert(Metric::Total, total);
        }
    }
}

/// Everything measured in one gate run, keyed uniquely.
#[derive(Debug, Clone, Default)]
pub struct Measurements {
    entries: Vec<GateEntry>,
    index: HashMap<String, usize>,
}

impl Measurements {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds entries from one source; a key measured twice (by two sources, or twice in one
    /// file) is an error naming both sources, never a silent overwrite.
    pub fn extend(&mut self, entries: Vec<GateEntry>) -> Result<(), GateError> {
        for e in entries {
            if let Some(&i) = self.index.get(&e.key) {
                return Err(GateError::DuplicateKey {
                    key: e.key,
                    first: self.entries[i].source.clone(),
                    second: e.source,
                });
            }
            self.index.insert(e.key.clone(), self.entries.len());
            self.entries.push(e);
        }
        Ok(())
    }

    pub fn get(&self, key: &str) -> Option<&GateEntry> {
        self.index.get(key).map(|&i| &self.entries[i])
    }

    pub fn entries(&self) -> &[GateEntry] {
        &self.entries
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }
}

/// Makes keys unique within one source: the second `jit_f` becomes `jit_f#2`, the third
/// `jit_f#3`, in the order given (callers order by the dump's numeric module id, which
/// follows compilation order, so the suffixes are stable between runs of one program).
pub fn disambiguate(keys: &mut [String]) {
    let mut seen: HashMap<String, usize> = HashMap::new();
    for k in keys.iter_mut() {
        let n = seen.entry(k.clone()).or_insert(0);
        *n += 1;
        if *n > 1 {
            *k = format!("{k}#{n}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(key: &str, source: &str) -> GateEntry {
        GateEntry {
            key: key.into(),
            source: source.into(),
            metrics: BTreeMap::new(),
            top_ops: vec![],
            doubt: None,
        }
    }

    #[test]
    fn duplicate_keys_across_sources_are_an_error() {
        let mut m = Measurements::new();
        m.extend(vec![entry("jit_f", "a.json")]).unwrap();
        let e = m.extend(vec![entry("jit_f", "dump/")]).unwrap_err();
        let text = e.to_string();
        assert!(
            text.contains("jit_f") && text.contains("a.json") && text.contains("dump/"),
            "{text}"
        );
    }

    #[test]
    fn repeated_names_get_numbered_suffixes() {
        let mut keys = vec![
            "jit_f".to_string(),
            "jit_g".into(),
            "jit_f".into(),
            "jit_f".into(),
        ];
        disambiguate(&mut keys);
        assert_eq!(keys, ["jit_f", "jit_g", "jit_f#2", "jit_f#3"]);
    }

    #[test]
    fn total_is_argument_output_temp_minus_alias() {
        let mut e = entry("k", "s");
        e.metrics.insert(Metric::Argument, 100);
        e.metrics.insert(Metric::Output, 50);
        e.metrics.insert(Metric::Temp, 30);
        e.metrics.insert(Metric::Alias, 40);
        e.fill_total();
        assert_eq!(e.metrics[&Metric::Total], 140);
    }
}
