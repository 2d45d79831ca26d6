//! Subcommand implementations, one file each, plus the shared exit-code policy and the
//! stdout writer every command prints through (`outln!`/`out!`: a full disk or a closed
//! pipe is an error that ends the command, never a panic).

/// `print!` that returns from the enclosing function with an error when standard output
/// cannot be written.
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::cmd::write_stdout(format_args!($($arg)*))?
    };
}

/// `println!` that returns from the enclosing function with an error when standard
/// output cannot be written.
macro_rules! outln {
    () => {
        $crate::cmd::write_stdout(format_args!("\n"))?
    };
    ($($arg:tt)*) => {
        $crate::cmd::write_stdout(format_args!("{}\n", format_args!($($arg)*)))?
    };
}

pub mod agent;
pub mod attach;
pub mod attach_live;
pub mod device_readings;
pub mod diagnose;
pub mod fmt;
pub mod gate;
pub mod gate_db;
pub mod import;
pub mod import_log;
pub mod import_snapshot;
pub mod import_xla;
#[cfg(test)]
mod live_agreement;
pub mod log;
pub mod out_file;
pub mod replay;
pub mod replay_gpu;
pub mod report;
mod report_devices;
pub mod report_readings;
pub mod report_snapshot;
pub mod run;
pub mod run_child;
pub mod run_doctor;
mod run_handoff;
pub mod run_output;
pub mod run_stderr;
pub mod runtime;
pub mod serve;
pub mod store_target;
pub mod token;
pub mod xla;

use std::process::ExitCode;

/// Standard output could not be written.
#[derive(Debug)]
pub struct StdoutError(pub std::io::Error);

impl std::fmt::Display for StdoutError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "cannot write to standard output: {}", self.0)
    }
}

impl std::error::Error for StdoutError {}

/// Writes to standard output (what `out!`/`outln!` expand to).
pub fn write_stdout(args: std::fmt::Arguments<'_>) -> Result<(), StdoutError> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    out.write_fmt(args).map_err(StdoutError)
}

/// What a command that ran to completion concluded.
#[allow(dead_code)]
pub enum Outcome {
    /// Exit 0.
    Success,
    /// Exit 1: the check the user asked for failed (gate regression, predicted OOM with
    /// `--fail-on-oom`).
    CheckFailed,
    /// Exit with this code (e.g. `memwatch run` exits with the command's code).
    Code(u8),
}

/// Turns a command's result into the process exit code; errors print one line (the
/// whole `anyhow` context chain) to stderr and exit 2.
pub fn finish(result: anyhow::Result<Outcome>) -> ExitCode {
    match result {
        Ok(Outcome::Success) => ExitCode::SUCCESS,
        Ok(Outcome::CheckFailed) => ExitCode::from(1),
        Ok(Outcome::Code(c)) => ExitCode::from(c),
        Err(e) => {
            // A reader that went away (`memwatch report c.mwcap | head`) is not worth a
            // message; the exit code still says the output is incomplete.
            let broken_pipe = e
                .downcast_ref::<StdoutError>()
                .is_some_and(|s| s.0.kind() == std::io::ErrorKind::BrokenPipe);
            if !broken_pipe {
                eprintln!("memwatch: error: {}", one_line(&e));
            }
            ExitCode::from(2)
        }
    }
}

/// The error and its causes on one line, `: `-separated, each said once: several of the
/// libraries' errors put their cause into their own message and also report it as their
/// source, which `{:#}` would print twice ("x: no such file: no such file").
pub fn one_line(e: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if text.is_empty() || line.contains(&text) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&text);
    }
    line
}

#[cfg(test)]
mod tests {
    use super::one_line;
    use anyhow::Context;

    #[derive(Debug, thiserror::Error)]
    #[error("{path}: {source}")]
    struct Wrapped {
        path: String,
        source: std::io::Error,
    }

    #[test]
    fn a_cause_already_in_the_message_is_not_repeated() {
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "no such file or directory");
        let e = Err::<(), _>(Wrapped {
            path: "/x".into(),
            source: io,
        })
        .context("reading XLA dump /x")
        .unwrap_err();
        assert_eq!(
            one_line(&e),
            "reading XLA dump /x: /x: no such file or directory"
        );
        assert_eq!(format!("{e:#}").matches("no such file").count(), 2);
    }

    #[test]
    fn distinct_causes_are_all_kept_in_order() {
        let e = anyhow::anyhow!("inner").context("middle").context("outer");
        assert_eq!(one_line(&e), "outer: middle: inner");
    }
}
