//! Gate entries from a run kept in the daemon's store (`memwatch gate --run ID --db PATH`).
//! The CLI reads the run through the daemon crate's queries and hands this adapter a
//! [`StoredRun`]; the adapter owns only the naming and the mapping to entries.
//!
//! The store keeps one peak per device for a run (all processes together), so there is one
//! entry per device, keyed `<name>/device<D>` like the capture adapter's single-process
//! keys, never with a pid. `<name>` is the name given on the command line (`--run NAME=ID`),
//! else the run's key; an `import:<file>:<content id>` key (what `memwatch import` and
//! `memwatch run --db` choose when no run key is given) becomes the file's stem, so a run
//! imported from `train.mwcap` is keyed like `--capture train.mwcap`.

use crate::gate::entry::GateEntry;
use crate::gate::metric::Metric;
use std::collections::BTreeMap;

/// What the store says about one run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredRun {
    /// The database as given on the command line (path or redacted URL), for messages.
    pub db: String,
    pub run_id: i64,
    /// The run's key in the store.
    pub run_key: String,
    /// `(device ordinal, peak bytes)` per device the run touched.
    pub device_peaks: Vec<(i64, u64)>,
}

/// The entry-name prefix for a stored run: `name` when given, else derived from its key.
pub fn run_name(run_key: &str, name: Option<&str>) -> String {
    if let Some(n) = name {
        return n.to_string();
    }
    if let Some(rest) = run_key.strip_prefix("import:") {
        if let Some((file, id)) = rest.rsplit_once(':') {
            if !file.is_empty() && !id.is_empty() && id.chars().all(|c| c.is_ascii_hexdigit()) {
                let stem = std::path::Path::new(file)
                    .file_stem()
                    .map(|s| s.to_string_lossy().into_owned())
                    .unwrap_or_else(|| file.to_string());
                return stem;
            }
        }
    }
    run_key.to_string()
}

/// One entry per device, metric [`Metric::Peak`], ordered by device. Calls that name no
/// device (-1: address reservations, host-side events) have nothing of a device to gate,
/// as in the capture adapter, so `--run` and `--capture` of the same run give the same keys.
pub fn entries(run: &StoredRun, name: Option<&str>) -> Vec<GateEntry> {
    let prefix = run_name(&run.run_key, name);
    let mut devs: Vec<(i64, u64)> = run
        .device_peaks
        .iter()
        .copied()
        .filter(|(device, _)| *device >= 0)
        .collect();
    devs.sort_unstable();
    devs.into_iter()
        .map(|(device, peak)| GateEntry {
            key: format!("{prefix}/device{device}"),
            source: format!("run {} in {}", run.run_id, run.db),
            metrics: BTreeMap::from([(Metric::Peak, peak)]),
            top_ops: Vec::new(),
            doubt: None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(key: &str) -> StoredRun {
        StoredRun {
            db: "mw.db".into(),
            run_id: 7,
            run_key: key.into(),
            device_peaks: vec![(1, 300), (-1, 0), (0, 100)],
        }
    }

    #[test]
    fn entries_are_keyed_by_name_and_device_without_pid() {
        let e = entries(&run("nightly"), None);
        let keys: Vec<&str> = e.iter().map(|e| e.key.as_str()).collect();
        assert_eq!(keys, ["nightly/device0", "nightly/device1"]);
        assert_eq!(e[1].metrics[&Metric::Peak], 300);
        assert_eq!(e[0].source, "run 7 in mw.db");
    }

    #[test]
    fn given_name_wins_over_run_key() {
        let e = entries(&run("import:a.mwcap:00000001deadbeef"), Some("train"));
        assert_eq!(e[0].key, "train/device0");
    }

    #[test]
    fn import_keys_become_the_file_stem() {
        assert_eq!(
            run_name("import:train.mwcap:00000001deadbeef", None),
            "train"
        );
        // Not the import pattern: kept as is.
        assert_eq!(run_name("import:x", None), "import:x");
        assert_eq!(run_name("import:a.mwcap:zz", None), "import:a.mwcap:zz");
    }
}
