-- Failed requests of one device of a run in time order (issue 38): the run page's and the
-- framework view's chart marks (the first failure of each column, found by one index seek
-- per column) and their counts read the index alone, however many failures a run holds
-- (a JAX loop failing every step once its pool is full: 816,705 in 100 s). The sqlite
-- twin is migrations/sqlite/0009_incidents_by_device.sql: the same index.
CREATE INDEX incidents_by_device ON incidents (run_id, device, ts_ns);
