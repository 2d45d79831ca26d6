-- Ingest speed (issue 5). Event chunks hold already-dense binary events (about 640 KiB
-- per chunk); PostgreSQL's default TOAST storage ran pglz over every one of them, which
-- was most of the server's CPU time during ingest (perf: pglz_compress ~60% of the
-- postgres process). Store them out of line uncompressed: more disk, far less CPU.
-- (The SQLite twin, migrations/sqlite/0003_ingest_speed.sql, also clusters the rollups;
-- PostgreSQL reads them through the primary-key index.)
ALTER TABLE event_chunks ALTER COLUMN events SET STORAGE EXTERNAL;
ALTER TABLE event_chunks ALTER COLUMN deltas SET STORAGE EXTERNAL;
-- Peak snapshots (40-byte records, rewritten whenever a peak moves): same reason.
ALTER TABLE peak_snapshots ALTER COLUMN allocs SET STORAGE EXTERNAL;

-- Raw-event reads select chunks by `ts_last >= from AND ts_first < to`: ts_first in the
-- index lets that test run on the index (as in the SQLite twin).
DROP INDEX event_chunks_by_time;
CREATE INDEX event_chunks_by_time ON event_chunks (run_id, device, ts_last, ts_first);
