-- The framework view and the stored verdict (issues 22 item 6, 23). The SQLite twin is
-- migrations/sqlite/0007_framework_view.sql (there the rollups are WITHOUT ROWID).

-- The OOM doctor's diagnosis of a run (memwatch_analysis::doctor::Diagnosis as JSON), one
-- per run: storing again replaces it. kind / headline / executable / error are the first
-- verdict's (what lists show without parsing the document); failed is 0 or 1.
CREATE TABLE run_diagnoses (
    run_id BIGINT NOT NULL REFERENCES runs(id),
    schema_version BIGINT NOT NULL,
    failed BIGINT NOT NULL,
    kind TEXT,
    headline TEXT NOT NULL,
    executable TEXT,
    error TEXT,
    source TEXT NOT NULL,
    diagnosis_json TEXT NOT NULL,
    created_unix_ns BIGINT NOT NULL,
    PRIMARY KEY (run_id)
);

-- PJRT compiles and loads (PJRT_Client_Compile, PJRT_Executable_DeserializeAndLoad): the
-- call's start and length, its result, the executable it made (0 when it failed).
CREATE TABLE pjrt_compiles (
    run_id BIGINT NOT NULL REFERENCES runs(id),
    pid BIGINT NOT NULL,
    api BIGINT NOT NULL,
    handle BIGINT NOT NULL,
    ts_ns BIGINT NOT NULL,
    duration_ns BIGINT NOT NULL,
    result BIGINT NOT NULL
);
CREATE INDEX pjrt_compiles_by_time ON pjrt_compiles (run_id, ts_ns);

-- Frees of PJRT buffers in time order (the framework view's background builder sweeps
-- creations by ts_ns and frees by freed_ts_ns).
CREATE INDEX pjrt_buffers_by_free ON pjrt_buffers (run_id, device, freed_ts_ns);

-- The framework view's series names of a run: who produced live buffers or ran
-- (an executable's name, or what made a buffer without an execute).
CREATE TABLE framework_producers (
    run_id BIGINT NOT NULL REFERENCES runs(id),
    idx BIGINT NOT NULL,
    name TEXT NOT NULL,
    PRIMARY KEY (run_id, idx)
);

-- The framework view's rollups, built in the background from the pjrt_* tables (and the
-- PyTorch block events of a snapshot run): per series (allocator bytes in use, pool,
-- limit, live buffers, PyTorch allocated, executions, per-producer live buffers and
-- executions; see daemon/src/framework/series.rs) the buckets of 2^(18+2*level) ns at
-- every level from the run's base level up. lo/hi/last: min/max/last value in the bucket
-- (counts: lo = executions started, hi = their busy ns, last = 0).
CREATE TABLE framework_rollups (
    run_id BIGINT NOT NULL,
    device BIGINT NOT NULL,
    series BIGINT NOT NULL,
    level BIGINT NOT NULL,
    bucket BIGINT NOT NULL,
    lo BIGINT NOT NULL,
    hi BIGINT NOT NULL,
    last BIGINT NOT NULL,
    PRIMARY KEY (run_id, device, series, level, bucket)
);

-- How far the builder got on each (run, device): swept_to_ns (monotonic ns, exclusive),
-- its finest level, whether it is final (the run had ended), and the values it carries
-- into the next sweep (JSON).
CREATE TABLE framework_progress (
    run_id BIGINT NOT NULL REFERENCES runs(id),
    device BIGINT NOT NULL,
    base_level BIGINT NOT NULL,
    swept_to_ns BIGINT NOT NULL,
    final BIGINT NOT NULL,
    state TEXT NOT NULL,
    PRIMARY KEY (run_id, device)
);
