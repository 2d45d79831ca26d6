-- memwatch storage schema (PostgreSQL). The SQLite twin is migrations/sqlite/0001_init.sql:
-- same tables, columns and indexes; only the id and blob types differ.
-- Times: *_unix_ns are wall-clock ns; ts_* and *_mono_ns are CLOCK_MONOTONIC ns as captured.

CREATE TABLE nodes (
    id BIGSERIAL PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    first_seen_unix_ns BIGINT NOT NULL,
    last_seen_unix_ns BIGINT NOT NULL
);

CREATE TABLE devices (
    node_id BIGINT NOT NULL REFERENCES nodes(id),
    ordinal BIGINT NOT NULL,
    vendor TEXT NOT NULL,
    name TEXT NOT NULL,
    total_bytes BIGINT NOT NULL,
    PRIMARY KEY (node_id, ordinal)
);

-- A `memwatch run`, an attach, an import or a job tag: one timeline per device.
CREATE TABLE runs (
    id BIGSERIAL PRIMARY KEY,
    node_id BIGINT NOT NULL REFERENCES nodes(id),
    run_key TEXT NOT NULL,
    t0_mono_ns BIGINT NOT NULL,
    wall_anchor_unix_ns BIGINT NOT NULL,
    created_unix_ns BIGINT NOT NULL,
    last_ts_ns BIGINT NOT NULL,
    event_count BIGINT NOT NULL,
    dropped_events BIGINT NOT NULL,
    UNIQUE (node_id, run_key)
);

-- Ingest idempotency: the last committed batch of each (node, stream).
CREATE TABLE streams (
    node_id BIGINT NOT NULL,
    stream_id BIGINT NOT NULL,
    last_seq BIGINT NOT NULL,
    PRIMARY KEY (node_id, stream_id)
);

CREATE TABLE processes (
    run_id BIGINT NOT NULL REFERENCES runs(id),
    pid BIGINT NOT NULL,
    ppid BIGINT NOT NULL,
    mono_anchor_ns BIGINT NOT NULL,
    wall_anchor_unix_ns BIGINT NOT NULL,
    hostname TEXT NOT NULL,
    shim_version TEXT NOT NULL,
    argv TEXT NOT NULL,
    exit_code BIGINT,
    end_ts_ns BIGINT,
    dropped_events BIGINT NOT NULL,
    PRIMARY KEY (run_id, pid)
);

-- Per run and device: counters and the peak.
CREATE TABLE run_devices (
    run_id BIGINT NOT NULL REFERENCES runs(id),
    device BIGINT NOT NULL,
    live_bytes BIGINT NOT NULL,
    peak_bytes BIGINT NOT NULL,
    peak_ts_ns BIGINT NOT NULL,
    alloc_count BIGINT NOT NULL,
    free_count BIGINT NOT NULL,
    failed_count BIGINT NOT NULL,
    PRIMARY KEY (run_id, device)
);

-- Raw events in chunks: `events` holds n_events wire-encoded 72-byte events exactly as
-- captured, `deltas` one little-endian i64 per event (its effect on the device's live
-- bytes). live_start/min/max/end describe the live bytes across the chunk.
CREATE TABLE event_chunks (
    id BIGSERIAL PRIMARY KEY,
    run_id BIGINT NOT NULL REFERENCES runs(id),
    device BIGINT NOT NULL,
    ts_first BIGINT NOT NULL,
    ts_last BIGINT NOT NULL,
    n_events BIGINT NOT NULL,
    live_start BIGINT NOT NULL,
    live_min BIGINT NOT NULL,
    live_max BIGINT NOT NULL,
    live_end BIGINT NOT NULL,
    created_unix_ns BIGINT NOT NULL,
    events BYTEA NOT NULL,
    deltas BYTEA NOT NULL
);
CREATE INDEX event_chunks_by_time ON event_chunks (run_id, device, ts_last);
CREATE INDEX event_chunks_by_age ON event_chunks (created_unix_ns);

-- Multi-resolution live-bytes rollups: bucket = (ts - t0) >> (18 + 2 * level).
CREATE TABLE rollups (
    run_id BIGINT NOT NULL,
    device BIGINT NOT NULL,
    level BIGINT NOT NULL,
    bucket BIGINT NOT NULL,
    lo BIGINT NOT NULL,
    hi BIGINT NOT NULL,
    last BIGINT NOT NULL,
    PRIMARY KEY (run_id, device, level, bucket)
);

-- The allocations live at each device's peak (40-byte records, see store::snapshot).
CREATE TABLE peak_snapshots (
    run_id BIGINT NOT NULL,
    device BIGINT NOT NULL,
    peak_bytes BIGINT NOT NULL,
    peak_ts_ns BIGINT NOT NULL,
    allocs BYTEA NOT NULL,
    PRIMARY KEY (run_id, device)
);

CREATE TABLE device_samples (
    node_id BIGINT NOT NULL,
    device BIGINT NOT NULL,
    memory BIGINT NOT NULL,
    ts_ns BIGINT NOT NULL,
    used_bytes BIGINT NOT NULL,
    total_bytes BIGINT NOT NULL,
    source TEXT NOT NULL,
    received_unix_ns BIGINT NOT NULL
);
CREATE INDEX device_samples_by_time ON device_samples (node_id, device, memory, ts_ns);

CREATE TABLE annotations (
    id BIGSERIAL PRIMARY KEY,
    run_id BIGINT NOT NULL REFERENCES runs(id),
    pid BIGINT NOT NULL,
    tid BIGINT NOT NULL,
    ts_ns BIGINT NOT NULL,
    device BIGINT NOT NULL,
    text TEXT NOT NULL
);
CREATE INDEX annotations_by_run ON annotations (run_id, ts_ns);

-- Failed allocations (out of memory and other errors).
CREATE TABLE incidents (
    id BIGSERIAL PRIMARY KEY,
    run_id BIGINT NOT NULL REFERENCES runs(id),
    pid BIGINT NOT NULL,
    tid BIGINT NOT NULL,
    device BIGINT NOT NULL,
    ts_ns BIGINT NOT NULL,
    size BIGINT NOT NULL,
    result BIGINT NOT NULL,
    api TEXT NOT NULL,
    live_bytes BIGINT NOT NULL,
    created_unix_ns BIGINT NOT NULL
);
CREATE INDEX incidents_by_run ON incidents (run_id, ts_ns);
CREATE INDEX incidents_by_time ON incidents (created_unix_ns);

CREATE TABLE xla_modules (
    id BIGSERIAL PRIMARY KEY,
    run_id BIGINT NOT NULL REFERENCES runs(id),
    name TEXT NOT NULL,
    argument_bytes BIGINT NOT NULL,
    output_bytes BIGINT NOT NULL,
    temp_bytes BIGINT NOT NULL,
    alias_bytes BIGINT NOT NULL,
    total_allocation_bytes BIGINT NOT NULL,
    report_json TEXT NOT NULL
);
CREATE INDEX xla_modules_by_run ON xla_modules (run_id);

CREATE TABLE gate_results (
    id BIGSERIAL PRIMARY KEY,
    run_id BIGINT REFERENCES runs(id),
    name TEXT NOT NULL,
    passed BIGINT NOT NULL,
    measured_bytes BIGINT NOT NULL,
    limit_bytes BIGINT NOT NULL,
    report_json TEXT NOT NULL,
    created_unix_ns BIGINT NOT NULL
);
CREATE INDEX gate_results_by_run ON gate_results (run_id);
