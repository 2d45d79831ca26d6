//! One module per kind of out-of-memory failure: each decides from the evidence whether
//! its kind explains the failure, with the figures that prove it, and writes the fix
//! (checked where memwatch can). [`classify`] asks them in order, most specific first;
//! the warnings (a limit ignored, a leak without a failure) are asked separately.

mod co_resident;
mod compile_scratch;
mod cupy_pool_limit;
mod execute_temp;
mod fragmentation;
mod host_pinned;
mod larger_than_device;
mod leak;
mod missing_donation;
mod other_framework_pool;
mod other_process;
mod pool_limit_ignored;
mod pool_too_small;
mod recovered;
mod torch;

use super::evidence::{DumpEvidence, Evidence};
use super::facts::{DriverFacts, PjrtFacts};
use super::failure::{Failure, Origin};
use super::verdict::{Cite, Fix, Kind, Verdict, What, When, Who};
use crate::log::LogReport;
use crate::size::format_bytes as b;
pub use recovered::ended_run;
use std::collections::BTreeMap;

/// What the kinds read.
pub struct Ctx<'a> {
    pub ev: &'a Evidence,
    /// The XLA dump, when it matches the capture (`None` when from another run).
    pub dump: Option<&'a DumpEvidence>,
    pub log: &'a LogReport,
    pub pjrt: &'a PjrtFacts,
    pub drivers: &'a DriverFacts,
    pub failure: Option<&'a Failure>,
    /// The failing device's ledger (`super::ledger`).
    pub ledger: Option<&'a super::ledger::Ledger>,
    /// The failure did not end the run (it exited 0): a `recovered` warning.
    pub recovered: bool,
}

/// The framework allocator's state at the failure, from the most exact source.
#[derive(Debug, Clone, Default)]
pub struct PoolState {
    pub in_use: Option<u64>,
    pub pool: Option<u64>,
    pub limit: Option<u64>,
    pub largest_free: Option<u64>,
    pub cites: Vec<Cite>,
}

impl<'a> Ctx<'a> {
    pub fn capture_path(&self) -> String {
        self.ev
            .capture
            .as_ref()
            .map(|c| c.path())
            .unwrap_or_default()
    }

    /// Runtime ns of a raw monotonic time.
    pub fn runtime_ts(&self, raw: u64) -> u64 {
        let o = self.ev.capture.as_ref().map_or(0, |c| c.runtime.origin_ns);
        raw.saturating_sub(o)
    }

    /// The failing (pid, device), when known.
    pub fn at(&self) -> Option<(u32, i32)> {
        let f = self.failure?;
        Some((f.pid?, f.device?))
    }

    /// The failure's time on the runtime clock (`u64::MAX` when unknown: the end).
    pub fn failure_rt(&self) -> u64 {
        self.failure
            .and_then(|f| f.ts_raw)
            .map_or(u64::MAX, |t| self.runtime_ts(t))
    }

    /// The device's total memory: the capture's device record, else the framework's
    /// message, else device samples.
    pub fn device_total(&self, pid: Option<u32>, device: Option<i32>) -> Option<u64> {
        let from_capture = self.ev.capture.as_ref().and_then(|c| {
            c.loaded
                .processes
                .values()
                .filter(|p| pid.is_none_or(|x| p.pid == x))
                .filter_map(|p| p.devices.get(&device.unwrap_or(0)))
                .map(|d| d.total_bytes)
                .find(|t| *t > 0)
        });
        from_capture
            .or_else(|| {
                self.log
                    .torch_ooms
                    .last()
                    .and_then(|t| t.total_approx_bytes)
            })
            .or_else(|| {
                self.ev
                    .device_samples
                    .iter()
                    .find(|s| s.device == device.unwrap_or(0))
                    .and_then(|s| s.total())
            })
    }

    /// The framework pool at the failure.
    pub fn pool_state(&self) -> PoolState {
        let mut s = PoolState::default();
        let cite = |file: &str, line: usize, what: &str| Cite {
            file: file.into(),
            line: Some(line),
            what: what.into(),
        };
        if let Some(o) = self.log.ooms.last() {
            if o.chunk_dump_complete() {
                s.in_use = o.in_use_bytes();
                s.largest_free = o.largest_free_chunk();
                s.cites.push(cite(
                    &o.chunk_dump_end().file,
                    o.chunk_dump_end().line,
                    "the allocator's chunk dump (whole)",
                ));
            }
            s.pool = o.pool_bytes();
            s.limit = o.limit_above_pool().or(o.pool_bytes());
        }
        if let (Some((pid, dev)), Some(_)) = (self.at(), &self.ev.capture) {
            if let Some(x) = self.pjrt.sample_before(pid, dev, self.failure_rt()) {
                s.in_use = s.in_use.or(Some(x.bytes_in_use));
                s.pool = s.pool.or(x.pool_bytes.filter(|p| *p > 0));
                s.limit = s.limit.or(x.bytes_limit);
                s.largest_free = s.largest_free.or(x.largest_free_block_bytes);
                s.cites.push(Cite {
                    file: self.capture_path(),
                    line: None,
                    what: format!(
                        "allocator statistics at {:.3} s: {} in use of {}, largest free block {}",
                        x.ts_ns as f64 / 1e9,
                        b(x.bytes_in_use),
                        x.pool_bytes.or(x.bytes_limit).map_or("?".into(), b),
                        x.largest_free_block_bytes.map_or("?".into(), b)
                    ),
                });
            }
        }
        // Without the allocator's whole chunk dump, what was in use is the larger of the last
        // sample (taken every 100 ms or so) and the PJRT buffers live at the failure.
        let dump_complete = self
            .log
            .ooms
            .last()
            .is_some_and(|o| o.chunk_dump_complete());
        if let (Some((pid, dev)), false) = (self.at(), dump_complete) {
            if let Some(in_use) = self.pjrt.in_use_at(pid, dev, self.failure_rt()) {
                s.in_use = Some(in_use);
            }
        }
        if s.pool.is_none() {
            if let Some(p) = self.log.pool_allocations.last() {
                s.pool = Some(p.bytes);
                s.cites
                    .push(cite(&p.at.file, p.at.line, "the pool XLA allocated"));
            }
        }
        // A driver call outside any framework pool: the device is the pool, what the
        // process held on it (driver level) is in use.
        let driver = self
            .failure
            .is_some_and(|f| f.origin == super::failure::Origin::Driver);
        if let (true, None, Some((pid, dev))) = (driver, s.pool, self.at()) {
            if let (Some(total), Some(d)) = (
                self.device_total(Some(pid), Some(dev)),
                self.drivers.of(pid, dev),
            ) {
                s.pool = Some(total);
                s.in_use = Some(d.at_checkpoint);
                s.cites.push(Cite {
                    file: self.capture_path(),
                    line: None,
                    what: format!(
                        "pid {pid} held {} of device {dev}'s {} when the call failed",
                        b(d.at_checkpoint),
                        b(total)
                    ),
                });
            }
        }
        // The live buffers include a failed execution's refused output, which holds
        // nothing: what is in use is never more than the pool.
        if let (Some(u), Some(p)) = (s.in_use, s.pool) {
            s.in_use = Some(u.min(p));
        }
        s
    }

    /// A verdict with what/when/who filled from the failure.
    pub fn base(&self, kind: Kind) -> Verdict {
        let f = self.failure;
        Verdict {
            kind,
            failure: f.is_some(),
            headline: String::new(),
            what: What {
                request_bytes: f.and_then(|f| f.request),
                request_exact: f.is_some_and(|f| f.request_exact),
                allocator: f.and_then(|f| f.allocator.clone()),
                pid: f.and_then(|f| f.pid),
                device: f.and_then(|f| f.device),
                result: f.and_then(|f| f.result.clone()),
            },
            when: f.map_or(When::Run, |f| f.when),
            who: Who {
                executable: f.and_then(|f| f.executable.clone()),
                python_frame: f.and_then(|f| f.python_frame.clone()),
                ..Who::default()
            },
            why: String::new(),
            figures: BTreeMap::new(),
            fix: Fix::default(),
            also: Vec::new(),
            evidence: f.map(|f| f.cites.clone()).unwrap_or_default(),
            holder: self.failing_holder(),
        }
    }

    /// The process and framework whose memory ran out: the failure's own, else what the
    /// ledger shows the failing process holding most of.
    pub fn failing_holder(&self) -> super::verdict::Blame {
        use super::ledger::HolderKind as H;
        let f = self.failure;
        let framework = f.and_then(|f| match f.origin {
            Origin::Torch(_) | Origin::TorchSnapshot(_) => Some("torch"),
            Origin::Cupy(_) => Some("cupy"),
            Origin::Xla | Origin::Compile => Some("xla"),
            Origin::Driver => None,
        });
        let from_ledger = || {
            let l = self.ledger?;
            let h = l
                .holders
                .iter()
                .filter(|h| h.pid.is_some() && h.pid == f.and_then(|f| f.pid))
                .filter(|h| !matches!(h.kind, H::OtherProcessUnrecorded | H::ContextAndModules))
                .max_by_key(|h| h.bytes)?;
            Some(match h.kind {
                H::XlaBfcPool | H::XlaAsyncPool | H::XlaDriver => "xla",
                H::TorchCaching | H::TorchExpandable => "torch",
                H::CupyPool => "cupy",
                _ => "driver",
            })
        };
        super::verdict::Blame {
            pid: f.and_then(|f| f.pid),
            framework: framework.or_else(from_ledger).map(str::to_string),
            other_process: false,
        }
    }

    /// Compiled (argument, output, temp) bytes of an executable by name: the capture's
    /// record, else the dump's module.
    pub fn executable_bytes(&self, pid: Option<u32>, name: &str) -> Option<ExecutableBytes> {
        let from_capture = self
            .pjrt
            .executables
            .iter()
            .filter(|x| x.name == name && pid.is_none_or(|p| x.pid == p))
            .filter_map(|x| {
                Some(ExecutableBytes {
                    arguments: x.stat(x.stats.argument)?,
                    outputs: x.stat(x.stats.output)?,
                    temp: x.stat(x.stats.temp)?,
                    alias: x.stat(x.stats.alias).unwrap_or(0),
                })
            })
            .max_by_key(|t| t.temp);
        from_capture.or_else(|| {
            self.dump?
                .modules
                .iter()
                .filter(|m| m.name == name)
                .map(|m| ExecutableBytes {
                    arguments: m.argument_bytes,
                    outputs: m.output_bytes,
                    temp: m.temp_bytes,
                    alias: m.alias_bytes,
                })
                .max_by_key(|t| t.temp)
        })
    }
}

/// An XLA executable's compiled memory figures (PJRT's compiled memory statistics, or
/// the dump's buffer assignment).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExecutableBytes {
    pub arguments: u64,
    pub outputs: u64,
    pub temp: u64,
    /// Outputs that reuse an argument's memory (donated arguments).
    pub alias: u64,
}

impl ExecutableBytes {
    /// What the executable needs on its own while it runs: its arguments, its outputs
    /// (less those that reuse a donated argument) and its temp — XLA's own peak figure.
    pub fn alone(&self) -> u64 {
        self.arguments
            .saturating_add(self.outputs.saturating_sub(self.alias))
            .saturating_add(self.temp)
    }
}

/// "2.00 GiB (2147483648 B)".
pub fn exact(n: u64) -> String {
    format!("{} ({n} B)", b(n))
}

/// The verdicts for the run: the failure's (if any), then the warnings.
pub fn classify(ctx: &Ctx<'_>) -> Vec<Verdict> {
    let mut out = Vec::new();
    if ctx.recovered {
        out.extend(recovered::warning(ctx));
    } else if let Some(f) = ctx.failure {
        let v = match f.origin {
            Origin::Torch(_) | Origin::TorchSnapshot(_) => host_pinned::verdict(ctx)
                .or_else(|| larger_than_device::verdict(ctx))
                .or_else(|| other_framework_pool::verdict(ctx))
                .or_else(|| torch::verdict(ctx)),
            Origin::Cupy(i) => larger_than_device::verdict(ctx)
                .or_else(|| cupy_pool_limit::verdict(ctx, i))
                .or_else(|| other_framework_pool::verdict(ctx))
                .or_else(|| other_process::verdict(ctx))
                .or_else(|| leak::ramp(ctx))
                .or_else(|| leak::from_ledger_trend(ctx)),
            Origin::Compile => compile_scratch::verdict(ctx),
            Origin::Xla | Origin::Driver => host_pinned::verdict(ctx)
                .or_else(|| larger_than_device::verdict(ctx))
                .or_else(|| other_framework_pool::verdict(ctx))
                .or_else(|| other_process::verdict(ctx))
                .or_else(|| execute_temp::verdict(ctx))
                .or_else(|| leak::verdict(ctx))
                .or_else(|| leak::ramp(ctx))
                .or_else(|| co_resident::verdict(ctx))
                .or_else(|| fragmentation::verdict(ctx)),
        };
        out.push(v.unwrap_or_else(|| pool_too_small::verdict(ctx)));
    }
    let failing = out.first().filter(|v| v.failure).map(|v| v.kind);
    for w in pool_limit_ignored::warnings(ctx) {
        if let Some(first) = out.first_mut() {
            if first.kind != w.kind && !first.also.contains(&w.kind) {
                first.also.push(w.kind);
            }
        }
        out.push(w);
    }
    if failing.is_none() && out.is_empty() {
        out.extend(leak::warning(ctx));
    }
    // Warnings about the whole run name the process they are about; the XLA warnings
    // (a limit its allocator ignored, its step outputs piling up) are XLA's memory.
    for v in out.iter_mut().filter(|v| !v.holder.other_process) {
        if v.holder.pid.is_none() {
            v.holder.pid = v.what.pid;
        }
        if v.holder.framework.is_none() && matches!(v.kind, Kind::PoolLimitIgnored | Kind::Leak) {
            v.holder.framework = Some("xla".into());
        }
    }
    out
}

/// A pool size the run's own trace was replayed at.
pub struct SizedPool {
    /// The smallest preallocated BFC pool that fits the trace.
    pub min_pool: u64,
    /// The fraction (two decimals) whose pool holds `min_pool` plus what the framework
    /// held outside the trace, and that pool — when the device's total is known.
    pub fraction: Option<(f64, u64)>,
    /// Whether the trace fits the suggested pool (or `min_pool`) on a fresh replay.
    pub fits: bool,
    /// Whether the model fails, as the run did, at the run's own pool (`None`: that pool
    /// is not known).
    pub reproduced: Option<(u64, bool)>,
    /// What was replayed, for the check's sentence.
    pub what: String,
}

fn repro_after(mut s: String, r: &str) -> String {
    s.push_str(r);
    s
}

impl SizedPool {
    /// The fix's check.
    pub fn check(&self) -> super::verdict::Check {
        let repro = match self.reproduced {
            Some((p, true)) => format!(" (it fails at the run's {} pool, as the run did)", b(p)),
            Some((p, false)) => format!(
                " (but it does not fail at the run's {} pool: the replay misses what made the run fail)",
                b(p)
            ),
            None => String::new(),
        };
        super::verdict::Check {
            method: "bfc_replay".into(),
            passed: self.fits && self.reproduced.is_none_or(|r| r.1),
            detail: repro_after(match self.fraction {
                Some((_, p)) => format!(
                    "{} replayed through the BFC model: the smallest pool that fits is {}; the suggested {} pool fits",
                    self.what,
                    b(self.min_pool),
                    b(p)
                ),
                None => format!(
                    "{} replayed through the BFC model: the smallest pool that fits is {}",
                    self.what,
                    b(self.min_pool)
                ),
            }, &repro),
        }
    }

    /// `XLA_CLIENT_MEM_FRACTION=F (a P pool)` or `a pool of at least P`.
    pub fn advice(&self) -> String {
        match self.fraction {
            Some((f, p)) => format!("XLA_CLIENT_MEM_FRACTION={f:.2} (a {} pool)", b(p)),
            None => format!("a pool of at least {}", b(self.min_pool)),
        }
    }
}

impl<'a> Ctx<'a> {
    /// Replays the run's own trace with `request` last through the BFC model and sizes
    /// the pool: the capture's PJRT buffers and temps up to the failure, else (when
    /// `packed_ok`: the live set's layout does not matter) the allocator's whole chunk
    /// dump from the log, which holds the live set at the failure but not the order that
    /// left holes between it.
    pub fn sized_pool(&self, requests: &[u64], packed_ok: bool) -> Option<SizedPool> {
        let request: u64 = requests.iter().sum();
        let f = self.failure?;
        let total = self.device_total(f.pid, f.device);
        let (trace, what, outside) = match self.at().and_then(|(pid, dev)| {
            super::check::run_trace(self.pjrt, pid, dev, self.failure_rt(), requests)
                .filter(|t| t.buffers > 0)
                .map(|t| (t, pid, dev))
        }) {
            Some((t, pid, dev)) => {
                let live: u64 = self
                    .pjrt
                    .live_at(pid, dev, self.failure_rt())
                    .map(|b| b.size)
                    .sum();
                let in_use = self.pool_state().in_use.unwrap_or(live);
                let what = if requests.len() > 1 {
                    format!(
                        "the run's {} buffers and temps with the {} asked for together ({} buffers)",
                        t.buffers,
                        b(request),
                        requests.len()
                    )
                } else {
                    format!(
                        "the run's {} buffers and temps with the {} request",
                        t.buffers,
                        b(request)
                    )
                };
                (t, what, in_use.saturating_sub(live))
            }
            None => {
                let oom = self
                    .log
                    .ooms
                    .last()
                    .filter(|o| packed_ok && requests.len() == 1 && o.chunk_dump_complete())?;
                let trace = crate::alloc::trace::from_bfc_oom(oom).ok()?;
                let n = trace.buffers().saturating_sub(1);
                let what = format!(
                    "the allocator's chunk dump ({n} live chunks, {}:{}) with the {} request",
                    oom.at.file,
                    oom.at.line,
                    b(request)
                );
                (super::check::RunTrace { trace, buffers: n }, what, 0)
            }
        };
        let max = total.unwrap_or(1 << 50);
        let min = super::check::min_pool(&trace, max)?;
        let fraction = total.and_then(|t| {
            let f = super::check::fraction_for(min + outside, t)?;
            Some((f, super::check::pool_of_fraction(f, t)))
        });
        let fits = super::check::fits(
            &trace,
            fraction.map_or(min, |(_, p)| p.saturating_sub(outside)),
        );
        let run_pool = self.pool_state();
        let reproduced = run_pool
            .pool
            .or(run_pool.limit)
            .map(|p| (p, !super::check::fits(&trace, p.saturating_sub(outside))));
        Some(SizedPool {
            min_pool: min,
            fraction,
            fits,
            reproduced,
            what,
        })
    }
}
