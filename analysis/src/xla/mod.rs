//! XLA dump analysis: parsers for the files `XLA_FLAGS=--xla_dump_to=DIR
//! --xla_dump_hlo_as_text` writes per module, and the per-module memory report
//! (`memwatch xla report|diff`). This module owns loading a dump directory or file into
//! [`ModuleReport`]s; parsing lives in one file per format, computation in `report`,
//! comparison in `diff`. Nothing here prints.
//!
//! Stable API (other crates build on it): [`load_dump_dir`], [`load_path`],
//! [`ModuleReport`], [`MemoryTotals`], [`PeakBuffer`], [`Group`], [`diff::diff_reports`].

pub mod buffer_assignment;
pub mod diff;
pub mod dump;
pub mod hlo;
pub mod live_range;
pub mod outputs;
pub mod report;
pub mod text;
pub mod usage_report;

pub use outputs::{entry_outputs, OutputValue};
pub use report::{build_report, memory_totals, Group, MemoryTotals, ModuleReport, PeakBuffer};
pub use text::ParseError;

use std::fs::File;
use std::io::BufReader;
use std::path::{Path, PathBuf};

/// Errors loading a dump.
#[derive(Debug, thiserror::Error)]
pub enum XlaError {
    /// A file did not parse (names file and line).
    #[error(transparent)]
    Parse(#[from] ParseError),
    /// A file or directory could not be read.
    #[error("{}: {source}", path.display())]
    Io {
        /// The path.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// A file disagrees with another file of the same module.
    #[error("{}: {msg}", path.display())]
    Mismatch {
        /// The file found wrong.
        path: PathBuf,
        /// What disagrees, naming the other file.
        msg: String,
    },
    /// The path holds no module.
    #[error("{}: {msg}", path.display())]
    NoModules {
        /// The path.
        path: PathBuf,
        /// What was expected.
        msg: String,
    },
}

fn open(path: &Path) -> Result<BufReader<File>, XlaError> {
    File::open(path)
        .map(|f| BufReader::with_capacity(1 << 16, f))
        .map_err(|source| XlaError::Io {
            path: path.to_path_buf(),
            source,
        })
}

/// Loads one module from its buffer-assignment file plus whichever sibling files exist
/// (HLO, live ranges, values).
pub fn load_module(files: &dump::ModuleFiles) -> Result<ModuleReport, XlaError> {
    let ba = buffer_assignment::parse_buffer_assignment(
        open(&files.buffer_assignment)?,
        &files.buffer_assignment,
    )?;
    let live = if files.live_range.is_file() {
        Some(live_range::parse_live_range(
            open(&files.live_range)?,
            &files.live_range,
        )?)
    } else {
        None
    };
    if let Some(live) = &live {
        check_every_range_is_assigned(&ba, live, files)?;
    }
    // Keep only the HLO instructions the report describes: bounded memory on huge dumps.
    let keep = report::instructions_needed(&ba, live.as_ref());
    let hlo = if files.hlo.is_file() {
        Some(hlo::parse_hlo_filtered(
            open(&files.hlo)?,
            &files.hlo,
            Some(&keep),
        )?)
    } else {
        None
    };
    let dump_total_bytes = if files.values.is_file() {
        Some(live_range::parse_total_bytes(
            open(&files.values)?,
            &files.values,
        )?)
    } else {
        None
    };
    // The usage report is validated (any malformed line is an error naming it); its
    // integer `Total bytes` stands in when the values file is missing.
    let usage_total = if files.memory_usage_report.is_file() {
        let spaces = usage_report::parse_usage_report(
            open(&files.memory_usage_report)?,
            &files.memory_usage_report,
        )?;
        Some(spaces.iter().map(|s| s.total_bytes).sum::<u64>())
    } else {
        None
    };
    // Both of those files print the sum of the allocation sizes; a buffer assignment that
    // adds up to something else is cut off (or from another compilation), and every figure
    // taken from it would be wrong.
    let totals = [
        (&files.values, dump_total_bytes),
        (&files.memory_usage_report, usage_total),
    ];
    for (other, total) in totals {
        if let Some(total) = total.filter(|t| *t != ba.total_bytes) {
            return Err(XlaError::Mismatch {
                path: files.buffer_assignment.clone(),
                msg: format!(
                    "its allocations add up to {} bytes but {} says {total}: the file is cut off or from another compilation",
                    ba.total_bytes,
                    other.display()
                ),
            });
        }
    }
    let dump_total_bytes = dump_total_bytes.or(usage_total);
    Ok(build_report(report::ReportInputs {
        name: files.name.clone(),
        id: files.id,
        platform: files.platform.clone(),
        file: files.buffer_assignment.display().to_string(),
        ba: &ba,
        hlo: hlo.as_ref(),
        live: live.as_ref(),
        dump_total_bytes,
    }))
}

/// XLA assigns every value that has a live range to an allocation, so a range whose value
/// the buffer assignment lacks means that file lost lines at its end (where the sizes
/// still add up, e.g. inside the last allocation's value list) or belongs to another
/// compilation.
fn check_every_range_is_assigned(
    ba: &buffer_assignment::BufferAssignment,
    live: &live_range::LiveRanges,
    files: &dump::ModuleFiles,
) -> Result<(), XlaError> {
    let assigned: std::collections::HashSet<String> = ba
        .allocations
        .iter()
        .flat_map(|a| a.values.iter().map(|v| v.key()))
        .collect();
    match live.ranges.iter().find(|(k, _, _)| !assigned.contains(k)) {
        None => Ok(()),
        Some((k, _, _)) => Err(XlaError::Mismatch {
            path: files.buffer_assignment.clone(),
            msg: format!(
                "value {k} has a live range in {} but no allocation here: the file is cut off or from another compilation",
                files.live_range.display()
            ),
        }),
    }
}

/// Lists the modules of a dump directory (every `*-buffer-assignment.txt`), sorted by
/// numeric id then name.
pub fn list_modules(dir: &Path) -> Result<Vec<dump::ModuleFiles>, XlaError> {
    let rd = std::fs::read_dir(dir).map_err(|source| XlaError::Io {
        path: dir.to_path_buf(),
        source,
    })?;
    let mut out = Vec::new();
    for entry in rd {
        let entry = entry.map_err(|source| XlaError::Io {
            path: dir.to_path_buf(),
            source,
        })?;
        if let Some(m) = dump::module_files(&entry.path()) {
            out.push(m);
        }
    }
    out.sort_by(|a, b| a.id.cmp(&b.id).then_with(|| a.name.cmp(&b.name)));
    Ok(out)
}

/// Loads every module of a dump directory. An empty directory (no
/// `*-buffer-assignment.txt`) is an error.
pub fn load_dump_dir(dir: &Path) -> Result<Vec<ModuleReport>, XlaError> {
    let mods = list_modules(dir)?;
    if mods.is_empty() {
        return Err(XlaError::NoModules {
            path: dir.to_path_buf(),
            msg: format!(
                "no XLA dump modules here (no *{}; dump with XLA_FLAGS=--xla_dump_to=DIR --xla_dump_hlo_as_text)",
                dump::BUFFER_ASSIGNMENT_SUFFIX
            ),
        });
    }
    mods.iter().map(load_module).collect()
}

/// Loads a dump directory, or one module given any one of its files.
pub fn load_path(path: &Path) -> Result<Vec<ModuleReport>, XlaError> {
    if path.is_dir() {
        return load_dump_dir(path);
    }
    let fname = path
        .file_name()
        .and_then(|f| f.to_str())
        .unwrap_or_default();
    // Map any sibling file of a module back to its buffer-assignment file.
    let suffixes = [
        "-buffer-assignment-values.txt",
        "-memory-usage-report.txt",
        "-live-range.txt",
        dump::BUFFER_ASSIGNMENT_SUFFIX,
        ".txt",
    ];
    for s in suffixes {
        if let Some(prefix) = fname.strip_suffix(s) {
            if s == ".txt" && !prefix.ends_with("after_optimizations") {
                continue;
            }
            let ba = path.with_file_name(format!("{prefix}{}", dump::BUFFER_ASSIGNMENT_SUFFIX));
            if !ba.is_file() {
                return Err(XlaError::NoModules {
                    path: path.to_path_buf(),
                    msg: format!("no buffer-assignment file beside it ({})", ba.display()),
                });
            }
            let files = dump::module_files(&ba).ok_or_else(|| XlaError::NoModules {
                path: ba.clone(),
                msg: "not a buffer-assignment file name".into(),
            })?;
            return Ok(vec![load_module(&files)?]);
        }
    }
    if !path.exists() {
        return Err(XlaError::Io {
            path: path.to_path_buf(),
            source: std::io::Error::new(std::io::ErrorKind::NotFound, "no such file or directory"),
        });
    }
    Err(XlaError::NoModules {
        path: path.to_path_buf(),
        msg: "not an XLA dump directory or dump file (expected *after_optimizations*.txt)".into(),
    })
}
