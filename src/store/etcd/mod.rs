//! `etcd`: etcd's v3 key-value API — range, put, deleterange, and a prefix-free range
//! (`range_end` "\0": every key from the start key on) with a limit for scans.
//!
//! It speaks the v3 API through etcd's JSON gateway (`POST /v3/kv/...`, keys and values in
//! base64), over keep-alive HTTP/1.1 written here (`http.rs`): the gRPC client crates bring an async
//! runtime and protobuf code generation for three calls, and a blocking request/reply keeps
//! the timing the same as for the other servers. The gateway translates each call into the
//! same gRPC handler inside etcd; its JSON step is part of what is measured (noted in
//! docs/stores.md). A record is one value (`record.rs` encoding); update reads, merges and
//! puts.

use super::kv::{KvSession, RawError, RawKv, ScanError, ScanSink};
use super::net::{self, push_num};

use super::*;

pub mod auth;
mod cluster;
mod codec;
mod frame;
mod http;
mod json;
mod metrics;
pub use http::Gateway;
pub use metrics::STATS;
pub mod url;
use crate::error::UsageError;
use auth::Access;
use http::Http;
use json::{b64_decode, b64_field, find, is_range_reply, json_str, not_a_range};
use std::net::SocketAddr;
use std::time::Duration;

const OPTIONS: &[OptSpec] = &[
    OptSpec { name: "addr", default: "", help: "[http://|https://]host:port[,…] of etcd client URLs you run (the client starts at the leader and moves to the next member when one fails); empty: kvmeter starts the cluster on loopback (managed, plain http)" },
    OptSpec { name: "tls", default: "false", help: "TLS (rustls) to your etcd (addr=); https:// in addr turns it on too; needs tls_ca" },
    OptSpec { name: "tls_ca", default: "", help: "PEM file of the CA certificates that sign etcd's certificate" },
    OptSpec { name: "tls_cert", default: "", help: "PEM client certificate, for an etcd started with --client-cert-auth (with tls_key)" },
    OptSpec { name: "tls_key", default: "", help: "PEM private key of tls_cert" },
    OptSpec { name: "tls_server_name", default: "", help: "name (or IP) every member's certificate must carry; empty: the host of each URL in addr" },
    OptSpec { name: "user", default: "", help: "etcd user (etcd's own authentication; addr= only); its password from password_file= or the KVMETER_ETCD_PASSWORD environment variable" },
    OptSpec { name: "password_file", default: "", help: "file whose first line is user='s password (else KVMETER_ETCD_PASSWORD; a password is never an option's value)" },
    OptSpec { name: "cpus", default: "", help: "managed: CPUs the server (every member of a cluster) is pinned to, e.g. 1, 0-1 or 0/2; recorded in the manifest" },
    OptSpec { name: "members", default: "1", help: "managed: members of the Raft group, 1, 3, 5 or 7 (each its own process, ports and data directory)" },
    OptSpec { name: "heartbeat_ms", default: "100", help: "managed: Raft heartbeat interval (--heartbeat-interval)" },
    OptSpec { name: "election_ms", default: "1000", help: "managed: Raft election timeout (--election-timeout), at least 5 heartbeats" },
    OptSpec { name: "connections", default: "1", help: "connections per worker, used in turn" },
    OptSpec { name: "timeout_ms", default: "10000", help: "deadline of one request: its whole reply within this, or the operation counts as a timeout (a server that drips bytes too)" },
    net::MAX_REPLY_OPT,
    OptSpec { name: "quota_backend_mb", default: "8192", help: "managed server: backend size quota (--quota-backend-bytes)" },
    OptSpec { name: "snapshot_count", default: "100000", help: "managed server: committed entries between snapshots (--snapshot-count)" },
];

pub static SERVER: ServerSpec = ServerSpec {
    binary: "etcd",
    package: "etcd-server",
    ports: 2,
    args: server_args,
    ping,
    clear,
    topology: |_| &cluster::ETCD,
    managed_only: &[
        "cpus",
        "members",
        "heartbeat_ms",
        "election_ms",
        "quota_backend_mb",
        "snapshot_count",
    ],
};

pub static KIND: StoreKind = StoreKind {
    name: "etcd",
    summary: "etcd server, v3 API (range/put/delete; range scans) (managed or addr=)",
    options: OPTIONS,
    capabilities: Capabilities {
        scan: true,
        persistent: true,
        stores_data: true,
    },
    version: || super::managed::binary_version("etcd", &["--version"]),
    probe: || probe_server(&SERVER),
    check: |o| {
        settings(o)?;
        cluster::check_input(o)?;
        super::managed::check_cpus(o)
    },
    open,
    server: Some(&SERVER),
    engine: Some(&ENGINE),
    scans_refused: super::scans_always_served,
    stats: metrics::STATS,
    profile_symbols: &[],
};

/// The event-driven engine serves etcd's JSON gateway with every option (TLS through the
/// engine's `Link::Tls`).
static ENGINE: super::EngineSupport = super::EngineSupport {
    refusal: |_| None,
    min_clients: 10_000,
    sockets_per_connection: super::one_socket,
};

#[derive(Clone)]
struct Settings {
    connections: usize,
    timeout: Duration,
    /// TLS and credentials for addr= (plain for a managed etcd).
    access: std::sync::Arc<Access>,
    /// The most bytes one request's reply may hold (`max_reply`).
    max_reply: usize,
}

fn settings(o: &StoreOptions) -> Result<Settings, UsageError> {
    o.positive_mib("quota_backend_mb")?;
    o.positive("snapshot_count")?;
    cluster::check(o)?;
    Ok(Settings {
        connections: o.positive("connections")? as usize,
        timeout: net::timeout(o)?,
        access: auth::store_access(o)?,
        max_reply: net::max_reply(o)?,
    })
}

/// The arguments of a one-member group (`ports`: client, peer).
fn server_args(o: &StoreOptions, ports: &[u16], dir: &Path) -> Vec<String> {
    let peer = format!("http://127.0.0.1:{}", ports[1]);
    cluster::member_args(
        o,
        "kvmeter",
        ports,
        &dir.join("etcd"),
        &format!("kvmeter={peer}"),
    )
}

/// Every address of the list must answer (and have a leader); returns the version.
fn ping(o: &StoreOptions, list: &str) -> Result<String, String> {
    let s = settings(o).map_err(|e| e.to_string())?;
    let mut version = String::new();
    for addr in auth::parse_urls(list)?.addrs() {
        version = ping_one(&s, addr).map_err(|e| s.access.explain(&e))?;
    }
    Ok(version)
}

fn ping_one(s: &Settings, addr: SocketAddr) -> Result<String, String> {
    let mut h = Http::connect(addr, s.timeout, &s.access).map_err(|e| e.message)?;
    h.max_reply = s.max_reply;
    let body = h
        .call(b"GET", b"/version", b"")
        .map_err(|e| e.message)?
        .to_vec();
    let text = String::from_utf8_lossy(&body);
    let version = json_str(&body, b"\"etcdserver\":\"")
        .map(|r| String::from_utf8_lossy(&body[r]).into_owned())
        .ok_or_else(|| format!("unexpected answer to GET /version: {text}"))?;
    // A range answers only once the member has a leader.
    h.call(b"POST", b"/v3/kv/range", b"{\"key\":\"AA==\",\"limit\":1}")
        .map_err(|e| e.message)?;
    Ok(version)
}

fn clear(o: &StoreOptions) -> anyhow::Result<()> {
    let s = settings(o)?;
    let addr = auth::parse_urls(o.str("addr"))
        .map_err(|e| anyhow::anyhow!(e))?
        .targets[0]
        .addr;
    let mut h =
        Http::connect(addr, s.timeout, &s.access).map_err(|e| anyhow::anyhow!(e.message))?;
    h.max_reply = s.max_reply;
    // key "\0", range_end "\0": every key.
    h.call(
        b"POST",
        b"/v3/kv/deleterange",
        b"{\"key\":\"AA==\",\"range_end\":\"AA==\"}",
    )
    .map_err(|e| anyhow::anyhow!(e.message))?;
    Ok(())
}

struct EtcdStore {
    /// Client URLs, the leader's first (as it was when the store was opened).
    endpoints: std::sync::Arc<[SocketAddr]>,
    s: Settings,
    /// The event-driven engine's token, shared by every phase's connections.
    tokens: std::sync::Arc<codec::Tokens>,
    /// `/metrics`, on a connection of its own (`metrics.rs`).
    metrics: stats::Poller<Http>,
    leaders: metrics::LeaderChanges,
}

fn open(_dir: &Path, o: &StoreOptions) -> anyhow::Result<Box<dyn Store>> {
    let s = settings(o)?;
    let mut endpoints = auth::parse_urls(o.str("addr"))
        .map_err(|e| anyhow::anyhow!("--store-opt addr={e}"))?
        .addrs();
    if endpoints.len() > 1 {
        if let Some(l) = http::leader_endpoint(&endpoints, s.timeout, &s.access) {
            endpoints.swap(0, l);
        }
    }
    Ok(Box::new(EtcdStore {
        endpoints: endpoints.into(),
        s,
        tokens: Default::default(),
        metrics: Default::default(),
        leaders: metrics::LeaderChanges::new(),
    }))
}

impl Store for EtcdStore {
    fn stats(&self) -> &'static [stats::StatSpec] {
        metrics::STATS
    }

    fn sample_stats(&self, out: &mut [Option<u64>]) -> Result<(), String> {
        let deadline = stats::deadline(self.s.timeout);
        // The leader's counters where one answers (after a failover, the new leader's), else
        // the first member that accepts.
        let open = || {
            let mut order: Vec<SocketAddr> = self.endpoints.to_vec();
            if order.len() > 1 {
                if let Some(l) = http::leader_endpoint(&order, deadline, &self.s.access) {
                    order.swap(0, l);
                }
            }
            let mut last = String::from("no member");
            for a in &order {
                match Http::connect(*a, deadline, &self.s.access) {
                    Ok(mut h) => {
                        h.max_reply = metrics::METRICS_LIMIT;
                        return Ok(h);
                    }
                    Err(e) => last = e.message,
                }
            }
            Err(last)
        };
        self.metrics.sample(open, |h| {
            let body = h
                .request(b"GET", b"/metrics", b"")
                .map_err(|e| format!("GET /metrics: {}", e.message))?;
            match metrics::parse(&String::from_utf8_lossy(body), out) {
                0 => Err(format!(
                    "GET /metrics: none of etcd's series in {} bytes (is it etcd?)",
                    body.len()
                )),
                _ => Ok(()),
            }
        })?;
        self.leaders.sampled(out);
        Ok(())
    }

    fn poll_events(&self, out: &mut Vec<stats::StoreEvent>) -> Result<(), String> {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_micros() as u64);
        self.leaders.events(now, out);
        Ok(())
    }

    fn session(&self) -> anyhow::Result<Box<dyn Session>> {
        let mut conns = Vec::with_capacity(self.s.connections);
        for _ in 0..self.s.connections {
            let mut h = Http::connect(self.endpoints[0], self.s.timeout, &self.s.access)
                .map_err(|e| anyhow::anyhow!(e.message))?;
            h.endpoints = self.endpoints.clone();
            h.max_reply = self.s.max_reply;
            conns.push(h);
        }
        Ok(Box::new(KvSession::new(EtcdRaw {
            conns,
            next: 0,
            value: Vec::new(),
            key: Vec::new(),
            sent: Vec::new(),
        })))
    }

    fn close(self: Box<Self>) -> anyhow::Result<()> {
        Ok(())
    }

    fn event_target(&self) -> Option<Box<dyn super::wire::EventTarget>> {
        Some(Box::new(codec::EtcdTarget {
            endpoints: self.endpoints.clone(),
            leader: Default::default(),
            timeout: self.s.timeout,
            max_reply: self.s.max_reply,
            access: self.s.access.clone(),
            tokens: self.tokens.clone(),
        }))
    }
}

/// One worker's connections; a record is one value, so `KvSession` does the rest.
struct EtcdRaw {
    conns: Vec<Http>,
    next: usize,
    /// The latest read's value, decoded from base64.
    value: Vec<u8>,
    /// A scanned key, decoded.
    key: Vec<u8>,
    /// Requests sent, by member (which member served: the leader the client follows).
    sent: Vec<(SocketAddr, u64)>,
}

impl EtcdRaw {
    /// POSTs to `path` the JSON object `fields` writes into the connection's reused buffer;
    /// the reply's body is then in that connection's `body`. Returns the connection used.
    fn post(&mut self, path: &[u8], fields: impl FnOnce(&mut Vec<u8>)) -> Result<usize, RawError> {
        let i = self.next;
        self.next = if i + 1 == self.conns.len() { 0 } else { i + 1 };
        let h = &mut self.conns[i];
        let mut json = std::mem::take(&mut h.json);
        json.clear();
        json.push(b'{');
        fields(&mut json);
        json.push(b'}');
        let r = h.call(b"POST", path, &json).map(|_| i);
        h.json = json;
        // The member the request went to (after any reconnect the request made); one member
        // needs no count.
        if self.conns[i].endpoints.len() > 1 {
            let addr = self.conns[i].conn.addr;
            count_sent(&mut self.sent, addr);
        }
        r
    }
}

impl RawKv for EtcdRaw {
    fn sent_to(&self) -> Vec<(SocketAddr, u64)> {
        self.sent.clone()
    }

    fn get(&mut self, key: &[u8]) -> Result<Option<&[u8]>, RawError> {
        let i = self.post(b"/v3/kv/range", |j| b64_field(j, b"key", key))?;
        let body = &self.conns[i].body;
        if find(body, b"\"kvs\":[").is_none() {
            if !is_range_reply(body) {
                return Err(not_a_range(body));
            }
            return Ok(None);
        }
        match json_str(body, b"\"value\":\"") {
            Some(r) => b64_decode(&body[r], &mut self.value)?,
            None => self.value.clear(),
        }
        Ok(Some(&self.value))
    }

    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<(), RawError> {
        self.post(b"/v3/kv/put", |j| {
            b64_field(j, b"key", key);
            j.push(b',');
            b64_field(j, b"value", value);
        })
        .map(|_| ())
    }

    fn delete(&mut self, key: &[u8]) -> Result<(), RawError> {
        self.post(b"/v3/kv/deleterange", |j| b64_field(j, b"key", key))
            .map(|_| ())
    }

    fn scan(
        &mut self,
        start: &[u8],
        count: usize,
        sink: &mut ScanSink<'_>,
    ) -> Result<(), ScanError> {
        let i = self.post(b"/v3/kv/range", |j| {
            b64_field(j, b"key", start);
            j.extend_from_slice(b",\"range_end\":\"AA==\",\"limit\":");
            push_num(j, count);
        })?;
        let body = &self.conns[i].body;
        let Some(mut at) = find(body, b"\"kvs\":[") else {
            if !is_range_reply(body) {
                return Err(not_a_range(body).into());
            }
            return Ok(());
        };
        while let Some(k) = json_str(&body[at..], b"\"key\":\"") {
            let key = at + k.start..at + k.end;
            let next = find(&body[key.end..], b"\"key\":\"")
                .map(|p| key.end + p)
                .unwrap_or(body.len());
            b64_decode(&body[key.clone()], &mut self.key)?;
            match json_str(&body[key.end..next], b"\"value\":\"") {
                Some(v) => b64_decode(&body[key.end + v.start..key.end + v.end], &mut self.value)?,
                None => self.value.clear(),
            }
            sink(&self.key, &self.value).map_err(ScanError::Decode)?;
            at = next;
        }
        Ok(())
    }
}
