-- Retention bookkeeping: the newest raw-event time (monotonic ns, like events) whose
-- chunk `memwatch serve --retain-raw-days` deleted from this run. Timelines over time
-- before it are answered from the finest rollup level instead of missing raw events.
ALTER TABLE runs ADD COLUMN raw_pruned_to_ns BIGINT;
