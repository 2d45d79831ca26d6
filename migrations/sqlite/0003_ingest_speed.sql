-- Ingest and timeline speed (issue 5).
-- Rollups become a WITHOUT ROWID table clustered on its key: one b-tree to maintain per
-- upsert instead of a table plus its primary-key index, and a timeline read (one run,
-- device and level, a bucket range) reads a few adjacent pages instead of one page per
-- bucket scattered over the file, which is what made the first query after a start slow.
CREATE TABLE rollups_clustered (
    run_id BIGINT NOT NULL,
    device BIGINT NOT NULL,
    level BIGINT NOT NULL,
    bucket BIGINT NOT NULL,
    lo BIGINT NOT NULL,
    hi BIGINT NOT NULL,
    last BIGINT NOT NULL,
    PRIMARY KEY (run_id, device, level, bucket)
) WITHOUT ROWID;
INSERT INTO rollups_clustered (run_id, device, level, bucket, lo, hi, last)
    SELECT run_id, device, level, bucket, lo, hi, last FROM rollups;
DROP TABLE rollups;
ALTER TABLE rollups_clustered RENAME TO rollups;

-- Raw-event reads (timelines at fine zoom, the events API) select chunks by
-- `ts_last >= from AND ts_first < to`: with ts_first in the index that test runs on the
-- index alone instead of reading every later chunk's row (and its blob's first page).
DROP INDEX event_chunks_by_time;
CREATE INDEX event_chunks_by_time ON event_chunks (run_id, device, ts_last, ts_first);
