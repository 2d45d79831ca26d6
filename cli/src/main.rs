//! memwatch: the one user-facing binary. Thin: parses arguments and calls the crates.
//!
//! Exit codes (DESIGN.md): 0 success, 1 "the check failed" (a command returns
//! [`cmd::Outcome::CheckFailed`]), 2 bad usage or unreadable input (any error: one line
//! naming the file and what is wrong, printed to stderr).

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
    /// Replay an allocation trace on this machine's GPU and compare with the model.
    ///
    /// Every allocation is a real driver allocation (--gpu-mode driver) or a chunk that
    /// memwatch's BFC model places inside one real device region (--gpu-mode bfc);
    /// --touch writes every byte and checksums each buffer before its free. Everything
    /// allocated is freed on exit, Ctrl-C included.
    #[command(after_help = "Examples:\n  \
      kernels/build-cuda.sh /tmp/k.fatbin\n  \
      memwatch replay-gpu testdata/h200/bfc/h200-jax0.11.2/bfc_seed12.json --mem-fraction 0.04 --kernels /tmp/k.fatbin --touch\n  \
      memwatch replay-gpu trace.jsonl --allocator platform --emulate h100 --kernels /tmp/k.fatbin --json\n  \
      memwatch replay-gpu trace.jsonl --emulate mi300x --kernels /tmp/k.fatbin   # scaled down, says by how much")]
    ReplayGpu(cmd::replay_gpu::ReplayGpuArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::FormatVersion => {
            println!("{}", memwatch_wire::FORMAT_VERSION);
            Ok(cmd::Outcome::Success)
        }
        Command::ReplayGpu(a) => cmd::replay_gpu::cmd(&a),
    };
    cmd::finish(result)
}
