//! The PJRT buffers (`jax.Array` storage) live at chosen instants, grouped by who made
//! them: the executable (by name), "host transfer", "before attach" or "device copy".
//! One sweep over a process's events in time order answers every instant asked about:
//! each event is applied once, and an answer costs what it lists (the groups live on
//! its device), so a run with a hundred thousand failed executes, each asking what was
//! live, takes time linear in the capture.

use std::collections::HashMap;

use memwatch_wire::{Api, Event, EventKind, MemKind};

use super::report::LiveGroup;

/// The PJRT buffers live on one device at one instant.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LiveAt {
    pub bytes: u64,
    /// By producer, most bytes first (ties by name).
    pub groups: Vec<LiveGroup>,
}

/// What a sweep did: the events it applied and the group entries it read to answer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SweepWork {
    pub events_applied: u64,
    pub groups_read: u64,
}

/// Who made a buffer, before it is named.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Maker {
    Executable(u64),
    HostTransfer,
    BeforeAttach,
    Copy,
}

impl Maker {
    fn of(e: &Event) -> Self {
        match e.api() {
            Api::PjrtExecuteOutput => Self::Executable(e.aux),
            Api::PjrtBufferFromHostBuffer => Self::HostTransfer,
            Api::PjrtBufferPreAttach => Self::BeforeAttach,
            _ => Self::Copy,
        }
    }

    fn name(self, names: &HashMap<u64, String>) -> String {
        match self {
            Self::Executable(h) => names
                .get(&h)
                .cloned()
                .unwrap_or_else(|| format!("executable {h:#x}")),
            Self::HostTransfer => "host transfer".into(),
            Self::BeforeAttach => "before attach".into(),
            Self::Copy => "device copy".into(),
        }
    }
}

/// Producers numbered by name (two executables of one name are one group).
#[derive(Default)]
struct Producers {
    names: Vec<String>,
    by_name: HashMap<String, u32>,
    by_maker: HashMap<Maker, u32>,
}

impl Producers {
    fn of(&mut self, m: Maker, names: &HashMap<u64, String>) -> u32 {
        if let Some(&i) = self.by_maker.get(&m) {
            return i;
        }
        let name = m.name(names);
        let i = match self.by_name.get(&name) {
            Some(&i) => i,
            None => {
                let i = self.names.len() as u32;
                self.by_name.insert(name.clone(), i);
                self.names.push(name);
                i
            }
        };
        self.by_maker.insert(m, i);
        i
    }
}

/// One device's live buffers: bytes, and (bytes, count) by producer (only producers with
/// a live buffer).
#[derive(Default)]
struct DeviceLive {
    bytes: u64,
    groups: HashMap<u32, (u64, u64)>,
}

impl DeviceLive {
    fn add(&mut self, who: u32, size: u64) {
        self.bytes += size;
        let g = self.groups.entry(who).or_default();
        g.0 += size;
        g.1 += 1;
    }

    fn remove(&mut self, who: u32, size: u64) {
        self.bytes -= size;
        if let Some(g) = self.groups.get_mut(&who) {
            g.0 -= size;
            g.1 -= 1;
            if g.1 == 0 {
                self.groups.remove(&who);
            }
        }
    }
}

/// For each `(ts, device)` of `at`, in that order: the PJRT buffers live on `device`
/// after every event of `events` (one process's, in time order) stamped at or before
/// `ts`. A PJRT buffer allocation of a pointer still live replaces it; a free of any
/// kind ends the pointer's buffer. `names`: executables' names by handle.
pub fn live_at_each(
    events: &[&Event],
    at: &[(u64, i32)],
    names: &HashMap<u64, String>,
) -> (Vec<LiveAt>, SweepWork) {
    let mut order: Vec<usize> = (0..at.len()).collect();
    order.sort_by_key(|&i| at[i].0);
    let mut producers = Producers::default();
    // pointer -> (size, producer, device)
    let mut live: HashMap<u64, (u64, u32, i32)> = HashMap::new();
    let mut devices: HashMap<i32, DeviceLive> = HashMap::new();
    let mut out = vec![LiveAt::default(); at.len()];
    let mut work = SweepWork::default();
    let mut next = 0;
    for q in order {
        let (ts, device) = at[q];
        while let Some(e) = events.get(next).filter(|e| e.ts_ns <= ts) {
            next += 1;
            work.events_applied += 1;
            let ended = match e.kind() {
                Some(EventKind::Alloc) if e.is_mem(MemKind::PjrtBuffer) => {
                    let who = producers.of(Maker::of(e), names);
                    devices.entry(e.device).or_default().add(who, e.size);
                    live.insert(e.ptr, (e.size, who, e.device))
                }
                Some(EventKind::Free) => live.remove(&e.ptr),
                _ => None,
            };
            if let Some((size, who, dev)) = ended {
                if let Some(d) = devices.get_mut(&dev) {
                    d.remove(who, size);
                }
            }
        }
        if let Some(d) = devices.get(&device) {
            work.groups_read += d.groups.len() as u64;
            let mut groups: Vec<LiveGroup> = d
                .groups
                .iter()
                .map(|(&who, &(bytes, count))| LiveGroup {
                    producer: producers.names[who as usize].clone(),
                    bytes,
                    count,
                })
                .collect();
            groups.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(a.producer.cmp(&b.producer)));
            out[q] = LiveAt {
                bytes: d.bytes,
                groups,
            };
        }
    }
    (out, work)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn buf(api: Api, ts: u64, ptr: u64, size: u64, producer: u64, device: i32) -> Event {
        Event {
            ts_ns: ts,
            ptr,
            size,
            aux: producer,
            pid: 1,
            device,
            ..Event::new(EventKind::Alloc, MemKind::PjrtBuffer, api)
        }
    }

    fn free(ts: u64, ptr: u64) -> Event {
        Event {
            ts_ns: ts,
            ptr,
            pid: 1,
            device: -1,
            ..Event::new(EventKind::Free, MemKind::PjrtBuffer, Api::PjrtBufferDestroy)
        }
    }

    /// What was live, listed the plain way: every event up to `ts` applied from the
    /// start, then the buffers on `device` grouped by name.
    fn listed(events: &[Event], ts: u64, device: i32, names: &HashMap<u64, String>) -> LiveAt {
        let mut live: HashMap<u64, (u64, String, i32)> = HashMap::new();
        for e in events.iter().take_while(|e| e.ts_ns <= ts) {
            match e.kind() {
                Some(EventKind::Alloc) if e.is_mem(MemKind::PjrtBuffer) => {
                    live.insert(e.ptr, (e.size, Maker::of(e).name(names), e.device));
                }
                Some(EventKind::Free) => {
                    live.remove(&e.ptr);
                }
                _ => {}
            }
        }
        let mut groups: std::collections::BTreeMap<String, (u64, u64)> = Default::default();
        let mut bytes = 0;
        for (size, who, dev) in live.values() {
            if *dev == device {
                bytes += size;
                let g = groups.entry(who.clone()).or_default();
                g.0 += size;
                g.1 += 1;
            }
        }
        let mut groups: Vec<LiveGroup> = groups
            .into_iter()
            .map(|(producer, (bytes, count))| LiveGroup {
                producer,
                bytes,
                count,
            })
            .collect();
        groups.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(a.producer.cmp(&b.producer)));
        LiveAt { bytes, groups }
    }

    /// Generated runs (outputs kept or dropped, pointers reused, two devices, two
    /// executables of one name, transfers and copies): every instant's answer equals the
    /// plain listing, each event is applied once however many instants are asked, and the
    /// groups read are the groups answered.
    #[test]
    fn answers_equal_a_listing_from_the_start_and_apply_each_event_once() {
        let names: HashMap<u64, String> = [(0xa, "jit_step"), (0xb, "jit_step"), (0xc, "jit_init")]
            .into_iter()
            .map(|(h, n)| (h, n.to_string()))
            .collect();
        for seed in 0..20u64 {
            let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
            let mut rnd = |m: u64| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x % m
            };
            let mut events = Vec::new();
            for i in 0..300u64 {
                let ts = i * 10;
                let ptr = 0x1000 + rnd(40) * 0x10;
                let dev = rnd(2) as i32;
                events.push(match rnd(6) {
                    0 => free(ts, ptr),
                    1 => buf(Api::PjrtBufferFromHostBuffer, ts, ptr, 64, 0, dev),
                    2 => buf(Api::PjrtBufferCopyToDevice, ts, ptr, 32, 0, dev),
                    k => buf(Api::PjrtExecuteOutput, ts, ptr, 100 + k, 0xa + rnd(4), dev),
                });
            }
            let at: Vec<(u64, i32)> = (0..200).map(|_| (rnd(3100), rnd(3) as i32)).collect();
            let refs: Vec<&Event> = events.iter().collect();
            let (got, work) = live_at_each(&refs, &at, &names);
            let mut groups = 0;
            for (q, &(ts, dev)) in at.iter().enumerate() {
                assert_eq!(
                    got[q],
                    listed(&events, ts, dev, &names),
                    "seed {seed}, {ts} {dev}"
                );
                groups += got[q].groups.len() as u64;
            }
            assert!(work.events_applied <= events.len() as u64);
            assert_eq!(work.groups_read, groups);
        }
    }
}
