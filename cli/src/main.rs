//! memwatch: the one user-facing binary. Thin: parses arguments and calls the crates.

use clap::{Parser, Subcommand};

/// memwatch finds out where GPU memory goes and why a job ran out of it.
#[derive(Parser)]
#[command(name = "memwatch", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Print the capture format version this build reads and writes.
    FormatVersion,
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::FormatVersion => println!("{}", memwatch_wire::FORMAT_VERSION),
    }
    Ok(())
}
