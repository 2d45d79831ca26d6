//! How a run ended, the one rule the overview and the run page show: out of memory (with
//! the doctor's kind), crashed for another reason (exit status and the error line of its
//! log), finished after refusals it recovered from, finished, running (only while data is
//! still arriving) or ended without an exit recorded (an attach, a snapshot, a killed
//! recorder). Reads what the store has about the run; the rule itself is [`decide`].

use crate::db::{Store, StoreError};
use crate::incidents::DiagnosisRow;
use crate::render::chart::Tone;

/// What the rule looks at.
#[derive(Debug, Default, Clone)]
pub(crate) struct Facts {
    /// Data is still arriving (`sql::run_active`).
    pub active: bool,
    /// Exit status of each recorded process (`None`: no exit recorded).
    pub exits: Vec<Option<i64>>,
    /// The store holds an out-of-memory incident of the run.
    pub any_oom: bool,
    /// The stored diagnosis: (failed, first verdict's kind).
    pub diagnosis: Option<(bool, Option<String>)>,
}

/// How the run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Outcome {
    Running,
    /// Out of memory, with the doctor's kind when it has one.
    Oom(Option<String>),
    /// A non-zero exit the doctor does not put down to memory.
    Crashed(i64),
    /// Every process exited 0 after refused requests (or a failure verdict).
    Recovered,
    Finished,
    /// No exit recorded and no data arriving.
    Ended,
}

/// The rule: how the processes exited decides, the doctor names the kind.
pub(crate) fn decide(f: &Facts) -> Outcome {
    if f.active {
        return Outcome::Running;
    }
    let diag_failed = f.diagnosis.as_ref().is_some_and(|d| d.0);
    let kind = f.diagnosis.as_ref().and_then(|d| d.1.clone());
    let failed_exit = f.exits.iter().flatten().copied().find(|&c| c != 0);
    let exited = f.exits.iter().any(Option::is_some);
    match failed_exit {
        Some(code) => {
            if diag_failed || (f.diagnosis.is_none() && f.any_oom) {
                Outcome::Oom(kind)
            } else {
                Outcome::Crashed(code)
            }
        }
        None if exited => {
            if diag_failed || f.any_oom {
                Outcome::Recovered
            } else {
                Outcome::Finished
            }
        }
        None => {
            if diag_failed || f.any_oom {
                Outcome::Oom(kind)
            } else {
                Outcome::Ended
            }
        }
    }
}

/// The badge of an outcome: (CSS class, text, tooltip).
pub(crate) fn badge(o: &Outcome) -> (&'static str, String, String) {
    match o {
        Outcome::Running => ("live", "live".into(), "data is still arriving".into()),
        Outcome::Oom(_) => (
            "bad",
            "OOM".into(),
            "ended in an out-of-memory failure".into(),
        ),
        Outcome::Crashed(code) => (
            "crash",
            format!("crashed: {}", exit_text(*code)),
            "ended with a non-zero exit that is not an out-of-memory failure".into(),
        ),
        Outcome::Recovered => (
            "warn",
            "recovered".into(),
            "requests were refused, and the program went on and exited 0".into(),
        ),
        Outcome::Finished => ("ok", "ok".into(), "every process exited 0".into()),
        Outcome::Ended => (
            "muted",
            "no exit recorded".into(),
            "the recording ended without a process exit (attach, snapshot, killed recorder)".into(),
        ),
    }
}

/// How what went wrong in the run reads, beside [`badge`]: a failure (red) only when the
/// run ended out of memory; a warning (orange) otherwise: refusals it recovered from, a
/// finished run's warning, a crash that is not memory. The colour of the charts' failure
/// marks.
pub(crate) fn tone_of(o: &Outcome) -> Tone {
    match o {
        Outcome::Oom(_) => Tone::Failure,
        _ => Tone::Warning,
    }
}

/// [`tone_of`] as the CSS class of the doctor's verdict (its badges and section) and of
/// the refused requests' badges on the overview and the run page.
pub(crate) fn tone(o: &Outcome) -> &'static str {
    tone_of(o).class()
}

/// What the rule looks at for run `id`, given whether one of its incidents ran out of
/// memory and its stored diagnosis.
pub(crate) async fn facts(
    store: &Store,
    id: i64,
    any_oom: bool,
    diagnosis: Option<&DiagnosisRow>,
) -> Result<Facts, StoreError> {
    Ok(Facts {
        active: super::sql::run_active(store, id).await?,
        exits: exits(store, id).await?,
        any_oom,
        diagnosis: diagnosis.map(|d| (d.failed != 0, d.kind.clone())),
    })
}

/// How run `id` ended, read whole from the store (for pages that show one chart of it).
pub(crate) async fn of_run(store: &Store, id: i64) -> Result<Outcome, StoreError> {
    let counts = store.incident_counts(id, &[]).await?;
    let diagnosis = store.diagnosis(id).await?;
    Ok(decide(
        &facts(store, id, counts.any_oom, diagnosis.as_ref()).await?,
    ))
}

/// The tone of run `id`'s failure marks ([`tone_of`] of [`of_run`]).
pub(crate) async fn failure_tone(store: &Store, id: i64) -> Result<Tone, StoreError> {
    Ok(tone_of(&of_run(store, id).await?))
}

/// "exit 1", or "signal 9" for a status the recorder stored as a negative signal number.
pub(crate) fn exit_text(code: i64) -> String {
    if code < 0 {
        format!("signal {}", -code)
    } else {
        format!("exit {code}")
    }
}

/// The error line of a log: the last line that names an exception (`ValueError: …`,
/// `jaxlib…XlaRuntimeError: …`), a fatal signal or an abort; `None` when there is none.
pub(crate) fn error_line(log: &str) -> Option<String> {
    log.lines()
        .rev()
        .map(str::trim)
        .find(|l| is_error_line(l))
        .map(|l| l.chars().take(300).collect())
}

fn is_error_line(l: &str) -> bool {
    let head = l.split(':').next().unwrap_or("");
    let name = head.rsplit('.').next().unwrap_or("");
    let exception = !head.is_empty()
        && !head.contains(' ')
        && head
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.')
        && (name.ends_with("Error") || name.ends_with("Exception") || name == "KeyboardInterrupt");
    exception
        || l.starts_with("Segmentation fault")
        || l.starts_with("Fatal Python error")
        || l.starts_with("terminate called")
        || l.contains("Aborted (core dumped)")
}

/// The facts of run `id` that are not already on the page: exits and the newest log.
pub(crate) async fn exits(store: &Store, id: i64) -> Result<Vec<Option<i64>>, StoreError> {
    Ok(sqlx::query_scalar(
        "SELECT exit_code FROM processes WHERE run_id = $1 AND argv NOT LIKE $2 ORDER BY pid",
    )
    .bind(id)
    .bind(crate::codes::snapshot_argv_pattern())
    .fetch_all(&store.pool)
    .await?)
}

/// The error line of the newest log stored with run `id`, if any.
pub(crate) async fn logged_error(store: &Store, id: i64) -> Result<Option<String>, StoreError> {
    let text: Option<String> = sqlx::query_scalar(
        "SELECT log_text FROM incident_logs WHERE run_id = $1 ORDER BY id DESC LIMIT 1",
    )
    .bind(id)
    .fetch_optional(&store.pool)
    .await?;
    Ok(text.as_deref().and_then(error_line))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(exits: &[Option<i64>], ooms: usize, diag: Option<(bool, &str)>) -> Facts {
        Facts {
            active: false,
            exits: exits.to_vec(),
            any_oom: ooms > 0,
            diagnosis: diag.map(|(f, k)| (f, Some(k.to_string()))),
        }
    }

    #[test]
    fn the_exit_decides_and_the_doctor_names_the_kind() {
        let leak = facts(&[Some(1)], 1, Some((true, "leak")));
        assert_eq!(decide(&leak), Outcome::Oom(Some("leak".into())));
        // A ValueError: exit 1, the doctor found no memory failure.
        let crash = facts(&[Some(1)], 0, Some((false, "")));
        assert_eq!(decide(&crash), Outcome::Crashed(1));
        assert_eq!(decide(&facts(&[Some(1)], 0, None)), Outcome::Crashed(1));
        // Refused preallocations, then exit 0: recovered, never OOM.
        assert_eq!(
            decide(&facts(&[Some(0)], 3, Some((true, "pool_limit")))),
            Outcome::Recovered
        );
        assert_eq!(
            decide(&facts(&[Some(0), Some(0)], 0, None)),
            Outcome::Finished
        );
        // A launcher and its worker: the worker's OOM decides.
        assert_eq!(
            decide(&facts(&[Some(0), Some(1)], 1, None)),
            Outcome::Oom(None)
        );
        // An attach or snapshot: no exit, no data arriving.
        assert_eq!(decide(&facts(&[None], 0, None)), Outcome::Ended);
        assert_eq!(decide(&facts(&[], 1, None)), Outcome::Oom(None));
        let live = Facts {
            active: true,
            ..facts(&[None], 0, None)
        };
        assert_eq!(decide(&live), Outcome::Running);
        assert_eq!(badge(&Outcome::Crashed(1)).1, "crashed: exit 1");
    }

    #[test]
    fn a_verdict_reads_as_a_failure_only_when_the_run_ran_out_of_memory() {
        // A recovered run has a failure verdict (refused requests) but exited 0: its
        // status badge is a warning, and so is its verdict.
        let recovered = decide(&facts(&[Some(0)], 3, Some((true, "pool_limit"))));
        assert_eq!(badge(&recovered).0, "warn");
        assert_eq!(tone(&recovered), "warning");
        let oom = decide(&facts(&[Some(1)], 1, Some((true, "leak"))));
        assert_eq!((badge(&oom).0, tone(&oom)), ("bad", "failure"));
        for o in [
            decide(&facts(&[Some(0)], 0, Some((false, "fragmentation")))),
            decide(&facts(&[Some(1)], 0, Some((false, "")))),
            decide(&facts(&[None], 0, None)),
        ] {
            assert_eq!(tone(&o), "warning", "{o:?}");
        }
        assert_eq!(badge(&Outcome::Crashed(-9)).1, "crashed: signal 9");
    }

    #[test]
    fn error_line_is_the_last_exception() {
        let log = "Traceback (most recent call last):\n  File \"x.py\", line 3, in <module>\n    \
                   raise ValueError('bad shape')\nValueError: bad shape (3, 4)\n";
        assert_eq!(
            error_line(log).as_deref(),
            Some("ValueError: bad shape (3, 4)")
        );
        let log = "W0000 warning\njaxlib._jax.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory\n";
        assert!(error_line(log).is_some_and(|l| l.starts_with("jaxlib._jax.XlaRuntimeError")));
        assert_eq!(error_line("all good\nStep 3: loss 0.1\n"), None);
        assert_eq!(error_line("During handling: see above\n"), None);
    }
}
