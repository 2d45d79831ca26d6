//! The OpenAPI 3.0 document served at `/api/openapi.json`, written by hand. A test checks
//! that every route of the router is documented and every documented route answers.

use serde_json::{json, Value};

/// (method, path) of every route the router serves.
pub const ROUTES: &[(&str, &str)] = &[
    ("get", "/api/nodes"),
    ("get", "/api/runs"),
    ("get", "/api/runs/{id}"),
    ("get", "/api/runs/{id}/timeline"),
    ("get", "/api/runs/{id}/peak"),
    ("get", "/api/runs/{id}/events"),
    ("get", "/api/runs/{id}/annotations"),
    ("get", "/api/runs/{id}/runtime"),
    ("post", "/api/runs/{id}/xla"),
    ("get", "/api/incidents"),
    ("post", "/api/ingest"),
    ("get", "/api/ingest"),
    ("get", "/api/openapi.json"),
    ("get", "/metrics"),
];

fn q(name: &str, schema: Value, desc: &str) -> Value {
    json!({"name": name, "in": "query", "required": false, "schema": schema, "description": desc})
}

/// A signed 64-bit integer (run ids, device ordinals; counts clamped by the handler).
fn int64() -> Value {
    json!({"type": "integer", "format": "int64"})
}

/// A non-negative integer: ns since a run's start, page sizes, list lengths.
fn count() -> Value {
    json!({"type": "integer", "format": "int64", "minimum": 0})
}

/// Downsampling buckets: 1..=100000.
fn points() -> Value {
    json!({"type": "integer", "minimum": 1, "maximum": 100000})
}

fn string() -> Value {
    json!({"type": "string"})
}

/// A paged endpoint's cursor, "A:B" as the previous page's `next_cursor` gave it (two
/// 64-bit integers; `b_signed`: B may be negative), or empty for the first page.
fn cursor(b_signed: bool) -> Value {
    let b = if b_signed {
        "-?[0-9]{1,18}"
    } else {
        "[0-9]{1,18}"
    };
    json!({"type": "string", "pattern": format!("^(-?[0-9]{{1,18}}:{b})?$")})
}

fn id() -> Value {
    json!({"name": "id", "in": "path", "required": true, "schema": int64(), "description": "run id"})
}

/// An error answer: `{"error": "..."}`.
fn error(desc: &str) -> Value {
    json!({"description": desc, "content": {"application/json": {"schema": {
        "type": "object", "required": ["error"], "properties": {"error": {"type": "string"}}}}}})
}

fn unauthorized() -> Value {
    error("bearer token missing or wrong (when the daemon requires one)")
}

fn ok(desc: &str) -> Value {
    json!({
        "200": {"description": desc, "content": {"application/json": {"schema": {"type": "object"}}}},
        "401": unauthorized(),
        "404": error("no such run"),
        "400": error("bad parameter")
    })
}

fn with_413(mut responses: Value) -> Value {
    responses["413"] = error("body over --max-body-mib");
    responses
}

/// The document.
pub fn document() -> Value {
    json!({
        "openapi": "3.0.3",
        "info": {
            "title": "memwatch daemon API",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "GPU memory timelines, peaks and incidents. Bytes are integers; \
                times are ns since the run's start unless named *_unix_ns or *_mono_ns."
        },
        "components": {"securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}},
        "security": [{"bearer": []}],
        "paths": {
            "/api/nodes": {"get": {"summary": "Nodes with devices and latest samples (VRAM and GTT apart)", "responses": ok("{\"nodes\": [...]}")}},
            "/api/runs": {"get": {"summary": "Runs, newest first", "parameters": [q("limit", int64(), "at most this many, clamped to 1..10000 (default 100)")], "responses": ok("{\"runs\": [...]}")}},
            "/api/runs/{id}": {"get": {"summary": "One run: devices, processes, its first 1000 annotations (`annotation_count` says how many there are; `annotations_next_cursor` continues at /api/runs/{id}/annotations)", "parameters": [id()], "responses": ok("run")}},
            "/api/runs/{id}/annotations": {"get": {
                "summary": "A run's annotations (markers) in time order, paged",
                "parameters": [id(), q("from", count(), "ns since run start"), q("to", count(), "ns since run start (exclusive)"),
                    q("cursor", cursor(true), "next_cursor of the previous page (or annotations_next_cursor of the run)"), q("limit", count(), "page size, clamped to 1..100000 (default 1000)")],
                "responses": ok("{\"annotations\": [{\"pid\",\"tid\",\"ts_ns\",\"device\",\"text\"}], \"next_cursor\": \"TS:ID\"|null}")}},
            "/api/runs/{id}/timeline": {"get": {
                "summary": "Live bytes over time, downsampled to `points` buckets with min/max/last each (peaks are never hidden)",
                "parameters": [id(), q("device", int64(), "device ordinal (default 0)"),
                    q("from", count(), "ns since run start (default 0)"),
                    q("to", count(), "ns since run start, greater than `from` (default: run end)"),
                    q("points", points(), "buckets (default 2000)")],
                "responses": ok("{\"bucket_ns\":N, \"source\":\"rollup|raw\", \"points\":[{\"t_ns\",\"min\",\"max\",\"last\"}]}")}},
            "/api/runs/{id}/peak": {"get": {
                "summary": "Allocations live at the device's peak, grouped by size class, kind, thread and annotation; with PJRT records, `runtime`: the executable at the runtime peak, BFC bytes in use/pool, live bytes by XLA module (`by_xla_module`) and, with an attached dump, by HLO op category (`by_hlo_category`) and op_name (`by_hlo_op`, `hlo_buffers`)",
                "parameters": [id(), q("device", int64(), "device ordinal (default 0)"), q("top", count(), "largest allocations to list (default 20, at most 10000)")],
                "responses": ok("peak")}},
            "/api/runs/{id}/events": {"get": {
                "summary": "Raw events of a device, paged. `from`/`to` are ns since the run's start; each event's `ts_ns` is the raw CLOCK_MONOTONIC value as recorded: subtract the page's `t0_mono_ns` for the same offsets",
                "parameters": [id(), q("device", int64(), "device ordinal (default 0)"),
                    q("from", count(), "ns since run start"), q("to", count(), "ns since run start"),
                    q("cursor", cursor(false), "next_cursor of the previous page"), q("limit", count(), "page size, clamped to 1..100000 (default 1000)")],
                "responses": ok("{\"t0_mono_ns\": N, \"events\": [...], \"next_cursor\": \"...\"|null}")}},
            "/api/runs/{id}/runtime": {"get": {
                "summary": "PJRT runtime view of a device: the framework allocator's (BFC) bytes in use / pool / largest free block / limit over time, executions as spans, the executable running at the runtime peak with its compiled memory statistics, OOMs inside execute",
                "parameters": [id(), q("device", int64(), "device ordinal (default 0)"),
                    q("points", points(), "timeline samples (default 2000; each bucket keeps its largest sample)"),
                    q("limit", count(), "executions to list (default 10000, at most 1000000)"),
                    q("top", count(), "HLO buffers / op_names to list from an attached dump (default 20, at most 10000)")],
                "responses": ok("{\"timeline\":[{\"ts_ns\",\"bytes_in_use\",\"peak_bytes_in_use\",\"pool_bytes\",\"largest_free_block_bytes\",\"bytes_limit\"}], \"executions\":[{\"executable\",\"start_ns\",\"end_ns\",\"completed\",\"result\"}], \"peak\":{...}|null, \"peak_executable\":{...}|null, \"executables\":[...], \"ooms\":[...]}")}},
            "/api/runs/{id}/xla": {"post": {
                "summary": "Attach an XLA dump to a run: the body is `memwatch xla report DUMP --json`; the peak then groups its runtime attribution by XLA module and HLO op_name",
                "parameters": [id()],
                "requestBody": {"required": true, "content": {"application/json": {"schema": {"type": "object", "required": ["modules"],
                    "properties": {"modules": {"type": "array", "minItems": 1, "items": {"type": "object"}}, "source": {"type": "string"}}}}}},
                "responses": with_413(ok("{\"run_id\":N, \"modules\":N}"))}},
            "/api/incidents": {"get": {"summary": "Failed allocations (OOM and other errors), newest first",
                "parameters": [q("run", int64(), "only this run"), q("limit", int64(), "clamped to 1..10000 (default 100)")],
                "responses": ok("{\"incidents\": [...]}")}},
            "/api/ingest": {"get": {
                "summary": "Where an ingest stream stands: its last committed batch number (0: none yet) and the run `run` names on that node; `memwatch import` resumes after it",
                "parameters": [{"name": "node", "in": "query", "required": true, "schema": {"type": "string", "minLength": 1}, "description": "node name"},
                    {"name": "stream", "in": "query", "required": true, "schema": count(), "description": "stream id"},
                    q("run", string(), "run key")],
                "responses": ok("{\"node\",\"stream\",\"last_seq\",\"run_id\"}")},
                "post": {
                "summary": "Ingest a wire stream (16-byte preamble + frames, e.g. a .mwcap file)",
                "parameters": [{"name": "node", "in": "query", "required": true, "schema": {"type": "string", "minLength": 1}, "description": "node name"},
                    q("run", string(), "run key"),
                    q("stream", count(), "stream id (with seq: idempotent resend)"), q("seq", json!({"type": "integer", "format": "int64", "minimum": 1}), "batch number (give both stream and seq, or neither)")],
                "requestBody": {"required": true, "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}}},
                "responses": {"200": {"description": "{\"stream\",\"seq\",\"duplicate\",\"events\",\"run_id\"}", "content": {"application/json": {"schema": {"type": "object"}}}},
                    "400": error("malformed stream or parameter"),
                    "401": unauthorized(),
                    "413": error("body over --max-body-mib"),
                    "503": error("the writer is not taking batches (shutting down)")}}},
            "/api/openapi.json": {"get": {"summary": "This document", "responses": ok("OpenAPI 3.0 document")}},
            "/metrics": {"get": {"summary": "Prometheus text metrics", "responses": {"200": {"description": "text/plain; version=0.0.4"},
                "401": unauthorized()}}}
        }
    })
}
