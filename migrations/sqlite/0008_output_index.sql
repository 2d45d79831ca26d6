-- Which output of its executable a PJRT execute output buffer is (issue 23 item 1): the
-- index the shim records, or for captures made before it did, the one derived from the
-- order of the call's outputs (memwatch_analysis::runtime::OutputOrder). NULL for buffers
-- that are not execute outputs and for rows stored before this column. The postgres twin
-- is migrations/postgres/0008_output_index.sql: the same column.
ALTER TABLE pjrt_buffers ADD COLUMN output_index BIGINT;
