//! A managed etcd Raft group on loopback (`--store-opt members=3`): every member its own
//! process, client and peer port, data directory and log; the leader found by asking each
//! member's maintenance status (`POST /v3/maintenance/status`: its own `member_id` and the
//! `leader` it follows). papers/002 measures crash recovery of a replicated store; etcd is the
//! Raft store Debian has.

use super::auth::Access;
use super::http::status;
use crate::error::UsageError;
use crate::store::cluster::{Cluster, Member, Role, Shape, StartCtx, Topology};
use crate::store::managed::{free_ports, Managed};
use crate::store::{net, StoreOptions};
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

pub(super) static ETCD: Etcd = Etcd;

pub(super) struct Etcd;

/// Checks the cluster options (before anything starts).
pub(super) fn check(o: &StoreOptions) -> Result<(), UsageError> {
    let n = o.u64("members")?;
    if ![1, 3, 5, 7].contains(&n) {
        let why = if n % 2 == 0 && n > 0 {
            format!(
                ": {n} members tolerate no more failures than {} (a quorum of {} is needed), so kvmeter refuses it",
                n - 1,
                n / 2 + 1
            )
        } else {
            String::new()
        };
        return Err(UsageError::new(format!(
            "--store-opt members={n}: expected 1, 3, 5 or 7{why}"
        )));
    }
    let (hb, el) = (o.positive("heartbeat_ms")?, o.positive("election_ms")?);
    if el < 5 * hb {
        return Err(UsageError::new(format!(
            "--store-opt election_ms={el}: expected at least 5 × heartbeat_ms ({}), as etcd requires",
            5 * hb
        )));
    }
    Ok(())
}

/// The user's input as given (not the options kvmeter fills in for its own cluster).
pub(super) fn check_input(o: &StoreOptions) -> Result<(), UsageError> {
    if o.u64("members")? > 1 && !o.str("addr").is_empty() {
        return Err(UsageError::new(
            "--store-opt members= starts a managed group; with addr= (your own servers) leave members out",
        ));
    }
    Ok(())
}

/// One member's arguments: `ports` = client, peer; `initial` = every member's name=peer URL.
pub(super) fn member_args(
    o: &StoreOptions,
    name: &str,
    ports: &[u16],
    data: &Path,
    initial: &str,
) -> Vec<String> {
    let client = format!("http://127.0.0.1:{}", ports[0]);
    let peer = format!("http://127.0.0.1:{}", ports[1]);
    let quota = o.u64("quota_backend_mb").unwrap_or(8192) << 20;
    [
        "--name",
        name,
        "--data-dir",
        &data.display().to_string(),
        "--listen-client-urls",
        &client,
        "--advertise-client-urls",
        &client,
        "--listen-peer-urls",
        &peer,
        "--initial-advertise-peer-urls",
        &peer,
        "--initial-cluster",
        initial,
        "--initial-cluster-state",
        "new",
        "--initial-cluster-token",
        "kvmeter",
        "--heartbeat-interval",
        o.str("heartbeat_ms"),
        "--election-timeout",
        o.str("election_ms"),
        "--quota-backend-bytes",
        &quota.to_string(),
        "--snapshot-count",
        o.str("snapshot_count"),
        "--logger",
        "zap",
        "--log-outputs",
        "stderr",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

impl Etcd {
    fn addrs(c: &Cluster) -> Vec<Option<SocketAddr>> {
        c.members
            .iter()
            .map(|m| net::resolve(&m.server.addr).ok())
            .collect()
    }

    /// (member index of the leader, term), asking every live member.
    fn leader(c: &Cluster) -> Result<(usize, u64), String> {
        let timeout = Duration::from_millis(500);
        let st: Vec<_> = Self::addrs(c)
            .into_iter()
            .zip(&c.members)
            .map(|(a, m)| {
                if m.server.paused {
                    None
                } else {
                    a.and_then(|a| status(a, timeout, &Access::plain()))
                }
            })
            .collect();
        let leader = st
            .iter()
            .flatten()
            .find(|(_, l, _)| !l.is_empty() && l != "0")
            .map(|(_, l, t)| (l.clone(), *t))
            .ok_or("no member reports a leader")?;
        st.iter()
            .position(|s| s.as_ref().is_some_and(|(id, _, _)| *id == leader.0))
            .map(|i| (i, leader.1))
            .ok_or_else(|| format!("the leader ({}) does not answer", leader.0))
    }
}

impl Topology for Etcd {
    fn shape(&self, o: &StoreOptions) -> Shape {
        let n = o.u64("members").unwrap_or(1) as usize;
        Shape {
            members: (0..n).map(|i| (Role::Member, i)).collect(),
            dynamic: &["leader", "follower"],
        }
    }

    fn start(&self, ctx: &StartCtx) -> anyhow::Result<Cluster> {
        let n = ctx.opts.u64("members")? as usize;
        let binary = ctx.binary()?;
        let mut last = String::new();
        // Ports taken between the probe and the bind: start again on fresh ones.
        for _attempt in 0..3 {
            let ports = free_ports(2 * n)?;
            let initial = (0..n)
                .map(|i| format!("m{i}=http://127.0.0.1:{}", ports[2 * i + 1]))
                .collect::<Vec<_>>()
                .join(",");
            let mut members = Vec::with_capacity(n);
            for i in 0..n {
                let (dir, log) = ctx.member_paths(Role::Member, i)?;
                let p = &ports[2 * i..2 * i + 2];
                let args = member_args(ctx.opts, &format!("m{i}"), p, &dir.join("etcd"), &initial);
                let addr = format!("127.0.0.1:{}", p[0]);
                let server = Managed::spawn("etcd", &binary, args, addr, &log, &ctx.cpus())?;
                members.push(Member {
                    role: Role::Member,
                    index: i,
                    server,
                    ports: p.to_vec(),
                    dir,
                });
            }
            let mut opts = ctx.opts.clone();
            let list: Vec<String> = members.iter().map(|m| m.server.addr.clone()).collect();
            opts.set("addr", &list.join(","));
            let mut c = Cluster {
                store: ctx.name,
                members,
                topology: &ETCD,
                opts,
                rundir: ctx.rundir.to_path_buf(),
            };
            let mut ok = true;
            for i in 0..n {
                let one = c.opts.clone();
                let r = c.members[i]
                    .server
                    .wait_ready(|a| (ctx.spec.ping)(&one, a), ctx.timeout);
                if let Err(e) = r {
                    last = format!("etcd member {i}: {e:#}");
                    ok = false;
                    break;
                }
            }
            if ok {
                return Ok(c);
            }
            if !last.contains("in use") {
                break;
            }
        }
        anyhow::bail!("{last}")
    }

    fn resolve(&self, c: &Cluster, role: &str) -> Result<usize, String> {
        let (leader, _) = Self::leader(c)?;
        match role {
            "leader" => Ok(leader),
            "follower" => (0..c.members.len())
                .find(|&i| i != leader)
                .ok_or_else(|| "a one-member group has no follower".into()),
            _ => Err(format!("etcd has no role '{role}'")),
        }
    }

    fn in_sync(&self, c: &Cluster) -> Result<(), String> {
        // Every live member follows the same leader.
        let timeout = Duration::from_millis(500);
        let mut leaders = vec![];
        for (a, m) in Self::addrs(c).into_iter().zip(&c.members) {
            if m.server.paused {
                continue;
            }
            let (_, l, _) = a
                .and_then(|a| status(a, timeout, &Access::plain()))
                .ok_or_else(|| format!("member:{} does not answer", m.index))?;
            leaders.push(l);
        }
        leaders.dedup();
        match leaders.as_slice() {
            [l] if !l.is_empty() && l != "0" => Ok(()),
            _ => Err(format!("members disagree on the leader: {leaders:?}")),
        }
    }

    fn status(&self, c: &Cluster) -> String {
        match Self::leader(c) {
            Ok((i, term)) => format!("leader member:{i} (term {term})"),
            Err(e) => e,
        }
    }

    fn ready(&self, c: &Cluster, i: usize) -> Result<(), String> {
        c.ping(i)
    }

    fn settings(&self, o: &StoreOptions) -> Vec<(String, String)> {
        let n = o.u64("members").unwrap_or(1);
        vec![
            ("members".into(), n.to_string()),
            ("quorum".into(), (n / 2 + 1).to_string()),
            ("heartbeat_ms".into(), o.str("heartbeat_ms").into()),
            ("election_ms".into(), o.str("election_ms").into()),
        ]
    }
}
