//! A Chrome / Perfetto trace-event document of a run (`{"traceEvents":[…]}`): live-bytes
//! counters from the peak-preserving timeline, complete events for API calls, instants
//! for failures.

use serde_json::{json, Value};

use super::trace::{parse_cursor, PAGE};
use crate::db::{Store, StoreError};

/// Most complete events written to one Perfetto export.
pub const MAX_TRACE_SPANS: usize = 200_000;

fn us(ns: u64) -> f64 {
    ns as f64 / 1000.0
}

/// Builds the Perfetto / Chrome trace-event document of a run.
pub async fn perfetto(store: &Store, run: i64) -> Result<Option<Value>, StoreError> {
    let Some(detail) = store.run(run).await? else {
        return Ok(None);
    };
    let t0 = detail.run.t0_mono_ns.max(0) as u64;
    let mut ev: Vec<Value> = Vec::new();
    ev.push(json!({"name":"process_name","ph":"M","pid":0,"tid":0,
        "args":{"name":format!("memwatch run {} ({})", detail.run.id, detail.run.run_key)}}));
    for p in &detail.processes {
        ev.push(json!({"name":"process_name","ph":"M","pid":p.pid,"tid":0,
            "args":{"name":format!("pid {} {}", p.pid, p.argv.join(" "))}}));
    }
    for d in &detail.run.devices {
        if let Some(tl) = store.timeline(run, d.device, None, None, 5000).await? {
            let name = format!("live bytes device {}", d.device);
            for p in &tl.points {
                ev.push(json!({"name":name,"ph":"C","pid":0,"tid":0,"ts":us(p.t_ns),
                    "args":{"bytes":p.max}}));
                ev.push(json!({"name":name,"ph":"C","pid":0,"tid":0,
                    "ts":us(p.t_ns + tl.bucket_ns / 2),"args":{"bytes":p.last}}));
            }
        }
    }
    let mut spans = 0usize;
    let mut truncated = false;
    'devices: for d in &detail.run.devices {
        let mut cursor = None;
        loop {
            let Some(page) = store
                .events(run, d.device, None, None, cursor, PAGE)
                .await?
            else {
                break;
            };
            for e in &page.events {
                match e.kind {
                    "alloc_failed" | "free_failed" => {
                        ev.push(
                            json!({"name":format!("{} FAILED {} B", e.api, e.size),"ph":"i",
                            "s":"g","pid":e.pid,"tid":e.tid,"ts":us(e.ts_ns.saturating_sub(t0)),
                            "args":{"size":e.size,"result":e.result,"device":e.device}}),
                        );
                    }
                    _ => {
                        let dur = if e.kind == "api_span" {
                            e.aux.max(e.duration_ns)
                        } else {
                            e.duration_ns
                        };
                        // A slice from the call's start (allocating calls are
                        // stamped when they returned).
                        ev.push(json!({"name":e.api,"cat":e.kind,"ph":"X","pid":e.pid,
                            "tid":e.tid,"ts":us(e.start_ns.saturating_sub(t0)),"dur":us(dur),
                            "args":{"size":e.size,"ptr":format!("{:#x}", e.ptr),
                                "device":e.device,"live_delta":e.delta}}));
                    }
                }
                spans += 1;
                if spans >= MAX_TRACE_SPANS {
                    truncated = true;
                    break 'devices;
                }
            }
            match page.next_cursor.as_deref().and_then(parse_cursor) {
                Some(c) => cursor = Some(c),
                None => break,
            }
        }
    }
    Ok(Some(json!({
        "traceEvents": ev,
        "displayTimeUnit": "ms",
        "metadata": {
            "memwatch_run": run,
            "events_exported": spans,
            "events_truncated_at": if truncated { Some(MAX_TRACE_SPANS) } else { None },
        }
    })))
}
