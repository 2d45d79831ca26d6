//! `memwatch import CAPTURE --db PATH | --daemon URL`: loads a capture file into a store,
//! directly (SQLite/PostgreSQL) or through a daemon's HTTP ingest.
//!
//! Owns reading the capture (salvaging a damaged one and saying what was lost), cutting
//! it into numbered batches, and sending them. Batches carry a stream id derived from the
//! file's contents, so importing the same file again stores nothing twice.

use std::io::Read;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::Args;
use memwatch_daemon::{Batch, Ingestor, Store, WriterLock};
use memwatch_wire::frame::encode_preamble;
use memwatch_wire::{encode_record, FrameReader, ReadMode, Record};
use serde::Serialize;

use super::Outcome;

const AFTER_HELP: &str = "\
Examples:
  memwatch import run.mwcap --db memwatch.db
  memwatch import run.mwcap --daemon http://central:7373 --token s3cret --run nightly-42
  memwatch import cut-off.mwcap --db mw.db --json
  memwatch import jax.mwcap --db mw.db --xla-dump /tmp/xla-dump   # + HLO attribution
  memwatch import --db mw.db --log run.log --xla-dump /tmp/dump --mem-fraction 0.025
  memwatch import --db mw.db --xla-dump /tmp/dump --run-id 3

A damaged capture is loaded up to the damage (what was skipped is reported). Importing
the same file twice stores it once (batches are keyed by the file's contents).";

/// Arguments of `memwatch import`.
#[derive(Args, Debug)]
#[command(after_help = AFTER_HELP)]
pub struct ImportArgs {
    /// Capture file (.mwcap). Not needed with --log / --xla-dump.
    #[arg(required_unless_present_any = ["log", "xla_dump"])]
    pub capture: Option<PathBuf>,
    /// Store directly into this SQLite file or postgres://… database.
    #[arg(
        long,
        value_name = "PATH|URL",
        conflicts_with = "daemon",
        required_unless_present = "daemon"
    )]
    pub db: Option<String>,
    /// Send to a daemon's HTTP API, e.g. http://127.0.0.1:7373.
    #[arg(long, value_name = "URL")]
    pub daemon: Option<String>,
    /// Bearer token for --daemon.
    #[arg(long, env = "MEMWATCH_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Run key [default: import:<file name>:<content id>].
    #[arg(long)]
    pub run: Option<String>,
    /// Node name [default: the capture's host name].
    #[arg(long)]
    pub node: Option<String>,
    /// Attach a JAX/XLA/TSL log (a run's stderr) for the dashboard's Incident page
    /// (needs --db; see `memwatch log`). Given on its own, without a capture.
    #[arg(long, value_name = "FILE", requires = "db")]
    pub log: Option<PathBuf>,
    /// Attach an XLA dump (XLA_FLAGS=--xla_dump_to=DIR): to the imported capture's run
    /// (or --run-id's), whose peak is then grouped by XLA module and HLO op_name (joined to
    /// the PJRT executables by name and compiled statistics); shown on the XLA module page
    /// and used to diagnose --log's OOMs.
    #[arg(long, value_name = "DIR")]
    pub xla_dump: Option<PathBuf>,
    /// The logged run's XLA_CLIENT_MEM_FRACTION (lets the diagnosis suggest one).
    #[arg(long, requires = "log")]
    pub mem_fraction: Option<f64>,
    /// Attach --log/--xla-dump to this stored run id.
    #[arg(long, value_name = "ID")]
    pub run_id: Option<i64>,
    /// Print one JSON document.
    #[arg(long)]
    pub json: bool,
}

/// `--db` / `--daemon` / `--token` of the commands that store their capture once it is
/// finished (`memwatch run`, `memwatch attach`): one definition, one way of storing.
#[derive(Args, Debug, Clone, Default)]
pub struct StoreArgs {
    /// Also store the capture in this SQLite file or postgres://… database (no daemon
    /// needed) once it is finished.
    #[arg(long, value_name = "PATH|URL", conflicts_with = "daemon")]
    pub db: Option<String>,
    /// Also send the capture to a daemon's HTTP API (http://HOST:7373) once it is finished.
    #[arg(long, value_name = "URL")]
    pub daemon: Option<String>,
    /// Bearer token for --daemon.
    #[arg(long, env = "MEMWATCH_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
}

impl StoreArgs {
    /// Where to store, or None when neither --db nor --daemon was given.
    pub fn target(&self) -> Option<Target<'_>> {
        match (&self.db, &self.daemon) {
            (Some(db), _) => Some(Target::Db(db)),
            (None, Some(url)) => Some(Target::Daemon {
                url,
                token: self.token.as_deref(),
            }),
            (None, None) => None,
        }
    }

    /// Checks before capturing that the store can be used: the database opens (a SQLite
    /// file is created and migrated), the daemon URL is an http:// URL. Catches a wrong
    /// `--db` before a long capture rather than after it.
    pub fn check(&self) -> Result<()> {
        match self.target() {
            None => Ok(()),
            Some(Target::Db(db)) => {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .context("cannot start the async runtime")?;
                rt.block_on(async {
                    let store = Store::open(db).await?;
                    // Refuse now, not after the capture, when another process stores there.
                    drop(WriterLock::acquire(db).await?);
                    store.close().await
                })
                .with_context(|| format!("--db {}", memwatch_daemon::store::redact(db)))
            }
            Some(Target::Daemon { url, .. }) => daemon_base(url).map(drop),
        }
    }

    /// Loads the finished capture `out` into the store (if one was asked for) under
    /// `run_key` (default: import's), printing one line on stderr about what was stored.
    pub fn store(&self, out: &Path, run_key: Option<String>) -> Result<Option<ImportSummary>> {
        let Some(target) = self.target() else {
            return Ok(None);
        };
        let s = import_capture(out, target, run_key, None)
            .with_context(|| format!("storing {} failed", out.display()))?;
        eprintln!(
            "memwatch: stored {} events as run {} (key {})",
            s.events,
            s.run_id.map_or("-".into(), |r| r.to_string()),
            s.run_key
        );
        Ok(Some(s))
    }
}

/// The base of a `--daemon` URL, or an error saying what is expected.
fn daemon_base(url: &str) -> Result<&str> {
    let base = url.trim_end_matches('/');
    if !base.starts_with("http://") {
        bail!("--daemon {url}: expected an http://HOST:PORT URL of `memwatch serve --listen`");
    }
    Ok(base)
}

/// Where to put a capture.
#[derive(Clone, Copy)]
pub enum Target<'a> {
    Db(&'a str),
    Daemon {
        url: &'a str,
        token: Option<&'a str>,
    },
}

/// What an import did.
#[derive(Debug, Serialize)]
pub struct ImportSummary {
    pub capture: String,
    pub run_key: String,
    pub run_id: Option<i64>,
    pub batches: u64,
    pub duplicate_batches: u64,
    pub events: u64,
    pub damaged_regions: usize,
    pub bytes_skipped: u64,
    /// XLA modules attached from `--xla-dump`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub xla_modules: Option<usize>,
}

const BATCH_EVENTS: usize = 65_536;

fn content_id(path: &Path) -> Result<u64> {
    let mut f = std::fs::File::open(path)
        .with_context(|| format!("cannot open capture {}", path.display()))?;
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    let mut head = vec![0u8; 1 << 20];
    let n = f.read(&mut head).unwrap_or(0);
    // Not a CRC: every frame ends with the CRC32 of its bytes, and CRC32 over "data + its
    // CRC" is a constant, so two different captures of one length and frame layout would
    // get one CRC32 and the second import would be dropped as already stored.
    use sha2::Digest;
    let digest = sha2::Sha256::digest(&head[..n]);
    let h = u32::from_be_bytes([digest[0], digest[1], digest[2], digest[3]]);
    Ok(((len & 0xffff_ffff) << 32) | u64::from(h))
}

/// Reads `path` and stores it at `target`.
pub fn import_capture(
    path: &Path,
    target: Target<'_>,
    run: Option<String>,
    node: Option<String>,
) -> Result<ImportSummary> {
    let file = std::fs::File::open(path)
        .with_context(|| format!("cannot open capture {}", path.display()))?;
    let mut reader = FrameReader::new(std::io::BufReader::new(file), ReadMode::Salvage)
        .with_context(|| format!("capture {}", path.display()))?;
    let stream = content_id(path)?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let run_key = run.unwrap_or_else(|| format!("import:{name}:{stream:016x}"));
    // Same file into the same run: same stream, so a repeated import stores nothing twice.
    let stream = stream ^ ((crc32fast::hash(run_key.as_bytes()) as u64) << 16);
    let mut groups: Vec<Vec<Record>> = vec![Vec::new()];
    let mut in_group = 0usize;
    let mut host = None;
    while let Some(rec) = reader
        .next_record()
        .with_context(|| format!("capture {}", path.display()))?
    {
        if let Record::ProcessStart(p) = &rec {
            host.get_or_insert_with(|| p.hostname.clone());
        }
        in_group += match &rec {
            Record::Events(e) => e.len(),
            _ => 1,
        };
        if let Some(g) = groups.last_mut() {
            g.push(rec);
        }
        if in_group >= BATCH_EVENTS {
            groups.push(Vec::new());
            in_group = 0;
        }
    }
    groups.retain(|g| !g.is_empty());
    let node = node
        .or(host)
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "import".into());
    let mut summary = ImportSummary {
        capture: path.display().to_string(),
        run_key: run_key.clone(),
        run_id: None,
        batches: groups.len() as u64,
        duplicate_batches: 0,
        events: 0,
        damaged_regions: reader.damage().len(),
        bytes_skipped: reader.damage().iter().map(|d| d.bytes_skipped).sum(),
        xla_modules: None,
    };
    match target {
        Target::Db(db) => {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .context("cannot start the async runtime")?;
            rt.block_on(async {
                let store = Store::open(db)
                    .await
                    .with_context(|| format!("database {}", memwatch_daemon::store::redact(db)))?;
                let _lock = WriterLock::acquire(db)
                    .await
                    .with_context(|| format!("database {}", memwatch_daemon::store::redact(db)))?;
                let mut ing = Ingestor::new(store.clone());
                for (i, records) in groups.into_iter().enumerate() {
                    let out = ing
                        .commit(vec![Batch {
                            node: node.clone(),
                            stream,
                            seq: i as u64 + 1,
                            run_key: run_key.clone(),
                            records,
                        }])
                        .await
                        .with_context(|| format!("storing batch {} into {db}", i + 1))?;
                    for o in out {
                        summary.run_id = summary.run_id.or(o.run_id);
                        summary.events += o.events;
                        summary.duplicate_batches += o.duplicate as u64;
                    }
                }
                store
                    .close()
                    .await
                    .with_context(|| format!("closing {db}"))?;
                Ok::<_, anyhow::Error>(())
            })?;
        }
        Target::Daemon { url, token } => {
            let base = daemon_base(url)?;
            for (i, records) in groups.into_iter().enumerate() {
                let mut body = encode_preamble().to_vec();
                for r in &records {
                    encode_record(r, &mut body).context("encoding a frame")?;
                }
                let endpoint = format!(
                    "{base}/api/ingest?node={}&run={}&stream={stream}&seq={}",
                    urlencode(&node),
                    urlencode(&run_key),
                    i + 1
                );
                let mut req = ureq::post(&endpoint).set("content-type", "application/octet-stream");
                if let Some(t) = token {
                    req = req.set("authorization", &format!("Bearer {t}"));
                }
                let resp = match req.send_bytes(&body) {
                    Ok(r) => r,
                    Err(ureq::Error::Status(code, r)) => {
                        let msg = r.into_string().unwrap_or_default();
                        bail!("daemon {base} refused batch {}: HTTP {code} {msg}", i + 1)
                    }
                    Err(e) => bail!("cannot reach daemon {base}: {e}"),
                };
                let text = resp
                    .into_string()
                    .with_context(|| format!("daemon {base}: unreadable reply"))?;
                let v: serde_json::Value = serde_json::from_str(&text)
                    .with_context(|| format!("daemon {base}: reply is not JSON: {text}"))?;
                summary.run_id = summary.run_id.or(v["run_id"].as_i64());
                summary.events += v["events"].as_u64().unwrap_or(0);
                summary.duplicate_batches += v["duplicate"].as_bool().unwrap_or(false) as u64;
            }
        }
    }
    Ok(summary)
}

fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

pub fn run(args: ImportArgs) -> Result<Outcome> {
    let target = match (&args.db, &args.daemon) {
        (Some(db), _) => Target::Db(db),
        (None, Some(url)) => Target::Daemon {
            url,
            token: args.token.as_deref(),
        },
        (None, None) => bail!("give --db PATH or --daemon URL"),
    };
    let Some(capture) = &args.capture else {
        // --log / --xla-dump on their own (optionally onto --run-id).
        return super::import_log::run(&args);
    };
    if args.log.is_some() {
        bail!(
            "--log is attached on its own: import the capture, then \
             `memwatch import --db DB --log FILE --run-id ID`"
        );
    }
    // The dump is parsed before anything is stored, so a bad dump changes nothing.
    let dump = match &args.xla_dump {
        Some(dir) => Some((dir, super::xla::load(dir)?)),
        None => None,
    };
    let mut s = import_capture(capture, target, args.run.clone(), args.node.clone())?;
    if let Some((dir, mods)) = dump {
        let Some(run) = s.run_id.or(args.run_id) else {
            bail!(
                "{}: no run was stored (empty capture, or imported before: give that run's \
                 --run-id), so --xla-dump {} was not attached",
                s.capture,
                dir.display()
            );
        };
        s.xla_modules = Some(super::import_xla::attach(&mods, dir, &target, run)?);
    }
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&s)?);
    } else {
        outln!(
            "imported {}: run {} (key {}), {} events in {} batches ({} already stored)",
            s.capture,
            s.run_id.map_or("-".into(), |r| r.to_string()),
            s.run_key,
            s.events,
            s.batches,
            s.duplicate_batches
        );
        if let Some(n) = s.xla_modules {
            outln!(
                "attached {n} XLA module(s) to run {}",
                s.run_id.unwrap_or(0)
            );
        }
        if s.damaged_regions > 0 {
            eprintln!(
                "warning: {}: {} damaged region(s), {} bytes skipped",
                s.capture, s.damaged_regions, s.bytes_skipped
            );
        }
    }
    Ok(Outcome::Success)
}
