//! Redis's own accounting (`INFO` of five sections, redis.io "INFO") on the run's clock
//! (issue 43): cache hits and misses, evictions and expiries, memory, clients, forks and
//! background saves, and from `commandstats` the calls and server-side microseconds of each
//! command kvmeter sends — the server's own service time beside the client's latency. Read
//! on a connection of its own (`stats::Poller`), bounded by `stats::REPLY_LIMIT` and a
//! deadline of at most a second.
//! Redis names each statistic as it is declared here (`cmdstat_<cmd>` becomes
//! `cmdstat_<cmd>_calls` and `_usec`).

use super::super::net::Conn;
use super::super::stats::{self, stat, Poller, Role, StatKind, StatSpec};
use super::resp::{command, reply, Reply};
use super::server::{connect, Settings};
use std::net::SocketAddr;
use StatKind::{Counter, Gauge};

pub static STATS: &[StatSpec] = &[
    stat(
        "keyspace_hits",
        "count",
        Counter,
        Role::CacheHit,
        "lookups that found their key",
    ),
    stat(
        "keyspace_misses",
        "count",
        Counter,
        Role::CacheMiss,
        "lookups that found no key",
    ),
    stat(
        "evicted_keys",
        "count",
        Counter,
        Role::Work,
        "keys evicted at maxmemory",
    ),
    stat("expired_keys", "count", Counter, Role::Work, "keys expired"),
    stat(
        "total_commands_processed",
        "count",
        Counter,
        Role::Plain,
        "commands served (kvmeter's INFO too)",
    ),
    stat(
        "total_connections_received",
        "count",
        Counter,
        Role::Plain,
        "connections accepted",
    ),
    stat(
        "rejected_connections",
        "count",
        Counter,
        Role::Work,
        "connections refused at maxclients",
    ),
    stat(
        "total_net_input_bytes",
        "bytes",
        Counter,
        Role::Plain,
        "bytes read from the network",
    ),
    stat(
        "total_net_output_bytes",
        "bytes",
        Counter,
        Role::Plain,
        "bytes written to the network",
    ),
    stat(
        "total_forks",
        "count",
        Counter,
        Role::Work,
        "forks (background saves and AOF rewrites)",
    ),
    stat(
        "total_error_replies",
        "count",
        Counter,
        Role::Work,
        "error replies",
    ),
    stat(
        "cmdstat_hgetall_calls",
        "count",
        Counter,
        Role::Plain,
        "HGETALL calls (a read of every field)",
    ),
    stat(
        "cmdstat_hgetall_usec",
        "us",
        Counter,
        Role::Plain,
        "server time in HGETALL",
    ),
    stat(
        "cmdstat_hset_calls",
        "count",
        Counter,
        Role::Plain,
        "HSET calls (an insert's or update's write)",
    ),
    stat(
        "cmdstat_hset_usec",
        "us",
        Counter,
        Role::Plain,
        "server time in HSET",
    ),
    stat(
        "cmdstat_get_calls",
        "count",
        Counter,
        Role::Plain,
        "GET calls (encoding=string)",
    ),
    stat(
        "cmdstat_get_usec",
        "us",
        Counter,
        Role::Plain,
        "server time in GET",
    ),
    stat(
        "cmdstat_set_calls",
        "count",
        Counter,
        Role::Plain,
        "SET calls (encoding=string)",
    ),
    stat(
        "cmdstat_set_usec",
        "us",
        Counter,
        Role::Plain,
        "server time in SET",
    ),
    stat(
        "connected_clients",
        "count",
        Gauge,
        Role::Plain,
        "open client connections (kvmeter's statistics connection too)",
    ),
    stat(
        "blocked_clients",
        "count",
        Gauge,
        Role::Plain,
        "clients waiting in a blocking command",
    ),
    stat(
        "used_memory",
        "bytes",
        Gauge,
        Role::Plain,
        "bytes allocated by Redis",
    ),
    stat(
        "used_memory_rss",
        "bytes",
        Gauge,
        Role::Plain,
        "resident bytes, as the OS sees them",
    ),
    stat(
        "maxmemory",
        "bytes",
        Gauge,
        Role::Plain,
        "the memory limit (0: none)",
    ),
    stat(
        "rdb_saves",
        "count",
        Counter,
        Role::Work,
        "RDB saves (background or not)",
    ),
    stat("aof_rewrites", "count", Counter, Role::Work, "AOF rewrites"),
    stat(
        "rdb_bgsave_in_progress",
        "bool",
        Gauge,
        Role::Plain,
        "a background RDB save is running",
    ),
    stat(
        "aof_rewrite_in_progress",
        "bool",
        Gauge,
        Role::Plain,
        "an AOF rewrite is running",
    ),
    stat(
        "rdb_changes_since_last_save",
        "count",
        Gauge,
        Role::Plain,
        "writes not yet in an RDB file",
    ),
    stat(
        "latest_fork_usec",
        "us",
        Gauge,
        Role::Plain,
        "how long the latest fork blocked the server",
    ),
];

/// Reads the server's INFO (`SECTIONS`) at `addr` into `out`.
pub(super) fn sample(
    poller: &Poller<Conn>,
    s: &Settings,
    addr: SocketAddr,
    out: &mut [Option<u64>],
) -> Result<(), String> {
    poller.sample(|| open(s, addr), |c| read_info(c, out))
}

/// The most masters whose statistics one sample sums.
const MAX_MASTERS: usize = 64;
/// Samples between two CLUSTER SLOTS (a failed sample asks again at once).
const MAP_EVERY: u32 = 50;

/// A cluster's statistics connections: the masters CLUSTER SLOTS named last, how many samples
/// ago, and a statistics connection to each.
#[derive(Default)]
pub(super) struct ClusterPollers {
    masters: Vec<SocketAddr>,
    age: u32,
    pollers: std::collections::BTreeMap<SocketAddr, Poller<Conn>>,
    /// Where each master's books stood at its last events poll.
    seen: std::collections::BTreeMap<SocketAddr, super::events::Seen>,
}

impl ClusterPollers {
    /// Each master's events (`events::poll`: saves, AOF rewrites, latency spikes) on its
    /// statistics connection, each detail naming the master; the masters are those the latest
    /// statistics sample found (none before it). A master that cannot answer is named in the
    /// error; the others' events still count.
    pub(super) fn events(
        &mut self,
        s: &Settings,
        out: &mut Vec<stats::StoreEvent>,
    ) -> Result<(), String> {
        let mut failed = None;
        for &m in &self.masters {
            let from = out.len();
            let poller = self.pollers.entry(m).or_default();
            let seen = self.seen.entry(m).or_default();
            if let Err(e) = super::events::poll(poller, || open(s, m), seen, out) {
                failed.get_or_insert(format!("master {m}: {e}"));
            }
            for e in &mut out[from..] {
                e.detail = stats::event_detail(&format!("master {m}: {}", e.detail));
            }
        }
        failed.map_or(Ok(()), Err)
    }
}

/// A Redis Cluster's statistics: the sections of INFO of each master that CLUSTER SLOTS names
/// (asked of the node at `addr` on the seed's statistics connection every `MAP_EVERY` samples),
/// each on a connection of its own, summed — the cluster's hits, evictions, memory and
/// commands — except the flags (`bool`) and the latest fork's time, which are the highest of
/// any master. A statistic one master did not give is unavailable in this sample.
pub(super) fn sample_cluster(
    seed: &Poller<Conn>,
    nodes: &std::sync::Mutex<ClusterPollers>,
    s: &Settings,
    addr: SocketAddr,
    out: &mut [Option<u64>],
) -> Result<(), String> {
    let mut nodes = nodes.lock().unwrap_or_else(|p| p.into_inner());
    if nodes.masters.is_empty() || nodes.age >= MAP_EVERY {
        let map = seed.sample(|| open(s, addr), super::cluster::slot_map)?;
        let mut masters: Vec<SocketAddr> = map.into_iter().flatten().collect();
        masters.sort();
        masters.dedup();
        if masters.is_empty() || masters.len() > MAX_MASTERS {
            return Err(format!(
                "CLUSTER SLOTS named {} masters (1 to {MAX_MASTERS} are sampled)",
                masters.len()
            ));
        }
        nodes.pollers.retain(|a, _| masters.contains(a));
        nodes.seen.retain(|a, _| masters.contains(a));
        (nodes.masters, nodes.age) = (masters, 0);
    }
    nodes.age += 1;
    let mut one = vec![None; out.len()];
    out.fill(Some(0));
    for i in 0..nodes.masters.len() {
        let m = nodes.masters[i];
        let poller = nodes.pollers.entry(m).or_default();
        let r = poller.sample(|| open(s, m), |c| read_info(c, &mut one));
        if let Err(e) = r {
            // The map may have changed (a failover, a reshard): ask for it at the next sample.
            nodes.masters.clear();
            return Err(format!("master {m}: {e}"));
        }
        for ((o, v), spec) in out.iter_mut().zip(&one).zip(STATS) {
            *o = match (*o, *v) {
                (Some(a), Some(b)) if spec.unit == "bool" || spec.name == "latest_fork_usec" => {
                    Some(a.max(b))
                }
                (Some(a), Some(b)) => Some(a.saturating_add(b)),
                _ => None,
            };
        }
    }
    Ok(())
}

/// The sections the declared statistics come from: Redis 7 answers several in one INFO,
/// about three quarters of `INFO all` and without its per-command latency percentiles.
const SECTIONS: [&[u8]; 6] = [
    b"INFO",
    b"stats",
    b"memory",
    b"clients",
    b"persistence",
    b"commandstats",
];

/// Whether a server refused INFO with several sections (Redis before 7.0): from then on this
/// process asks for `INFO all`.
static ONE_SECTION_ONLY: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// One INFO of the sections the statistics need on `c` into `out`.
fn read_info(c: &mut Conn, out: &mut [Option<u64>]) -> Result<(), String> {
    use std::sync::atomic::Ordering::Relaxed;
    out.fill(None);
    let ask = |c: &mut Conn, all: bool| -> Result<Reply, String> {
        c.begin();
        if all {
            command(&mut c.wbuf, &[b"INFO", b"all"]);
        } else {
            command(&mut c.wbuf, &SECTIONS);
        }
        c.send().map_err(|e| e.message)?;
        reply(c).map_err(|e| format!("INFO: {}", e.message))
    };
    let mut answer = ask(c, ONE_SECTION_ONLY.load(Relaxed))?;
    if matches!(answer, Reply::Error(_)) && !ONE_SECTION_ONLY.load(Relaxed) {
        ONE_SECTION_ONLY.store(true, Relaxed);
        answer = ask(c, true)?;
    }
    let text = match answer {
        Reply::Bulk(Some(r)) => c.bytes(r),
        _ => return Err(c.protocol("INFO: not a bulk string").message),
    };
    if text.windows(15).any(|w| w == b"# Commandstats\r") {
        // A command not yet called has no line: its calls and time are 0.
        for (i, spec) in STATS.iter().enumerate() {
            if spec.name.starts_with("cmdstat_") {
                out[i] = Some(0);
            }
        }
    }
    for line in text.split(|&b| b == b'\n') {
        let line = std::str::from_utf8(line)
            .unwrap_or("")
            .trim_end_matches('\r');
        let Some((name, value)) = line.split_once(':') else {
            continue; // "# Section" headers and blank lines
        };
        match name.strip_prefix("cmdstat_") {
            Some(cmd) => command_stats(out, cmd, value),
            None => stats::set(STATS, out, name, value),
        }
    }
    Ok(())
}

/// The statistics connection: the store's settings (TLS, AUTH, SELECT) under the statistics'
/// deadline and reply bound.
pub(super) fn open(s: &Settings, addr: SocketAddr) -> Result<Conn, String> {
    let mut s = s.clone();
    s.timeout = stats::deadline(s.timeout);
    s.max_reply = stats::REPLY_LIMIT;
    connect(&s, addr).map_err(|e| format!("statistics connection: {}", e.message))
}

/// `cmdstat_hset:calls=3,usec=12,usec_per_call=4.00,...`: the calls and the microseconds.
fn command_stats(out: &mut [Option<u64>], cmd: &str, value: &str) {
    for pair in value.split(',') {
        if let Some((what @ ("calls" | "usec"), n)) = pair.split_once('=') {
            // Only the commands declared: the name is looked up, never allocated for others.
            let mut name = [0u8; 64];
            let full = format_name(&mut name, cmd, what);
            if let Some(full) = full {
                stats::set(STATS, out, full, n);
            }
        }
    }
}

/// `cmdstat_<cmd>_<what>` in `buf`; None when it does not fit (no declared name is that long).
fn format_name<'b>(buf: &'b mut [u8; 64], cmd: &str, what: &str) -> Option<&'b str> {
    let parts: [&[u8]; 4] = [b"cmdstat_", cmd.as_bytes(), b"_", what.as_bytes()];
    let mut at = 0;
    for p in parts {
        buf.get_mut(at..at + p.len())?.copy_from_slice(p);
        at += p.len();
    }
    std::str::from_utf8(&buf[..at]).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(name: &str) -> usize {
        STATS.iter().position(|s| s.name == name).unwrap()
    }

    #[test]
    fn command_stats_give_calls_and_usec_of_declared_commands_only() {
        let mut out = vec![None; STATS.len()];
        command_stats(
            &mut out,
            "hset",
            "calls=3,usec=12,usec_per_call=4.00,rejected_calls=0",
        );
        command_stats(&mut out, "zadd", "calls=9,usec=99");
        command_stats(&mut out, &"x".repeat(100), "calls=1");
        assert_eq!(out[at("cmdstat_hset_calls")], Some(3));
        assert_eq!(out[at("cmdstat_hset_usec")], Some(12));
        assert_eq!(out.iter().flatten().count(), 2);
    }
}
