-- The allocations live at each device's peak, one row each (issue 33 item 2): ingest keeps
-- them current with the rows that changed since the peak it stored last, instead of
-- writing the whole live set as one blob at every commit that moves the peak (3M live
-- allocations: 120 MB per commit). `peak_snapshots` keeps the peak's figures; its `allocs`
-- blob is empty for rows written since, and older rows keep theirs. The key is the live
-- set's (process image, family, pointer). The sqlite twin is
-- migrations/sqlite/0010_peak_allocs.sql: the same table.
CREATE TABLE peak_allocs (
    run_id BIGINT NOT NULL,
    device BIGINT NOT NULL,
    pid BIGINT NOT NULL,
    image BIGINT NOT NULL,
    family BIGINT NOT NULL,
    ptr BIGINT NOT NULL,
    tid BIGINT NOT NULL,
    size BIGINT NOT NULL,
    ts_ns BIGINT NOT NULL,
    api BIGINT NOT NULL,
    mem_kind BIGINT NOT NULL,
    PRIMARY KEY (run_id, device, pid, image, family, ptr)
);
