//! `redis`: Redis over RESP. A record is a hash (YCSB's fields are hash fields, natively);
//! keys are also kept in a sorted set so scans work (`ZRANGEBYLEX`, then the hashes in one
//! pipelined round trip), as YCSB's redis binding keeps its `_indices` set. `scan_index=false`
//! drops the index: inserts get cheaper and SCAN is reported N/A.
//!
//! Insert replaces the record (DEL + HSET in one round trip): YCSB's semantics, which a bare
//! HSET would not keep when the record had more fields. Update is HSET (an upsert).

use super::kv::RawError;
use super::net::{self, parse_usize, push_num, Conn};
use super::record::{self, Record, RecordView};
use super::Queued;
use super::*;
use crate::error::UsageError;
use std::net::SocketAddr;
use std::ops::Range;
use std::time::Duration;

const INDEX: &[u8] = b"_kvmeter:keys";

const OPTIONS: &[OptSpec] = &[
    OptSpec { name: "addr", default: "", help: "host:port of a Redis you run; empty: kvmeter starts one on loopback (managed)" },
    OptSpec { name: "password", default: "", help: "AUTH password (managed servers get it as requirepass); prefer the REDISCLI_AUTH environment variable, which ps does not show" },
    OptSpec { name: "user", default: "", help: "ACL user for AUTH (Redis 6+); empty: the default user" },
    OptSpec { name: "db", default: "0", help: "database number (SELECT)" },
    OptSpec { name: "connections", default: "1", help: "connections per worker, used in turn" },
    OptSpec { name: "timeout_ms", default: "5000", help: "how long to wait for a reply before the operation counts as a timeout" },
    OptSpec { name: "pipeline", default: "1", help: "operations sent per round trip (redis-benchmark's -P): reads, updates, inserts and deletes are batched; scans and read-modify-writes go alone" },
    OptSpec { name: "scan_index", default: "true", help: "keep keys in a sorted set so SCAN works (costs a ZADD per insert)" },
    OptSpec { name: "tls", default: "false", help: "TLS (rustls); needs tls_ca. Managed: the server listens with TLS only" },
    OptSpec { name: "tls_ca", default: "", help: "PEM file of the CA certificates that sign the server's certificate" },
    OptSpec { name: "tls_cert", default: "", help: "PEM certificate: the managed server's own; with addr=, kvmeter's client certificate (for tls-auth-clients yes)" },
    OptSpec { name: "tls_key", default: "", help: "PEM private key of tls_cert" },
    OptSpec { name: "tls_server_name", default: "", help: "name (or IP) the server's certificate must carry; empty: the host of addr (127.0.0.1 when managed)" },
    OptSpec { name: "persistence", default: "none", help: "managed server: none, rdb (save every 60 s with a write), aof (appendfsync everysec) or aof-always (fsync every write)" },
    OptSpec { name: "maxmemory_mb", default: "0", help: "managed server: memory limit in MiB (0: none)" },
    OptSpec { name: "io_threads", default: "1", help: "managed server: I/O threads (io-threads)" },
];

pub static SERVER: ServerSpec = ServerSpec {
    binary: "redis-server",
    package: "redis-server",
    ports: 1,
    args: server_args,
    ping,
    clear,
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
    check: |o| settings(o).map(|_| ()),
    open,
    server: Some(&SERVER),
};

#[derive(Clone)]
struct Settings {
    addr: Option<SocketAddr>,
    password: String,
    user: String,
    db: usize,
    connections: usize,
    timeout: Duration,
    index: bool,
    pipeline: usize,
    tls: Option<net::Tls>,
}

fn password(o: &StoreOptions) -> String {
    match o.str("password") {
        "" => std::env::var("REDISCLI_AUTH").unwrap_or_default(),
        p => p.to_string(),
    }
}

fn settings(o: &StoreOptions) -> Result<Settings, UsageError> {
    o.choice("persistence", &["none", "rdb", "aof", "aof-always"])?;
    o.u64("maxmemory_mb")?;
    let io = o.positive("io_threads")?;
    if io > 128 {
        return Err(UsageError::new(format!(
            "--store-opt io_threads={io}: expected 1 to 128"
        )));
    }
    let addr = match o.str("addr") {
        "" => None,
        a => Some(net::resolve(a).map_err(|e| UsageError::new(format!("--store-opt addr={e}")))?),
    };
    let tls = if o.bool("tls")? {
        if o.str("tls_ca").is_empty() {
            return Err(UsageError::new(
                "--store-opt tls=true needs tls_ca=FILE (PEM CA certificates that sign the server's certificate)",
            ));
        }
        let (cert, key) = (o.str("tls_cert"), o.str("tls_key"));
        if cert.is_empty() != key.is_empty() {
            return Err(UsageError::new(
                "--store-opt tls_cert and tls_key go together: give both or neither",
            ));
        }
        if o.str("addr").is_empty() && cert.is_empty() {
            return Err(UsageError::new(
                "--store-opt tls=true with a managed server needs tls_cert=FILE and tls_key=FILE (the server's certificate and key)",
            ));
        }
        let name = match o.str("tls_server_name") {
            "" => o
                .str("addr")
                .rsplit_once(':')
                .map(|(h, _)| h)
                .unwrap_or("127.0.0.1")
                .trim_matches(['[', ']'])
                .to_string(),
            n => n.to_string(),
        };
        let name = if name.is_empty() {
            "127.0.0.1".to_string()
        } else {
            name
        };
        // A managed server does not ask for a client certificate; a user's server may.
        let client = (!o.str("addr").is_empty() && !cert.is_empty()).then_some((cert, key));
        Some(
            net::Tls::new(o.str("tls_ca"), client, &name)
                .map_err(|e| UsageError::new(format!("--store-opt {e}")))?,
        )
    } else {
        None
    };
    Ok(Settings {
        addr,
        password: password(o),
        user: o.str("user").to_string(),
        db: o.u64("db")? as usize,
        connections: o.positive("connections")? as usize,
        timeout: Duration::from_millis(o.positive("timeout_ms")?),
        index: o.bool("scan_index")?,
        pipeline: match o.positive("pipeline")? {
            n @ 1..=10_000 => n as usize,
            n => {
                return Err(UsageError::new(format!(
                    "--store-opt pipeline={n}: expected 1 to 10000"
                )))
            }
        },
        tls,
    })
}

fn server_args(o: &StoreOptions, ports: &[u16], dir: &Path) -> Vec<String> {
    let mut a: Vec<String> = [
        "--port",
        &ports[0].to_string(),
        "--bind",
        "127.0.0.1",
        "--daemonize",
        "no",
        "--protected-mode",
        "no",
        "--logfile",
        "",
        "--dir",
        &dir.display().to_string(),
        "--io-threads",
        o.str("io_threads"),
        "--maxmemory",
        &format!("{}mb", o.str("maxmemory_mb")),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let (save, aof, fsync) = match o.str("persistence") {
        "rdb" => ("60 1", "no", "everysec"),
        "aof" => ("", "yes", "everysec"),
        "aof-always" => ("", "yes", "always"),
        _ => ("", "no", "everysec"),
    };
    a.extend([
        "--save".into(),
        save.into(),
        "--appendonly".into(),
        aof.into(),
        "--appendfsync".into(),
        fsync.into(),
    ]);
    if o.bool("tls").unwrap_or(false) {
        // TLS only: the plain port is closed; clients are not asked for certificates.
        let port = a.iter().position(|x| x == "--port").expect("--port") + 1;
        a[port] = "0".into();
        a.extend(
            [
                "--tls-port",
                &ports[0].to_string(),
                "--tls-cert-file",
                o.str("tls_cert"),
                "--tls-key-file",
                o.str("tls_key"),
                "--tls-ca-cert-file",
                o.str("tls_ca"),
                "--tls-auth-clients",
                "no",
            ]
            .iter()
            .map(|s| s.to_string()),
        );
    }
    let p = password(o);
    if !p.is_empty() {
        a.extend(["--requirepass".into(), p]);
    }
    a
}

fn connect(s: &Settings, addr: SocketAddr) -> Result<Conn, RawError> {
    let mut c = Conn::connect_with(addr, s.timeout, s.tls.as_ref()).map_err(|e| {
        let tls = if s.tls.is_some() { " (TLS)" } else { "" };
        RawError::new(
            ErrorKind::Io,
            true,
            format!("cannot connect to Redis at {addr}{tls}: {e}"),
        )
    })?;
    if !s.password.is_empty() {
        let mut args: Vec<&[u8]> = vec![b"AUTH"];
        if !s.user.is_empty() {
            args.push(s.user.as_bytes());
        }
        args.push(s.password.as_bytes());
        simple(&mut c, &args).map_err(|e| {
            RawError::new(ErrorKind::Other, true, format!("Redis AUTH: {}", e.message))
        })?;
    }
    if s.db != 0 {
        let db = s.db.to_string();
        simple(&mut c, &[b"SELECT", db.as_bytes()])?;
    }
    Ok(c)
}

/// Sends one command and expects a simple (+) or integer reply; returns its text.
fn simple(c: &mut Conn, args: &[&[u8]]) -> Result<String, RawError> {
    c.begin();
    command(&mut c.wbuf, args);
    c.send()?;
    match reply(c)? {
        Reply::Simple(r) => Ok(String::from_utf8_lossy(c.bytes(r)).into_owned()),
        Reply::Int(i) => Ok(i.to_string()),
        Reply::Bulk(Some(r)) => Ok(String::from_utf8_lossy(c.bytes(r)).into_owned()),
        Reply::Error(r) => Err(redis_error(c.bytes(r))),
        _ => Err(RawError::new(
            ErrorKind::Other,
            false,
            "Redis: unexpected reply type",
        )),
    }
}

fn ping(o: &StoreOptions, addr: &str) -> Result<String, String> {
    let s = settings(o).map_err(|e| e.to_string())?;
    let addr = net::resolve(addr)?;
    let mut c = connect(&s, addr).map_err(|e| e.message)?;
    let info = simple(&mut c, &[b"INFO", b"server"]).map_err(|e| e.message)?;
    if info.contains("loading:1") {
        return Err("Redis is loading its data set".into());
    }
    Ok(info
        .lines()
        .find_map(|l| l.strip_prefix("redis_version:"))
        .unwrap_or("unknown")
        .trim()
        .to_string())
}

fn clear(o: &StoreOptions) -> anyhow::Result<()> {
    let s = settings(o)?;
    let addr = net::resolve(o.str("addr")).map_err(|e| anyhow::anyhow!(e))?;
    let mut c = connect(&s, addr).map_err(|e| anyhow::anyhow!(e.message))?;
    simple(&mut c, &[b"FLUSHDB"]).map_err(|e| anyhow::anyhow!(e.message))?;
    Ok(())
}

/// Appends a RESP command (an array of bulk strings).
#[inline]
fn command(out: &mut Vec<u8>, args: &[&[u8]]) {
    out.push(b'*');
    push_num(out, args.len());
    out.extend_from_slice(b"\r\n");
    for a in args {
        bulk(out, a);
    }
}

#[inline]
fn array_head(out: &mut Vec<u8>, n: usize) {
    out.push(b'*');
    push_num(out, n);
    out.extend_from_slice(b"\r\n");
}

#[inline]
fn bulk(out: &mut Vec<u8>, a: &[u8]) {
    out.push(b'$');
    push_num(out, a.len());
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(a);
    out.extend_from_slice(b"\r\n");
}

enum Reply {
    Simple(Range<usize>),
    Error(Range<usize>),
    Int(i64),
    Bulk(Option<Range<usize>>),
    Array(Option<usize>),
}

#[inline]
fn reply(c: &mut Conn) -> Result<Reply, RawError> {
    let l = c.line()?;
    let b = c.bytes(l.clone());
    let Some(&t) = b.first() else {
        return Err(malformed(c));
    };
    let rest = l.start + 1..l.end;
    let num = |b: &[u8]| -> Option<i64> {
        match b.first() {
            Some(b'-') => parse_usize(&b[1..]).map(|n| -(n as i64)),
            _ => parse_usize(b).map(|n| n as i64),
        }
    };
    Ok(match t {
        b'+' => Reply::Simple(rest),
        b'-' => Reply::Error(rest),
        b':' => Reply::Int(num(&b[1..]).ok_or_else(|| malformed(c))?),
        b'$' => match num(&b[1..]).ok_or_else(|| malformed(c))? {
            n if n < 0 => Reply::Bulk(None),
            n => {
                let r = c.take(n as usize)?;
                let crlf = c.take(2)?;
                if c.bytes(crlf) != b"\r\n" {
                    return Err(malformed(c));
                }
                Reply::Bulk(Some(r))
            }
        },
        b'*' => match num(&b[1..]).ok_or_else(|| malformed(c))? {
            n if n < 0 => Reply::Array(None),
            n => Reply::Array(Some(n as usize)),
        },
        _ => return Err(malformed(c)),
    })
}

#[cold]
fn malformed(c: &mut Conn) -> RawError {
    c.broken = true;
    RawError::new(
        ErrorKind::Other,
        false,
        "Redis: malformed reply (connection reset)",
    )
}

#[cold]
fn redis_error(b: &[u8]) -> RawError {
    let text = String::from_utf8_lossy(b).into_owned();
    let kind = if text.starts_with("OOM") || text.starts_with("BUSY") || text.starts_with("LOADING")
    {
        ErrorKind::Busy
    } else {
        ErrorKind::Other
    };
    let fatal = text.starts_with("NOAUTH") || text.starts_with("WRONGPASS");
    RawError::new(kind, fatal, format!("Redis: {text}"))
}

struct RedisStore {
    s: Settings,
}

fn open(_dir: &Path, o: &StoreOptions) -> anyhow::Result<Box<dyn Store>> {
    let mut s = settings(o)?;
    if s.addr.is_none() {
        s.addr = Some(net::resolve(o.str("addr")).map_err(|e| anyhow::anyhow!(e))?);
    }
    Ok(Box::new(RedisStore { s }))
}

impl Store for RedisStore {
    fn session(&self) -> anyhow::Result<Box<dyn Session>> {
        let addr = self.s.addr.expect("resolved in open");
        let mut conns = Vec::with_capacity(self.s.connections);
        for _ in 0..self.s.connections {
            conns.push(connect(&self.s, addr).map_err(|e| anyhow::anyhow!(e.message))?);
        }
        Ok(Box::new(RedisSession {
            conns,
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
}

struct RedisSession {
    conns: Vec<Conn>,
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
    #[inline]
    fn conn(&mut self) -> Result<usize, RawError> {
        let i = self.next;
        self.next = if i + 1 == self.conns.len() { 0 } else { i + 1 };
        if self.conns[i].broken {
            self.conns[i] = connect(&self.s, self.conns[i].addr)?;
        }
        self.conns[i].begin();
        Ok(i)
    }

    #[cold]
    fn fail(&mut self, e: RawError) -> Status {
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
                Ok(n > 0)
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

impl Session for RedisSession {
    fn read(&mut self, _table: &str, key: &[u8], fields: Fields) -> (Status, RecordView<'_>) {
        let i = match self.conn() {
            Ok(i) => i,
            Err(e) => return (self.fail(e), RecordView::EMPTY),
        };
        let c = &mut self.conns[i];
        match fields {
            Fields::All => command(&mut c.wbuf, &[b"HGETALL", key]),
            Fields::One(f) => command(&mut c.wbuf, &[b"HGET", key, f]),
        }
        let r = c
            .send()
            .and_then(|_| Self::read_hash(c, fields, &mut self.spans));
        match r {
            Ok(true) => {
                if let Fields::One(f) = fields {
                    // One field: its value is copied next to its name (at most one field's
                    // bytes); HGETALL would move every field over the wire instead.
                    let v = self.spans[0];
                    let bytes = self.conns[i].bytes(v.value_range());
                    self.one.clear();
                    self.one.push(f, bytes);
                    return (Status::Ok, self.one.view());
                }
                (
                    Status::Ok,
                    RecordView::new(self.conns[i].buffer(), &self.spans),
                )
            }
            Ok(false) => (Status::NotFound, RecordView::EMPTY),
            Err(e) => (self.fail(e), RecordView::EMPTY),
        }
    }

    fn scan(
        &mut self,
        _table: &str,
        start: &[u8],
        count: usize,
        fields: Fields,
        out: &mut ScanOut,
    ) -> Status {
        out.clear();
        if !self.s.index {
            return Status::error(ErrorKind::NotImplemented);
        }
        let i = match self.conn() {
            Ok(i) => i,
            Err(e) => return self.fail(e),
        };
        let c = &mut self.conns[i];
        // ZRANGEBYLEX _kvmeter:keys [start + LIMIT 0 count
        array_head(&mut c.wbuf, 7);
        bulk(&mut c.wbuf, b"ZRANGEBYLEX");
        bulk(&mut c.wbuf, INDEX);
        c.wbuf.push(b'$');
        push_num(&mut c.wbuf, start.len() + 1);
        c.wbuf.extend_from_slice(b"\r\n[");
        c.wbuf.extend_from_slice(start);
        c.wbuf.extend_from_slice(b"\r\n");
        bulk(&mut c.wbuf, b"+");
        bulk(&mut c.wbuf, b"LIMIT");
        bulk(&mut c.wbuf, b"0");
        let mut nb = itoa::Buffer::new();
        bulk(&mut c.wbuf, nb.format(count).as_bytes());
        let keys = (|| -> Result<(), RawError> {
            c.send()?;
            let n = match reply(c)? {
                Reply::Array(Some(n)) => n,
                Reply::Error(r) => return Err(redis_error(c.bytes(r))),
                _ => return Err(malformed(c)),
            };
            for _ in 0..n {
                let Reply::Bulk(Some(k)) = reply(c)? else {
                    return Err(malformed(c));
                };
                let (kb, _) = out.next_slot();
                kb.extend_from_slice(c.bytes(k));
            }
            Ok(())
        })();
        if let Err(e) = keys {
            return self.fail(e);
        }
        // The records, in one pipelined round trip.
        c.begin();
        for j in 0..out.len() {
            let (k, _) = out.get(j);
            match fields {
                Fields::All => command(&mut c.wbuf, &[b"HGETALL", k]),
                Fields::One(f) => command(&mut c.wbuf, &[b"HMGET", k, f]),
            }
        }
        let n = out.len();
        let r = (|| -> Result<usize, RawError> {
            c.send()?;
            let mut kept = 0;
            for j in 0..n {
                let (_, rec) = out.slot_mut(j);
                rec.clear();
                match reply(c)? {
                    Reply::Array(Some(m)) => {
                        if let Fields::One(f) = fields {
                            for _ in 0..m {
                                if let Reply::Bulk(Some(v)) = reply(c)? {
                                    rec.push(f, c.bytes(v));
                                }
                            }
                        } else {
                            for _ in 0..m / 2 {
                                let (Reply::Bulk(Some(a)), Reply::Bulk(Some(b))) =
                                    (reply(c)?, reply(c)?)
                                else {
                                    return Err(malformed(c));
                                };
                                rec.push(c.bytes(a), c.bytes(b));
                            }
                        }
                        if !rec.is_empty() {
                            kept += 1;
                        }
                    }
                    Reply::Error(r) => return Err(redis_error(c.bytes(r))),
                    _ => return Err(malformed(c)),
                }
            }
            Ok(kept)
        })();
        match r {
            Ok(_) => Status::Ok,
            Err(e) => self.fail(e),
        }
    }

    fn update(&mut self, _table: &str, key: &[u8], values: &Record) -> Status {
        let i = match self.conn() {
            Ok(i) => i,
            Err(e) => return self.fail(e),
        };
        let c = &mut self.conns[i];
        Self::hset(&mut c.wbuf, key, values);
        match c.send().and_then(|_| Self::expect_ok(c, "update")) {
            Ok(()) => Status::Ok,
            Err(e) => self.fail(e),
        }
    }

    fn insert(&mut self, _table: &str, key: &[u8], values: &Record) -> Status {
        let i = match self.conn() {
            Ok(i) => i,
            Err(e) => return self.fail(e),
        };
        let index = self.s.index;
        let c = &mut self.conns[i];
        command(&mut c.wbuf, &[b"DEL", key]);
        Self::hset(&mut c.wbuf, key, values);
        if index {
            command(&mut c.wbuf, &[b"ZADD", INDEX, b"0", key]);
        }
        let r = c.send().and_then(|_| {
            // Every reply is read, so the connection stays in step even after an error.
            let a = Self::expect_ok(c, "insert");
            let b = Self::expect_ok(c, "insert");
            let z = if index {
                Self::expect_ok(c, "insert")
            } else {
                Ok(())
            };
            a.and(b).and(z)
        });
        match r {
            Ok(()) => Status::Ok,
            Err(e) => self.fail(e),
        }
    }

    fn delete(&mut self, _table: &str, key: &[u8]) -> Status {
        let i = match self.conn() {
            Ok(i) => i,
            Err(e) => return self.fail(e),
        };
        let index = self.s.index;
        let c = &mut self.conns[i];
        command(&mut c.wbuf, &[b"DEL", key]);
        if index {
            command(&mut c.wbuf, &[b"ZREM", INDEX, key]);
        }
        let r = c.send().and_then(|_| {
            let a = Self::expect_ok(c, "delete");
            let z = if index {
                Self::expect_ok(c, "delete")
            } else {
                Ok(())
            };
            a.and(z)
        });
        match r {
            Ok(()) => Status::Ok,
            Err(e) => self.fail(e),
        }
    }

    fn last_error(&mut self) -> Option<String> {
        self.last_error.take()
    }

    fn pipeline_depth(&self) -> usize {
        self.s.pipeline
    }

    fn queue(&mut self, op: Queued<'_>) -> bool {
        if self.batch.is_none() {
            self.batch = Some(self.conn());
        }
        let Some(Ok(i)) = self.batch else {
            self.pending.push(Pending::Update); // answered with the connection error
            return true;
        };
        let index = self.s.index;
        let w = &mut self.conns[i].wbuf;
        match op {
            Queued::Read(key, Fields::All) => {
                command(w, &[b"HGETALL", key]);
                self.pending.push(Pending::Read(None));
            }
            Queued::Read(key, Fields::One(f)) => {
                command(w, &[b"HGET", key, f]);
                self.pending.push(Pending::Read(Some(f.len())));
            }
            Queued::Update(key, values) => {
                Self::hset(w, key, values);
                self.pending.push(Pending::Update);
            }
            Queued::Insert(key, values) => {
                command(w, &[b"DEL", key]);
                Self::hset(w, key, values);
                if index {
                    command(w, &[b"ZADD", INDEX, b"0", key]);
                }
                self.pending.push(Pending::Insert);
            }
            Queued::Delete(key) => {
                command(w, &[b"DEL", key]);
                if index {
                    command(w, &[b"ZREM", INDEX, key]);
                }
                self.pending.push(Pending::Delete);
            }
        }
        true
    }

    fn flush(&mut self, done: &mut dyn FnMut(Status, u64)) {
        let batch = self.batch.take();
        let n = self.pending.len();
        let i = match batch {
            None => return,
            Some(Ok(i)) => i,
            Some(Err(e)) => {
                let st = self.fail(e);
                (0..n).for_each(|_| done(st, 0));
                self.pending.clear();
                return;
            }
        };
        let index = self.s.index;
        let c = &mut self.conns[i];
        let mut broken: Option<RawError> = c.send().err();
        for k in 0..n {
            if let Some(e) = &broken {
                done(
                    Status::Error {
                        kind: e.kind,
                        fatal: e.fatal,
                    },
                    0,
                );
                continue;
            }
            let r = match self.pending[k] {
                Pending::Read(one) => {
                    let f = if one.is_none() {
                        Fields::All
                    } else {
                        Fields::One(b"")
                    };
                    Self::read_hash(c, f, &mut self.spans).map(|found| {
                        let bytes: u64 = self.spans.iter().map(|s| s.data_len()).sum();
                        match found {
                            true => (Status::Ok, bytes + one.unwrap_or(0) as u64),
                            false => (Status::NotFound, 0),
                        }
                    })
                }
                Pending::Update => Self::expect_ok(c, "update").map(|_| (Status::Ok, 0)),
                Pending::Insert => {
                    let a = Self::expect_ok(c, "insert");
                    let b = Self::expect_ok(c, "insert");
                    let z = if index {
                        Self::expect_ok(c, "insert")
                    } else {
                        Ok(())
                    };
                    a.and(b).and(z).map(|_| (Status::Ok, 0))
                }
                Pending::Delete => {
                    let a = Self::expect_ok(c, "delete");
                    let z = if index {
                        Self::expect_ok(c, "delete")
                    } else {
                        Ok(())
                    };
                    a.and(z).map(|_| (Status::Ok, 0))
                }
            };
            match r {
                Ok((st, bytes)) => done(st, bytes),
                Err(e) => {
                    let st = Status::Error {
                        kind: e.kind,
                        fatal: e.fatal,
                    };
                    self.last_error = Some(e.message.clone());
                    if c.broken {
                        broken = Some(e);
                    }
                    done(st, 0);
                }
            }
        }
        if let Some(e) = broken {
            self.last_error = Some(e.message);
        }
        self.pending.clear();
    }
}
