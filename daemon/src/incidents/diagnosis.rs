//! The OOM doctor's diagnosis stored with a run (`run_diagnoses`, migration 0007): what
//! `memwatch run --db/--daemon` and `memwatch import CAPTURE --log STDERR` compute
//! (`memwatch_analysis::doctor::Diagnosis`, schema 1, as JSON), `POST
//! /api/runs/{id}/diagnosis` stores and `GET` answers. The document is kept whole; the
//! first verdict's kind, headline, executable and error are kept beside it for lists.
//! Reading it back for pages goes through [`Stored`], which reads the fields the pages
//! show and ignores the rest (the schema is extended, never renamed).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::views::VerdictView;
use crate::db::{now_unix_ns, Store, StoreError};
use crate::render::fmt;

/// Schema versions of the doctor's document this build reads.
pub const SCHEMA: u64 = 1;

/// A document that is not a diagnosis this build can store.
#[derive(Debug, thiserror::Error)]
#[error("not a `memwatch diagnose --json` document (schema {SCHEMA}): {0}")]
pub struct BadDiagnosis(String);

/// The fields of a stored diagnosis the dashboard shows.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Stored {
    pub schema: u64,
    pub failed: bool,
    pub headline: String,
    pub verdicts: Vec<StoredVerdict>,
    pub missing: Vec<StoredMissing>,
    /// The device ledger, where the doctor made one.
    pub ledger: Option<super::ledger::StoredLedger>,
}

/// One verdict, as shown.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct StoredVerdict {
    pub kind: String,
    pub failure: bool,
    pub headline: String,
    pub what: StoredWhat,
    pub when: String,
    pub who: StoredWho,
    pub why: String,
    pub figures: BTreeMap<String, u64>,
    pub fix: StoredFix,
    pub evidence: Vec<StoredCite>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct StoredWhat {
    pub request_bytes: Option<u64>,
    pub request_exact: bool,
    pub allocator: Option<String>,
    pub pid: Option<u32>,
    pub device: Option<i32>,
    pub result: Option<String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct StoredWho {
    pub executable: Option<String>,
    pub hlo_instruction: Option<String>,
    pub op_name: Option<String>,
    pub source: Option<String>,
    pub python_frame: Option<String>,
    pub resident_executable: Option<String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct StoredFix {
    pub advice: String,
    pub check: Option<StoredCheck>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct StoredCheck {
    pub method: String,
    pub passed: bool,
    pub detail: String,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct StoredCite {
    pub file: String,
    pub line: Option<usize>,
    pub what: String,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct StoredMissing {
    pub evidence: String,
    pub would_add: String,
}

impl Stored {
    /// Reads a document: an object with an integer `schema` this build reads, a boolean
    /// `failed`, a `headline` and a `verdicts` array.
    pub fn parse(doc: &serde_json::Value) -> Result<Self, BadDiagnosis> {
        let obj = doc
            .as_object()
            .ok_or_else(|| BadDiagnosis("not a JSON object".into()))?;
        let schema = obj
            .get("schema")
            .and_then(serde_json::Value::as_u64)
            .ok_or_else(|| BadDiagnosis("no integer `schema`".into()))?;
        if schema != SCHEMA {
            return Err(BadDiagnosis(format!("schema {schema}")));
        }
        for (field, ok) in [
            ("failed", obj.get("failed").is_some_and(|v| v.is_boolean())),
            (
                "headline",
                obj.get("headline").is_some_and(|v| v.is_string()),
            ),
            (
                "verdicts",
                obj.get("verdicts").is_some_and(|v| v.is_array()),
            ),
        ] {
            if !ok {
                return Err(BadDiagnosis(format!(
                    "`{field}` missing or of the wrong type"
                )));
            }
        }
        serde_json::from_value(doc.clone()).map_err(|e| BadDiagnosis(e.to_string()))
    }

    /// The verdict that names the run: its first failure, else its first warning.
    pub fn lead(&self) -> Option<&StoredVerdict> {
        self.verdicts
            .iter()
            .find(|v| v.failure)
            .or(self.verdicts.first())
    }
}

/// A `run_diagnoses` row.
#[derive(Debug, Clone, Serialize, sqlx::FromRow)]
pub struct DiagnosisRow {
    pub run_id: i64,
    pub failed: i64,
    pub kind: Option<String>,
    pub headline: String,
    pub executable: Option<String>,
    pub error: Option<String>,
    pub source: String,
    pub created_unix_ns: i64,
    #[serde(skip)]
    pub diagnosis_json: String,
}

impl Store {
    /// Stores `doc` (a diagnosis, checked by [`Stored::parse`]) as run `run`'s, replacing
    /// one stored before. `Ok(None)`: there is no such run.
    pub async fn store_diagnosis(
        &self,
        run: i64,
        source: &str,
        doc: &serde_json::Value,
    ) -> Result<Option<Result<(), BadDiagnosis>>, StoreError> {
        if !self.run_exists(run).await? {
            return Ok(None);
        }
        let d = match Stored::parse(doc) {
            Ok(d) => d,
            Err(e) => return Ok(Some(Err(e))),
        };
        let lead = d.lead();
        let mut tx = self.pool.begin().await?;
        sqlx::query("DELETE FROM run_diagnoses WHERE run_id = $1")
            .bind(run)
            .execute(&mut *tx)
            .await?;
        sqlx::query(
            "INSERT INTO run_diagnoses (run_id, schema_version, failed, kind, headline, \
             executable, error, source, diagnosis_json, created_unix_ns) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
        )
        .bind(run)
        .bind(d.schema as i64)
        .bind(i64::from(d.failed))
        .bind(lead.map(|v| v.kind.clone()))
        .bind(d.headline.clone())
        .bind(lead.and_then(|v| v.who.executable.clone()))
        .bind(lead.and_then(|v| v.what.result.clone()))
        .bind(source.to_string())
        .bind(doc.to_string())
        .bind(now_unix_ns())
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(Some(Ok(())))
    }

    /// The diagnosis stored with run `run`, if any.
    pub async fn diagnosis(&self, run: i64) -> Result<Option<DiagnosisRow>, StoreError> {
        Ok(sqlx::query_as(
            "SELECT run_id, failed, kind, headline, executable, error, source, \
             created_unix_ns, diagnosis_json FROM run_diagnoses WHERE run_id = $1",
        )
        .bind(run)
        .fetch_optional(&self.pool)
        .await?)
    }

    /// The newest stored diagnoses (without their documents), newest run first.
    pub(crate) async fn diagnoses(&self, limit: i64) -> Result<Vec<DiagnosisRow>, StoreError> {
        Ok(sqlx::query_as(
            "SELECT run_id, failed, kind, headline, executable, error, source, \
             created_unix_ns, '' AS diagnosis_json FROM run_diagnoses \
             ORDER BY run_id DESC LIMIT $1",
        )
        .bind(limit)
        .fetch_all(&self.pool)
        .await?)
    }

    /// The stored diagnoses of the given runs (for lists), by run id.
    pub(crate) async fn diagnosis_heads(
        &self,
        runs: &[i64],
    ) -> Result<BTreeMap<i64, DiagnosisRow>, StoreError> {
        let mut out = BTreeMap::new();
        for group in runs.chunks(256) {
            if group.is_empty() {
                continue;
            }
            let marks: Vec<String> = (1..=group.len()).map(|i| format!("${i}")).collect();
            let sql = format!(
                "SELECT run_id, failed, kind, headline, executable, error, source, \
                 created_unix_ns, '' AS diagnosis_json FROM run_diagnoses \
                 WHERE run_id IN ({})",
                marks.join(", ")
            );
            let mut q = sqlx::query_as::<_, DiagnosisRow>(&sql);
            for id in group {
                q = q.bind(*id);
            }
            for r in q.fetch_all(&self.pool).await? {
                out.insert(r.run_id, r);
            }
        }
        Ok(out)
    }
}

/// The page model of a stored diagnosis (`None` when the document has no verdict).
pub fn verdict_view(row: &DiagnosisRow) -> Option<VerdictView> {
    let doc: serde_json::Value = serde_json::from_str(&row.diagnosis_json).ok()?;
    let d = Stored::parse(&doc).ok()?;
    let v = d.lead()?;
    let mut facts: Vec<(&'static str, String)> = Vec::new();
    let w = &v.what;
    let mut what = Vec::new();
    if let Some(b) = w.request_bytes {
        what.push(format!(
            "a request of {}{}",
            fmt::bytes_u64(b),
            if w.request_exact {
                ""
            } else {
                " (as the message printed it)"
            }
        ));
    }
    if let Some(a) = &w.allocator {
        what.push(format!("from {a}"));
    }
    if let Some(dv) = w.device {
        what.push(format!("on GPU {dv}"));
    }
    if let Some(p) = w.pid {
        what.push(format!("pid {p}"));
    }
    if let Some(r) = &w.result {
        what.push(format!("failed with {r}"));
    }
    if !what.is_empty() {
        facts.push(("What", what.join(", ")));
    }
    if !v.when.is_empty() {
        facts.push(("When", v.when.replace('_', " ")));
    }
    let who = &v.who;
    let mut whos = Vec::new();
    for (label, x) in [
        ("executable", &who.executable),
        ("HLO", &who.hlo_instruction),
        ("op_name", &who.op_name),
        ("source", &who.source),
        ("Python", &who.python_frame),
        ("resident beside it", &who.resident_executable),
    ] {
        if let Some(x) = x {
            whos.push(format!("{label} {x}"));
        }
    }
    if !whos.is_empty() {
        facts.push(("Who", whos.join(" · ")));
    }
    if !v.why.is_empty() {
        facts.push(("Why", v.why.clone()));
    }
    if !v.fix.advice.is_empty() {
        facts.push(("Fix", v.fix.advice.clone()));
    }
    if let Some(c) = &v.fix.check {
        facts.push((
            "Checked",
            format!(
                "{} ({}): {}",
                if c.passed { "yes" } else { "not confirmed" },
                c.method.replace('_', " "),
                c.detail
            ),
        ));
    }
    Some(VerdictView {
        ledger: d.ledger.as_ref().map(super::ledger::ledger_view),
        kind: v.kind.clone(),
        failure: v.failure,
        headline: if v.headline.is_empty() {
            d.headline.clone()
        } else {
            v.headline.clone()
        },
        facts,
        figures: v
            .figures
            .iter()
            .map(|(k, x)| {
                let shown = if k.ends_with("_bytes") {
                    fmt::bytes_u64(*x)
                } else {
                    x.to_string()
                };
                (k.clone(), shown)
            })
            .collect(),
        evidence: v
            .evidence
            .iter()
            .map(|c| {
                let at = match c.line {
                    Some(l) => format!("{}:{l}", c.file),
                    None => c.file.clone(),
                };
                (at, c.what.clone())
            })
            .collect(),
        others: d
            .verdicts
            .iter()
            .filter(|o| !std::ptr::eq(*o, v))
            .map(|o| (o.kind.clone(), o.headline.clone()))
            .collect(),
        missing: d
            .missing
            .iter()
            .map(|m| (m.evidence.clone(), m.would_add.clone()))
            .collect(),
        source: format!("{}, stored {}", row.source, fmt::wall(row.created_unix_ns)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_what_is_not_a_diagnosis() {
        for bad in [
            serde_json::json!([1, 2]),
            serde_json::json!({"schema": 2, "failed": true, "headline": "", "verdicts": []}),
            serde_json::json!({"schema": 1, "failed": "yes", "headline": "", "verdicts": []}),
            serde_json::json!({"schema": 1, "failed": true, "verdicts": []}),
            serde_json::json!({"schema": 1, "failed": true, "headline": "x", "verdicts": {}}),
        ] {
            assert!(Stored::parse(&bad).is_err(), "{bad}");
        }
        let ok = serde_json::json!({"schema": 1, "failed": false, "headline": "no failure",
            "verdicts": [{"kind": "pool_limit_ignored", "failure": false, "future_field": 3}],
            "added_later": {"x": 1}});
        let d = Stored::parse(&ok).unwrap();
        assert_eq!(
            d.lead().map(|v| v.kind.as_str()),
            Some("pool_limit_ignored")
        );
    }
}
