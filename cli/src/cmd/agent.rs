//! `memwatch agent --daemon HOST:PORT`: the per-node agent. A Unix-socket receiver for
//! shims (the same one `memwatch run` uses) feeding the forwarder (spool + TCP to the
//! daemon), plus device sampling (every --sample-ms, 100 by default). Owns argument parsing and wiring only.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Args;
use memwatch_agent::forwarder::{Forwarder, ForwarderConfig};
use memwatch_agent::{sampler, FrameSink, Receiver, SocketAccess};

use super::Outcome;

const AFTER_HELP: &str = "\
Examples:
  memwatch agent --daemon central:7374 --token-file /etc/memwatch/token
  memwatch agent --daemon 127.0.0.1:7374 --spool /var/lib/memwatch/spool --spool-max-mib 4096
  memwatch agent --daemon central:7374 --socket /run/memwatch/agent.sock --socket-mode 0660 --socket-group video

The agent prints the socket to point shims at (MEMWATCH_SINK=unix:PATH, or run
programs with `LD_PRELOAD=libmemwatch_preload.so`). Everything received is spooled to
disk first and deleted only after the daemon acknowledged its commit: when the daemon
is down, the agent keeps spooling (up to --spool-max-mib) and replays in order when it
is back. Reads each GPU and the processes on it (NVML, ROCm SMI) every --sample-ms
and at once when a shim reports a failed allocation, and amdgpu sysfs counters where
ROCm SMI is absent. Stops on SIGINT/SIGTERM after flushing for up to --drain-secs.

Exit status: 0, or 1 when batches were lost (the spool was full or could not be
written); what was lost is said on stderr.";

/// Arguments of `memwatch agent`.
#[derive(Args, Debug)]
#[command(after_help = AFTER_HELP)]
pub struct AgentArgs {
    /// HOST:PORT of `memwatch serve --ingest`.
    #[arg(long, value_name = "HOST:PORT", value_parser = parse_host_port)]
    pub daemon: String,
    /// Token the daemon requires.
    #[arg(long, env = "MEMWATCH_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// File holding the token (first line; instead of --token).
    #[arg(long, value_name = "FILE", env = "MEMWATCH_TOKEN_FILE")]
    pub token_file: Option<PathBuf>,
    /// Node name [default: the host name].
    #[arg(long)]
    pub node: Option<String>,
    /// Spool directory [default: $TMPDIR/memwatch-spool].
    #[arg(long, value_name = "DIR")]
    pub spool: Option<PathBuf>,
    /// Largest spool size in MiB (1 to 16777216); beyond it batches are refused and
    /// counted.
    #[arg(long, default_value_t = 1024, value_parser = clap::value_parser!(u64).range(1..=(1 << 24)))]
    pub spool_max_mib: u64,
    /// Directory in which the private socket directory is created [default: $TMPDIR].
    #[arg(long, value_name = "DIR", conflicts_with = "socket")]
    pub socket_dir: Option<PathBuf>,
    /// Listen on this fixed socket path instead of a private directory (e.g. in a
    /// volume workload containers mount). A socket an agent left there is replaced.
    #[arg(long, value_name = "PATH")]
    pub socket: Option<PathBuf>,
    /// File mode of the --socket (octal; a shim needs write permission: 0660 lets the
    /// --socket-group in, 0666 everyone).
    #[arg(long, value_name = "OCTAL", default_value = "0600", value_parser = parse_mode, requires = "socket")]
    pub socket_mode: u32,
    /// Group of the --socket (a name or a number), for --socket-mode 0660.
    #[arg(long, value_name = "GROUP", value_parser = parse_group, requires = "socket")]
    pub socket_group: Option<u32>,
    /// Device sampling period in ms (0: no sampling): NVML / ROCm SMI read each device
    /// and its processes this often, and at once when a shim reports a failed
    /// allocation; amdgpu sysfs counters are read as often.
    #[arg(long, default_value_t = memwatch_wire::ingest::DEFAULT_SAMPLE_MS)]
    pub sample_ms: u64,
    /// sysfs root for amdgpu sampling.
    #[arg(long, default_value = "/sys", hide = true)]
    pub sysfs_root: PathBuf,
    /// Seconds to wait for the daemon to acknowledge everything when stopping.
    #[arg(long, default_value_t = 10.0)]
    pub drain_secs: f64,
}

/// `HOST:PORT` (`[v6]:PORT` for IPv6 literals) with a port 1..=65535; the host is
/// resolved when connecting, so a name that does not resolve yet is accepted.
fn parse_host_port(s: &str) -> Result<String, String> {
    let (host, port) = s
        .rsplit_once(':')
        .ok_or_else(|| format!("`{s}` is not HOST:PORT (e.g. central:7374)"))?;
    let host_ok = !host.is_empty()
        && !host.contains('/')
        && (!host.contains(':') || (host.starts_with('[') && host.ends_with(']')));
    if !host_ok {
        return Err(format!("`{s}`: `{host}` is not a host name or address"));
    }
    match port.parse::<u16>() {
        Ok(p) if p > 0 => Ok(s.to_string()),
        _ => Err(format!("`{s}`: `{port}` is not a port (1 to 65535)")),
    }
}

/// An octal file mode for a socket: rw for its owner at least, nothing beyond 0777.
fn parse_mode(s: &str) -> Result<u32, String> {
    let m = u32::from_str_radix(s.trim_start_matches("0o"), 8)
        .map_err(|_| format!("`{s}` is not an octal file mode (e.g. 0660)"))?;
    if m > 0o777 || m & 0o600 != 0o600 {
        return Err(format!(
            "`{s}`: a socket mode between 0600 and 0777 that lets its owner read and write"
        ));
    }
    Ok(m)
}

/// A group name (looked up in /etc/group) or number.
fn parse_group(s: &str) -> Result<u32, String> {
    if let Ok(gid) = s.parse::<u32>() {
        return Ok(gid);
    }
    let groups = std::fs::read_to_string("/etc/group")
        .map_err(|e| format!("cannot read /etc/group to look up `{s}`: {e}"))?;
    groups
        .lines()
        .filter_map(|l| {
            let mut f = l.split(':');
            Some((f.next()?, f.nth(1)?))
        })
        .find(|(name, _)| *name == s)
        .and_then(|(_, gid)| gid.parse().ok())
        .ok_or_else(|| format!("no group `{s}` in /etc/group"))
}

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "localhost".into())
}

pub fn run(args: AgentArgs) -> Result<Outcome> {
    let token =
        super::token::token(args.token.as_deref(), args.token_file.as_deref())?.unwrap_or_default();
    let node = args.node.clone().unwrap_or_else(hostname);
    let spool = args
        .spool
        .clone()
        .unwrap_or_else(|| std::env::temp_dir().join("memwatch-spool"));
    let mut cfg = ForwarderConfig::new(args.daemon.clone(), node.clone(), spool.clone());
    cfg.token = token;
    cfg.spool_max_bytes = args.spool_max_mib << 20;
    let fwd = Arc::new(
        Forwarder::start(cfg).with_context(|| format!("cannot open spool {}", spool.display()))?,
    );
    // Devices and their processes read every --sample-ms and at each failed allocation a
    // shim reports (the node's view: no process tree is watched).
    let (readers, off) = if args.sample_ms > 0 {
        sampler::reader::detect_readers()
    } else {
        (Vec::new(), Vec::new())
    };
    let rocm_reads = readers.iter().any(|r| r.source() == "rocm_smi");
    let names: Vec<&str> = readers.iter().map(|r| r.source()).collect();
    let readings = (!readers.is_empty())
        .then(|| {
            let out = sampler::ForwarderOut::open(fwd.clone(), &readers);
            sampler::sampling::Sampling::start(
                readers,
                sampler::watch::Watch::new(),
                Box::new(out),
                Duration::from_millis(args.sample_ms),
            )
        })
        .flatten();
    let sink = Arc::new(sampler::failure_tap::FailureTap::new(
        fwd.clone() as Arc<dyn FrameSink>,
        readings.as_ref().map(|s| s.trigger()),
    )) as Arc<dyn FrameSink>;
    let receiver = match &args.socket {
        Some(path) => Receiver::start_at(
            path,
            SocketAccess {
                mode: args.socket_mode,
                group: args.socket_group,
            },
            sink,
        ),
        None => Receiver::start(args.socket_dir.as_deref(), sink),
    }
    .context("cannot start the shim receiver")?;
    // SAFETY: installing a handler that only stores to an atomic.
    unsafe {
        libc::signal(libc::SIGINT, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGTERM, on_signal as *const () as libc::sighandler_t);
    }
    outln!("MEMWATCH_SINK={}", receiver.sink_address());
    eprintln!(
        "memwatch agent: node {node}, daemon {}, spool {}",
        args.daemon,
        spool.display()
    );
    let sampling = if args.sample_ms > 0 {
        let samplers = sampler::detect(&args.sysfs_root, rocm_reads);
        let all: Vec<&str> = names
            .iter()
            .copied()
            .chain(samplers.iter().map(|s| s.name()))
            .collect();
        for why in &off {
            eprintln!("memwatch agent: {why}");
        }
        eprintln!(
            "memwatch agent: device sampling: {}",
            if all.is_empty() {
                "no GPU found".to_string()
            } else {
                all.join(", ")
            }
        );
        let f = fwd.clone();
        let period = Duration::from_millis(args.sample_ms);
        (!samplers.is_empty())
            .then(|| std::thread::spawn(move || sampler::run_sampling(samplers, &f, period, &STOP)))
    } else {
        None
    };
    while !STOP.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(100));
    }
    eprintln!("memwatch agent: stopping");
    let stats = receiver.shutdown();
    if let Some(t) = sampling {
        let _ = t.join();
    }
    if let Some(r) = readings {
        r.stop();
    }
    let fwd = Arc::try_unwrap(fwd).map_err(|_| anyhow::anyhow!("forwarder still in use"))?;
    let refused = fwd.stats().batches_refused.load(Ordering::Relaxed);
    let failed = fwd.stats().batches_lost.load(Ordering::Relaxed);
    let drained = fwd.shutdown(Duration::from_secs_f64(args.drain_secs.max(0.0)));
    let lost = refused + failed;
    eprintln!(
        "memwatch agent: {} connections; {}{}",
        stats.connections.len(),
        if drained && lost == 0 {
            "everything acknowledged by the daemon".to_string()
        } else if drained {
            "everything spooled was acknowledged by the daemon".to_string()
        } else {
            format!(
                "unacknowledged data stays in {} for the next start",
                spool.display()
            )
        },
        if lost == 0 {
            String::new()
        } else {
            format!(
                "; {lost} batch{} never reached the spool and {} lost ({refused} spool full, \
                 {failed} write errors)",
                if lost == 1 { "" } else { "es" },
                if lost == 1 { "is" } else { "are" }
            )
        }
    );
    Ok(if lost == 0 {
        Outcome::Success
    } else {
        Outcome::CheckFailed
    })
}

#[cfg(test)]
mod tests {
    use super::{parse_group, parse_host_port, parse_mode};

    #[test]
    fn socket_modes_and_groups() {
        assert_eq!(parse_mode("0660"), Ok(0o660));
        assert_eq!(parse_mode("666"), Ok(0o666));
        for bad in ["0400", "0o1777", "rw", "0999"] {
            assert!(parse_mode(bad).is_err(), "{bad}");
        }
        assert_eq!(parse_group("10001"), Ok(10001));
        assert_eq!(parse_group("root"), Ok(0));
        assert!(parse_group("no-such-group-here").is_err());
    }

    #[test]
    fn daemon_addresses_are_host_and_port() {
        for ok in ["central:7374", "127.0.0.1:7374", "[::1]:7374", "a.b.c:1"] {
            assert_eq!(parse_host_port(ok).as_deref(), Ok(ok));
        }
        for (bad, why) in [
            ("nothostport", "not HOST:PORT"),
            ("central:", "not a port"),
            ("central:0", "not a port"),
            ("central:70000", "not a port"),
            (":7374", "not a host"),
            ("::1:7374", "not a host"),
            ("http://central:7374", "not a host"),
        ] {
            let e = parse_host_port(bad).unwrap_err();
            assert!(e.contains(why), "{bad}: {e}");
        }
    }
}
