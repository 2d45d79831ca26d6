//! Which device a `device_info` or `device_reading` describes, stored by identity: the
//! node's `devices` row is found by `memwatch_wire::find_device_like` (UUID, then PCI bus
//! id, ordinal only where the two share no identity and name and memory agree) — a process under
//! `CUDA_VISIBLE_DEVICES=1` describes the node's second GPU as its device 0, and captures
//! of two machines imported under one host name are two devices when their UUIDs differ —
//! and a process's own view (the ordinal it saw, with that device's identity) goes to
//! `process_devices`. Device samples are stored against the row they are of
//! (`device_samples.device_id`), so two machines' device 0 keep their own samples.
//! Called by [`Ingestor::commit`](super::Ingestor::commit) inside its transaction;
//! [`RowCache`] remembers the rows readings and samples go to.

use std::collections::HashMap;

use memwatch_wire::{find_device_like, DeviceIdentity, DeviceInfo, DeviceLook, DeviceReading};

use super::Tx;
use crate::codes;
use crate::db::StoreError;
use crate::runs::StoredDevice;

/// One description of a device, from a process or from the node's sampler.
pub(super) struct Described<'a> {
    /// The process's ordinal, or the sampler's index when `node_view`.
    pub ordinal: i32,
    pub vendor: u8,
    /// `None`: the record names none (a reading); the stored name stays.
    pub name: Option<&'a str>,
    pub total_bytes: u64,
    pub identity: &'a DeviceIdentity,
    /// Said by the node's sampler (pid 0, a reading): its index is the node's numbering,
    /// the one `device_samples` use, and replaces the ordinal a process saw.
    pub node_view: bool,
}

impl<'a> Described<'a> {
    /// A `device_info` record (pid 0: the node's sampler's).
    pub fn info(d: &'a DeviceInfo) -> Self {
        Described {
            ordinal: d.device,
            vendor: d.vendor,
            name: Some(&d.name),
            total_bytes: d.total_bytes,
            identity: d.identity(),
            node_view: d.pid == 0,
        }
    }

    /// A reading's device (`identity` from [`DeviceReading::identity`]).
    pub fn reading(r: &DeviceReading, identity: &'a DeviceIdentity) -> Self {
        Described {
            ordinal: r.device,
            vendor: r.vendor,
            name: None,
            total_bytes: r.total_bytes,
            identity,
            node_view: true,
        }
    }
}

impl Described<'_> {
    fn look(&self) -> DeviceLook<'_> {
        DeviceLook {
            name: self.name,
            total_bytes: Some(self.total_bytes),
        }
    }
}

/// Node `node_id`'s devices rows, in the order they were made, with their identities.
async fn rows_of(
    tx: &mut Tx,
    node_id: i64,
) -> Result<(Vec<StoredDevice>, Vec<DeviceIdentity>), StoreError> {
    let rows: Vec<StoredDevice> = sqlx::query_as(
        "SELECT id, ordinal, name, total_bytes, uuid, pci_bus_id FROM devices WHERE node_id = $1 \
         ORDER BY id",
    )
    .bind(node_id)
    .fetch_all(&mut **tx)
    .await?;
    let ids = rows.iter().map(StoredDevice::identity).collect();
    Ok((rows, ids))
}

/// Stores `d` as a device of node `node_id`: the row [`find_device_like`] picks is updated
/// (its identity completed with what `d` knows), or a new row is added. The row's id.
pub(super) async fn describe(
    tx: &mut Tx,
    node_id: i64,
    d: &Described<'_>,
) -> Result<i64, StoreError> {
    let (rows, ids) = rows_of(tx, node_id).await?;
    let vendor = codes::vendor_name(d.vendor).to_string();
    let found = find_device_like(
        i64::from(d.ordinal),
        d.identity,
        d.look(),
        rows.iter()
            .zip(&ids)
            .map(|(r, id)| (r.ordinal, id, r.look())),
    );
    let Some(k) = found else {
        return Ok(sqlx::query_scalar(
            "INSERT INTO devices (node_id, ordinal, vendor, name, total_bytes, uuid, pci_bus_id) \
             VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING id",
        )
        .bind(node_id)
        .bind(i64::from(d.ordinal))
        .bind(vendor)
        .bind(d.name.unwrap_or_default().to_string())
        .bind(d.total_bytes as i64)
        .bind(d.identity.uuid.clone())
        .bind(d.identity.pci_bus_id.clone())
        .fetch_one(&mut **tx)
        .await?);
    };
    let id = d.identity.merged(&ids[k]);
    let ordinal = if d.node_view {
        i64::from(d.ordinal)
    } else {
        rows[k].ordinal
    };
    sqlx::query(
        "UPDATE devices SET ordinal = $1, vendor = $2, name = COALESCE($3, name), \
         total_bytes = $4, uuid = $5, pci_bus_id = $6 WHERE id = $7",
    )
    .bind(ordinal)
    .bind(vendor)
    .bind(d.name.map(str::to_string))
    .bind(d.total_bytes as i64)
    .bind(id.uuid)
    .bind(id.pci_bus_id)
    .bind(rows[k].id)
    .execute(&mut **tx)
    .await?;
    Ok(rows[k].id)
}

/// The devices rows readings and samples are stored against, remembered across commits
/// (cleared with the ingestor's other caches when a commit fails: a rolled-back row is
/// not remembered).
#[derive(Default)]
pub(super) struct RowCache {
    /// (node, index, identity, total bytes) of a reading -> its row.
    readings: HashMap<(i64, i32, DeviceIdentity, u64), i64>,
    /// (node, index) of an identity-less sample -> the row at that index, if any.
    by_index: HashMap<(i64, i32), Option<i64>>,
}

impl RowCache {
    pub fn clear(&mut self) {
        self.readings.clear();
        self.by_index.clear();
    }

    /// Stores a `device_info` of node `node_id`.
    pub async fn info(
        &mut self,
        tx: &mut Tx,
        node_id: i64,
        d: &DeviceInfo,
    ) -> Result<(), StoreError> {
        describe(tx, node_id, &Described::info(d)).await?;
        // A sample's row by index may be another now.
        self.by_index.clear();
        Ok(())
    }

    /// The row of a reading's device (described the first time it is seen).
    pub async fn reading(
        &mut self,
        tx: &mut Tx,
        node_id: i64,
        r: &DeviceReading,
    ) -> Result<i64, StoreError> {
        let id = r.identity();
        let key = (node_id, r.device, id, r.total_bytes);
        if let Some(row) = self.readings.get(&key) {
            return Ok(*row);
        }
        let row = describe(tx, node_id, &Described::reading(r, &key.2)).await?;
        self.by_index.clear();
        self.readings.insert(key, row);
        Ok(row)
    }

    /// The row a sample without identity (`device_sample`: amdgpu sysfs) is of: the
    /// node's device at its index, by the same rule; `None` when no row is there.
    pub async fn sample(
        &mut self,
        tx: &mut Tx,
        node_id: i64,
        index: i32,
    ) -> Result<Option<i64>, StoreError> {
        if let Some(row) = self.by_index.get(&(node_id, index)) {
            return Ok(*row);
        }
        let (rows, ids) = rows_of(tx, node_id).await?;
        let row = find_device_like(
            i64::from(index),
            DeviceIdentity::unknown(),
            DeviceLook::default(),
            rows.iter()
                .zip(&ids)
                .map(|(r, id)| (r.ordinal, id, r.look())),
        )
        .map(|k| rows[k].id);
        self.by_index.insert((node_id, index), row);
        Ok(row)
    }
}

/// The process's own view of device `d` (the ordinal it saw, and which device that was)
/// in run `run`.
pub(super) async fn process_device(
    tx: &mut Tx,
    run: i64,
    d: &DeviceInfo,
) -> Result<(), StoreError> {
    let id = d.identity();
    sqlx::query(
        "INSERT INTO process_devices (run_id, pid, ordinal, vendor, name, total_bytes, uuid, \
         pci_bus_id) VALUES ($1, $2, $3, $4, $5, $6, $7, $8) \
         ON CONFLICT (run_id, pid, ordinal) DO UPDATE SET vendor = excluded.vendor, \
         name = excluded.name, total_bytes = excluded.total_bytes, uuid = excluded.uuid, \
         pci_bus_id = excluded.pci_bus_id",
    )
    .bind(run)
    .bind(i64::from(d.pid))
    .bind(i64::from(d.device))
    .bind(codes::vendor_name(d.vendor).to_string())
    .bind(d.name.clone())
    .bind(d.total_bytes as i64)
    .bind(id.uuid.clone())
    .bind(id.pci_bus_id.clone())
    .execute(&mut **tx)
    .await?;
    Ok(())
}
