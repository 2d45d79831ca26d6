-- A device is what its driver says it is (issue 34 item 2): `devices` keeps each device's
-- UUID and PCI bus id (memwatch_wire::identity's canonical forms; '' when not known), and
-- is keyed by a row id instead of (node, ordinal): captures of two machines imported under
-- one host name both have a device 0, and are two devices when their UUIDs differ. Which
-- row a record describes is decided by the one rule (memwatch_wire::find_device: UUID,
-- then PCI bus id, ordinal only where the two share no identity) when it is stored.
-- `ordinal` is the node's index of the device (the one device_samples use) when a node
-- sampler described it, else the ordinal the first process saw.
-- `process_devices` keeps each process's own view: the ordinal it saw (under
-- CUDA_VISIBLE_DEVICES=1 the second GPU is its device 0) and that device's identity, so a
-- run's device is joined to the node's sampled device by identity.
-- `device_samples.device_id` is the `devices` row a sample is of (NULL: no row described
-- the device when it was stored): two machines' device 0 keep their own samples.
-- The sqlite twin is migrations/sqlite/0011_device_identity.sql: the same tables.
ALTER TABLE devices DROP CONSTRAINT devices_pkey;
ALTER TABLE devices ADD COLUMN id BIGSERIAL PRIMARY KEY;
ALTER TABLE devices ADD COLUMN uuid TEXT NOT NULL DEFAULT '';
ALTER TABLE devices ADD COLUMN pci_bus_id TEXT NOT NULL DEFAULT '';
CREATE INDEX devices_by_node ON devices (node_id, ordinal);

CREATE TABLE process_devices (
    run_id BIGINT NOT NULL REFERENCES runs(id),
    pid BIGINT NOT NULL,
    ordinal BIGINT NOT NULL,
    vendor TEXT NOT NULL,
    name TEXT NOT NULL,
    total_bytes BIGINT NOT NULL,
    uuid TEXT NOT NULL,
    pci_bus_id TEXT NOT NULL,
    PRIMARY KEY (run_id, pid, ordinal)
);

ALTER TABLE device_samples ADD COLUMN device_id BIGINT;
UPDATE device_samples SET device_id = (SELECT d.id FROM devices d
    WHERE d.node_id = device_samples.node_id AND d.ordinal = device_samples.device);
CREATE INDEX device_samples_by_device ON device_samples (device_id, memory, ts_ns);
