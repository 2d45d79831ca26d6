//! A Chrome / Perfetto trace-event document of a run (`{"traceEvents":[…]}`): live-bytes
//! counters from the peak-preserving timeline, complete events for API calls, instants
//! for failures. Streamed in chunks of at most [`SPAN_PAGE`] events (a few MiB), so
//! neither a run of millions of events nor many readers at once make the daemon hold the
//! document.

use serde_json::json;

use super::trace::parse_cursor;
use crate::db::{Store, StoreError};

/// Most complete events written to one Perfetto export.
pub const MAX_TRACE_SPANS: usize = 200_000;

/// Stored events read (and written out) per chunk.
const SPAN_PAGE: usize = 8192;

fn us(ns: u64) -> f64 {
    ns as f64 / 1000.0
}

/// State of the Perfetto export between chunks.
pub struct Perfetto {
    store: Store,
    run: i64,
    t0: u64,
    devices: Vec<i64>,
    /// Index into `devices` of the device whose events are being written.
    device: usize,
    cursor: Option<(i64, usize)>,
    spans: usize,
    truncated: bool,
    /// Something was written after `[` (the next event needs a comma).
    wrote_event: bool,
    done: bool,
}

impl Perfetto {
    /// The export of run `run`, and its first chunk (the header, process names and the
    /// live-bytes counters); `None` when there is no such run.
    pub async fn start(store: Store, run: i64) -> Result<Option<(Self, String)>, StoreError> {
        let Some(detail) = store.run(run).await? else {
            return Ok(None);
        };
        let mut out = String::from("{\"traceEvents\":[");
        let mut wrote = false;
        let mut push = |out: &mut String, v: serde_json::Value| {
            if wrote {
                out.push(',');
            }
            wrote = true;
            out.push_str(&v.to_string());
        };
        push(
            &mut out,
            json!({"name":"process_name","ph":"M","pid":0,"tid":0,
            "args":{"name":format!("memwatch run {} ({})", detail.run.id, detail.run.run_key)}}),
        );
        for p in &detail.processes {
            push(
                &mut out,
                json!({"name":"process_name","ph":"M","pid":p.pid,"tid":0,
                "args":{"name":format!("pid {} {}", p.pid, p.argv.join(" "))}}),
            );
        }
        for d in &detail.run.devices {
            if let Some(tl) = store.timeline(run, d.device, None, None, 5000).await? {
                let name = format!("live bytes device {}", d.device);
                for p in &tl.points {
                    push(
                        &mut out,
                        json!({"name":name,"ph":"C","pid":0,"tid":0,"ts":us(p.t_ns),
                        "args":{"bytes":p.max}}),
                    );
                    push(
                        &mut out,
                        json!({"name":name,"ph":"C","pid":0,"tid":0,
                        "ts":us(p.t_ns + tl.bucket_ns / 2),"args":{"bytes":p.last}}),
                    );
                }
            }
        }
        let state = Self {
            t0: detail.run.t0_mono_ns.max(0) as u64,
            devices: detail.run.devices.iter().map(|d| d.device).collect(),
            store,
            run,
            device: 0,
            cursor: None,
            spans: 0,
            truncated: false,
            wrote_event: wrote,
            done: false,
        };
        Ok(Some((state, out)))
    }

    /// The next chunk of the document, `None` after its end.
    pub async fn next_chunk(&mut self) -> Result<Option<String>, StoreError> {
        if self.done {
            return Ok(None);
        }
        let Some(&device) = self.devices.get(self.device).filter(|_| !self.truncated) else {
            self.done = true;
            return Ok(Some(self.tail()));
        };
        let page = self
            .store
            .events(self.run, device, None, None, self.cursor, SPAN_PAGE)
            .await?;
        let Some(page) = page else {
            self.next_device();
            return Ok(Some(String::new()));
        };
        let mut out = String::with_capacity(page.events.len() * 200);
        for e in &page.events {
            let v = match e.kind {
                "alloc_failed" | "free_failed" => {
                    json!({"name":format!("{} FAILED {} B", e.api, e.size),"ph":"i",
                    "s":"g","pid":e.pid,"tid":e.tid,"ts":us(e.ts_ns.saturating_sub(self.t0)),
                    "args":{"size":e.size,"result":e.result,"device":e.device}})
                }
                _ => {
                    let dur = if e.kind == "api_span" {
                        e.aux.max(e.duration_ns)
                    } else {
                        e.duration_ns
                    };
                    // A slice from the call's start (allocating calls are stamped when
                    // they returned).
                    json!({"name":e.api,"cat":e.kind,"ph":"X","pid":e.pid,
                        "tid":e.tid,"ts":us(e.start_ns.saturating_sub(self.t0)),"dur":us(dur),
                        "args":{"size":e.size,"ptr":format!("{:#x}", e.ptr),
                            "device":e.device,"live_delta":e.delta}})
                }
            };
            if self.wrote_event {
                out.push(',');
            }
            self.wrote_event = true;
            out.push_str(&v.to_string());
            self.spans += 1;
            if self.spans >= MAX_TRACE_SPANS {
                self.truncated = true;
                return Ok(Some(out));
            }
        }
        match page.next_cursor.as_deref().and_then(parse_cursor) {
            Some(c) => self.cursor = Some(c),
            None => self.next_device(),
        }
        Ok(Some(out))
    }

    fn next_device(&mut self) {
        self.device += 1;
        self.cursor = None;
    }

    /// The end of the document: the metadata.
    fn tail(&self) -> String {
        let meta = json!({
            "memwatch_run": self.run,
            "events_exported": self.spans,
            "events_truncated_at": if self.truncated { Some(MAX_TRACE_SPANS) } else { None },
        });
        format!("],\"displayTimeUnit\":\"ms\",\"metadata\":{meta}}}")
    }
}
