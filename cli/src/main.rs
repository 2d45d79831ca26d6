//! memwatch: the one user-facing binary. Thin: parses arguments and calls the crates.
//!
//! Exit codes (DESIGN.md): 0 success, 1 "the check failed" (a command returns
//! [`cmd::Outcome::CheckFailed`]), 2 bad usage or unreadable input (any error: one line
//! naming the file and what is wrong, printed to stderr).
#![doc = include_str!("../README.md")]

mod allocator;
mod cmd;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// memwatch finds out where GPU memory goes and why a job ran out of it.
///
/// Capture every device allocation of a program (HIP on AMD, CUDA on NVIDIA), explain
/// peaks in terms of the XLA program, diagnose out-of-memory logs, predict whether a
/// trace fits on another device, and fail CI when memory regresses.
#[derive(Parser)]
#[command(name = "memwatch", version, about, long_about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Print the capture format version this build reads and writes.
    FormatVersion,
    /// Replay an allocation trace through an allocator model: would it fit on a device?
    Replay(cmd::replay::ReplayArgs),
    /// Fail CI when memory regresses: compare per-module figures with a baseline file.
    Gate(cmd::gate::GateArgs),
    /// Analyse XLA dumps (`XLA_FLAGS=--xla_dump_to=DIR --xla_dump_hlo_as_text`).
    #[command(subcommand)]
    Xla(cmd::xla::XlaCmd),
    /// Explain XLA/JAX out-of-memory logs (BFC dumps, remat warnings, RESOURCE_EXHAUSTED).
    Log(cmd::log::LogArgs),
    /// The OOM doctor: why a run ran out of memory, from its capture, logs and XLA dump.
    Diagnose(cmd::diagnose::DiagnoseArgs),
    /// Run a command with every GPU allocation captured, then print a short report.
    Run(cmd::run::RunArgs),
    /// Report a capture: per process and device counts, peaks, leaks, failures, API times.
    Report(cmd::report::ReportArgs),
    /// Capture a process that is already running (loads the shim into it), until Ctrl-C.
    Attach(cmd::attach::AttachArgs),
    /// Runtime attribution from a capture's PJRT records: allocator timeline per device,
    /// the executable at the runtime peak, co-resident buffers, OOMs in execute.
    Runtime(cmd::runtime::RuntimeArgs),
    /// Run the central daemon: ingest from agents, SQLite/PostgreSQL storage, JSON API.
    Serve(cmd::serve::ServeArgs),
    /// Run the node agent: shim receiver, device sampling, spool, forwarding to a daemon.
    Agent(cmd::agent::AgentArgs),
    /// Load a capture file into a database or a daemon.
    Import(cmd::import::ImportArgs),
}

fn main() -> ExitCode {
    allocator::tune_for(std::env::args_os().nth(1).as_deref());
    let cli = Cli::parse();
    let result = match cli.command {
        Command::FormatVersion => {
            cmd::write_stdout(format_args!("{}\n", memwatch_wire::FORMAT_VERSION))
                .map(|()| cmd::Outcome::Success)
                .map_err(Into::into)
        }
        Command::Replay(args) => cmd::replay::run(args),
        Command::Gate(args) => cmd::gate::run(args),
        Command::Xla(c) => cmd::xla::run(c),
        Command::Log(a) => cmd::log::run(a),
        Command::Diagnose(a) => cmd::diagnose::run(a),
        Command::Run(args) => cmd::run::run(args),
        Command::Report(args) => cmd::report::run(args),
        Command::Attach(args) => cmd::attach::run(args),
        Command::Runtime(a) => cmd::runtime::run(a),
        Command::Serve(args) => cmd::serve::run(args),
        Command::Agent(args) => cmd::agent::run(args),
        Command::Import(args) => cmd::import::run(args),
    };
    cmd::finish(result)
}
