-- Dashboard attachments (dash helper): XLA dumps and allocator logs stored for the
-- Incident and XLA module pages. Written by `memwatch import --log FILE [--xla-dump DIR]`.
-- The twin file for the other backend has the same tables and columns.

-- One analysed XLA dump directory (or file): where it came from, optionally its run.
CREATE TABLE xla_dumps (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id BIGINT REFERENCES runs(id),
    source TEXT NOT NULL,
    created_unix_ns BIGINT NOT NULL
);

-- One module of a dump: the headline figures plus the full analysis
-- (memwatch_analysis::xla::ModuleReport as JSON), from which pages draw and diff.
CREATE TABLE xla_dump_modules (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    dump_id BIGINT NOT NULL REFERENCES xla_dumps(id),
    name TEXT NOT NULL,
    argument_bytes BIGINT NOT NULL,
    output_bytes BIGINT NOT NULL,
    temp_bytes BIGINT NOT NULL,
    peak_bytes BIGINT,
    total_allocation_bytes BIGINT NOT NULL,
    report_json TEXT NOT NULL
);
CREATE INDEX xla_dump_modules_by_dump ON xla_dump_modules (dump_id);

-- A JAX/XLA/TSL log (stderr of a run) kept verbatim; the Incident page parses and
-- diagnoses it (memwatch_analysis::log), joined to dump_id when a dump was attached.
CREATE TABLE incident_logs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id BIGINT REFERENCES runs(id),
    dump_id BIGINT REFERENCES xla_dumps(id),
    source TEXT NOT NULL,
    log_text TEXT NOT NULL,
    mem_fraction_ppm BIGINT,
    created_unix_ns BIGINT NOT NULL
);

-- Live-set checkpoints for "what was live at instant t": the counted allocations live
-- after all events of chunks up to after_chunk (40-byte records, see store::snapshot);
-- ts_max is the latest event time among those chunks. Built lazily by the dashboard.
CREATE TABLE live_checkpoints (
    run_id BIGINT NOT NULL REFERENCES runs(id),
    device BIGINT NOT NULL,
    after_chunk BIGINT NOT NULL,
    ts_max BIGINT NOT NULL,
    live_bytes BIGINT NOT NULL,
    allocs BLOB NOT NULL,
    PRIMARY KEY (run_id, device, after_chunk)
);
