//! A managed Redis primary with replicas (`--store-opt replicas=K`) and, with `sentinels=3`,
//! Redis Sentinels that promote a replica when the primary fails (papers/002: what a
//! replication factor and a crash cost). Replicas follow with `--replicaof`; the replication
//! settings and each member's CPU go into the manifest. `in_sync` is what the fault schedule
//! waits for: every replica `online` at the primary and `master_link_status:up` itself.

use super::resp::*;
use super::server::{ask, connect, field, ping, server_args, settings, Settings};
use crate::error::UsageError;
use crate::store::cluster::{Cluster, Member, Role, Shape, StartCtx, Topology};
use crate::store::managed::{free_ports, Managed};
use crate::store::{net, StoreOptions};
use std::time::Duration;

pub(super) static REPLICATION: Replication = Replication;

pub(super) struct Replication;

/// The name Sentinels monitor the primary under.
pub(super) const MASTER_NAME: &str = "kvmeter";

pub(super) fn check(o: &StoreOptions) -> Result<(), UsageError> {
    let replicas = o.u64("replicas")?;
    if replicas > 4 {
        return Err(UsageError::new(format!(
            "--store-opt replicas={replicas}: expected 0 to 4"
        )));
    }
    let managed = o.str("addr").is_empty();
    let wait = o.u64("wait_replicas")?;
    if managed && wait > replicas {
        return Err(UsageError::new(format!(
            "--store-opt wait_replicas={wait}: the primary has only {replicas} replica(s) (replicas={replicas})"
        )));
    }
    o.positive("wait_timeout_ms")?;
    o.positive("down_after_ms")?;
    let sentinels = o.u64("sentinels")?;
    if ![0, 3, 5].contains(&sentinels) {
        return Err(UsageError::new(format!(
            "--store-opt sentinels={sentinels}: expected 0, 3 or 5 (a majority must agree to fail over)"
        )));
    }
    if sentinels > 0 && replicas == 0 {
        return Err(UsageError::new(
            "--store-opt sentinels= needs replicas=1 or more: Sentinel promotes a replica",
        ));
    }
    if wait > 0 && o.u64("pipeline")? > 1 {
        return Err(UsageError::new(
            "--store-opt wait_replicas= waits after every write, which pipeline= would batch: use one of them",
        ));
    }
    if !o.str("sentinel_addr").is_empty() {
        net::resolve_list(o.str("sentinel_addr"))
            .map_err(|e| UsageError::new(format!("--store-opt sentinel_addr={e}")))?;
    }
    Ok(())
}

/// The user's input as given (not the options kvmeter fills in for its own servers).
pub(super) fn check_input(o: &StoreOptions) -> Result<(), UsageError> {
    let managed = o.str("addr").is_empty();
    if !managed && (o.u64("replicas")? > 0 || o.u64("sentinels")? > 0) {
        return Err(UsageError::new(
            "--store-opt replicas= and sentinels= start managed servers; with addr= (your own server) give sentinel_addr= instead",
        ));
    }
    if !managed && !o.str("sentinel_addr").is_empty() && o.u64("sentinels")? > 0 {
        return Err(UsageError::new(
            "--store-opt sentinel_addr= names your own Sentinels; sentinels= starts managed ones: give one of them",
        ));
    }
    Ok(())
}

fn sentinel_conf(o: &StoreOptions, port: u16, primary: u16, dir: &std::path::Path) -> String {
    let mut c = format!(
        "port {port}\nbind 127.0.0.1\ndaemonize no\nprotected-mode no\ndir {}\n\
         sentinel monitor {MASTER_NAME} 127.0.0.1 {primary} 2\n\
         sentinel down-after-milliseconds {MASTER_NAME} {}\n\
         sentinel failover-timeout {MASTER_NAME} {}\n\
         sentinel parallel-syncs {MASTER_NAME} 1\n",
        dir.display(),
        o.str("down_after_ms"),
        (o.u64("down_after_ms").unwrap_or(1000) * 3).max(3000),
    );
    let p = super::server::password(o);
    if !p.is_empty() {
        c.push_str(&format!("sentinel auth-pass {MASTER_NAME} {p}\n"));
    }
    c
}

/// The primary's address as the Sentinels at `list` report it.
pub(super) fn ask_sentinels(list: &str, timeout: Duration) -> Option<String> {
    for a in net::resolve_list(list).ok()? {
        let Ok(mut c) = net::Conn::connect(a, timeout) else {
            continue;
        };
        if let Ok(v) = strings(
            &mut c,
            &[
                b"SENTINEL",
                b"get-master-addr-by-name",
                MASTER_NAME.as_bytes(),
            ],
        ) {
            if v.len() == 2 {
                return Some(format!("{}:{}", v[0], v[1]));
            }
        }
    }
    None
}

/// `INFO replication` of the member at `addr`, as key:value lines.
fn info(s: &Settings, addr: &str) -> Result<String, String> {
    ask(s, addr, &[b"INFO", b"replication"])
}

impl Replication {
    fn settings(c: &Cluster) -> Result<Settings, String> {
        settings(&c.opts).map_err(|e| e.to_string())
    }
}

impl Topology for Replication {
    fn shape(&self, o: &StoreOptions) -> Shape {
        let k = o.u64("replicas").unwrap_or(0) as usize;
        let s = o.u64("sentinels").unwrap_or(0) as usize;
        let mut members = vec![(Role::Primary, 0)];
        members.extend((0..k).map(|i| (Role::Replica, i)));
        members.extend((0..s).map(|i| (Role::Sentinel, i)));
        Shape {
            members,
            // After a failover the primary is whichever member the Sentinels promoted.
            dynamic: &["primary"],
        }
    }

    fn start(&self, ctx: &StartCtx) -> anyhow::Result<Cluster> {
        let k = ctx.opts.u64("replicas")? as usize;
        let sn = ctx.opts.u64("sentinels")? as usize;
        let binary = ctx.binary()?;
        let ports = free_ports(1 + k + sn)?;
        let mut members = Vec::new();
        for i in 0..=k {
            let role = if i == 0 { Role::Primary } else { Role::Replica };
            let index = i.saturating_sub(1);
            let (dir, log) = ctx.member_paths(role, index)?;
            let mut args = server_args(ctx.opts, &ports[i..=i], &dir);
            if i > 0 {
                args.extend([
                    "--replicaof".into(),
                    "127.0.0.1".into(),
                    ports[0].to_string(),
                ]);
                let p = super::server::password(ctx.opts);
                if !p.is_empty() {
                    args.extend(["--masterauth".into(), p]);
                }
            }
            let addr = format!("127.0.0.1:{}", ports[i]);
            members.push(Member {
                role,
                index,
                server: Managed::spawn("redis", &binary, args, addr, &log, &ctx.cpus())?,
                ports: vec![ports[i]],
                dir,
            });
        }
        for j in 0..sn {
            let (dir, log) = ctx.member_paths(Role::Sentinel, j)?;
            let port = ports[1 + k + j];
            let conf = dir.join("sentinel.conf");
            std::fs::write(&conf, sentinel_conf(ctx.opts, port, ports[0], &dir))?;
            let args = vec![conf.display().to_string(), "--sentinel".into()];
            let addr = format!("127.0.0.1:{port}");
            members.push(Member {
                role: Role::Sentinel,
                index: j,
                server: Managed::spawn("redis-sentinel", &binary, args, addr, &log, &ctx.cpus())?,
                ports: vec![port],
                dir,
            });
        }
        let mut opts = ctx.opts.clone();
        opts.set("addr", &members[0].server.addr);
        if sn > 0 {
            let list: Vec<String> = members[1 + k..]
                .iter()
                .map(|m| m.server.addr.clone())
                .collect();
            opts.set("sentinel_addr", &list.join(","));
        }
        let mut c = Cluster {
            store: ctx.name,
            members,
            topology: &REPLICATION,
            opts,
            rundir: ctx.rundir.to_path_buf(),
        };
        for i in 0..c.members.len() {
            let o = c.opts.clone();
            let sentinel = c.members[i].role == Role::Sentinel;
            c.members[i].server.wait_ready(
                |a| {
                    if sentinel {
                        sentinel_ping(a)
                    } else {
                        ping(&o, a)
                    }
                },
                ctx.timeout,
            )?;
        }
        c.wait_in_sync(ctx.timeout)
            .map_err(|e| anyhow::anyhow!("the replicas did not come in sync: {e}"))?;
        if sn > 0 {
            // Each Sentinel must have found the replicas and the other Sentinels before a
            // failover can be agreed on.
            let deadline = std::time::Instant::now() + ctx.timeout;
            loop {
                match sentinels_ready(&c, k, sn) {
                    Ok(()) => break,
                    Err(e) if std::time::Instant::now() >= deadline => {
                        anyhow::bail!("the Sentinels are not ready: {e}")
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(100)),
                }
            }
        }
        Ok(c)
    }

    fn resolve(&self, c: &Cluster, role: &str) -> Result<usize, String> {
        match role {
            // After a failover the primary is whichever member the Sentinels promoted.
            "primary" => self.current_primary(c),
            _ => Err(format!(
                "Redis with replicas has no role '{role}' (primary, replica:i, sentinel:i)"
            )),
        }
    }

    fn in_sync(&self, c: &Cluster) -> Result<(), String> {
        let s = Self::settings(c)?;
        let primary = self.current_primary(c)?;
        let want = c
            .members
            .iter()
            .filter(|m| m.role == Role::Replica && !m.server.paused)
            .count();
        let i = info(&s, &c.members[primary].server.addr)?;
        let online = i
            .lines()
            .filter(|l| l.starts_with("slave") && l.contains("state=online"))
            .count();
        if online < want {
            return Err(format!("{online} of {want} replicas online"));
        }
        for m in &c.members {
            if m.role == Role::Replica && !m.server.paused {
                let r = info(&s, &m.server.addr)?;
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
        let Ok(s) = Self::settings(c) else {
            return String::new();
        };
        match self.current_primary(c) {
            Ok(p) => {
                let i = info(&s, &c.members[p].server.addr).unwrap_or_default();
                format!(
                    "primary {} ({}), {} replica(s) connected",
                    c.members[p].label(),
                    c.members[p].server.addr,
                    field(&i, "connected_slaves").unwrap_or("?")
                )
            }
            Err(e) => e,
        }
    }

    fn ready(&self, c: &Cluster, i: usize) -> Result<(), String> {
        let a = &c.members[i].server.addr;
        if c.members[i].role == Role::Sentinel {
            sentinel_ping(a).map(|_| ())
        } else {
            ping(&c.opts, a).map(|_| ())
        }
    }

    fn serving(&self, c: &mut Cluster, timeout: Duration) -> Result<(String, String), String> {
        let deadline = std::time::Instant::now() + timeout;
        loop {
            if let Ok(p) = self.current_primary(c) {
                if ping(&c.opts, &c.members[p].server.addr).is_ok() {
                    return Ok((c.members[p].server.addr.clone(), String::new()));
                }
            }
            // No Sentinel, and the primary is gone: promote the replica that got furthest,
            // as an operator would (REPLICAOF NO ONE).
            let live_primary = c
                .members
                .iter_mut()
                .any(|m| m.role == Role::Primary && m.server.running());
            if !live_primary && c.opts.str("sentinel_addr").is_empty() {
                let s = Self::settings(c)?;
                let best = c
                    .members
                    .iter()
                    .enumerate()
                    .filter(|(_, m)| m.role == Role::Replica)
                    .filter_map(|(i, m)| {
                        let inf = info(&s, &m.server.addr).ok()?;
                        let off: u64 = field(&inf, "slave_repl_offset")?.parse().ok()?;
                        Some((off, i))
                    })
                    .max();
                if let Some((off, i)) = best {
                    let a = net::resolve(&c.members[i].server.addr)?;
                    let mut conn = connect(&s, a).map_err(|e| e.message)?;
                    simple(&mut conn, &[b"REPLICAOF", b"NO", b"ONE"]).map_err(|e| e.message)?;
                    return Ok((
                        c.members[i].server.addr.clone(),
                        format!(
                            "the primary was down with no Sentinel: kvmeter promoted {} (replication offset {off}) with REPLICAOF NO ONE, as an operator would",
                            c.members[i].label()
                        ),
                    ));
                }
            }
            if std::time::Instant::now() >= deadline {
                return Err("no primary serves".into());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn settings(&self, o: &StoreOptions) -> Vec<(String, String)> {
        let k = o.u64("replicas").unwrap_or(0);
        vec![
            ("replication_factor".into(), (k + 1).to_string()),
            ("replicas".into(), k.to_string()),
            ("replication".into(), "asynchronous (Redis)".into()),
            ("wait_replicas".into(), o.str("wait_replicas").into()),
            ("wait_timeout_ms".into(), o.str("wait_timeout_ms").into()),
            ("sentinels".into(), o.str("sentinels").into()),
            ("down_after_ms".into(), o.str("down_after_ms").into()),
            ("persistence".into(), o.str("persistence").into()),
        ]
    }
}

impl Replication {
    /// The member that is primary now: as the Sentinels report it, else the one whose
    /// `INFO replication` says `role:master`.
    pub(super) fn current_primary(&self, c: &Cluster) -> Result<usize, String> {
        let list = c.opts.str("sentinel_addr");
        if !list.is_empty() {
            if let Some(a) = ask_sentinels(list, Duration::from_millis(500)) {
                if let Some(i) = c.members.iter().position(|m| m.server.addr == a) {
                    return Ok(i);
                }
            }
        }
        let s = Self::settings(c)?;
        c.members
            .iter()
            .position(|m| {
                m.role != Role::Sentinel
                    && !m.server.paused
                    && info(&s, &m.server.addr)
                        .map(|i| field(&i, "role") == Some("master"))
                        .unwrap_or(false)
            })
            .ok_or_else(|| "no member reports role:master".into())
    }
}

fn sentinel_ping(addr: &str) -> Result<String, String> {
    let a = net::resolve(addr)?;
    let mut c = net::Conn::connect(a, Duration::from_secs(2)).map_err(|e| e.to_string())?;
    let i = simple(&mut c, &[b"INFO", b"server"]).map_err(|e| e.message)?;
    Ok(field(&i, "redis_version").unwrap_or("unknown").to_string())
}

/// Every Sentinel knows the replicas and the other Sentinels.
fn sentinels_ready(c: &Cluster, replicas: usize, sentinels: usize) -> Result<(), String> {
    for m in c.members.iter().filter(|m| m.role == Role::Sentinel) {
        let a = net::resolve(&m.server.addr)?;
        let mut conn = net::Conn::connect(a, Duration::from_secs(2)).map_err(|e| e.to_string())?;
        let i = simple(&mut conn, &[b"INFO", b"sentinel"]).map_err(|e| e.message)?;
        let line = i
            .lines()
            .find(|l| l.starts_with("master0:"))
            .ok_or("no master monitored yet")?;
        let num = |k: &str| -> usize {
            line.split(',')
                .find_map(|p| p.strip_prefix(k))
                .and_then(|v| v.parse().ok())
                .unwrap_or(0)
        };
        if num("slaves=") < replicas || num("sentinels=") < sentinels {
            return Err(format!("{}: {line}", m.label()));
        }
    }
    Ok(())
}
