//! Which XLA dump is the failing process's own. A multi-process run has one dump per
//! worker (`--xla_dump_to` per rank), and the workers compile executables of the same
//! name to different sizes (an uneven split): a dump is matched to one process by the
//! compiled statistics of that process's executables, never against another process's
//! executable of the same name.
//!
//! Owns reading a folder of per-rank dumps ([`read_dumps`]) and the choice ([`choose`]);
//! the kinds read the chosen dump through `Ctx::dump`.

use std::path::{Path, PathBuf};

use super::evidence::{DumpEvidence, Evidence};
use super::DoctorError;

/// Reads `dir` as one dump, or, when it holds no modules itself, each of its
/// subdirectories that is a dump (a folder of per-rank dumps: `dump/rank0`, `dump/rank1`),
/// in name order.
pub fn read_dumps(dir: &Path) -> Result<Vec<DumpEvidence>, DoctorError> {
    let whole = match DumpEvidence::read(dir) {
        Ok(d) => return Ok(vec![d]),
        Err(e @ DoctorError::NotADump { .. }) if dir.is_dir() => e,
        Err(e) => return Err(e),
    };
    let rd = std::fs::read_dir(dir).map_err(|err| DoctorError::Io {
        path: dir.to_path_buf(),
        err,
    })?;
    let mut subdirs: Vec<PathBuf> = rd
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_dir())
        .collect();
    subdirs.sort();
    let mut out = Vec::new();
    for s in subdirs {
        match DumpEvidence::read(&s) {
            Ok(d) => out.push(d),
            Err(DoctorError::NotADump { .. }) => {}
            Err(e) => return Err(e),
        }
    }
    if out.is_empty() {
        return Err(whole);
    }
    Ok(out)
}

/// The dump the kinds use, and a note for each dump that is not used.
#[derive(Debug, Clone, Default)]
pub struct DumpChoice {
    /// Index into `Evidence::dumps`.
    pub chosen: Option<usize>,
    /// Per dump (same order): why it is not used; `None` for the chosen one.
    pub notes: Vec<Option<String>>,
}

impl DumpChoice {
    /// Whether dumps were given but none is usable.
    pub fn none_usable(&self) -> bool {
        self.chosen.is_none() && !self.notes.is_empty()
    }
}

/// How a dump compares with one process's compiled executables.
enum Match {
    /// Every executable of the process named like a module of the dump has its figures
    /// in one of them; or some do and the others' modules are another process's
    /// compilation (several processes dumping into one folder): what is said of those.
    Same(Option<String>),
    /// A module named like one of its executables has other figures.
    Differs(String),
    /// No module named like any of its executables.
    NoneInCommon,
}

/// Chooses the failing process's dump (`pid`; any process when not known). A capture
/// without compiled statistics cannot tell: the first dump is used.
pub fn choose(ev: &Evidence, pid: Option<u32>) -> DumpChoice {
    let n = ev.dumps.len();
    let mut choice = DumpChoice {
        chosen: None,
        notes: vec![None; n],
    };
    if n == 0 {
        return choice;
    }
    let exes: Vec<&memwatch_wire::PjrtExecutable> = ev
        .capture
        .as_ref()
        .map(|c| {
            c.runtime
                .executables
                .iter()
                .filter(|x| x.flags & memwatch_wire::PjrtExecutable::FLAG_STATS != 0)
                .collect()
        })
        .unwrap_or_default();
    let mut pids: Vec<u32> = exes.iter().map(|x| x.pid).collect();
    pids.sort_unstable();
    pids.dedup();
    if exes.is_empty() {
        choice.chosen = Some(0);
        for note in choice.notes.iter_mut().skip(1) {
            *note = Some(
                "several dumps and no compiled statistics in the evidence to tell which is \
                 the failing process's: the first is used"
                    .into(),
            );
        }
        return choice;
    }
    let wanted: Vec<u32> = match pid {
        Some(p) => vec![p],
        None => pids.clone(),
    };
    let of = |d: &DumpEvidence, p: u32| compare(d, exes.iter().copied().filter(|x| x.pid == p));
    // A dump whole of the failing process first; else one folder several processes dumped
    // into, matched module by module: it holds a module of the failing process's own
    // compilation (`distinct`), the others may be another process's.
    let whole = |d: &DumpEvidence| {
        wanted
            .iter()
            .any(|p| matches!(of(d, *p), Match::Same(None)))
    };
    let partial = |d: &DumpEvidence| {
        wanted.iter().find_map(|p| match of(d, *p) {
            Match::Same(Some(note)) => Some(note),
            _ => None,
        })
    };
    let other_whole = |d: &DumpEvidence| {
        pids.iter()
            .copied()
            .find(|p| !wanted.contains(p) && matches!(of(d, *p), Match::Same(None)))
    };
    // A module of the failing process's own compilation: its figures are those of the
    // failing process's executable and not of another process's of the same name.
    let fig = |v: i64| u64::try_from(v).unwrap_or(0);
    let figs = |x: &memwatch_wire::PjrtExecutable| {
        (
            fig(x.stats.argument),
            fig(x.stats.output),
            fig(x.stats.temp),
        )
    };
    let distinct = |d: &DumpEvidence| {
        exes.iter().filter(|x| wanted.contains(&x.pid)).any(|x| {
            let f = figs(x);
            d.modules
                .iter()
                .any(|m| m.name == x.name && (m.argument_bytes, m.output_bytes, m.temp_bytes) == f)
                && exes
                    .iter()
                    .any(|y| !wanted.contains(&y.pid) && y.name == x.name)
                && !exes
                    .iter()
                    .any(|y| !wanted.contains(&y.pid) && y.name == x.name && figs(y) == f)
        })
    };
    if let Some(i) = ev.dumps.iter().position(whole) {
        choice.chosen = Some(i);
    } else if let Some((i, note)) = ev
        .dumps
        .iter()
        .enumerate()
        .find_map(|(i, d)| distinct(d).then(|| partial(d)).flatten().map(|n| (i, n)))
    {
        choice.chosen = Some(i);
        choice.notes[i] = Some(note);
    }
    for (i, d) in ev.dumps.iter().enumerate() {
        if choice.chosen == Some(i) {
            continue;
        }
        let mine = whole(d) || (partial(d).is_some() && distinct(d));
        choice.notes[i] = Some(match (mine, other_whole(d), pid) {
            (true, _, _) => "another dump of the same process is used".to_string(),
            (false, Some(q), Some(p)) => {
                format!("it is the dump of pid {q}, not of the failing process (pid {p}): not used")
            }
            (false, _, _) => match wanted.first().map(|p| of(d, *p)) {
                Some(Match::Differs(why)) | Some(Match::Same(Some(why))) => {
                    format!("{why}: the dump is from another compilation, so it is not used")
                }
                _ => "it has no module named like any executable of the capture: it is from \
                      another run, so it is not used"
                    .to_string(),
            },
        });
    }
    choice
}

fn compare<'a>(
    d: &DumpEvidence,
    exes: impl Iterator<Item = &'a memwatch_wire::PjrtExecutable>,
) -> Match {
    let fig = |v: i64| u64::try_from(v).unwrap_or(0);
    let mut matched = 0;
    let mut differs: Vec<String> = Vec::new();
    for x in exes {
        let same: Vec<_> = d.modules.iter().filter(|m| m.name == x.name).collect();
        if same.is_empty() {
            continue;
        }
        let (a, o, t) = (
            fig(x.stats.argument),
            fig(x.stats.output),
            fig(x.stats.temp),
        );
        if same
            .iter()
            .any(|m| (m.argument_bytes, m.output_bytes, m.temp_bytes) == (a, o, t))
        {
            matched += 1;
        } else {
            let m = same[0];
            differs.push(format!(
                "its module {} has argument/output/temp {}/{}/{} B but pid {}'s {} compiled to \
                 {a}/{o}/{t} B",
                m.name, m.argument_bytes, m.output_bytes, m.temp_bytes, x.pid, x.name
            ));
        }
    }
    match (matched, differs.first()) {
        (0, None) => Match::NoneInCommon,
        (0, Some(why)) => Match::Differs(why.clone()),
        (_, None) => Match::Same(None),
        (k, Some(why)) => Match::Same(Some(format!(
            "used for the {k} module(s) that match the process's executables; {} other(s) are another process's compilation (several processes dumping into one folder), not used: {why}",
            differs.len()
        ))),
    }
}
