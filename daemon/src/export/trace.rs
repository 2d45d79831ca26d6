//! The JSON-lines trace of a device (`{"op":"alloc","id":..}` lines, the format `memwatch
//! replay` reads), streamed page by page so a 100M-event run never sits in memory.

use std::collections::HashMap;

use crate::db::{Store, StoreError};

pub(super) const PAGE: usize = 50_000;

pub(super) fn parse_cursor(c: &str) -> Option<(i64, usize)> {
    let (a, b) = c.split_once(':')?;
    Some((a.parse().ok()?, b.parse().ok()?))
}

/// State of the JSON-lines export: pages through the device's events.
pub struct JsonLines {
    store: Store,
    run: i64,
    device: i64,
    t0: u64,
    cursor: Option<(i64, usize)>,
    done: bool,
    ids: HashMap<(u32, u64), u64>,
    next_id: u64,
}

impl JsonLines {
    pub fn new(store: Store, run: i64, device: i64, t0: u64) -> Self {
        Self {
            store,
            run,
            device,
            t0,
            cursor: None,
            done: false,
            ids: HashMap::new(),
            next_id: 1,
        }
    }

    /// The next chunk of lines, `None` at the end.
    pub async fn next_chunk(&mut self) -> Result<Option<String>, StoreError> {
        if self.done {
            return Ok(None);
        }
        let page = self
            .store
            .events(self.run, self.device, None, None, self.cursor, PAGE)
            .await?;
        let Some(page) = page else {
            self.done = true;
            return Ok(None);
        };
        let mut out = String::with_capacity(page.events.len() * 64);
        for e in &page.events {
            let ts = e.ts_ns.saturating_sub(self.t0);
            match e.kind {
                "alloc" if e.delta > 0 => {
                    let id = self.next_id;
                    self.next_id += 1;
                    if let Some(old) = self.ids.insert((e.pid, e.ptr), id) {
                        out.push_str(&format!(
                            "{{\"op\":\"free\",\"id\":{old},\"ts_ns\":{ts},\"device\":{}}}\n",
                            e.device
                        ));
                    }
                    out.push_str(&format!(
                        "{{\"op\":\"alloc\",\"id\":{id},\"size\":{},\"ts_ns\":{ts},\"device\":{},\"stream\":{}}}\n",
                        e.size, e.device, e.stream
                    ));
                }
                "free" if e.delta < 0 => {
                    if let Some(id) = self.ids.remove(&(e.pid, e.ptr)) {
                        out.push_str(&format!(
                            "{{\"op\":\"free\",\"id\":{id},\"ts_ns\":{ts},\"device\":{}}}\n",
                            self.device
                        ));
                    }
                }
                _ => {}
            }
        }
        match page.next_cursor.as_deref().and_then(parse_cursor) {
            Some(c) => self.cursor = Some(c),
            None => self.done = true,
        }
        Ok(Some(out))
    }
}
