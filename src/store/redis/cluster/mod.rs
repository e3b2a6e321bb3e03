//! Redis Cluster (`--store-opt cluster=M`, optional `cluster_replicas=R` per master): M
//! masters own equal ranges of the 16384 hash slots (master:i the i-th range), started with
//! `--cluster-enabled yes` and joined by hand (CLUSTER ADDSLOTSRANGE, MEET, REPLICATE — the
//! steps `redis-cli --cluster create` takes, without needing redis-tools). The client routes
//! each key by CRC16 hash slot (hash tags honoured), learns the slot map from CLUSTER SLOTS,
//! and after a MOVED or ASK reply — or a master that stops answering — asks again. Throughput
//! against the number of servers is `kvmeter sweep --param store-opt.cluster=3,4,6`.
//!
//! The shard of a key (for the recovery timeline's affected/rest split) is the master that
//! owned its slot when the cluster was made: after a failover the same data is served by the
//! promoted replica.

use super::resp::*;
use super::server::{ask, connect, field, ping, server_args, settings, Settings};
use crate::error::UsageError;
use crate::store::cluster::{Cluster, Member, Role, Shape, StartCtx, Topology};
use crate::store::kv::RawError;
use crate::store::managed::Managed;
use crate::store::{count_sent, net, StoreOptions};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

pub(super) static REDIS_CLUSTER: RedisCluster = RedisCluster;

pub(super) struct RedisCluster;

pub(super) const SLOTS: usize = 16384;

pub(super) fn check(o: &StoreOptions) -> Result<(), UsageError> {
    let m = o.u64("cluster")?;
    if m == 0 {
        return Ok(());
    }
    if !(3..=16).contains(&m) {
        return Err(UsageError::new(format!(
            "--store-opt cluster={m}: expected 3 to 16 masters (Redis Cluster needs 3 to agree on a failure)"
        )));
    }
    let r = o.u64("cluster_replicas")?;
    if r > 2 {
        return Err(UsageError::new(format!(
            "--store-opt cluster_replicas={r}: expected 0 to 2 replicas per master"
        )));
    }
    if o.u64("replicas")? > 0 || o.u64("sentinels")? > 0 {
        return Err(UsageError::new(
            "--store-opt cluster= has its own replicas (cluster_replicas=) and failover: leave replicas= and sentinels= out",
        ));
    }
    if o.u64("pipeline")? > 1 {
        return Err(UsageError::new(
            "--store-opt cluster= routes each key to its own master, so pipeline= (one batch per connection) is not offered with it",
        ));
    }
    o.positive("node_timeout_ms")?;
    o.bool("full_coverage")?;
    Ok(())
}

/// CRC16-CCITT (XModem), the slot hash of the Redis Cluster specification.
pub(super) fn crc16(data: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &b in data {
        crc ^= (b as u16) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

/// A key's hash slot: of the `{tag}` when the key has a non-empty one.
#[inline]
pub(super) fn slot(key: &[u8]) -> usize {
    let k = match key.iter().position(|&c| c == b'{') {
        Some(open) => match key[open + 1..].iter().position(|&c| c == b'}') {
            Some(len) if len > 0 => &key[open + 1..open + 1 + len],
            _ => key,
        },
        None => key,
    };
    crc16(k) as usize % SLOTS
}

/// The first slot of master `i`'s range of `m`.
fn range_start(i: usize, m: usize) -> usize {
    i * SLOTS / m
}

/// The master (by creation order) whose range holds `slot`: the i with
/// `range_start(i) <= slot < range_start(i + 1)`.
#[inline]
pub(super) fn shard_of(slot: usize, m: usize) -> u16 {
    (((slot + 1) * m - 1) / SLOTS).min(m - 1) as u16
}

/// The most distinct nodes one CLUSTER SLOTS reply may name (a real cluster has at most a
/// few hundred masters): more is refused before any is resolved or connected to, so a
/// reply cannot turn kvmeter into a port scanner.
pub(super) const MAX_NODES: usize = 1000;

/// The slot → owner map, from CLUSTER SLOTS (None: no master serves the slot). An owner with
/// an empty host is the node asked (the specification's "unknown endpoint").
pub(super) fn slot_map(c: &mut net::Conn) -> Result<Vec<Option<SocketAddr>>, String> {
    c.begin();
    command(&mut c.wbuf, &[b"CLUSTER", b"SLOTS"]);
    c.send().map_err(|e| e.message)?;
    let Reply::Array(Some(n)) = reply(c).map_err(|e| e.message)? else {
        return Err("CLUSTER SLOTS: unexpected reply".into());
    };
    if n > SLOTS {
        c.broken = true;
        return Err(format!(
            "CLUSTER SLOTS: {n} slot ranges, more than the {SLOTS} slots"
        ));
    }
    let mut map = vec![None; SLOTS];
    // Each owner as the reply names it, resolved once.
    let mut owners: Vec<(String, u16, Option<SocketAddr>)> = Vec::new();
    for _ in 0..n {
        let Reply::Array(Some(parts)) = reply(c).map_err(|e| e.message)? else {
            return Err("CLUSTER SLOTS: unexpected entry".into());
        };
        let (Reply::Int(lo), Reply::Int(hi)) = (
            reply(c).map_err(|e| e.message)?,
            reply(c).map_err(|e| e.message)?,
        ) else {
            return Err("CLUSTER SLOTS: unexpected range".into());
        };
        let mut owner = None;
        for p in 2..parts {
            let node = node(c).map_err(|e| e.message)?;
            if p == 2 {
                owner = node;
            }
        }
        let Some((host, port)) = owner else { continue };
        let a = match owners.iter().find(|(h, p, _)| *h == host && *p == port) {
            Some(o) => o.2,
            None => {
                if owners.len() == MAX_NODES {
                    c.broken = true;
                    return Err(format!(
                        "CLUSTER SLOTS names more than {MAX_NODES} nodes; kvmeter connects to no more"
                    ));
                }
                let a = match host.as_str() {
                    "" => Some(SocketAddr::new(c.addr.ip(), port)),
                    h => match h.parse::<std::net::IpAddr>() {
                        Ok(ip) => Some(SocketAddr::new(ip, port)),
                        Err(_) => net::resolve(&format!("{h}:{port}")).ok(),
                    },
                };
                owners.push((host, port, a));
                a
            }
        };
        if let Some(a) = a {
            let (lo, hi) = (lo.max(0) as usize, (hi.max(0) as usize).min(SLOTS - 1));
            if lo <= hi {
                map[lo..=hi].fill(Some(a));
            }
        }
    }
    Ok(map)
}

/// One node of a CLUSTER SLOTS entry: `[host, port, id, {metadata}]` → (host, port), None when
/// the port is not one.
fn node(c: &mut net::Conn) -> Result<Option<(String, u16)>, RawError> {
    let Reply::Array(Some(fields)) = reply(c)? else {
        return Err(c.protocol("CLUSTER SLOTS: unexpected node"));
    };
    let mut host = String::new();
    let mut port = 0i64;
    for f in 0..fields {
        match reply(c)? {
            Reply::Bulk(Some(r)) if f == 0 => host = net::excerpt(c.bytes(r)),
            Reply::Int(x) if f == 1 => port = x,
            // Redis 7's metadata map (and anything nested): skipped, depth bounded.
            Reply::Array(Some(k)) => skip(c, k)?,
            _ => {}
        }
    }
    Ok(u16::try_from(port)
        .ok()
        .filter(|&p| p > 0)
        .map(|p| (host, p)))
}

fn cluster_info(s: &Settings, addr: &str) -> Result<String, String> {
    ask(s, addr, &[b"CLUSTER", b"INFO"])
}

fn node_id(s: &Settings, addr: &str) -> Result<String, String> {
    ask(s, addr, &[b"CLUSTER", b"MYID"])
}

/// `n` free loopback ports for cluster members whose bus ports (each port + 10,000, where
/// Redis puts a member's cluster bus) are free too: Redis refuses a port above 55,535, and
/// ports from the kernel's ephemeral range (up to 60,999) would be one in five times.
fn cluster_ports(n: usize) -> std::io::Result<Vec<u16>> {
    use std::net::TcpListener;
    let mut held: Vec<TcpListener> = Vec::new();
    let mut ports = Vec::with_capacity(n);
    for _ in 0..(n * 50) {
        if ports.len() == n {
            break;
        }
        let l = TcpListener::bind("127.0.0.1:0")?;
        let port = l.local_addr()?.port();
        held.push(l);
        if port > 55_535 {
            continue;
        }
        // The bus port is held too until every member's pair is chosen.
        if let Ok(bus) = TcpListener::bind(("127.0.0.1", port + 10_000)) {
            held.push(bus);
            ports.push(port);
        }
    }
    if ports.len() < n {
        return Err(std::io::Error::other(format!(
            "no {n} free loopback ports at or below 55535 with their cluster bus port (+10000) free"
        )));
    }
    Ok(ports)
}

/// Starts one cluster-enabled redis-server on `port`.
fn spawn_member(
    ctx: &StartCtx,
    binary: &std::path::Path,
    role: Role,
    index: usize,
    port: u16,
) -> anyhow::Result<Member> {
    let (dir, log) = ctx.member_paths(role, index)?;
    let mut args = server_args(ctx.opts, &[port], &dir);
    args.extend([
        "--cluster-enabled".into(),
        "yes".into(),
        "--cluster-config-file".into(),
        dir.join("nodes.conf").display().to_string(),
        "--cluster-node-timeout".into(),
        ctx.opts.str("node_timeout_ms").into(),
        "--cluster-require-full-coverage".into(),
        if ctx.opts.bool("full_coverage")? {
            "yes"
        } else {
            "no"
        }
        .into(),
    ]);
    let p = super::server::password(ctx.opts);
    if !p.is_empty() {
        args.extend(["--masterauth".into(), p]);
    }
    let addr = format!("127.0.0.1:{port}");
    Ok(Member {
        role,
        index,
        server: Managed::spawn("redis", binary, args, addr, &log, &ctx.cpus())?,
        ports: vec![port],
        dir,
    })
}

/// Introduces every node to the first and waits until each knows all the others (before
/// that a replica cannot follow its master).
fn meet(s: &Settings, c: &Cluster, timeout: Duration) -> anyhow::Result<()> {
    let n = c.members.len();
    let first = &c.members[0].server.addr;
    for m in &c.members[1..] {
        let port = m.ports[0].to_string();
        ask(
            s,
            first,
            &[b"CLUSTER", b"MEET", b"127.0.0.1", port.as_bytes()],
        )
        .map_err(|e| anyhow::anyhow!("making the Redis Cluster: {e}"))?;
    }
    let deadline = Instant::now() + timeout;
    loop {
        let known = c.members.iter().all(|m| {
            cluster_info(s, &m.server.addr)
                .ok()
                .and_then(|i| field(&i, "cluster_known_nodes").and_then(|v| v.parse().ok()))
                == Some(n)
        });
        if known {
            return Ok(());
        }
        if Instant::now() >= deadline {
            anyhow::bail!(
                "making the Redis Cluster: the nodes did not meet within {:.0} s",
                timeout.as_secs_f64()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

impl Topology for RedisCluster {
    fn shape(&self, o: &StoreOptions) -> Shape {
        let m = o.u64("cluster").unwrap_or(3) as usize;
        let r = o.u64("cluster_replicas").unwrap_or(0) as usize;
        let mut members: Vec<(Role, usize)> = (0..m).map(|i| (Role::Master, i)).collect();
        members.extend((0..m * r).map(|i| (Role::Replica, i)));
        Shape {
            members,
            dynamic: &[],
        }
    }

    fn start(&self, ctx: &StartCtx) -> anyhow::Result<Cluster> {
        let m = ctx.opts.u64("cluster")? as usize;
        let r = ctx.opts.u64("cluster_replicas")? as usize;
        let n = m * (1 + r);
        let binary = ctx.binary()?;
        let ports = cluster_ports(n)?;
        let mut members = Vec::with_capacity(n);
        for (k, &port) in ports.iter().enumerate() {
            let (role, index) = if k < m {
                (Role::Master, k)
            } else {
                (Role::Replica, k - m)
            };
            members.push(spawn_member(ctx, &binary, role, index, port)?);
        }
        let mut opts = ctx.opts.clone();
        opts.set("addr", &members[0].server.addr);
        let mut c = Cluster {
            store: ctx.name,
            members,
            topology: &REDIS_CLUSTER,
            opts,
            rundir: ctx.rundir.to_path_buf(),
        };
        for k in 0..n {
            let o = c.opts.clone();
            c.members[k]
                .server
                .wait_ready(|a| ping(&o, a), ctx.timeout)?;
        }
        let s = settings(&c.opts)?;
        let e = |e: String| anyhow::anyhow!("making the Redis Cluster: {e}");
        // Slots: master i takes the i-th of m equal ranges.
        for i in 0..m {
            let (lo, hi) = (range_start(i, m), range_start(i + 1, m) - 1);
            ask(
                &s,
                &c.members[i].server.addr,
                &[
                    b"CLUSTER",
                    b"ADDSLOTSRANGE",
                    lo.to_string().as_bytes(),
                    hi.to_string().as_bytes(),
                ],
            )
            .map_err(e)?;
        }
        meet(&s, &c, ctx.timeout)?;
        // Replica j follows master j mod m.
        for j in 0..m * r {
            let id = node_id(&s, &c.members[j % m].server.addr).map_err(e)?;
            ask(
                &s,
                &c.members[m + j].server.addr,
                &[b"CLUSTER", b"REPLICATE", id.as_bytes()],
            )
            .map_err(e)?;
        }
        c.wait_in_sync(ctx.timeout)
            .map_err(|e| anyhow::anyhow!("the Redis Cluster did not become ready: {e}"))?;
        Ok(c)
    }

    fn in_sync(&self, c: &Cluster) -> Result<(), String> {
        let s = settings(&c.opts).map_err(|e| e.to_string())?;
        for m in c.members.iter().filter(|m| !m.server.paused) {
            let i = cluster_info(&s, &m.server.addr)?;
            if field(&i, "cluster_state") != Some("ok") {
                return Err(format!("{}: cluster_state not ok", m.label()));
            }
            if m.role == Role::Replica {
                let r = ask(&s, &m.server.addr, &[b"INFO", b"replication"])?;
                if field(&r, "role") == Some("slave")
                    && field(&r, "master_link_status") != Some("up")
                {
                    return Err(format!("{}: master link not up", m.label()));
                }
            }
        }
        Ok(())
    }

    fn status(&self, c: &Cluster) -> String {
        let Ok(s) = settings(&c.opts) else {
            return String::new();
        };
        let live = c
            .members
            .iter()
            .find(|m| !m.server.paused && cluster_info(&s, &m.server.addr).is_ok());
        match live {
            Some(m) => {
                let i = cluster_info(&s, &m.server.addr).unwrap_or_default();
                format!(
                    "cluster_state {}, {} masters serving slots",
                    field(&i, "cluster_state").unwrap_or("?"),
                    field(&i, "cluster_size").unwrap_or("?")
                )
            }
            None => "no node answers".into(),
        }
    }

    fn ready(&self, c: &Cluster, i: usize) -> Result<(), String> {
        ping(&c.opts, &c.members[i].server.addr).map(|_| ())
    }

    fn serving(&self, c: &mut Cluster, timeout: Duration) -> Result<(String, String), String> {
        c.wait_in_sync(timeout)?;
        let live = c
            .members
            .iter()
            .find(|m| m.role == Role::Master && !m.server.paused)
            .map(|m| m.server.addr.clone())
            .unwrap_or_default();
        Ok((live, String::new()))
    }

    fn settings(&self, o: &StoreOptions) -> Vec<(String, String)> {
        vec![
            ("cluster_masters".into(), o.str("cluster").into()),
            ("cluster_replicas".into(), o.str("cluster_replicas").into()),
            (
                "replication_factor".into(),
                (o.u64("cluster_replicas").unwrap_or(0) + 1).to_string(),
            ),
            ("node_timeout_ms".into(), o.str("node_timeout_ms").into()),
            ("full_coverage".into(), o.str("full_coverage").into()),
            ("wait_replicas".into(), o.str("wait_replicas").into()),
            ("persistence".into(), o.str("persistence").into()),
        ]
    }
}

/// A cluster session's slot map: slot → node index, and the nodes (a node's connection is
/// `conns[index]`). Refreshed after a MOVED or ASK reply and after a node stops answering.
#[derive(Default)]
pub(super) struct Routes {
    nodes: Vec<std::net::SocketAddr>,
    pub(super) slots: Vec<u16>,
    pub(super) stale: bool,
    /// The slot of the latest key (its shard, for the recovery timeline).
    pub(super) slot: usize,
}

impl Routes {
    /// Asks the nodes in turn for the slot map; connections follow the node list.
    pub(super) fn refresh(
        &mut self,
        s: &Settings,
        conns: &mut Vec<net::Conn>,
    ) -> Result<(), String> {
        let mut last = String::from("no node to ask");
        let mut candidates: Vec<std::net::SocketAddr> = conns.iter().map(|c| c.addr).collect();
        candidates.extend(self.nodes.iter().copied());
        candidates.dedup();
        for a in candidates {
            let Ok(mut c) = connect(s, a) else {
                last = format!("{a} does not answer");
                continue;
            };
            match slot_map(&mut c) {
                Ok(map) => {
                    let (nodes, slots) = indexed(s, map, a, vec![]);
                    // Connections follow the node list; a node without one gets it when a
                    // key is first routed there (one reply cannot open a connection per node).
                    let mut fresh = Vec::with_capacity(nodes.len());
                    for n in &nodes {
                        let old = conns.iter().position(|c| c.addr == *n && !c.broken);
                        fresh.push(match old {
                            Some(i) => conns.swap_remove(i),
                            None => net::Conn::unconnected(*n, s.timeout),
                        });
                    }
                    *conns = fresh;
                    self.nodes = nodes;
                    self.slots = slots;
                    self.stale = false;
                    return Ok(());
                }
                Err(e) => last = e,
            }
        }
        Err(last)
    }
}

/// A slot map as node indices: `nodes` (those given keep their places, new owners are added)
/// and each slot's index in it. A slot no master serves goes to `asked`, the node that sent the
/// map: it answers with CLUSTERDOWN (or MOVED) itself, never a connection to 0.0.0.0.
fn indexed(
    s: &Settings,
    map: Vec<Option<SocketAddr>>,
    asked: SocketAddr,
    mut nodes: Vec<SocketAddr>,
) -> (Vec<SocketAddr>, Vec<u16>) {
    let mut slots = Vec::with_capacity(map.len());
    for owner in map {
        let addr = owner.unwrap_or(asked);
        let i = match nodes.iter().position(|n| *n == addr) {
            Some(i) => i,
            None => {
                super::server::warn_foreign(s, "CLUSTER SLOTS", addr);
                nodes.push(addr);
                nodes.len() - 1
            }
        };
        slots.push(i as u16);
    }
    (nodes, slots)
}

/// The engine's slot map (`wire::ClusterMap`): asked of the nodes in `known`, then of the node
/// options name, in turn; a slot no master serves goes to the node asked (it answers
/// CLUSTERDOWN or MOVED itself).
pub(super) fn engine_map(
    s: &Settings,
    known: &[SocketAddr],
) -> Result<crate::store::wire::ClusterMap, String> {
    let mut last = String::from("no node to ask");
    let mut candidates: Vec<SocketAddr> = known.to_vec();
    candidates.extend(s.addr.iter().copied());
    for a in candidates {
        let Ok(mut c) = connect(s, a) else {
            last = format!("{a} does not answer");
            continue;
        };
        match slot_map(&mut c) {
            Ok(map) => {
                let (nodes, slots) = indexed(s, map, a, known.to_vec());
                return Ok(crate::store::wire::ClusterMap {
                    nodes,
                    slots,
                    slot_of: slot,
                    shard_of,
                    masters: s.cluster.max(1),
                });
            }
            Err(e) => last = e,
        }
    }
    Err(last)
}

/// Following MOVED and ASK: the session's side (its fields are private to `redis`).
impl super::RedisSession {
    /// A redirected request's connection (MOVED or ASK): to `addr`, opened if need be, with
    /// ASKING sent first for an ASK (it allows the next command only).
    #[cold]
    pub(super) fn conn_to(
        &mut self,
        addr: std::net::SocketAddr,
        asking: bool,
    ) -> Result<usize, RawError> {
        let i = match self.conns.iter().position(|c| c.addr == addr && !c.broken) {
            Some(i) => i,
            None => {
                // The slot map's next refresh drops connections it does not name; until then
                // redirects to ever new nodes are bounded like the map's nodes.
                if self.conns.len() > MAX_NODES {
                    return Err(RawError::new(
                        crate::store::ErrorKind::Protocol,
                        false,
                        format!("Redis Cluster: a redirect to {addr} would open more than {MAX_NODES} connections"),
                    ));
                }
                super::server::warn_foreign(&self.s, "a MOVED or ASK redirect", addr);
                self.conns.push(connect(&self.s, addr)?);
                self.conns.len() - 1
            }
        };
        if asking {
            simple(&mut self.conns[i], &[b"ASKING"])?;
        }
        self.conns[i].begin();
        count_sent(&mut self.sent, addr);
        Ok(i)
    }

    /// A MOVED or ASK reply's target: `-MOVED 3999 127.0.0.1:6381`.
    pub(super) fn redirect_of(message: &str) -> Option<(std::net::SocketAddr, bool)> {
        super::resp::redirect_of(message.strip_prefix("Redis: ")?)
    }

    /// After a MOVED or ASK reply: the next attempt goes where the reply said (once).
    #[inline]
    pub(super) fn follow(&mut self) -> bool {
        match self.redirect.take() {
            Some(to) => {
                self.force = Some(to);
                true
            }
            None => false,
        }
    }
}

#[cfg(test)]
mod tests;
