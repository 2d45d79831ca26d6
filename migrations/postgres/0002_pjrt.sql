-- PJRT runtime records (issue 9). The SQLite twin is migrations/sqlite/0002_pjrt.sql:
-- same tables, columns and indexes; only the id type differs.
-- Times are CLOCK_MONOTONIC ns as captured (like events); handles are the shim's
-- PJRT_LoadedExecutable pointers stored bit for bit as BIGINT.

-- Executables compiled or loaded through the PJRT C API, with their compiled memory
-- statistics (PJRT_Executable_GetCompiledMemoryStats; valid when flags bit 0 is set).
CREATE TABLE pjrt_executables (
    id BIGSERIAL PRIMARY KEY,
    run_id BIGINT NOT NULL REFERENCES runs(id),
    pid BIGINT NOT NULL,
    handle BIGINT NOT NULL,
    ts_ns BIGINT NOT NULL,
    flags BIGINT NOT NULL,
    devices TEXT NOT NULL,
    name TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    generated_code_bytes BIGINT NOT NULL,
    argument_bytes BIGINT NOT NULL,
    output_bytes BIGINT NOT NULL,
    alias_bytes BIGINT NOT NULL,
    temp_bytes BIGINT NOT NULL,
    host_generated_code_bytes BIGINT NOT NULL,
    host_argument_bytes BIGINT NOT NULL,
    host_output_bytes BIGINT NOT NULL,
    host_alias_bytes BIGINT NOT NULL,
    host_temp_bytes BIGINT NOT NULL
);
CREATE INDEX pjrt_executables_by_run ON pjrt_executables (run_id, pid, handle);

-- One execute per device: the call (start_ns + call_ns, its result and the size its
-- error names) and, when the device-side completion was seen, its end and result.
CREATE TABLE pjrt_executions (
    id BIGSERIAL PRIMARY KEY,
    run_id BIGINT NOT NULL REFERENCES runs(id),
    pid BIGINT NOT NULL,
    device BIGINT NOT NULL,
    handle BIGINT NOT NULL,
    start_ns BIGINT NOT NULL,
    call_ns BIGINT NOT NULL,
    result BIGINT NOT NULL,
    requested_bytes BIGINT NOT NULL,
    complete_ns BIGINT,
    complete_result BIGINT,
    complete_requested_bytes BIGINT
);
CREATE INDEX pjrt_executions_by_run ON pjrt_executions (run_id, device, start_ns);
CREATE INDEX pjrt_executions_by_handle ON pjrt_executions (run_id, pid, handle, start_ns);

-- PJRT_Device_MemoryStats answers: the framework allocator's own counters (BFC).
-- flags bit i: field i of the eight counters is valid.
CREATE TABLE pjrt_memory_stats (
    run_id BIGINT NOT NULL REFERENCES runs(id),
    pid BIGINT NOT NULL,
    device BIGINT NOT NULL,
    ts_ns BIGINT NOT NULL,
    flags BIGINT NOT NULL,
    bytes_in_use BIGINT NOT NULL,
    peak_bytes_in_use BIGINT NOT NULL,
    largest_free_block BIGINT NOT NULL,
    pool_bytes BIGINT NOT NULL,
    peak_pool_bytes BIGINT NOT NULL,
    bytes_limit BIGINT NOT NULL,
    num_allocs BIGINT NOT NULL,
    largest_alloc_size BIGINT NOT NULL
);
CREATE INDEX pjrt_memory_stats_by_time ON pjrt_memory_stats (run_id, device, ts_ns);

-- PJRT buffers (jax.Array storage): created by api (execute output, host transfer, copy)
-- with their on-device size; producer = the executable handle for execute outputs.
CREATE TABLE pjrt_buffers (
    id BIGSERIAL PRIMARY KEY,
    run_id BIGINT NOT NULL REFERENCES runs(id),
    pid BIGINT NOT NULL,
    device BIGINT NOT NULL,
    ptr BIGINT NOT NULL,
    size BIGINT NOT NULL,
    api BIGINT NOT NULL,
    producer BIGINT NOT NULL,
    ts_ns BIGINT NOT NULL,
    freed_ts_ns BIGINT
);
CREATE INDEX pjrt_buffers_by_ptr ON pjrt_buffers (run_id, pid, ptr, freed_ts_ns);
CREATE INDEX pjrt_buffers_by_time ON pjrt_buffers (run_id, device, ts_ns);

-- The dump file a stored XLA module came from (attaching the same dump again replaces it).
ALTER TABLE xla_modules ADD COLUMN file TEXT NOT NULL DEFAULT '';
