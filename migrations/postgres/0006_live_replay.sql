-- What replays of the stored events need besides the event chunks (the run state
-- rebuilt after a restart, "what was live at an instant", live-set checkpoints).

-- Exec images: every process_start of a pid in a run after its first one means the pid
-- exec'd a new program. Image N (the pid's first program is image 0) started at
-- start_ts_ns (monotonic ns, like events), and what the image before it held was
-- released then.
CREATE TABLE process_images (
    run_id BIGINT NOT NULL REFERENCES runs(id),
    pid BIGINT NOT NULL,
    image BIGINT NOT NULL,
    start_ts_ns BIGINT NOT NULL,
    PRIMARY KEY (run_id, pid, image)
);

-- Allocations released on one device by an event stored with another's: a pointer still
-- live on `device` (its free was never seen) handed out again by an allocation on
-- another device releases the one on `device` at ts_ns. pid, ptr, mem_kind and api are
-- the new allocation's (they name the released one's key).
CREATE TABLE device_releases (
    run_id BIGINT NOT NULL REFERENCES runs(id),
    device BIGINT NOT NULL,
    ts_ns BIGINT NOT NULL,
    pid BIGINT NOT NULL,
    ptr BIGINT NOT NULL,
    mem_kind BIGINT NOT NULL,
    api BIGINT NOT NULL
);
CREATE INDEX device_releases_by_time ON device_releases (run_id, device, ts_ns);
