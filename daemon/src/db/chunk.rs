//! The stored form of raw events (`event_chunks`, one row per ≤ 8192 events of one
//! device): `events` holds each event's 72-byte wire encoding, unchanged, back to back;
//! `deltas` one little-endian i64 per event, its effect on the device's live bytes.
//! Owns encoding and decoding of the two blobs; ingest writes them, the readers (events,
//! timelines, spans, live-at replay, restart rebuild) read them through this module.

use memwatch_wire::frame::{decode_event, encode_event};
use memwatch_wire::{Event, EVENT_SIZE};

use super::StoreError;

/// Largest number of events in one stored chunk.
pub(crate) const CHUNK_EVENTS: usize = 8192;

/// Appends `e`'s stored encoding to a chunk's `events` blob.
pub(crate) fn push_event(events: &mut Vec<u8>, e: &Event) {
    let mut slot = [0u8; EVENT_SIZE];
    encode_event(e, &mut slot);
    events.extend_from_slice(&slot);
}

/// Appends one delta to a chunk's `deltas` blob.
pub(crate) fn push_delta(deltas: &mut Vec<u8>, delta: i64) {
    deltas.extend_from_slice(&delta.to_le_bytes());
}

/// Number of whole events in an `events` blob.
pub(crate) fn event_count(events: &[u8]) -> usize {
    events.len() / EVENT_SIZE
}

/// The `i`-th event of an `events` blob (the caller checks `i < event_count`).
pub(crate) fn event_at(events: &[u8], i: usize) -> Event {
    decode_slot(&events[i * EVENT_SIZE..(i + 1) * EVENT_SIZE])
}

/// The `i`-th delta of a `deltas` blob; 0 when the blob is shorter.
pub(crate) fn delta_at(deltas: &[u8], i: usize) -> i64 {
    deltas
        .get(i * 8..i * 8 + 8)
        .map_or(0, |b| i64::from_le_bytes(b.try_into().unwrap_or([0; 8])))
}

/// The events of an `events` blob, in stored order (a partial trailing event is ignored).
pub(crate) fn events(events: &[u8]) -> impl Iterator<Item = Event> + '_ {
    events.chunks_exact(EVENT_SIZE).map(decode_slot)
}

/// The events of chunk `chunk`, which must hold whole events.
pub(crate) fn whole_events(
    chunk: i64,
    blob: &[u8],
) -> Result<impl Iterator<Item = Event> + '_, StoreError> {
    if !blob.len().is_multiple_of(EVENT_SIZE) {
        return Err(StoreError::Corrupt(format!(
            "event chunk {chunk} holds {} bytes, not whole events",
            blob.len()
        )));
    }
    Ok(events(blob))
}

/// The events of chunk `chunk` with their deltas; the two blobs must hold as many.
pub(crate) fn with_deltas<'a>(
    chunk: i64,
    ev: &'a [u8],
    de: &'a [u8],
) -> Result<impl Iterator<Item = (Event, i64)> + 'a, StoreError> {
    if ev.len() / EVENT_SIZE != de.len() / 8 {
        return Err(StoreError::Corrupt(format!(
            "event chunk {chunk}: {} events but {} deltas",
            ev.len() / EVENT_SIZE,
            de.len() / 8
        )));
    }
    Ok(events(ev).zip(
        de.chunks_exact(8)
            .map(|d| i64::from_le_bytes(d.try_into().unwrap_or([0; 8]))),
    ))
}

/// The order stamp (`ts_ns`) of each event of an `events` blob with its delta, without
/// decoding the rest of the event (the raw timeline reads only these). `None` when the
/// two blobs do not hold as many.
pub(crate) fn stamps_with_deltas<'a>(
    ev: &'a [u8],
    de: &'a [u8],
) -> Option<impl Iterator<Item = (u64, i64)> + 'a> {
    if ev.len() / EVENT_SIZE != de.len() / 8 {
        return None;
    }
    Some(
        ev.chunks_exact(EVENT_SIZE)
            .zip(de.chunks_exact(8))
            .map(|(e, d)| {
                // The wire encoding starts with ts_ns (little-endian u64).
                let ts = u64::from_le_bytes(e[..8].try_into().unwrap_or([0; 8]));
                (ts, i64::from_le_bytes(d.try_into().unwrap_or([0; 8])))
            }),
    )
}

fn decode_slot(slot: &[u8]) -> Event {
    let mut b = [0u8; EVENT_SIZE];
    b.copy_from_slice(slot);
    decode_event(&b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_and_deltas_round_trip_and_counts_are_checked() {
        let (mut ev, mut de) = (Vec::new(), Vec::new());
        for i in 0..3u64 {
            push_event(
                &mut ev,
                &Event {
                    ts_ns: 100 + i,
                    ptr: 0x10 * i,
                    size: i,
                    ..Event::default()
                },
            );
            push_delta(&mut de, -(i as i64));
        }
        let got: Vec<(u64, i64)> = with_deltas(7, &ev, &de)
            .unwrap()
            .map(|(e, d)| (e.ts_ns, d))
            .collect();
        assert_eq!(got, vec![(100, 0), (101, -1), (102, -2)]);
        let stamps: Vec<(u64, i64)> = stamps_with_deltas(&ev, &de).unwrap().collect();
        assert_eq!(stamps, got);
        assert_eq!(
            (event_count(&ev), event_at(&ev, 2).ptr, delta_at(&de, 1)),
            (3, 0x20, -1)
        );
        assert_eq!(delta_at(&de, 9), 0);
        assert!(with_deltas(7, &ev, &de[..8]).is_err());
        assert!(whole_events(7, &ev[..10]).is_err());
    }
}
