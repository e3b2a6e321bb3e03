//! `redis`: Redis over RESP. A record is a hash (YCSB's fields are hash fields, natively);
//! keys are also kept in a sorted set so scans work (`ZRANGEBYLEX`, then the hashes in one
//! pipelined round trip), as YCSB's redis binding keeps its `_indices` set. `scan_index=false`
//! drops the index: inserts get cheaper and SCAN is reported N/A.
//!
//! Insert replaces the record (DEL + HSET in one round trip): YCSB's semantics, which a bare
//! HSET would not keep when the record had more fields. Update is HSET (an upsert).

use super::kv::RawError;
use super::net::{self, push_num, Conn};
use super::record::{self, Record, RecordView};
use super::Queued;
use super::*;

mod cluster;
mod codec;
mod events;
mod info;
mod ops;
mod replication;
mod resp;
mod server;
mod session;
mod strings;

use resp::*;
use server::*;

pub use info::STATS;

const INDEX: &[u8] = b"_kvmeter:keys";

const OPTIONS: &[OptSpec] = &[
    OptSpec { name: "addr", default: "", help: "host:port of a Redis you run; empty: kvmeter starts one on loopback (managed)" },
    OptSpec { name: "password", default: "", help: "AUTH password (managed servers get it as requirepass); prefer the REDISCLI_AUTH environment variable, which ps does not show" },
    OptSpec { name: "user", default: "", help: "ACL user for AUTH (Redis 6+); empty: the default user" },
    OptSpec { name: "db", default: "0", help: "database number (SELECT)" },
    OptSpec { name: "connections", default: "1", help: "connections per worker, used in turn" },
    OptSpec { name: "max_clients", default: "auto", help: "managed server: maxclients; auto: Redis's default (10000), or what --connections needs" },
    OptSpec { name: "timeout_ms", default: "5000", help: "deadline of one request: its whole reply within this, or the operation counts as a timeout (a server that drips bytes too)" },
    net::MAX_REPLY_OPT,
    super::wait::WAIT_OPT,
    OptSpec { name: "pipeline", default: "1", help: "operations sent per round trip (redis-benchmark's -P): reads, updates, inserts and deletes are batched; scans and read-modify-writes go alone" },
    OptSpec { name: "encoding", default: "hash", help: "hash: a record is a hash, one field each (YCSB's binding: HGETALL/HGET/HSET); string: the serialized record under its key (GET/SET, as redis-benchmark and memtier send; no key index, so no scans)" },
    OptSpec { name: "scan_index", default: "true", help: "keep keys in a sorted set so SCAN works (costs a ZADD per insert)" },
    OptSpec { name: "tls", default: "false", help: "TLS (rustls); needs tls_ca. Managed: the server listens with TLS only" },
    OptSpec { name: "tls_ca", default: "", help: "PEM file of the CA certificates that sign the server's certificate" },
    OptSpec { name: "tls_cert", default: "", help: "PEM certificate: the managed server's own; with addr=, kvmeter's client certificate (for tls-auth-clients yes)" },
    OptSpec { name: "tls_key", default: "", help: "PEM private key of tls_cert" },
    OptSpec { name: "tls_server_name", default: "", help: "name (or IP) the server's certificate must carry; empty: the host of addr (127.0.0.1 when managed)" },
    OptSpec { name: "persistence", default: "none", help: "managed server: none, rdb (save every 60 s with a write), aof (appendfsync everysec) or aof-always (fsync every write)" },
    OptSpec { name: "maxmemory_mb", default: "0", help: "managed server: memory limit in MiB (0: none)" },
    OptSpec { name: "io_threads", default: "1", help: "managed server: I/O threads (io-threads)" },
    OptSpec { name: "cpus", default: "", help: "managed: CPUs the server (every member of a cluster) is pinned to, e.g. 1, 0-1 or 0/2; recorded in the manifest" },
    OptSpec { name: "replicas", default: "0", help: "managed: replicas of the primary, 0 to 4 (each its own redis-server with --replicaof)" },
    OptSpec { name: "wait_replicas", default: "0", help: "WAIT for this many replicas after every write; a write fewer confirmed in wait_timeout_ms counts as 'unconfirmed'" },
    OptSpec { name: "wait_timeout_ms", default: "1000", help: "WAIT's timeout" },
    OptSpec { name: "sentinels", default: "0", help: "managed: Redis Sentinels (3 or 5) that fail over to a replica; the client asks them for the primary after an error" },
    OptSpec { name: "down_after_ms", default: "1000", help: "managed Sentinels: down-after-milliseconds (how long the primary may not answer before failover)" },
    OptSpec { name: "sentinel_addr", default: "", help: "host:port,… of Sentinels (monitoring 'kvmeter') the client asks for the primary; set by kvmeter for managed Sentinels" },
    OptSpec { name: "cluster", default: "0", help: "Redis Cluster of this many masters (3 to 16; managed, or with addr= a node of yours): keys routed by hash slot, MOVED/ASK followed; no key index, so SCAN is not offered" },
    OptSpec { name: "cluster_replicas", default: "0", help: "managed Redis Cluster: replicas per master (0 to 2)" },
    OptSpec { name: "full_coverage", default: "false", help: "managed Redis Cluster: cluster-require-full-coverage (true: every key is refused while any slot has no master; false: only the lost slots' keys are)" },
    OptSpec { name: "node_timeout_ms", default: "1000", help: "managed Redis Cluster: cluster-node-timeout (how long a master may not answer before its replica takes over)" },
];

pub static SERVER: ServerSpec = ServerSpec {
    binary: "redis-server",
    package: "redis-server",
    ports: 1,
    args: server_args,
    ping,
    clear,
    topology: |o| {
        if o.u64("cluster").unwrap_or(0) > 0 {
            &cluster::REDIS_CLUSTER
        } else {
            &replication::REPLICATION
        }
    },
    managed_only: &[
        "max_clients",
        "persistence",
        "maxmemory_mb",
        "io_threads",
        "cpus",
        "replicas",
        "sentinels",
        "down_after_ms",
        "cluster_replicas",
        "full_coverage",
        "node_timeout_ms",
    ],
};

pub static KIND: StoreKind = StoreKind {
    name: "redis",
    summary: "Redis server over RESP, records as hashes (managed or addr=)",
    options: OPTIONS,
    capabilities: Capabilities {
        scan: true,
        persistent: false,
        stores_data: true,
    },
    version: || super::managed::binary_version("redis-server", &["--version"]),
    probe: || probe_server(&SERVER),
    check: |o| {
        checked_settings(o)?;
        replication::check_input(o)?;
        super::managed::check_cpus(o)
    },
    open,
    server: Some(&SERVER),
    engine: Some(&ENGINE),
    scans_refused: |o| {
        (o.str("encoding") == "string").then_some(
            "--store-opt encoding=string: string mode keeps no key index; use encoding=hash",
        )
    },
    stats: STATS,
    profile_symbols: &[],
};

/// The event-driven engine serves Redis: plain, TLS, Sentinel and Cluster (a socket per
/// master on each connection: `cluster=M` says how many, managed or not; nodes the map names
/// later, a promoted replica, are opened within the descriptors' headroom).
static ENGINE: super::EngineSupport = super::EngineSupport {
    refusal: engine_refusal,
    min_clients: 10_000,
    sockets_per_connection: |o| o.str("cluster").parse::<u64>().unwrap_or(0).max(1),
};

struct RedisStore {
    s: Settings,
    /// Redis's `INFO`, on a connection of its own, and where its books stood (events).
    poller: super::stats::Poller<Conn>,
    /// A cluster's masters' statistics connections.
    nodes: std::sync::Mutex<info::ClusterPollers>,
    seen: std::sync::Mutex<events::Seen>,
}

/// The options checked whole: replication's and the cluster's (each in its own file), then the
/// server's. Composed here, so that server.rs, which both use, imports neither.
fn checked_settings(o: &StoreOptions) -> Result<Settings, crate::error::UsageError> {
    replication::check(o)?;
    cluster::check(o)?;
    settings(o)
}

fn open(_dir: &Path, o: &StoreOptions) -> anyhow::Result<Box<dyn Store>> {
    let mut s = checked_settings(o)?;
    if s.addr.is_none() {
        s.addr = Some(net::resolve(o.str("addr")).map_err(|e| anyhow::anyhow!(e))?);
    }
    Ok(Box::new(RedisStore {
        s,
        poller: Default::default(),
        nodes: Default::default(),
        seen: Default::default(),
    }))
}

impl Store for RedisStore {
    fn session(&self) -> anyhow::Result<Box<dyn Session>> {
        let addr = self.s.addr.expect("resolved in open");
        let mut conns = Vec::with_capacity(self.s.connections);
        for _ in 0..self.s.connections {
            conns.push(connect(&self.s, addr).map_err(|e| anyhow::anyhow!(e.message))?);
        }
        if self.s.string {
            return Ok(Box::new(super::kv::KvSession::new(strings::RedisStrings {
                conns,
                next: 0,
                s: self.s.clone(),
                addr,
            })));
        }
        let routes = if self.s.cluster > 0 {
            let mut r = cluster::Routes::default();
            r.refresh(&self.s, &mut conns)
                .map_err(|e| anyhow::anyhow!("Redis Cluster at {addr}: {e}"))?;
            Some(r)
        } else {
            None
        };
        Ok(Box::new(RedisSession {
            conns,
            routes,
            sent: Vec::new(),
            redirect: None,
            force: None,
            next: 0,
            s: self.s.clone(),
            spans: Vec::new(),
            one: Record::new(),
            last_error: None,
            batch: None,
            pending: Vec::with_capacity(self.s.pipeline),
        }))
    }

    fn close(self: Box<Self>) -> anyhow::Result<()> {
        Ok(())
    }

    fn stats(&self) -> &'static [super::stats::StatSpec] {
        STATS
    }

    fn sample_stats(&self, out: &mut [Option<u64>]) -> Result<(), String> {
        let addr = self.s.addr.expect("resolved in open");
        if self.s.cluster > 0 {
            return info::sample_cluster(&self.poller, &self.nodes, &self.s, addr, out);
        }
        info::sample(&self.poller, &self.s, addr, out)
    }

    fn poll_events(&self, out: &mut Vec<super::stats::StoreEvent>) -> Result<(), String> {
        if self.s.cluster > 0 {
            // Each master keeps its own books: each is polled, its events named by it.
            let mut nodes = self.nodes.lock().unwrap_or_else(|p| p.into_inner());
            return nodes.events(&self.s, out);
        }
        let addr = self.s.addr.expect("resolved in open");
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        events::poll(&self.poller, || info::open(&self.s, addr), &mut seen, out)
    }

    fn event_target(&self) -> Option<Box<dyn super::wire::EventTarget>> {
        Some(Box::new(codec::RedisTarget {
            primary: std::sync::Mutex::new(None),
            s: self.s.clone(),
            addr: self.s.addr.expect("resolved in open"),
        }))
    }
}

/// Why the event-driven engine (`--connections`) cannot serve these options yet, if it
/// cannot: it speaks plain RESP to one server.
pub fn engine_refusal(o: &StoreOptions) -> Option<String> {
    for (opt, unset) in [("wait_replicas", "0"), ("pipeline", "1")] {
        if o.str(opt) != unset {
            return Some(format!(
                "--store-opt {opt}={}: not served by the event-driven engine (--connections) yet; without --connections, worker threads serve it",
                o.str(opt)
            ));
        }
    }
    None
}

struct RedisSession {
    /// One per connection (`connections=`); with a cluster, one per node, in `routes.nodes`
    /// order.
    conns: Vec<Conn>,
    /// Redis Cluster: which node serves each slot.
    routes: Option<cluster::Routes>,
    /// Requests sent, by server (after a failover: the new primary or master).
    sent: Vec<(std::net::SocketAddr, u64)>,
    /// Redis Cluster: the latest reply was MOVED or ASK to this node (ASK: true).
    redirect: Option<(std::net::SocketAddr, bool)>,
    /// The next request goes to this node (preceded by ASKING when true), not its slot's.
    force: Option<(std::net::SocketAddr, bool)>,
    next: usize,
    s: Settings,
    spans: Vec<record::Span>,
    one: Record,
    last_error: Option<String>,
    /// A pipelined batch: the connection it goes to and the replies it expects.
    batch: Option<Result<usize, RawError>>,
    pending: Vec<Pending>,
}

/// The replies a queued operation expects.
#[derive(Clone, Copy)]
enum Pending {
    /// None: all fields; Some(n): one field whose name is n bytes (HGET's reply omits it).
    Read(Option<usize>),
    Update,
    /// DEL + HSET (+ ZADD with the index).
    Insert,
    /// DEL (+ ZREM with the index).
    Delete,
}

impl RedisSession {
    /// The connection for `key`: its slot's node in a cluster, else the next in turn.
    #[inline]
    fn conn(&mut self, key: &[u8]) -> Result<usize, RawError> {
        if let Some((addr, asking)) = self.force.take() {
            return self.conn_to(addr, asking);
        }
        if let Some(r) = self.routes.as_mut() {
            if r.stale {
                let _ = r.refresh(&self.s, &mut self.conns);
            }
            r.slot = cluster::slot(key);
            let i = r.slots.get(r.slot).copied().unwrap_or(0) as usize;
            if self.conns[i].broken {
                if let Err(e) = self.reconnect(i) {
                    if let Some(r) = self.routes.as_mut() {
                        r.stale = true;
                    }
                    return Err(e);
                }
            }
            self.conns[i].begin();
            count_sent(&mut self.sent, self.conns[i].addr);
            return Ok(i);
        }
        let i = self.next;
        self.next = if i + 1 == self.conns.len() { 0 } else { i + 1 };
        if self.conns[i].broken {
            self.reconnect(i)?;
        }
        self.conns[i].begin();
        if !self.s.sentinels.is_empty() {
            // Which server served: it changes with a failover.
            count_sent(&mut self.sent, self.conns[i].addr);
        }
        Ok(i)
    }

    /// A new connection for slot `i`: to the primary the Sentinels name, where there are
    /// Sentinels (after a failover it is another server), else to the same address.
    #[cold]
    fn reconnect(&mut self, i: usize) -> Result<(), RawError> {
        let mut addr = self.conns[i].addr;
        if !self.s.sentinels.is_empty() {
            if let Some(a) = replication::ask_sentinels(&self.s.sentinels, self.s.timeout)
                .and_then(|a| net::resolve(&a).ok())
            {
                server::warn_foreign(&self.s, "a Sentinel", a);
                addr = a;
            }
        }
        self.conns[i] = connect(&self.s, addr)?;
        Ok(())
    }

    /// After a write: WAIT for `wait_replicas` replicas (same round trip as the write was
    /// sent in); fewer in time is `unconfirmed`.
    #[inline]
    fn push_wait(s: &Settings, out: &mut Vec<u8>) {
        if s.wait > 0 {
            command(
                out,
                &[b"WAIT", s.wait_arg.as_bytes(), s.wait_timeout.as_bytes()],
            );
        }
    }

    fn read_wait(s: &Settings, c: &mut Conn) -> Result<(), RawError> {
        if s.wait == 0 {
            return Ok(());
        }
        match reply(c)? {
            Reply::Int(n) if n as usize >= s.wait => Ok(()),
            Reply::Int(n) => Err(RawError::new(
                ErrorKind::Unconfirmed,
                false,
                format!(
                    "Redis: WAIT {} {}: {n} replica(s) confirmed the write",
                    s.wait, s.wait_timeout
                ),
            )),
            Reply::Error(r) => Err(redis_error(c.bytes(r))),
            _ => Err(malformed(c)),
        }
    }

    #[cold]
    fn fail(&mut self, e: RawError) -> Status {
        if let Some(r) = self.routes.as_mut() {
            let to = Self::redirect_of(&e.message);
            // MOVED (the slot has another owner now), CLUSTERDOWN, or a lost node: ask for
            // the slot map before the next operation. ASK is one request's detour only.
            if !to.is_some_and(|t| t.1) {
                r.stale = true;
            }
            self.redirect = to;
        }
        if e.message.contains("READONLY") && !self.s.sentinels.is_empty() {
            // A demoted primary: every connection moves to the new one.
            for c in &mut self.conns {
                c.broken = true;
            }
        }
        self.last_error = Some(e.message);
        Status::Error {
            kind: e.kind,
            fatal: e.fatal,
        }
    }

    /// Reads a hash reply (HGETALL's flat array, or one HGET bulk for `Fields::One`) into
    /// `spans`, over connection `i`'s buffer. Ok(false): no such key.
    fn read_hash(
        c: &mut Conn,
        fields: Fields,
        spans: &mut Vec<record::Span>,
    ) -> Result<bool, RawError> {
        spans.clear();
        match (reply(c)?, fields) {
            (Reply::Array(Some(n)), _) => {
                if n % 2 != 0 {
                    return Err(malformed(c));
                }
                for _ in 0..n / 2 {
                    let (Reply::Bulk(Some(name)), Reply::Bulk(Some(value))) =
                        (reply(c)?, reply(c)?)
                    else {
                        return Err(malformed(c));
                    };
                    if fields.wants(c.bytes(name.clone())) {
                        spans.push(record::Span::new(name, value));
                    }
                }
                // One field asked: found only if that field came back (a hostile or broken
                // server may answer HGET with an array of other fields).
                Ok(match fields {
                    Fields::All => n > 0,
                    Fields::One(_) => !spans.is_empty(),
                })
            }
            (Reply::Bulk(None), Fields::One(_)) => Ok(false),
            (Reply::Bulk(Some(v)), Fields::One(_)) => {
                // HGET's reply has no field name; `read` pairs the value with the asked name.
                spans.push(record::Span::new(v.start..v.start, v));
                Ok(true)
            }
            (Reply::Error(r), _) => Err(redis_error(c.bytes(r))),
            _ => Err(malformed(c)),
        }
    }

    fn expect_ok(c: &mut Conn, what: &str) -> Result<(), RawError> {
        match reply(c)? {
            Reply::Simple(_) | Reply::Int(_) => Ok(()),
            Reply::Error(r) => Err(redis_error(c.bytes(r))),
            _ => Err(RawError::new(
                ErrorKind::Other,
                false,
                format!("Redis {what}: unexpected reply"),
            )),
        }
    }

    fn hset(out: &mut Vec<u8>, key: &[u8], values: &Record) {
        array_head(out, 2 + 2 * values.len());
        bulk(out, b"HSET");
        bulk(out, key);
        for (n, v) in values.iter() {
            bulk(out, n);
            bulk(out, v);
        }
    }
}
