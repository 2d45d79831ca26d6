//! Subcommand implementations, one file each, plus the shared exit-code policy.

pub mod agent;
pub mod attach;
pub mod attach_live;
pub mod fmt;
pub mod gate;
pub mod gate_db;
pub mod import;
pub mod import_xla;
pub mod log;
pub mod replay;
pub mod replay_gpu;
pub mod report;
pub mod run;
pub mod runtime;
pub mod serve;
pub mod xla;

use std::process::ExitCode;

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
            eprintln!("memwatch: error: {e:#}");
            ExitCode::from(2)
        }
    }
}
