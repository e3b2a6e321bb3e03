//! `etcd`: etcd's v3 key-value API — range, put, deleterange, and a prefix-free range
//! (`range_end` "\0": every key from the start key on) with a limit for scans.
//!
//! It speaks the v3 API through etcd's JSON gateway (`POST /v3/kv/...`, keys and values in
//! base64), over keep-alive HTTP/1.1 written here: the gRPC client crates bring an async
//! runtime and protobuf code generation for three calls, and a blocking request/reply keeps
//! the timing the same as for the other servers. The gateway translates each call into the
//! same gRPC handler inside etcd; its JSON step is part of what is measured (noted in
//! docs/stores.md). A record is one value (`record.rs` encoding); update reads, merges and
//! puts.

use super::kv::{KvSession, RawError, RawKv, ScanError, ScanSink};
use super::net::{self, push_num, Conn};

use super::*;

pub mod auth;
mod cluster;
mod codec;
mod frame;
mod metrics;
pub use metrics::STATS;
pub mod url;
use crate::error::UsageError;
use auth::Access;
use base64::Engine;
use std::net::SocketAddr;
use std::time::Duration;

const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;

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
    o.positive("quota_backend_mb")?;
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

/// The range of the JSON string value that follows `prefix` (e.g. `"value":"`).
fn json_str(body: &[u8], prefix: &[u8]) -> Option<std::ops::Range<usize>> {
    let at = find(body, prefix)? + prefix.len();
    let end = at + net::memchr(b'"', &body[at..])?;
    Some(at..end)
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Whether a 200 body without `"kvs":[` is etcd's empty range response (a JSON object with
/// its `"header"`), as opposed to garbage or another server's page: only the former is a
/// miss; the rest is a protocol error (security review, minor findings).
fn is_range_reply(body: &[u8]) -> bool {
    let t = body.trim_ascii();
    // The opening brace spelled \x7b: one in a literal misleads brace-counting tools.
    let header = b"\"header\":\x7b";
    t.first() == Some(&b'{') && t.last() == Some(&b'}') && find(t, header).is_some()
}

/// The error for a 200 range reply that is not a range response.
fn not_a_range(body: &[u8]) -> RawError {
    RawError::new(
        ErrorKind::Protocol,
        false,
        format!(
            "etcd range: a 200 reply that is not a range response ({} bytes)",
            body.len()
        ),
    )
}

/// Keep-alive HTTP/1.1 over `Conn`; the body of the latest reply is in `body`.
struct Http {
    conn: Conn,
    body: Vec<u8>,
    json: Vec<u8>,
    /// The most bytes one reply may hold (`max_reply`; the coordination channel's own).
    max_reply: usize,
    timeout: Duration,
    /// TLS and credentials (shared by the client's connections).
    access: std::sync::Arc<Access>,
    /// The authentication token sent with each request (empty: none yet, or no auth).
    token: Vec<u8>,
    /// Every member's client address: a broken connection moves to the next one that accepts
    /// (a killed leader's clients go on with the rest of the group).
    endpoints: std::sync::Arc<[SocketAddr]>,
    /// After moving to a member that was not the leader (an election was under way): when to
    /// look for the leader again. Reads and writes through a follower cost it a round trip
    /// to the leader, so the client follows the leader.
    find_leader_at: Option<std::time::Instant>,
}

impl Http {
    fn connect(
        addr: SocketAddr,
        timeout: Duration,
        access: &std::sync::Arc<Access>,
    ) -> Result<Http, RawError> {
        let conn = access
            .connect(addr, timeout)
            .map_err(|e| RawError::new(ErrorKind::Io, true, e))?;
        Ok(Http {
            conn,
            body: Vec::with_capacity(4096),
            json: Vec::with_capacity(4096),
            max_reply: net::DEFAULT_MAX_REPLY,
            timeout,
            access: access.clone(),
            token: Vec::new(),
            endpoints: std::sync::Arc::from([addr]),
            find_leader_at: None,
        })
    }

    /// Moves to the leader if another member leads now; looks again later while there is none.
    #[cold]
    fn follow_leader(&mut self) {
        self.find_leader_at = None;
        match cluster::leader_endpoint(&self.endpoints, self.timeout, &self.access) {
            Some(l) if self.endpoints[l] == self.conn.addr => {}
            Some(l) => {
                if let Ok(c) = self.access.connect(self.endpoints[l], self.timeout) {
                    self.conn = c;
                }
            }
            None => {
                self.find_leader_at =
                    Some(std::time::Instant::now() + std::time::Duration::from_millis(200))
            }
        }
    }

    /// Reconnects: to the leader where one answers, else to the same member first, then to
    /// each other member in turn (and looks for the leader again shortly).
    #[cold]
    fn reconnect(&mut self) -> Result<(), RawError> {
        if self.endpoints.len() > 1 {
            if let Some(l) = cluster::leader_endpoint(&self.endpoints, self.timeout, &self.access) {
                if let Ok(c) = self.access.connect(self.endpoints[l], self.timeout) {
                    self.conn = c;
                    return Ok(());
                }
            }
            self.find_leader_at =
                Some(std::time::Instant::now() + std::time::Duration::from_millis(200));
        }
        let n = self.endpoints.len();
        let at = self
            .endpoints
            .iter()
            .position(|a| *a == self.conn.addr)
            .unwrap_or(0);
        let mut last = String::new();
        for k in 0..n {
            let addr = self.endpoints[(at + k) % n];
            match self.access.connect(addr, self.timeout) {
                Ok(c) => {
                    self.conn = c;
                    return Ok(());
                }
                Err(e) => last = format!("reconnecting: {e}"),
            }
        }
        Err(RawError::new(ErrorKind::Io, true, last))
    }

    /// Sends a request with `body` and returns the reply's body (status 200 only).
    fn request(&mut self, method: &[u8], path: &[u8], body: &[u8]) -> Result<&[u8], RawError> {
        if self.conn.broken {
            self.reconnect()?;
        } else if self
            .find_leader_at
            .is_some_and(|t| std::time::Instant::now() >= t)
        {
            self.follow_leader();
        }
        let c = &mut self.conn;
        // Every connection the client opened (reconnects included) gets the bound.
        c.set_limit(self.max_reply);
        c.begin();
        let w = &mut c.wbuf;
        w.extend_from_slice(method);
        w.push(b' ');
        w.extend_from_slice(path);
        w.extend_from_slice(b" HTTP/1.1\r\nHost: etcd\r\nContent-Type: application/json\r\n");
        if !self.token.is_empty() {
            w.extend_from_slice(b"Authorization: ");
            w.extend_from_slice(&self.token);
            w.extend_from_slice(b"\r\n");
        }
        w.extend_from_slice(b"Content-Length: ");
        push_num(w, body.len());
        w.extend_from_slice(b"\r\n\r\n");
        w.extend_from_slice(body);
        c.send()?;
        // The reply is framed by `frame.rs`, as on the engine: a chunked error reply's trailer
        // is read with it, so the next request on this connection starts clean.
        let limit = c.limit();
        let body = &mut self.body;
        let ((status, range, close), at) =
            c.read_until(|b| match frame::frame(b, limit, body) {
                frame::Framed::More => Ok(None),
                frame::Framed::Broken(why) => Err(why),
                frame::Framed::Whole {
                    status,
                    used,
                    body,
                    close,
                } => Ok(Some(((status, body, close), used))),
            })?;
        if let Some(r) = range {
            self.body.clear();
            self.body
                .extend_from_slice(c.bytes(at.start + r.start..at.start + r.end));
        }
        if close {
            c.broken = true;
        }
        if status != 200 {
            return Err(http_error(status as usize, &self.body));
        }
        Ok(&self.body)
    }
}

#[cold]
fn http_error(status: usize, body: &[u8]) -> RawError {
    let text = net::excerpt(body);
    let kind = if text.contains("too many requests") || status == 503 {
        ErrorKind::Busy
    } else if text.contains("space quota") {
        ErrorKind::Io
    } else {
        ErrorKind::Other
    };
    RawError::new(
        kind,
        kind == ErrorKind::Io,
        format!("etcd: HTTP {status}: {}", text.trim()),
    )
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
        if let Some(l) = cluster::leader_endpoint(&endpoints, s.timeout, &s.access) {
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
                if let Some(l) = cluster::leader_endpoint(&order, deadline, &self.s.access) {
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

/// Appends `"name":"<base64 of b>"`.
fn b64_field(json: &mut Vec<u8>, name: &[u8], b: &[u8]) {
    json.push(b'"');
    json.extend_from_slice(name);
    json.extend_from_slice(b"\":\"");
    let at = json.len();
    json.resize(at + b.len().div_ceil(3) * 4, 0);
    let n = B64
        .encode_slice(b, &mut json[at..])
        .expect("sized for base64");
    json.truncate(at + n);
    json.push(b'"');
}

/// Decodes base64 `src` into `out` (replacing it).
fn b64_decode(src: &[u8], out: &mut Vec<u8>) -> Result<(), RawError> {
    out.resize(src.len() / 4 * 3 + 3, 0);
    match B64.decode_slice(src, out) {
        Ok(n) => {
            out.truncate(n);
            Ok(())
        }
        Err(e) => Err(RawError::new(
            ErrorKind::Corruption,
            false,
            format!("etcd: undecodable base64 in reply: {e}"),
        )),
    }
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

/// The most bytes one reply on the coordination channel may hold: a range over a distributed
/// run's keys (every agent's interval posts) is far above a store's `max_reply`.
const GATEWAY_MAX_REPLY: usize = 256 << 20;

/// etcd's v3 JSON gateway for kvmeter's own coordination (`dist`): any request, JSON in and
/// out, over the same keep-alive HTTP client the store uses, failing over across members.
pub struct Gateway(Http);

impl Gateway {
    /// Connects to the leader where one answers, else to the first member that accepts.
    pub fn connect(
        endpoints: &[SocketAddr],
        timeout: Duration,
        access: &std::sync::Arc<Access>,
    ) -> Result<Gateway, String> {
        let mut order: Vec<SocketAddr> = endpoints.to_vec();
        if order.len() > 1 {
            if let Some(l) = cluster::leader_endpoint(&order, timeout, access) {
                order.swap(0, l);
            }
        }
        let mut last = String::from("no endpoint");
        for a in &order {
            match Http::connect(*a, timeout, access) {
                Ok(mut h) => {
                    h.endpoints = order.clone().into();
                    h.max_reply = GATEWAY_MAX_REPLY;
                    return Ok(Gateway(h));
                }
                Err(e) => last = e.message,
            }
        }
        Err(last)
    }

    /// POSTs `body` to `path` (e.g. /v3/kv/put); one retry on another member when the
    /// connection breaks. Returns the reply's JSON.
    pub fn post(
        &mut self,
        path: &str,
        body: &serde_json::Value,
    ) -> Result<serde_json::Value, String> {
        let text = body.to_string();
        let mut tries = 0;
        loop {
            let r = self
                .0
                .call(b"POST", path.as_bytes(), text.as_bytes())
                .map(serde_json::from_slice::<serde_json::Value>);
            match r {
                Ok(parsed) => {
                    return parsed.map_err(|e| format!("etcd {path}: reply is not JSON: {e}"))
                }
                Err(e) if tries < 2 && (self.0.conn.broken || e.kind == ErrorKind::Io) => {
                    self.0.conn.broken = true;
                    tries += 1;
                }
                Err(e) => return Err(format!("etcd {path}: {}", e.message)),
            }
        }
    }

    /// The member this client talks to now.
    pub fn addr(&self) -> SocketAddr {
        self.0.conn.addr
    }
}
