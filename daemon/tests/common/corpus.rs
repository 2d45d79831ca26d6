//! Real recordings of `testdata/` stored through the daemon's own ingest: the H100 OOM
//! corpus's captures (with the OOM doctor's diagnosis of each, computed from the capture,
//! the program's stderr and its XLA dump, as `memwatch import CAPTURE --log STDERR
//! --xla-dump DIR` computes it) and the PyTorch snapshots.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use memwatch_analysis::doctor::{self, CaptureEvidence, DumpEvidence, Evidence, LogEvidence};
use memwatch_daemon::{Batch, Ingestor, Store};
use memwatch_wire::{FrameReader, ReadMode, Record};

pub fn testdata(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../testdata")
        .join(rel)
}

/// Stores `records` as run `key` of node `node` (stream `stream`, batches of `per_batch`
/// records); returns the run id.
pub async fn store_records(
    store: &Store,
    node: &str,
    key: &str,
    stream: u64,
    records: Vec<Record>,
    per_batch: usize,
) -> i64 {
    let mut ing = Ingestor::new(store.clone());
    let mut run = None;
    for (i, group) in records.chunks(per_batch.max(1)).enumerate() {
        let out = ing
            .commit(vec![Batch {
                node: node.into(),
                stream,
                seq: i as u64 + 1,
                run_key: key.into(),
                records: group.to_vec(),
            }])
            .await
            .unwrap();
        run = run.or(out[0].run_id);
    }
    run.expect("a run was created")
}

/// The records of a capture file.
pub fn capture_records(path: &Path) -> Vec<Record> {
    let f = std::fs::File::open(path).unwrap();
    let mut r = FrameReader::new(std::io::BufReader::new(f), ReadMode::Salvage).unwrap();
    let mut out = Vec::new();
    while let Some(rec) = r.next_record().unwrap() {
        out.push(rec);
    }
    out
}

/// Stores `testdata/oom-corpus/<scenario>/capture.mwcap` under the key `memwatch import`
/// makes (`import:capture.mwcap:<16 hex digits>`); returns the run id.
pub async fn store_corpus(store: &Store, scenario: &str, stream: u64) -> i64 {
    let recs = capture_records(&testdata(&format!("oom-corpus/{scenario}/capture.mwcap")));
    let key = format!("import:capture.mwcap:{:016x}", 0x5eed_0000 + stream);
    store_records(store, "h100", &key, stream, recs, 16).await
}

/// The OOM doctor's diagnosis of a corpus scenario (capture + stderr + dump), as JSON.
pub fn corpus_diagnosis(scenario: &str) -> serde_json::Value {
    let dir = testdata(&format!("oom-corpus/{scenario}"));
    let mut ev = Evidence {
        capture: Some(CaptureEvidence::read(&dir.join("capture.mwcap")).unwrap()),
        log: Some(LogEvidence::read(&[dir.join("stderr.log")]).unwrap()),
        ..Evidence::default()
    };
    if dir.join("dump").is_dir() {
        ev.dumps
            .push(DumpEvidence::read(&dir.join("dump")).unwrap());
    }
    serde_json::to_value(doctor::diagnose(&ev)).unwrap()
}

/// Stores the PyTorch snapshot `testdata/torch-snapshots/<name>.pickle` (or any pickle
/// path) as `memwatch import` converts it; returns the run id.
pub async fn store_snapshot_file(store: &Store, path: &Path, key: &str, stream: u64) -> i64 {
    let scan = memwatch_analysis::torch::scan_path(path).unwrap();
    let mut records: Vec<Record> = Vec::new();
    memwatch_analysis::torch::to_records(&scan, "h100", &mut |r| {
        records.push(r);
        Ok::<(), ()>(())
    })
    .unwrap();
    store_records(store, "h100", key, stream, records, 8).await
}
