//! The Redis server side: settings from `--store-opt` (checked before anything starts), the
//! arguments of a managed redis-server, connecting (AUTH, TLS), the readiness ping and FLUSHDB.

use super::super::kv::RawError;
use super::super::net::{self, Conn};
use super::super::{ErrorKind, StoreOptions};
use super::resp::*;
use crate::error::UsageError;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

#[derive(Clone)]
pub(super) struct Settings {
    pub(super) addr: Option<SocketAddr>,
    pub(super) password: String,
    pub(super) user: String,
    pub(super) db: usize,
    pub(super) connections: usize,
    pub(super) timeout: Duration,
    pub(super) index: bool,
    /// `encoding=string`: the serialized record under its key (GET/SET).
    pub(super) string: bool,
    pub(super) pipeline: usize,
    pub(super) tls: Option<net::Tls>,
    /// WAIT after every write for this many replicas (0: no WAIT); its arguments as text.
    pub(super) wait: usize,
    pub(super) wait_arg: String,
    pub(super) wait_timeout: String,
    /// Sentinels to ask for the primary after an error (comma-separated; empty: none).
    pub(super) sentinels: String,
    /// Redis Cluster: its number of masters (0: not a cluster); keys are routed by slot.
    pub(super) cluster: usize,
    /// The most bytes one request's replies may hold (`max_reply`).
    pub(super) max_reply: usize,
    /// How a read waits for a reply (`reply_wait`, resolved by the run).
    pub(super) reply_wait: crate::store::wait::Wait,
}

pub(super) fn password(o: &StoreOptions) -> String {
    match o.str("password") {
        "" => std::env::var("REDISCLI_AUTH").unwrap_or_default(),
        p => p.to_string(),
    }
}

pub(super) fn settings(o: &StoreOptions) -> Result<Settings, UsageError> {
    o.choice("persistence", &["none", "rdb", "aof", "aof-always"])?;
    o.mib("maxmemory_mb")?;
    if o.str("max_clients") != "auto" {
        o.positive("max_clients")?;
    }
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
    let tls = tls(o)?;
    check_string_mode(o)?;
    Ok(Settings {
        addr,
        password: password(o),
        user: o.str("user").to_string(),
        db: o.u64("db")? as usize,
        connections: o.positive("connections")? as usize,
        timeout: net::timeout(o)?,
        // A cluster keeps no key index: one sorted set would live on one master.
        index: o.bool("scan_index")? && o.u64("cluster")? == 0,
        string: o.choice("encoding", &["hash", "string"])? == "string",
        pipeline: match o.positive("pipeline")? {
            n @ 1..=10_000 => n as usize,
            n => {
                return Err(UsageError::new(format!(
                    "--store-opt pipeline={n}: expected 1 to 10000"
                )))
            }
        },
        tls,
        wait: o.u64("wait_replicas")? as usize,
        wait_arg: o.str("wait_replicas").to_string(),
        wait_timeout: o.str("wait_timeout_ms").to_string(),
        sentinels: o.str("sentinel_addr").to_string(),
        cluster: o.u64("cluster")? as usize,
        max_reply: net::max_reply(o)?,
        reply_wait: crate::store::wait::wait(o)?,
    })
}

/// The TLS of `tls=true` (`None` without it): a managed server needs its certificate and key;
/// the server name defaults to the host of `addr`.
fn tls(o: &StoreOptions) -> Result<Option<net::Tls>, UsageError> {
    if !o.bool("tls")? {
        return Ok(None);
    }
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
    Ok(Some(
        net::Tls::new(o.str("tls_ca"), client, &name)
            .map_err(|e| UsageError::new(format!("--store-opt {e}")))?,
    ))
}

/// String mode speaks GET/SET/DEL to one server (either client): the options that need more
/// are refused with it.
fn check_string_mode(o: &StoreOptions) -> Result<(), UsageError> {
    if o.choice("encoding", &["hash", "string"])? == "string" {
        for (opt, unset) in [
            ("cluster", "0"),
            ("sentinels", "0"),
            ("sentinel_addr", ""),
            ("wait_replicas", "0"),
            ("pipeline", "1"),
        ] {
            if o.str(opt) != unset {
                return Err(UsageError::new(format!(
                    "--store-opt encoding=string with {opt}={}: string mode talks to one server, one request at a time per connection; leave {opt} out or use encoding=hash",
                    o.str(opt)
                )));
            }
        }
    }
    Ok(())
}

pub(super) fn server_args(o: &StoreOptions, ports: &[u16], dir: &Path) -> Vec<String> {
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
        // Its latency monitor (LATENCY LATEST) records forks, slow commands and fsyncs over
        // 10 ms: the store events of a run (store_events.csv).
        "--latency-monitor-threshold",
        "10",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    if let Ok(n) = o.str("max_clients").parse::<u64>() {
        a.extend(["--maxclients".into(), n.to_string()]);
    }
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

pub(super) fn connect(s: &Settings, addr: SocketAddr) -> Result<Conn, RawError> {
    let mut c = Conn::connect_with(addr, s.timeout, s.tls.as_ref()).map_err(|e| {
        let tls = if s.tls.is_some() { " (TLS)" } else { "" };
        RawError::new(
            ErrorKind::Io,
            true,
            format!("cannot connect to Redis at {addr}{tls}: {e}"),
        )
    })?;
    c.set_limit(s.max_reply);
    c.set_wait(s.reply_wait);
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

pub(super) fn ping(o: &StoreOptions, addr: &str) -> Result<String, String> {
    let s = settings(o).map_err(|e| e.to_string())?;
    let addr = net::resolve(addr)?;
    let mut c = connect(&s, addr).map_err(|e| e.message)?;
    // A restarted server answers INFO while it loads its RDB or AOF; `loading` is in the
    // persistence section.
    let persistence = simple(&mut c, &[b"INFO", b"persistence"]).map_err(|e| e.message)?;
    if persistence.contains("loading:1") {
        return Err("Redis is loading its data set".into());
    }
    let info = simple(&mut c, &[b"INFO", b"server"]).map_err(|e| e.message)?;
    Ok(info
        .lines()
        .find_map(|l| l.strip_prefix("redis_version:"))
        .unwrap_or("unknown")
        .trim()
        .to_string())
}

pub(super) fn clear(o: &StoreOptions) -> anyhow::Result<()> {
    let s = settings(o)?;
    let addr = net::resolve(o.str("addr")).map_err(|e| anyhow::anyhow!(e))?;
    let mut c = connect(&s, addr).map_err(|e| anyhow::anyhow!(e.message))?;
    simple(&mut c, &[b"FLUSHDB"]).map_err(|e| anyhow::anyhow!(e.message))?;
    Ok(())
}

/// One command on a fresh connection to `addr` (the cluster and replication checks, not the
/// measured path): its simple, integer or bulk reply as text.
pub(super) fn ask(s: &Settings, addr: &str, args: &[&[u8]]) -> Result<String, String> {
    let a = net::resolve(addr)?;
    let mut c = connect(s, a).map_err(|e| e.message)?;
    simple(&mut c, args).map_err(|e| e.message)
}

/// A `key:value` line of an INFO reply.
pub(super) fn field<'a>(info: &'a str, key: &str) -> Option<&'a str> {
    info.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
        .map(str::trim)
}

/// Says once per run and per kind of answer (CLUSTER SLOTS, a redirect, a Sentinel) that
/// Redis sent kvmeter to a host the options did not name: kvmeter connects there and sends
/// AUTH, as every Cluster and Sentinel client does (docs/stores.md, "Where Redis sends
/// kvmeter"). Hosts, not ports: a cluster's nodes on the host given are expected.
#[cold]
pub(super) fn warn_foreign(s: &Settings, what: &'static str, to: SocketAddr) {
    use std::sync::atomic::{AtomicBool, Ordering};
    static CLUSTER: AtomicBool = AtomicBool::new(false);
    static REDIRECT: AtomicBool = AtomicBool::new(false);
    static SENTINEL: AtomicBool = AtomicBool::new(false);
    let given = s
        .addr
        .iter()
        .copied()
        .chain(net::resolve_list(&s.sentinels).unwrap_or_default());
    if given.clone().any(|a| a.ip() == to.ip()) {
        return;
    }
    let flag = match what {
        "CLUSTER SLOTS" => &CLUSTER,
        "a Sentinel" => &SENTINEL,
        _ => &REDIRECT,
    };
    if flag.swap(true, Ordering::Relaxed) {
        return;
    }
    let names: Vec<String> = given.map(|a| a.to_string()).collect();
    let auth = if s.password.is_empty() {
        ""
    } else {
        " and sends AUTH there"
    };
    errln!(
        "warning: Redis: {what} sends kvmeter to {to}, a host the options did not name ({}): kvmeter connects{auth}, as Cluster and Sentinel clients do (docs/stores.md, \"Where Redis sends kvmeter\"); further ones are not repeated",
        names.join(", ")
    );
}
