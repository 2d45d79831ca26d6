//! Which of its node's devices a run's device is: the run's processes said which GPU
//! their ordinal was (`process_devices`), the node's devices are kept by identity
//! (`devices`), and `memwatch_wire::find_device_like` pairs them — by UUID, then PCI bus
//! id, and by ordinal only where the two share no identity and name and memory agree. A process under
//! `CUDA_VISIBLE_DEVICES=1` saw the node's second GPU as its device 0: that GPU's name,
//! memory and samples are its device 0's. The one place the run pages ask this.

use memwatch_wire::{find_device_like, DeviceIdentity, DeviceLook};

use crate::db::{Store, StoreError};

/// A device of the node, as the run's device was matched to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NodeDevice {
    /// Its `devices` row (the one its samples are stored against).
    pub id: i64,
    /// The node's index of it.
    pub ordinal: i64,
    pub name: String,
    pub total_bytes: i64,
}

#[derive(sqlx::FromRow)]
struct Id {
    name: String,
    total_bytes: i64,
    uuid: String,
    pci_bus_id: String,
}

/// What the run's processes recorded of one of their devices.
#[derive(Default)]
struct RunView {
    identity: DeviceIdentity,
    name: String,
    total_bytes: u64,
}

/// A `devices` row: a node's device as stored (ingest finds and updates rows by the same
/// rule the run pages join them with).
#[derive(sqlx::FromRow)]
pub(crate) struct StoredDevice {
    pub id: i64,
    pub ordinal: i64,
    pub name: String,
    pub total_bytes: i64,
    pub uuid: String,
    pub pci_bus_id: String,
}

impl StoredDevice {
    /// Its identity as stored ('' fields: not known).
    pub fn identity(&self) -> DeviceIdentity {
        DeviceIdentity {
            uuid: self.uuid.clone(),
            pci_bus_id: self.pci_bus_id.clone(),
        }
    }

    /// Its name and memory, for [`find_device_like`].
    pub fn look(&self) -> DeviceLook<'_> {
        DeviceLook {
            name: Some(&self.name),
            total_bytes: u64::try_from(self.total_bytes).ok(),
        }
    }
}

/// The identity the run's processes recorded for their device `device` (the first
/// process that knew one; unknown when none did), with the name and memory the first
/// process recorded.
async fn run_view(store: &Store, run: i64, device: i64) -> Result<RunView, StoreError> {
    let ids: Vec<Id> = sqlx::query_as(
        "SELECT name, total_bytes, uuid, pci_bus_id FROM process_devices \
         WHERE run_id = $1 AND ordinal = $2 ORDER BY pid",
    )
    .bind(run)
    .bind(device)
    .fetch_all(&store.pool)
    .await?;
    let identity = ids
        .iter()
        .map(|i| DeviceIdentity {
            uuid: i.uuid.clone(),
            pci_bus_id: i.pci_bus_id.clone(),
        })
        .find(DeviceIdentity::is_known)
        .unwrap_or_default();
    let first = ids.into_iter().next();
    Ok(RunView {
        identity,
        name: first.as_ref().map(|i| i.name.clone()).unwrap_or_default(),
        total_bytes: first
            .and_then(|i| u64::try_from(i.total_bytes).ok())
            .unwrap_or(0),
    })
}

/// The node device that run `run`'s device `device` is, and whether the run's
/// processes knew its identity; `None` when no node device matches.
pub(crate) async fn node_device(
    store: &Store,
    run: i64,
    device: i64,
) -> Result<(Option<NodeDevice>, bool), StoreError> {
    let view = run_view(store, run, device).await?;
    let id = view.identity;
    let rows: Vec<StoredDevice> = sqlx::query_as(
        "SELECT d.id AS id, d.ordinal AS ordinal, d.name AS name, d.total_bytes AS total_bytes, \
         d.uuid AS uuid, d.pci_bus_id AS pci_bus_id FROM devices d \
         JOIN runs r ON r.node_id = d.node_id WHERE r.id = $1 ORDER BY d.id",
    )
    .bind(run)
    .fetch_all(&store.pool)
    .await?;
    let ids: Vec<DeviceIdentity> = rows.iter().map(StoredDevice::identity).collect();
    let look = DeviceLook {
        name: Some(&view.name),
        total_bytes: Some(view.total_bytes),
    };
    let found = find_device_like(
        device,
        &id,
        look,
        rows.iter().zip(&ids).map(|(r, i)| (r.ordinal, i, r.look())),
    );
    Ok((
        found.map(|k| NodeDevice {
            id: rows[k].id,
            ordinal: rows[k].ordinal,
            name: rows[k].name.clone(),
            total_bytes: rows[k].total_bytes,
        }),
        id.is_known(),
    ))
}

/// Which stored samples are a device's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SampleKey {
    /// Those stored against its `devices` row.
    Row(i64),
    /// Those of the node's index that no row described (no device records at all).
    Index(i64),
}

/// Whose device samples are run `run`'s device `device`: its matched node device's,
/// else (no identity known and no node device described) the samples at the ordinal
/// itself; `None` when the run's device is known to be none of the node's devices.
pub(crate) async fn sample_key(
    store: &Store,
    run: i64,
    device: i64,
) -> Result<Option<SampleKey>, StoreError> {
    let (found, known) = node_device(store, run, device).await?;
    Ok(match found {
        Some(d) => Some(SampleKey::Row(d.id)),
        None => (!known).then_some(SampleKey::Index(device)),
    })
}
