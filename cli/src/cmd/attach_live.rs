//! The `memwatch attach --live` terminal view and the running figures it shows.
//!
//! Owns [`LiveStats`] (per process and device: live bytes, peak, allocation count and
//! rate, failures, largest live allocations, updated from every received frame through
//! `memwatch_analysis::live::LiveSet`) and the
//! ratatui screen that redraws them twice a second until `q`, Ctrl-C, `--duration` or the
//! processes' exit. It does not write the capture (the file sink does).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use memwatch_analysis::live::{Change, ImageClock, LiveSet, MemEvent};
use memwatch_wire::{EventKind, Record};
use ratatui::crossterm::event::{self, Event as TermEvent, KeyCode, KeyModifiers};
use ratatui::layout::{Constraint, Layout};
use ratatui::style::{Modifier, Style};
use ratatui::widgets::{Block, Borders, Paragraph, Row, Table};

use super::attach::TeeSink;
use super::report::bytes;

/// Figures of one (pid, device).
#[derive(Debug, Default, Clone)]
pub struct DeviceLive {
    /// Device memory live now, of the allocations seen since attach.
    pub live_bytes: u64,
    pub peak_bytes: u64,
    /// Device-memory allocations and frees seen since attach (a free of memory
    /// allocated before attach counts here but releases nothing it knows of).
    pub allocs: u64,
    pub frees: u64,
    pub failures: u64,
    /// (time, allocs) samples for the rate.
    rate_mark: Option<(Instant, u64)>,
    pub rate_per_s: f64,
}

/// Everything the live view shows.
#[derive(Debug, Default)]
pub struct LiveStats {
    pub devices: BTreeMap<(u32, i32), DeviceLive>,
    /// The allocations seen since attach that are still live (the one free-matching
    /// rule of `memwatch_analysis::live`, as `memwatch report` applies it).
    pub live: LiveSet,
    /// Which exec image of each pid records belong to.
    images: ImageClock,
    /// `pre-attach-baseline` marker texts.
    pub baselines: Vec<String>,
    /// Per pid: the shim's `memwatch-attach start` marker (what it could hook).
    pub starts: BTreeMap<u32, String>,
    /// Every process that streamed to this session: the targets, and children forked
    /// from them while attached (they inherit the shim's patches and connection).
    pub pids: std::collections::BTreeSet<u32>,
}

impl LiveStats {
    /// Folds one received record in.
    pub fn record(&mut self, rec: &Record) {
        match rec {
            Record::Events(evs) => {
                for e in evs {
                    self.event(e);
                }
            }
            Record::Marker(m) if m.text.starts_with("pre-attach-baseline") => {
                self.baselines.push(format!("pid {} {}", m.pid, m.text));
            }
            Record::Marker(m) if m.text.starts_with("memwatch-attach start") => {
                self.starts.insert(m.pid, m.text.clone());
            }
            Record::ProcessStart(p) => {
                self.pids.insert(p.pid);
                // An exec: the image before it gave its memory back.
                if let Some(ended) = self.images.process_start(p.pid) {
                    self.live.release_process(ended);
                    for ((pid, _), d) in self
                        .devices
                        .range_mut((p.pid, i32::MIN)..=(p.pid, i32::MAX))
                    {
                        debug_assert_eq!(*pid, p.pid);
                        d.live_bytes = 0;
                    }
                }
            }
            _ => {}
        }
    }

    fn event(&mut self, e: &memwatch_wire::Event) {
        let proc_ = self.images.key(e.pid);
        match self.live.apply(&MemEvent::of_wire(proc_, e), ()) {
            Change::Alloc {
                family,
                replaced,
                now,
            } if family.on_device() => {
                if let Some(old) = replaced {
                    let before = self.live.totals(proc_, old.device).device_bytes;
                    self.devices
                        .entry((e.pid, old.device))
                        .or_default()
                        .live_bytes = before;
                }
                let d = self.devices.entry((e.pid, e.device)).or_default();
                d.allocs += 1;
                d.live_bytes = now.device_bytes;
                d.peak_bytes = d.peak_bytes.max(d.live_bytes);
            }
            Change::Free { family, freed, now } if family.on_device() => {
                self.devices
                    .entry((e.pid, freed.device))
                    .or_default()
                    .live_bytes = now.device_bytes;
                self.devices.entry((e.pid, e.device)).or_default().frees += 1;
            }
            Change::UnmatchedFree { family } if family.on_device() => {
                self.devices.entry((e.pid, e.device)).or_default().frees += 1;
            }
            Change::NotMemory
                if matches!(
                    e.kind(),
                    Some(EventKind::AllocFailed | EventKind::FreeFailed)
                ) =>
            {
                self.devices.entry((e.pid, e.device)).or_default().failures += 1;
            }
            _ => {}
        }
    }

    /// Updates the allocation rates (call periodically).
    pub fn tick(&mut self, now: Instant) {
        for d in self.devices.values_mut() {
            match d.rate_mark {
                Some((t, n)) if now.duration_since(t) >= Duration::from_millis(900) => {
                    d.rate_per_s = (d.allocs - n) as f64 / now.duration_since(t).as_secs_f64();
                    d.rate_mark = Some((now, d.allocs));
                }
                None => d.rate_mark = Some((now, d.allocs)),
                _ => {}
            }
        }
    }

    /// The `n` largest live allocations over all devices: (pid, device, ptr, size).
    pub fn largest(&self, n: usize) -> Vec<(u32, i32, u64, u64)> {
        let mut all: Vec<(u32, i32, u64, u64)> = self
            .live
            .iter()
            .filter(|(k, _)| k.family.on_device())
            .map(|(k, h)| (k.proc.pid, h.device, k.ptr, h.size))
            .collect();
        all.sort_by(|a, b| b.3.cmp(&a.3).then(a.2.cmp(&b.2)));
        all.truncate(n);
        all
    }
}

/// Runs the view until `q` / Esc / Ctrl-C, the deadline, or every process exited.
pub fn run(
    tee: &TeeSink,
    pids: &[i32],
    deadline: Option<Instant>,
    stop: &AtomicBool,
) -> Result<()> {
    let mut terminal = ratatui::try_init().context("cannot open the terminal for --live")?;
    let result = (|| -> Result<()> {
        let started = Instant::now();
        loop {
            let alive: Vec<i32> = pids
                .iter()
                .copied()
                .filter(|p| std::path::Path::new(&format!("/proc/{p}")).exists())
                .collect();
            if stop.load(Ordering::SeqCst)
                || alive.is_empty()
                || deadline.is_some_and(|d| Instant::now() >= d)
            {
                return Ok(());
            }
            let (rows, largest, baselines) = {
                let mut st = tee.live.lock().unwrap_or_else(|p| p.into_inner());
                st.tick(Instant::now());
                let rows: Vec<Row> = st
                    .devices
                    .iter()
                    .map(|((pid, dev), d)| {
                        Row::new(vec![
                            pid.to_string(),
                            dev.to_string(),
                            bytes(d.live_bytes),
                            bytes(d.peak_bytes),
                            d.allocs.to_string(),
                            d.frees.to_string(),
                            format!("{:.0}/s", d.rate_per_s),
                            d.failures.to_string(),
                        ])
                    })
                    .collect();
                let largest: Vec<Row> = st
                    .largest(10)
                    .into_iter()
                    .map(|(pid, dev, ptr, size)| {
                        Row::new(vec![
                            pid.to_string(),
                            dev.to_string(),
                            format!("{ptr:#x}"),
                            bytes(size),
                        ])
                    })
                    .collect();
                (rows, largest, st.baselines.join("\n"))
            };
            terminal
                .draw(|f| {
                    let [head, devs, big, base] = Layout::vertical([
                        Constraint::Length(1),
                        Constraint::Min(5),
                        Constraint::Length(13),
                        Constraint::Length(6),
                    ])
                    .areas(f.area());
                    f.render_widget(
                        Paragraph::new(format!(
                            "memwatch attach: {} process(es) {:?}, {:.0} s — q detaches (process keeps running)",
                            alive.len(),
                            alive,
                            started.elapsed().as_secs_f64()
                        ))
                        .style(Style::default().add_modifier(Modifier::BOLD)),
                        head,
                    );
                    let header = Row::new(vec!["pid", "device", "live", "peak", "allocs", "frees", "rate", "failed"])
                        .style(Style::default().add_modifier(Modifier::BOLD));
                    f.render_widget(
                        Table::new(rows.clone(), [Constraint::Length(8); 8])
                            .header(header)
                            .block(Block::default().borders(Borders::ALL).title("since attach, per device")),
                        devs,
                    );
                    f.render_widget(
                        Table::new(largest.clone(), [Constraint::Length(8), Constraint::Length(7), Constraint::Length(20), Constraint::Length(12)])
                            .header(Row::new(vec!["pid", "device", "pointer", "size"]).style(Style::default().add_modifier(Modifier::BOLD)))
                            .block(Block::default().borders(Borders::ALL).title("largest live allocations")),
                        big,
                    );
                    f.render_widget(
                        Paragraph::new(baselines.clone())
                            .block(Block::default().borders(Borders::ALL).title("pre-attach baseline (device used memory at attach)")),
                        base,
                    );
                })
                .context("cannot draw the live view")?;
            if event::poll(Duration::from_millis(500)).context("terminal input")? {
                if let TermEvent::Key(k) = event::read().context("terminal input")? {
                    let ctrl_c =
                        k.code == KeyCode::Char('c') && k.modifiers.contains(KeyModifiers::CONTROL);
                    if matches!(k.code, KeyCode::Char('q') | KeyCode::Esc) || ctrl_c {
                        return Ok(());
                    }
                }
            }
        }
    })();
    ratatui::restore();
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use memwatch_wire::{Api, Event, Marker, MemKind};

    fn ev(kind: EventKind, ptr: u64, size: u64) -> Event {
        Event {
            pid: 7,
            device: 1,
            ptr,
            size,
            ..Event::new(kind, MemKind::Device, Api::Unknown)
        }
    }

    #[test]
    fn live_figures() {
        let mut s = LiveStats::default();
        s.record(&Record::Events(vec![
            ev(EventKind::Alloc, 0x10, 100),
            ev(EventKind::Alloc, 0x20, 300),
            ev(EventKind::Free, 0x10, 0),
            ev(EventKind::AllocFailed, 0, 1 << 40),
            ev(EventKind::Free, 0x999, 0), // allocated before attach: unknown size
        ]));
        s.record(&Record::Marker(Marker {
            text: "pre-attach-baseline device=1 used=5 total=9 free=4 source=x".into(),
            ..Marker::default()
        }));
        let d = &s.devices[&(7, 1)];
        assert_eq!(
            (d.live_bytes, d.peak_bytes, d.allocs, d.frees, d.failures),
            (300, 400, 2, 2, 1)
        );
        assert_eq!(s.largest(5), vec![(7, 1, 0x20, 300)]);
        assert_eq!(s.baselines.len(), 1);
    }
}
