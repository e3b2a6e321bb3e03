//! `--connections`, `--depth` and `--when-full`: the event-driven engine's settings (issue
//! 30), checked before anything starts. The engine runs `--threads` event loops (default: one
//! per CPU) over `--connections` in all, `--depth` requests in flight on each, for the stores
//! whose `StoreKind` declares `EngineSupport` (memcached, Redis, etcd today: their options it
//! refuses, their servers' connection floor, sockets per connection); embedded stores and
//! plug-ins keep worker threads. Nothing here names a store (issue 42). What the engine cannot
//! serve yet is refused in one line, never approximated.

pub use super::model::{Engine, Probe, WhenFull};
use super::model::{PhaseKind, PhasePlan, PropValue};
use super::Request;
use crate::error::UsageError;
use crate::store::{StoreKind, StoreOptions};

/// The most connections one kvmeter process opens (each is a file descriptor and a few KiB).
pub const MAX_CONNECTIONS: i64 = 100_000;
/// The most requests in flight on one connection.
pub const MAX_DEPTH: i64 = 1024;
/// Descriptors kept free beside the connections: the run directory's files, telemetry's
/// /proc readers, a managed server's pipes, the epoll instances.
pub const FD_HEADROOM: u64 = 256;

/// The most probe connections (the probe is a light stream beside the load).
pub const MAX_PROBE_CONNECTIONS: i64 = 1000;

fn probe(req: &Request) -> Result<Option<Probe>, UsageError> {
    let Some(rate) = req.probe_rate else {
        if req.probe_connections.is_some() {
            return Err(UsageError::new(
                "--probe-connections goes with --probe-rate (the probe stream's rate)",
            ));
        }
        return Ok(None);
    };
    if !(rate.is_finite() && rate > 0.0 && rate <= 1e6) {
        return Err(UsageError::new(format!(
            "--probe-rate {rate}: expected a rate above 0 and at most 1,000,000 operations per second"
        )));
    }
    let connections = req.probe_connections.unwrap_or(1);
    if !(1..=MAX_PROBE_CONNECTIONS).contains(&connections) {
        return Err(UsageError::new(format!(
            "--probe-connections {connections}: expected 1 to {MAX_PROBE_CONNECTIONS}"
        )));
    }
    Ok(Some(Probe {
        rate,
        connections: connections as usize,
    }))
}

/// The engine's settings from the request, or `None` without `--connections`; fixes each
/// phase's thread count (event loops) and refuses what the engine cannot serve.
pub(super) fn resolve(
    req: &Request,
    adapter: &StoreKind,
    opts: &mut StoreOptions,
    phases: &mut [PhasePlan],
) -> Result<Option<Engine>, UsageError> {
    let Some(connections) = req.connections else {
        if req.depth.is_some()
            || req.when_full.is_some()
            || req.probe_rate.is_some()
            || req.send_slack.is_some()
        {
            return Err(UsageError::new(
                "--depth, --when-full, --probe-rate and --send-slack go with --connections (the event-driven engine); without it each worker thread has one request in flight",
            ));
        }
        if let Some(why) = (adapter.scans_refused)(opts) {
            for p in phases.iter().filter(|p| p.kind == PhaseKind::Run) {
                if p.workload.as_ref().is_some_and(|w| w.scanproportion > 0.0) {
                    return Err(UsageError::new(format!(
                        "phase '{}': scans with {why}",
                        p.name
                    )));
                }
            }
        }
        return Ok(None);
    };
    if !(1..=MAX_CONNECTIONS).contains(&connections) {
        return Err(UsageError::new(format!(
            "--connections {connections}: expected 1 to {MAX_CONNECTIONS}"
        )));
    }
    let depth = req.depth.unwrap_or(1);
    if !(1..=MAX_DEPTH).contains(&depth) {
        return Err(UsageError::new(format!(
            "--depth {depth}: expected 1 to {MAX_DEPTH} requests in flight per connection"
        )));
    }
    let when_full = match req.when_full.as_deref() {
        None | Some("queue") => WhenFull::Queue,
        Some("skip") => WhenFull::Skip,
        Some(v) => {
            return Err(UsageError::new(format!(
                "--when-full {v}: expected queue or skip"
            )))
        }
    };
    let support = served(adapter, opts)?;
    let probe = probe(req)?;
    let send_slack_ns = send_slack(req)?;
    if req.target.is_some() {
        return Err(UsageError::new(
            "--target with --connections: the engine's pacing is the open loop; use --rate",
        ));
    }
    let connections = connections as usize;
    // A managed server must take them all (a few more: kvmeter's own readiness checks).
    if opts.str("max_clients") == "auto" {
        let floor = support.min_clients;
        opts.set(
            "max_clients",
            &((connections + probe.map_or(0, |p| p.connections)) as u64 + 64)
                .max(floor)
                .to_string(),
        );
    }
    for p in phases.iter_mut() {
        workload_served(p)?;
        event_loops(req, p, connections);
    }
    // A Redis Cluster client has a socket per master on each connection.
    let masters = (support.sockets_per_connection)(opts);
    let fds_needed =
        (connections + probe.map_or(0, |p| p.connections)) as u64 * masters + FD_HEADROOM;
    let (_, hard) = fd_limits();
    if hard < fds_needed {
        let per = if masters > 1 {
            format!(" ({masters} masters: a socket per master on each connection)")
        } else {
            String::new()
        };
        return Err(UsageError::new(format!(
            "--connections {connections}: needs {fds_needed} file descriptors{per}, and this process may open at most {hard} (its hard limit, ulimit -Hn): raise it or open fewer connections"
        )));
    }
    Ok(Some(Engine {
        connections,
        depth: depth as usize,
        when_full,
        fds_needed,
        probe,
        send_slack_ns,
        first_conn: 0,
    }))
}

/// The most `--send-slack`: a tenth of a second (beyond it, the arrival process is no longer
/// what was asked for at the 10 ms windows the run checks).
const MAX_SEND_SLACK_NS: u64 = 100_000_000;

fn send_slack(req: &Request) -> Result<u64, UsageError> {
    let Some(s) = req.send_slack.as_deref() else {
        return Ok(0);
    };
    let d = crate::values::parse_duration("--send-slack", s)?;
    if req.rate.is_none() {
        return Err(UsageError::new(format!(
            "--send-slack {s}: goes with --rate (the open loop's arrivals it sends together)"
        )));
    }
    let ns = d.as_nanos().min(u64::MAX as u128) as u64;
    if ns > MAX_SEND_SLACK_NS {
        return Err(UsageError::new(format!(
            "--send-slack {s}: expected at most 100ms"
        )));
    }
    Ok(ns)
}

/// The store's engine support, if the engine speaks this store with these options.
fn served(
    adapter: &StoreKind,
    opts: &StoreOptions,
) -> Result<&'static crate::store::EngineSupport, UsageError> {
    let Some(support) = adapter.engine else {
        let served: Vec<&str> = crate::store::registry::built_in()
            .into_iter()
            .filter(|k| k.engine.is_some())
            .map(|k| k.name)
            .collect();
        return Err(UsageError::new(format!(
            "--connections with --store {}: the event-driven engine serves {}; other stores run on worker threads (--threads)",
            adapter.name,
            and_list(&served)
        )));
    };
    match (support.refusal)(opts) {
        Some(r) => Err(UsageError::new(r)),
        None => Ok(support),
    }
}

/// "a", "a and b", "a, b and c".
fn and_list(names: &[&str]) -> String {
    match names.split_last() {
        Some((last, [])) => last.to_string(),
        Some((last, rest)) => format!("{} and {last}", rest.join(", ")),
        None => "no store in this build".into(),
    }
}

/// The operations the engine sends: everything but scans (a read-modify-write, and a partial
/// update where the record is one value, are requests chained on one connection).
fn workload_served(p: &PhasePlan) -> Result<(), UsageError> {
    let Some(w) = &p.workload else { return Ok(()) };
    if p.kind != PhaseKind::Run {
        return Ok(());
    }
    let phase = &p.name;
    if w.scanproportion > 0.0 {
        return Err(UsageError::new(format!(
            "phase '{phase}': scanproportion={} with --connections: the event-driven engine does not scan; run it without --connections",
            w.scanproportion
        )));
    }
    Ok(())
}

/// Event-loop threads: `--threads` (or threadcount) when given, else one per CPU; never more
/// than connections.
fn event_loops(req: &Request, p: &mut PhasePlan, connections: usize) {
    let given = req.threads.is_some() || req.props.iter().any(|x| x.starts_with("threadcount="));
    let (threads, source) = if given {
        (p.threads.min(connections), "--threads: event loops")
    } else {
        (
            crate::machine::cpu_count().clamp(1, connections),
            "kvmeter default with --connections: one event loop per CPU",
        )
    };
    p.threads = threads;
    p.properties.insert(
        "threadcount".into(),
        PropValue {
            value: threads.to_string(),
            source: source.into(),
        },
    );
}

/// This process's (soft, hard) limits on open file descriptors.
pub fn fd_limits() -> (u64, u64) {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the struct it is given.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) } != 0 {
        return (1024, 1024);
    }
    (r.rlim_cur, r.rlim_max)
}

/// Raises the soft limit to `needed` (checked against the hard limit by `resolve`); returns
/// the limit in force.
pub fn raise_fd_limit(needed: u64) -> u64 {
    let (soft, hard) = fd_limits();
    if soft >= needed {
        return soft;
    }
    let r = libc::rlimit {
        rlim_cur: needed.min(hard),
        rlim_max: hard,
    };
    // SAFETY: setrlimit reads the struct it is given.
    unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &r) };
    fd_limits().0
}
