//! The baseline file: parsing (with file:line:column errors) and writing.
//!
//! A baseline is TOML, one table per entry, keys sorted, figures as integer bytes, so a
//! change to it reads well in code review:
//!
//! ```toml
//! # memwatch gate baseline ...
//! version = 1
//!
//! [entries.jit_train_step]
//! argument = 71303168
//! output = 67108938
//! temp = 239103760
//! total = 377515866
//! max_increase = "5%"            # optional, this entry only
//! max_increase_bytes = "128MiB"  # optional, this entry only
//! note = "remat policy tuned in #1234"   # optional, kept by --update
//!
//! [entries.jit_train_step.ops]   # per-op bytes at the peak (XLA dumps only)
//! "fusion.12" = 134217728
//! ```
//!
//! Owns the file format only; comparison lives in `compare`.

use super::error::{line_column, GateError};
use super::metric::Metric;
use super::units::{parse_bytes, parse_percent};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use toml::de::{DeTable, DeValue};
use toml::Spanned;

/// The baseline format version this build reads and writes.
pub const BASELINE_VERSION: i64 = 1;

/// A threshold as written in the baseline (kept verbatim so `--update` writes it back
/// unchanged) and its parsed value.
#[derive(Debug, Clone, PartialEq)]
pub struct Threshold<T> {
    pub value: T,
    pub written: toml::Value,
}

/// One entry of the baseline.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct BaselineEntry {
    pub metrics: BTreeMap<Metric, u64>,
    /// Per-op bytes at the peak, when the source had them.
    pub ops: BTreeMap<String, u64>,
    pub note: Option<String>,
    /// Per-entry relative threshold in percent (overrides `--max-increase`).
    pub max_increase: Option<Threshold<f64>>,
    /// Per-entry absolute threshold in bytes (overrides `--max-increase-bytes`).
    pub max_increase_bytes: Option<Threshold<u64>>,
}

/// A parsed baseline file.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Baseline {
    pub entries: BTreeMap<String, BaselineEntry>,
}

struct Ctx<'a> {
    path: &'a Path,
    text: &'a str,
}

impl Ctx<'_> {
    fn err(&self, offset: usize, message: impl Into<String>) -> GateError {
        let (line, column) = line_column(self.text, offset);
        GateError::Baseline {
            path: self.path.to_path_buf(),
            line,
            column,
            message: message.into(),
        }
    }
}

fn integer(v: &Spanned<DeValue<'_>>) -> Option<i128> {
    let i = v.get_ref().as_integer()?;
    let s = i.as_str().replace('_', "");
    let (neg, digits) = match s.strip_prefix('-') {
        Some(d) => (true, d.to_string()),
        None => (false, s.trim_start_matches('+').to_string()),
    };
    let n = i128::from_str_radix(&digits, i.radix()).ok()?;
    Some(if neg { -n } else { n })
}

fn bytes_value(ctx: &Ctx<'_>, key: &str, v: &Spanned<DeValue<'_>>) -> Result<u64, GateError> {
    match integer(v) {
        Some(n) if n < 0 => Err(ctx.err(
            v.span().start,
            format!("`{key}` is negative ({n}); byte figures must be zero or more"),
        )),
        // TOML integers are signed 64-bit: a larger figure could not be written back.
        Some(n) => i64::try_from(n).map(|n| n as u64).map_err(|_| {
            ctx.err(
                v.span().start,
                format!("`{key}` = {n} is above 2^63 - 1 bytes, the largest TOML integer"),
            )
        }),
        None => Err(ctx.err(
            v.span().start,
            format!(
                "`{key}` must be an integer number of bytes, found {}",
                v.get_ref().type_str()
            ),
        )),
    }
}

impl Baseline {
    /// Reads and parses a baseline file.
    pub fn load(path: &Path) -> Result<Baseline, GateError> {
        let text = std::fs::read_to_string(path).map_err(|source| GateError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        Baseline::parse(&text, path)
    }

    /// Parses baseline text; `path` is only used in error messages.
    pub fn parse(text: &str, path: &Path) -> Result<Baseline, GateError> {
        let ctx = Ctx { path, text };
        let root = DeTable::parse(text).map_err(|e| {
            let offset = e.span().map_or(0, |s| s.start);
            ctx.err(
                offset,
                format!(
                    "TOML syntax error: {}",
                    e.message().trim().replace('\n', "; ")
                ),
            )
        })?;
        let mut baseline = Baseline::default();
        let mut saw_version = false;
        for (k, v) in root.get_ref() {
            match k.get_ref().as_ref() {
                "version" => {
                    saw_version = true;
                    match integer(v) {
                        Some(n) if n == i128::from(BASELINE_VERSION) => {}
                        _ => {
                            return Err(ctx.err(
                                v.span().start,
                                format!("unsupported baseline `version` (this memwatch reads version {BASELINE_VERSION})"),
                            ))
                        }
                    }
                }
                "entries" => {
                    let table = v.get_ref().as_table().ok_or_else(|| {
                        ctx.err(v.span().start, "`entries` must be a table of entries")
                    })?;
                    for (name, value) in table {
                        let entry = parse_entry(&ctx, name.get_ref(), value)?;
                        baseline.entries.insert(name.get_ref().to_string(), entry);
                    }
                }
                other => {
                    return Err(ctx.err(
                        k.span().start,
                        format!("unknown top-level key `{other}` (expected `version` and `[entries.NAME]` tables)"),
                    ))
                }
            }
        }
        if !saw_version {
            return Err(ctx.err(
                0,
                format!(
                    "missing `version = {BASELINE_VERSION}`: is this a memwatch gate baseline?"
                ),
            ));
        }
        Ok(baseline)
    }

    /// The baseline as TOML text: sorted keys, one table per entry, integer figures.
    pub fn to_toml_string(&self) -> String {
        let mut out = String::from(
            "# memwatch gate baseline: measured memory figures (bytes) per compiled module or\n\
             # captured process/device. Written by `memwatch gate --update`; review changes like code.\n\
             # Per entry you may add `max_increase = \"5%\"`, `max_increase_bytes = \"128MiB\"` and\n\
             # `note = \"...\"`; --update keeps them.\n",
        );
        out.push_str(&format!("version = {BASELINE_VERSION}\n"));
        for (name, e) in &self.entries {
            let mut t = toml::Table::new();
            for (m, v) in &e.metrics {
                t.insert(m.name().to_string(), toml::Value::Integer(clamp_i64(*v)));
            }
            if let Some(th) = &e.max_increase {
                t.insert("max_increase".into(), th.written.clone());
            }
            if let Some(th) = &e.max_increase_bytes {
                t.insert("max_increase_bytes".into(), th.written.clone());
            }
            if let Some(n) = &e.note {
                t.insert("note".into(), toml::Value::String(n.clone()));
            }
            if !e.ops.is_empty() {
                let ops: toml::Table = e
                    .ops
                    .iter()
                    .map(|(k, v)| (k.clone(), toml::Value::Integer(clamp_i64(*v))))
                    .collect();
                t.insert("ops".into(), toml::Value::Table(ops));
            }
            let mut entries = toml::Table::new();
            entries.insert(name.clone(), toml::Value::Table(t));
            let mut root = toml::Table::new();
            root.insert("entries".into(), toml::Value::Table(entries));
            out.push('\n');
            // A table of tables of plain values always serialises.
            out.push_str(&toml::to_string(&root).unwrap_or_default());
        }
        out
    }

    /// Writes the baseline atomically (temp file in the same directory, then rename), so
    /// an interrupted `--update` never leaves a half-written baseline.
    pub fn save(&self, path: &Path) -> Result<(), GateError> {
        let io = |source| GateError::Io {
            path: path.to_path_buf(),
            source,
        };
        let dir = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let file_name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let tmp = dir.join(format!(".{file_name}.tmp{}", std::process::id()));
        std::fs::write(&tmp, self.to_toml_string()).map_err(io)?;
        std::fs::rename(&tmp, path).map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            io(e)
        })
    }
}

fn clamp_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

fn parse_entry(
    ctx: &Ctx<'_>,
    name: &str,
    value: &Spanned<DeValue<'_>>,
) -> Result<BaselineEntry, GateError> {
    let table = value.get_ref().as_table().ok_or_else(|| {
        ctx.err(
            value.span().start,
            format!("entry `{name}` must be a table"),
        )
    })?;
    let mut e = BaselineEntry::default();
    for (k, v) in table {
        let key = k.get_ref().as_ref();
        match key {
            "note" => {
                let s = v.get_ref().as_str().ok_or_else(|| {
                    ctx.err(
                        v.span().start,
                        format!("entry `{name}`: `note` must be a string"),
                    )
                })?;
                e.note = Some(s.to_string());
            }
            "max_increase" => {
                let s = v.get_ref().as_str().ok_or_else(|| {
                    ctx.err(
                        v.span().start,
                        format!("entry `{name}`: `max_increase` must be a string like \"2%\""),
                    )
                })?;
                let value = parse_percent(s).map_err(|err| {
                    ctx.err(
                        v.span().start,
                        format!("entry `{name}`: `max_increase`: {err}"),
                    )
                })?;
                e.max_increase = Some(Threshold {
                    value,
                    written: toml::Value::String(s.to_string()),
                });
            }
            "max_increase_bytes" => {
                let (value, written) = if let Some(s) = v.get_ref().as_str() {
                    let b = parse_bytes(s).map_err(|err| {
                        ctx.err(
                            v.span().start,
                            format!("entry `{name}`: `max_increase_bytes`: {err}"),
                        )
                    })?;
                    (b, toml::Value::String(s.to_string()))
                } else if let Some(n) = integer(v) {
                    if n < 0 {
                        return Err(ctx.err(
                            v.span().start,
                            format!("entry `{name}`: `max_increase_bytes`: negative threshold `{n}`: thresholds must be zero or more"),
                        ));
                    }
                    let b = u64::try_from(n)
                        .map_err(|_| ctx.err(v.span().start, "threshold too large"))?;
                    (b, toml::Value::Integer(clamp_i64(b)))
                } else {
                    return Err(ctx.err(
                        v.span().start,
                        format!("entry `{name}`: `max_increase_bytes` must be bytes (integer) or a size string like \"64MiB\""),
                    ));
                };
                e.max_increase_bytes = Some(Threshold { value, written });
            }
            "ops" => {
                let ops = v.get_ref().as_table().ok_or_else(|| {
                    ctx.err(
                        v.span().start,
                        format!("entry `{name}`: `ops` must be a table of op name = bytes"),
                    )
                })?;
                for (op, b) in ops {
                    let bytes = bytes_value(ctx, &format!("{name}.ops.{}", op.get_ref()), b)?;
                    e.ops.insert(op.get_ref().to_string(), bytes);
                }
            }
            other => {
                let metric: Metric = other.parse().map_err(|err| {
                    ctx.err(
                        k.span().start,
                        format!("entry `{name}`: {err}; other keys allowed: note, max_increase, max_increase_bytes, ops"),
                    )
                })?;
                let value = bytes_value(ctx, &format!("{name}.{other}"), v)?;
                if e.metrics.insert(metric, value).is_some() {
                    return Err(ctx.err(
                        k.span().start,
                        format!(
                            "entry `{name}`: `{other}` gives `{}` a second time (its two spellings are one metric)",
                            metric.name()
                        ),
                    ));
                }
            }
        }
    }
    Ok(e)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Baseline, GateError> {
        Baseline::parse(text, Path::new("base.toml"))
    }

    const GOOD: &str = r#"version = 1

[entries.jit_step]
temp = 1024
argument = 2048
max_increase = "5%"
max_increase_bytes = "1MiB"
note = "tuned"

[entries.jit_step.ops]
"fusion.1" = 512

[entries."cap/pid1/device0"]
peak = 4096
max_increase_bytes = 100
"#;

    #[test]
    fn parses_and_round_trips() {
        let b = parse(GOOD).unwrap();
        let e = &b.entries["jit_step"];
        assert_eq!(e.metrics[&Metric::Temp], 1024);
        assert_eq!(e.max_increase.as_ref().unwrap().value, 5.0);
        assert_eq!(e.max_increase_bytes.as_ref().unwrap().value, 1 << 20);
        assert_eq!(e.ops["fusion.1"], 512);
        assert_eq!(
            b.entries["cap/pid1/device0"]
                .max_increase_bytes
                .as_ref()
                .unwrap()
                .value,
            100
        );
        let text = b.to_toml_string();
        assert_eq!(parse(&text).unwrap(), b, "{text}");
        // Deterministic and sorted: writing twice gives the same bytes.
        assert_eq!(parse(&text).unwrap().to_toml_string(), text);
        assert!(
            text.find("[entries.\"cap/pid1/device0\"]").unwrap()
                < text.find("[entries.jit_step]").unwrap(),
            "{text}"
        );
    }

    fn err(text: &str) -> String {
        parse(text).unwrap_err().to_string()
    }

    #[test]
    fn syntax_error_names_file_and_line() {
        let e = err("version = 1\n\n[entries.jit_f\ntemp = 1\n");
        assert!(e.starts_with("base.toml:3:"), "{e}");
        assert!(e.contains("TOML syntax error"), "{e}");
    }

    #[test]
    fn unknown_metric_names_line_and_known_metrics() {
        let e = err("version = 1\n[entries.jit_f]\ntemp = 1\ntmep = 2\n");
        assert!(
            e.starts_with("base.toml:4:1: entry `jit_f`: unknown metric `tmep`"),
            "{e}"
        );
        assert!(e.contains("host_temp"), "{e}");
    }

    #[test]
    fn negative_thresholds_and_figures_are_rejected_with_line() {
        let e = err("version = 1\n[entries.jit_f]\ntemp = 1\nmax_increase = \"-2%\"\n");
        assert!(
            e.starts_with("base.toml:4:16:") && e.contains("negative threshold"),
            "{e}"
        );
        let e = err("version = 1\n[entries.jit_f]\nmax_increase_bytes = -5\n");
        assert!(
            e.starts_with("base.toml:3:") && e.contains("negative threshold"),
            "{e}"
        );
        let e = err("version = 1\n[entries.jit_f]\nmax_increase_bytes = \"-5MiB\"\n");
        assert!(
            e.starts_with("base.toml:3:") && e.contains("negative threshold"),
            "{e}"
        );
        let e = err("version = 1\n[entries.jit_f]\ntemp = -1\n");
        assert!(
            e.starts_with("base.toml:3:8:") && e.contains("negative"),
            "{e}"
        );
    }

    #[test]
    fn other_bad_shapes() {
        assert!(err("").contains("missing `version = 1`"));
        assert!(err("version = 2\n").contains("unsupported baseline `version`"));
        assert!(err("version = 1\nfoo = 1\n").contains("unknown top-level key `foo`"));
        assert!(err("version = 1\n[entries.a]\ntemp = \"1MiB\"\n").contains("must be an integer"));
        assert!(
            err("version = 1\n[entries.a]\nhost-temp = 1\nhost_temp = 2\n")
                .contains("a second time")
        );
        assert!(err("version = 1\n[entries.a]\ntemp = 0xffffffffffffffff\n").contains("2^63 - 1"));
        assert!(err("version = 1\n[entries.a]\nmax_increase = 2\n").contains("like \"2%\""));
        assert!(err("version = 1\nentries = 3\n").contains("must be a table"));
    }
}
