//! `memwatch import CAPTURE --db PATH | --daemon URL`: loads a capture file into a store,
//! directly (SQLite/PostgreSQL) or through a daemon's HTTP ingest.
//!
//! Owns reading the capture (salvaging a damaged one and saying what was lost), cutting
//! it into numbered batches, and sending them. Batches carry a stream id derived from the
//! file's contents, so importing the same file again stores nothing twice.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::Args;
use memwatch_daemon::{Batch, Ingestor, Store, WriterLock};
use memwatch_wire::frame::encode_preamble;
use memwatch_wire::{encode_record, FrameReader, ReadMode, Record};
use serde::Serialize;

use super::import_log::LogImport;
use super::store_target::{daemon_base, http, post_json, with_store, Target};
use super::Outcome;

const AFTER_HELP: &str = "\
Examples:
  memwatch import run.mwcap --db memwatch.db
  memwatch import run.mwcap --daemon http://central:7373 --token s3cret --run nightly-42
  memwatch import cut-off.mwcap --db mw.db --json
  memwatch import jax.mwcap --db mw.db --xla-dump /tmp/xla-dump   # + HLO attribution
  memwatch import run.mwcap --log stderr.log --xla-dump /tmp/dump --db mw.db   # + the verdict
  memwatch import --db mw.db --log run.log --xla-dump /tmp/dump --mem-fraction 0.025
  memwatch import --db mw.db --xla-dump /tmp/dump --run-id 3
  memwatch import snapshot.pickle --db mw.db     # a PyTorch memory snapshot, streamed

A damaged capture is loaded up to the damage (what was skipped is reported). Importing
the same file twice stores it once, and importing the whole capture after a cut-off copy
of it (same run key) stores only what the copy lacked (batches are numbered by the
capture's records, in a stream keyed by its first 8 records).

With a capture, --log names the run's stderr: the OOM doctor's diagnosis of the run (as
`memwatch diagnose CAPTURE STDERR --xla-dump DIR` prints it) is computed from the capture,
that log and the dump, and stored with the run (the dashboard shows the verdict; `GET
/api/runs/ID/diagnosis` answers it). Without a capture, --log is kept for the Incident
page (--db only).";

/// Arguments of `memwatch import`.
#[derive(Args, Debug)]
#[command(after_help = AFTER_HELP)]
pub struct ImportArgs {
    /// Capture file (.mwcap), or a PyTorch memory snapshot (.pickle, from
    /// torch.cuda.memory._dump_snapshot). Not needed with --log / --xla-dump.
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
    /// The run's stderr. With a capture: diagnose the run (capture + this log + --xla-dump)
    /// and store the verdict with it. Without one: attach the log for the dashboard's
    /// Incident page (--db only; see `memwatch log`).
    #[arg(long, value_name = "FILE")]
    pub log: Option<PathBuf>,
    /// Attach an XLA dump (XLA_FLAGS=--xla_dump_to=DIR): to the imported capture's run
    /// (or --run-id's), whose peak is then grouped by XLA module and HLO op_name (joined to
    /// the PJRT executables by name and compiled statistics); shown on the XLA module page
    /// and used to diagnose --log's OOMs.
    #[arg(long, value_name = "DIR")]
    pub xla_dump: Option<PathBuf>,
    /// The logged run's XLA_CLIENT_MEM_FRACTION (lets the diagnosis suggest one and check
    /// the limit).
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
                    // Refuse now, not after the capture, when another process stores there.
                    let lock = WriterLock::acquire(db).await?;
                    let store = Store::open(db).await?;
                    drop(lock);
                    store.close().await
                })
                .with_context(|| format!("--db {}", memwatch_daemon::redact(db)))
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
        match s.run_id {
            Some(id) => eprintln!(
                "memwatch: stored {} events as run {id} (key {})",
                s.events, s.run_key
            ),
            // No process reached the shim (the command made no hooked call before it
            // ended): there is no run to make, and `run -` read like a failure.
            None => eprintln!(
                "memwatch: nothing to store: {} holds no process (no hooked call was made)",
                out.display()
            ),
        }
        Ok(Some(s))
    }
}

/// What an import did.
#[derive(Debug, Serialize)]
pub struct ImportSummary {
    pub capture: String,
    pub run_key: String,
    pub run_id: Option<i64>,
    /// Records (frames) read from the capture.
    pub records: u64,
    /// Of those, how many an earlier import of this capture (or of a cut-off copy of
    /// it) under the same run key had stored already: skipped.
    pub records_already_stored: u64,
    pub batches: u64,
    pub duplicate_batches: u64,
    pub events: u64,
    pub damaged_regions: usize,
    pub bytes_skipped: u64,
    /// XLA modules attached from `--xla-dump`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub xla_modules: Option<usize>,
    /// The stored diagnosis's headline (`--log`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub verdict: Option<String>,
}

pub(super) const BATCH_EVENTS: usize = 65_536;

/// Records that make a capture's identity.
pub(super) const IDENTITY_RECORDS: usize = 8;

/// A capture's identity, the same for every copy of it that holds at least its first
/// [`IDENTITY_RECORDS`] records: a SHA-256 (not a CRC: every frame ends with the CRC32 of
/// its bytes, so CRC32 over a frame is a constant) of those records, which carry the
/// processes' pids and nanosecond clock anchors, `memwatch run`'s tags with their times,
/// and the first events. Two different captures agree on them only when generated to be
/// identical. Records this version does not know are hashed by their type and length.
pub(super) fn capture_identity(records: &[Record]) -> u64 {
    use sha2::Digest;
    let mut h = sha2::Sha256::new();
    let mut bytes = Vec::new();
    for r in records.iter().take(IDENTITY_RECORDS) {
        bytes.clear();
        match (r, encode_record(r, &mut bytes)) {
            (_, Ok(())) => h.update(&bytes),
            (Record::Unknown { frame_type, len }, _) => {
                h.update([*frame_type]);
                h.update(len.to_le_bytes());
            }
            (_, Err(_)) => h.update(b"?"),
        }
    }
    let d = h.finalize();
    u64::from_be_bytes([d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7]])
}

/// Events in a record, for cutting batches.
pub(super) fn weight(r: &Record) -> usize {
    match r {
        Record::Events(e) => e.len(),
        _ => 1,
    }
}

/// Where the records go: the store directly, or a daemon's HTTP ingest.
pub(super) enum Destination<'a> {
    Db {
        rt: tokio::runtime::Runtime,
        /// Boxed: its run state makes it large. Its store is the destination's.
        ingestor: Box<Ingestor>,
        _lock: WriterLock,
        db: &'a str,
    },
    Daemon {
        base: &'a str,
        token: Option<&'a str>,
    },
}

/// What one batch did.
pub(super) struct Sent {
    pub run_id: Option<i64>,
    pub events: u64,
    pub duplicate: bool,
}

impl<'a> Destination<'a> {
    pub(super) fn open(target: Target<'a>) -> Result<Self> {
        Ok(match target {
            Target::Db(db) => {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .context("cannot start the async runtime")?;
                // The lock before the store: parallel first imports into a new file are
                // refused as such, not by racing migrations. (Store errors name the
                // database themselves.)
                let (store, lock) = rt.block_on(async {
                    let lock = WriterLock::acquire(db).await?;
                    let store = Store::open(db).await?;
                    Ok::<_, anyhow::Error>((store, lock))
                })?;
                Destination::Db {
                    rt,
                    ingestor: Box::new(Ingestor::new(store)),
                    _lock: lock,
                    db,
                }
            }
            Target::Daemon { url, token } => Destination::Daemon {
                base: daemon_base(url)?,
                token,
            },
        })
    }

    /// How many records of the stream are stored already (its last sequence number),
    /// and the run they went to.
    pub(super) fn position(
        &self,
        node: &str,
        stream: u64,
        run_key: &str,
    ) -> Result<(u64, Option<i64>)> {
        match self {
            Destination::Db {
                rt, ingestor, db, ..
            } => rt
                .block_on(async {
                    let store = ingestor.store();
                    Ok::<_, memwatch_daemon::StoreError>((
                        store.stream_last_seq(node, stream).await?,
                        store.run_id_of(node, run_key).await?,
                    ))
                })
                .with_context(|| format!("reading {db}")),
            Destination::Daemon { base, token } => {
                let endpoint = format!(
                    "{base}/api/ingest?node={}&stream={stream}&run={}",
                    urlencode(node),
                    urlencode(run_key)
                );
                let v = call(http().get(&endpoint), *token, base, None)?;
                Ok((v["last_seq"].as_u64().unwrap_or(0), v["run_id"].as_i64()))
            }
        }
    }

    pub(super) fn send(&mut self, batch: Batch) -> Result<Sent> {
        let mut sent = self.send_many(vec![batch])?;
        sent.pop()
            .context("the store answered no outcome for the batch")
    }

    /// Stores `batches` (in order) in one transaction of the store (one commit, one
    /// sync to disk); a daemon gets them one request each. What each did.
    pub(super) fn send_many(&mut self, batches: Vec<Batch>) -> Result<Vec<Sent>> {
        let Some(seq) = batches.last().map(|b| b.seq) else {
            return Ok(Vec::new());
        };
        match self {
            Destination::Db {
                rt, ingestor, db, ..
            } => {
                let out = rt
                    .block_on(ingestor.commit(batches))
                    .with_context(|| format!("storing the records up to {seq} into {db}"))?;
                Ok(out
                    .into_iter()
                    .map(|o| Sent {
                        run_id: o.run_id,
                        events: o.events,
                        duplicate: o.duplicate,
                    })
                    .collect())
            }
            Destination::Daemon { base, token } => batches
                .iter()
                .map(|b| send_to_daemon(base, *token, b))
                .collect(),
        }
    }

    pub(super) fn close(self) -> Result<()> {
        if let Destination::Db {
            rt, ingestor, db, ..
        } = self
        {
            rt.block_on(ingestor.store().close())
                .with_context(|| format!("closing {db}"))?;
        }
        Ok(())
    }
}

/// One batch to a daemon's `/api/ingest`.
fn send_to_daemon(base: &str, token: Option<&str>, batch: &Batch) -> Result<Sent> {
    let mut body = encode_preamble().to_vec();
    for r in &batch.records {
        encode_record(r, &mut body).context("encoding a frame")?;
    }
    let endpoint = format!(
        "{base}/api/ingest?node={}&run={}&stream={}&seq={}",
        urlencode(&batch.node),
        urlencode(&batch.run_key),
        batch.stream,
        batch.seq
    );
    let req = http()
        .post(&endpoint)
        .set("content-type", "application/octet-stream");
    let v = call(req, token, base, Some(&body))?;
    Ok(Sent {
        run_id: v["run_id"].as_i64(),
        events: v["events"].as_u64().unwrap_or(0),
        duplicate: v["duplicate"].as_bool().unwrap_or(false),
    })
}

/// One HTTP call to the daemon; its JSON answer, or an error naming the daemon.
fn call(
    mut req: ureq::Request,
    token: Option<&str>,
    base: &str,
    body: Option<&[u8]>,
) -> Result<serde_json::Value> {
    if let Some(t) = token {
        req = req.set("authorization", &format!("Bearer {t}"));
    }
    let resp = match body {
        Some(b) => req.send_bytes(b),
        None => req.call(),
    };
    let resp = match resp {
        Ok(r) => r,
        Err(ureq::Error::Status(code, r)) => {
            let msg = r.into_string().unwrap_or_default();
            bail!("daemon {base} refused the import: HTTP {code} {msg}")
        }
        Err(e) => bail!("cannot reach daemon {base}: {e}"),
    };
    let text = resp
        .into_string()
        .with_context(|| format!("daemon {base}: unreadable reply"))?;
    serde_json::from_str(&text).with_context(|| format!("daemon {base}: reply is not JSON: {text}"))
}

/// Reads `path` and stores it at `target`.
///
/// Batches are numbered by records: a batch's sequence number is the number of the
/// capture's records up to and including its last one, in one stream per (capture, run
/// key). So a repeated import stores nothing twice, and importing the whole capture
/// after a cut-off copy of it (the copy holds a prefix of the records, at least the
/// identity's) stores exactly the records the copy lacked: the import starts after the
/// stored position. A copy damaged in its middle (records skipped there) followed by the
/// whole capture would store the records after the damage at shifted positions.
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
    let mut records = Vec::new();
    let mut host = None;
    while let Some(rec) = reader
        .next_record()
        .with_context(|| format!("capture {}", path.display()))?
    {
        if let Record::ProcessStart(p) = &rec {
            host.get_or_insert_with(|| p.hostname.clone());
        }
        records.push(rec);
    }
    let identity = capture_identity(&records);
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let run_key = run.unwrap_or_else(|| format!("import:{name}:{identity:016x}"));
    let stream = identity ^ ((crc32fast::hash(run_key.as_bytes()) as u64) << 16);
    let node = node
        .or(host)
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "import".into());
    let mut dest = Destination::open(target)?;
    let (stored, stored_run) = dest.position(&node, stream, &run_key)?;
    let skip = usize::try_from(stored)
        .unwrap_or(usize::MAX)
        .min(records.len());
    let mut summary = ImportSummary {
        capture: path.display().to_string(),
        run_key: run_key.clone(),
        run_id: None,
        records: records.len() as u64,
        records_already_stored: skip as u64,
        batches: 0,
        duplicate_batches: 0,
        events: 0,
        damaged_regions: reader.damage().len(),
        bytes_skipped: reader.damage().iter().map(|d| d.bytes_skipped).sum(),
        xla_modules: None,
        verdict: None,
    };
    let mut batch: Vec<Record> = Vec::new();
    let mut in_batch = 0usize;
    let total = records.len();
    for (i, rec) in records.into_iter().enumerate().skip(skip) {
        in_batch += weight(&rec);
        batch.push(rec);
        if in_batch >= BATCH_EVENTS || i + 1 == total {
            let sent = dest.send(Batch {
                node: node.clone(),
                stream,
                seq: i as u64 + 1,
                run_key: run_key.clone(),
                records: std::mem::take(&mut batch),
            })?;
            in_batch = 0;
            summary.batches += 1;
            summary.run_id = summary.run_id.or(sent.run_id);
            summary.events += sent.events;
            summary.duplicate_batches += u64::from(sent.duplicate);
        }
    }
    summary.run_id = summary.run_id.or(stored_run);
    dest.close()?;
    Ok(summary)
}

/// Stores the OOM doctor's diagnosis `d` with run `run` at `target` (replacing one stored
/// before): directly, or through the daemon's `POST /api/runs/{id}/diagnosis`.
pub fn attach_diagnosis(
    target: &Target<'_>,
    run: i64,
    d: &memwatch_analysis::doctor::Diagnosis,
    source: &str,
) -> Result<()> {
    let doc = serde_json::to_value(d).context("encoding the diagnosis")?;
    match target {
        Target::Db(db) => with_store(db, async |store| {
            let stored = store
                .store_diagnosis(run, source, &doc)
                .await
                .context("storing the diagnosis")?;
            match stored {
                None => bail!("run {run} is not in {}", memwatch_daemon::redact(db)),
                Some(Err(e)) => Err(e.into()),
                Some(Ok(())) => Ok(()),
            }
        }),
        Target::Daemon { url, token } => post_json(
            url,
            *token,
            &format!("/api/runs/{run}/diagnosis?source={}", urlencode(source)),
            doc.to_string().as_bytes(),
            "the diagnosis",
        ),
    }
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
        return super::import_log::run(&LogImport {
            db: args.db.as_deref(),
            log: args.log.as_deref(),
            xla_dump: args.xla_dump.as_deref(),
            mem_fraction: args.mem_fraction,
            run_id: args.run_id,
            json: args.json,
        });
    };
    if let Some(f) = args.mem_fraction {
        if !(f > 0.0 && f <= 1.0) {
            bail!("--mem-fraction {f}: must be in (0, 1]");
        }
    }
    // The dump is parsed before anything is stored, so a bad dump changes nothing.
    let dump = match &args.xla_dump {
        Some(dir) => Some((dir, super::xla::load(dir)?)),
        None => None,
    };
    let snapshot = super::report_snapshot::is_snapshot(capture)?;
    if snapshot && args.xla_dump.is_some() {
        bail!("--xla-dump attaches to JAX captures, not to a PyTorch memory snapshot");
    }
    // The verdict, before anything is stored: an unreadable log or dump changes nothing.
    let diagnosis = match &args.log {
        Some(log) => {
            let mut files = vec![log.clone()];
            if !snapshot {
                files.insert(0, capture.clone());
            }
            let env: Vec<(String, String)> = args
                .mem_fraction
                .map(|f| ("XLA_CLIENT_MEM_FRACTION".to_string(), f.to_string()))
                .into_iter()
                .collect();
            let ev = super::diagnose::load_evidence(&files, args.xla_dump.as_slice(), &env)?;
            Some(memwatch_analysis::doctor::diagnose(&ev))
        }
        None => None,
    };
    let mut s = if snapshot {
        super::import_snapshot::import(capture, target, args.run.clone(), args.node.clone())?
    } else {
        import_capture(capture, target, args.run.clone(), args.node.clone())?
    };
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
    if let Some(d) = &diagnosis {
        let Some(run) = s.run_id.or(args.run_id) else {
            bail!(
                "{}: no run was stored (empty capture, or imported before: give that run's \
                 --run-id), so the diagnosis was not stored",
                s.capture
            );
        };
        attach_diagnosis(&target, run, d, "memwatch import --log")?;
        s.verdict = Some(d.headline.clone());
        if let (Target::Db(db), Some(log)) = (&target, &args.log) {
            with_store(db, async |store| {
                super::import_log::keep_with_run(store, run, log, args.mem_fraction).await
            })?;
        }
    }
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&s)?);
    } else {
        outln!(
            "imported {}: run {} (key {}), {} events in {} batches; {} of its {} records were \
             stored already",
            s.capture,
            s.run_id.map_or("-".into(), |r| r.to_string()),
            s.run_key,
            s.events,
            s.batches,
            s.records_already_stored,
            s.records
        );
        if let Some(n) = s.xla_modules {
            outln!(
                "attached {n} XLA module(s) to run {}",
                s.run_id.unwrap_or(0)
            );
        }
        if let Some(v) = &s.verdict {
            outln!(
                "stored the diagnosis with run {}: {v}",
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
