//! Gate entries from XLA dump directories, through the XLA analysis API
//! ([`crate::xla::load_path`]): one entry per module, keyed by the normalised module name
//! (`jit_train_step`; a name compiled twice in one dump becomes `jit_f#2`, … in module-id
//! order). Figures: argument/output/temp/alias/host_temp exactly as `memory_analysis()`,
//! `total` = argument + output + temp − alias, `peak` = bytes live at the module's peak
//! (from the live-range file). Per-op figures: the peak bytes by framework `op_name`
//! (by op category when the HLO carries no op names). Owns this mapping only.

use crate::gate::entry::{disambiguate, GateEntry, OpBytes};
use crate::gate::error::GateError;
use crate::gate::metric::Metric;
use crate::xla::{self, ModuleReport};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Converts module reports (in dump order) to gate entries.
pub fn entries_from_reports(reports: &[ModuleReport], origin: &Path) -> Vec<GateEntry> {
    let mut keys: Vec<String> = reports.iter().map(|r| r.name.clone()).collect();
    disambiguate(&mut keys);
    reports
        .iter()
        .zip(keys)
        .map(|(r, key)| {
            let mut metrics = BTreeMap::new();
            metrics.insert(Metric::Argument, r.argument_bytes);
            metrics.insert(Metric::Output, r.output_bytes);
            metrics.insert(Metric::Temp, r.temp_bytes);
            metrics.insert(Metric::Alias, r.alias_bytes);
            metrics.insert(Metric::HostTemp, r.totals.host_temp_bytes);
            if let Some(p) = r.peak_bytes {
                metrics.insert(Metric::Peak, p);
            }
            let groups = if r.by_op_name.is_empty() {
                &r.by_category
            } else {
                &r.by_op_name
            };
            let mut top_ops: Vec<OpBytes> = groups
                .iter()
                .map(|g| OpBytes {
                    name: g.key.clone(),
                    bytes: g.bytes,
                })
                .collect();
            top_ops.sort_by(|a, b| b.bytes.cmp(&a.bytes).then_with(|| a.name.cmp(&b.name)));
            let mut e = GateEntry {
                key,
                source: format!("xla-dump:{}", origin.display()),
                metrics,
                top_ops,
                doubt: None,
            };
            e.fill_total();
            e
        })
        .collect()
}

/// Called with (modules loaded, modules in total) as a dump loads.
pub type Progress<'a> = &'a (dyn Fn(usize, usize) + Sync);

/// Loads the modules of a dump directory on every available core (module order kept).
fn load_dir_parallel(
    dir: &Path,
    progress: Progress<'_>,
) -> Result<Vec<ModuleReport>, xla::XlaError> {
    let modules = xla::list_modules(dir)?;
    if modules.is_empty() {
        // Let the XLA API produce its "no modules here" error.
        return xla::load_dump_dir(dir);
    }
    let total = modules.len();
    let done = AtomicUsize::new(0);
    let load_one = |m: &xla::dump::ModuleFiles| {
        let r = xla::load_module(m);
        progress(done.fetch_add(1, Ordering::Relaxed) + 1, total);
        r
    };
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(modules.len());
    let chunk = modules.len().div_ceil(threads);
    let results: Vec<Result<Vec<ModuleReport>, xla::XlaError>> = std::thread::scope(|scope| {
        let handles: Vec<_> = modules
            .chunks(chunk)
            .map(|part| scope.spawn(|| part.iter().map(load_one).collect()))
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
            })
            .collect()
    });
    let mut out = Vec::with_capacity(modules.len());
    for r in results {
        out.extend(r?);
    }
    Ok(out)
}

/// Loads a dump directory (or one module's file) and converts it.
pub fn load(path: &Path) -> Result<Vec<GateEntry>, GateError> {
    load_with_progress(path, &|_, _| {})
}

/// [`load`], reporting progress per module loaded.
pub fn load_with_progress(
    path: &Path,
    progress: Progress<'_>,
) -> Result<Vec<GateEntry>, GateError> {
    let reports = if path.is_dir() {
        load_dir_parallel(path, progress)
    } else {
        xla::load_path(path)
    };
    let reports = reports.map_err(|e| GateError::Input {
        path: path.to_path_buf(),
        message: format!("cannot read XLA dump: {e}"),
    })?;
    Ok(entries_from_reports(&reports, path))
}
