//! `memwatch serve`: the central daemon (ingest from agents, storage, JSON API).
//!
//! Owns argument parsing and logging set-up only; everything else is memwatch-daemon.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Args;

use super::Outcome;

const AFTER_HELP: &str = "\
Examples:
  memwatch serve                                   # ./memwatch.db, API on 127.0.0.1:7373
  memwatch serve --db /var/lib/memwatch/mw.db --retain-raw-days 14
  MEMWATCH_TOKEN=s3cret memwatch serve --listen 0.0.0.0:7373 --ingest 0.0.0.0:7374
  memwatch serve --token-file /etc/memwatch/token --listen 0.0.0.0:7373 --ingest 0.0.0.0:7374
  memwatch serve --db postgres://memwatch@dbhost/memwatch

Agents (`memwatch agent --daemon HOST:7374`) stream to --ingest over TCP; tools POST
captures to /api/ingest. Query: /api/runs, /api/runs/ID/timeline?device=0&points=2000,
/api/runs/ID/peak, /api/openapi.json; Prometheus: /metrics. Listening on anything other
than loopback requires a token (--token, MEMWATCH_TOKEN or --token-file FILE, its first
line); clients send it as
`Authorization: Bearer TOKEN` (HTTP) or in the agent hello (TCP).";

/// Arguments of `memwatch serve`.
#[derive(Args, Debug)]
#[command(after_help = AFTER_HELP)]
pub struct ServeArgs {
    /// SQLite file (created and migrated on first start) or postgres://… URL.
    #[arg(long, default_value = "memwatch.db", value_name = "PATH|URL")]
    pub db: String,
    /// Address of the HTTP API.
    #[arg(long, default_value = "127.0.0.1:7373")]
    pub listen: SocketAddr,
    /// Address of the TCP ingest listener for agents.
    #[arg(long, default_value = "127.0.0.1:7374")]
    pub ingest: SocketAddr,
    /// Bearer token required from clients (mandatory when not on loopback).
    #[arg(long, env = "MEMWATCH_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// File whose first line is the token (instead of --token; e.g. a container secret).
    #[arg(long, value_name = "FILE", env = "MEMWATCH_TOKEN_FILE")]
    pub token_file: Option<PathBuf>,
    /// Delete raw events after this many days (timelines, peaks and incidents stay).
    #[arg(long, value_name = "DAYS")]
    pub retain_raw_days: Option<f64>,
    /// Largest HTTP request body accepted, in MiB (XLA documents; captures are sent in
    /// batches). Request bodies being read count against the daemon's memory bound.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..=1024))]
    pub max_body_mib: u64,
    /// Connections open at once, on each listener (TCP ingest, HTTP). At the limit a new
    /// connection closes an idle one, or one of the client holding the most.
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u64).range(1..=65536))]
    pub max_connections: u64,
    /// Connections open at once from one client, on each listener: an IP address, and on
    /// loopback the address and the user owning the client's socket.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..=65536))]
    pub max_connections_per_peer: u64,
}

pub fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("MEMWATCH_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // Colours only for a terminal: a redirected log must not carry escape codes.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .try_init();
}

pub fn run(args: ServeArgs) -> Result<Outcome> {
    init_logging();
    let mut cfg = memwatch_daemon::ServeConfig::new(args.db.clone());
    cfg.listen = args.listen;
    cfg.ingest = args.ingest;
    cfg.token = super::token::token(args.token.as_deref(), args.token_file.as_deref())?;
    cfg.retain_raw = args
        .retain_raw_days
        .map(|d| Duration::from_secs_f64((d * 86400.0).max(0.0)));
    cfg.max_body_bytes = (args.max_body_mib as usize) << 20;
    if args.max_connections_per_peer > args.max_connections {
        anyhow::bail!(
            "--max-connections-per-peer {} is more than --max-connections {}",
            args.max_connections_per_peer,
            args.max_connections
        );
    }
    cfg.tcp.max_connections = args.max_connections as usize;
    cfg.tcp.max_connections_per_peer = args.max_connections_per_peer as usize;
    cfg.http.max_connections = args.max_connections as usize;
    cfg.http.max_connections_per_peer = args.max_connections_per_peer as usize;
    if !args.db.contains("://") && !args.db.starts_with("sqlite:") {
        let p = PathBuf::from(&args.db);
        if let Some(dir) = p.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)
                .with_context(|| format!("cannot create the directory of --db {}", args.db))?;
        }
    }
    // The daemon's allocator settings, before the runtime's threads allocate.
    memwatch_daemon::tune_allocator();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    rt.block_on(async move {
        let running = memwatch_daemon::start(cfg).await.with_context(|| {
            format!("memwatch serve --db {}", memwatch_daemon::redact(&args.db))
        })?;
        eprintln!(
            "memwatch serve: API http://{}  ingest tcp://{}  db {}",
            running.api_addr,
            running.ingest_addr,
            memwatch_daemon::redact(&args.db)
        );
        let mut running = running;
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .context("cannot watch for SIGTERM")?;
        tokio::select! {
            r = running.wait() => r.context("memwatch serve stopped")?,
            _ = tokio::signal::ctrl_c() => eprintln!("memwatch serve: interrupted, stopping"),
            _ = term.recv() => eprintln!("memwatch serve: terminated, stopping"),
        }
        running
            .shutdown()
            .await
            .context("memwatch serve: closing the database")?;
        Ok(Outcome::Success)
    })
}
