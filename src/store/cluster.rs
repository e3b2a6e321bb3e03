//! Managed clusters on loopback (papers/002): a set of `Managed` servers — an etcd Raft group,
//! a Redis primary with replicas (and Sentinels), a Redis Cluster — each member its own
//! process, ports, data directory and log (`members/<role>-<i>.log` in the run directory).
//! A single managed server is the one-member case, so the driver, the fault schedule and the
//! manifest handle every managed store the same way.
//!
//! The store-specific part is a `Topology`: which members exist for the given options, how to
//! start them, who leads now, whether replicas are in sync, and one line of what the cluster
//! reports. Faults (`src/fault/`) resolve their target role through it when they fire.

use super::managed::{self, Managed};
use super::{ServerSpec, StoreOptions};
use crate::error::UsageError;
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// What a member is in its cluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// The one server of a single-server store.
    Server,
    /// An etcd member (which one leads changes at run time).
    Member,
    /// A Redis primary and its replicas.
    Primary,
    Replica,
    /// A Redis Cluster master (its replicas are `Replica`).
    Master,
    Sentinel,
}

impl Role {
    pub fn name(self) -> &'static str {
        match self {
            Role::Server => "server",
            Role::Member => "member",
            Role::Primary => "primary",
            Role::Replica => "replica",
            Role::Master => "master",
            Role::Sentinel => "sentinel",
        }
    }
}

/// The members a set of options asks for, and the roles that are found by asking the cluster
/// when a fault fires ("leader"); known before anything starts, so a fault on a role the
/// cluster does not have is refused with the rest of the input.
#[derive(Clone, Debug, Default)]
pub struct Shape {
    pub members: Vec<(Role, usize)>,
    /// Roles resolved at run time (etcd's "leader", "follower").
    pub dynamic: &'static [&'static str],
}

impl Shape {
    pub fn single() -> Shape {
        Shape {
            members: vec![(Role::Server, 0)],
            dynamic: &[],
        }
    }
    pub fn count(&self, role: Role) -> usize {
        self.members.iter().filter(|(r, _)| *r == role).count()
    }
    /// Every target a fault may name, for error messages.
    pub fn targets(&self) -> Vec<String> {
        let mut out: Vec<String> = self.dynamic.iter().map(|s| s.to_string()).collect();
        let mut seen = vec![];
        for (r, _) in &self.members {
            if !seen.contains(r) && !self.dynamic.contains(&r.name()) {
                seen.push(*r);
                let n = self.count(*r);
                out.push(if n == 1 {
                    r.name().to_string()
                } else {
                    format!("{}:0..{}", r.name(), n - 1)
                });
            }
        }
        out
    }
}

/// One member: its role, its index within the role, and its server process.
pub struct Member {
    pub role: Role,
    pub index: usize,
    pub server: Managed,
    /// Its ports (the first is the client port).
    pub ports: Vec<u16>,
    pub dir: PathBuf,
}

impl Member {
    pub fn label(&self) -> String {
        format!("{}:{}", self.role.name(), self.index)
    }
}

/// The store-specific side of a cluster.
pub trait Topology: Send + Sync {
    /// The members these options ask for (checked with the rest of the input).
    fn shape(&self, opts: &StoreOptions) -> Shape;
    /// Starts every member under `dir` with logs in `logs`, waits until the cluster serves,
    /// and returns it with the client's address list.
    fn start(&self, ctx: &StartCtx) -> anyhow::Result<Cluster>;
    /// The member index holding a run-time role ("leader"), asking the cluster now.
    fn resolve(&self, _c: &Cluster, role: &str) -> Result<usize, String> {
        Err(format!("the cluster has no role '{role}'"))
    }
    /// Ok once every replica reports it is in sync (faults wait for this); Err says why not.
    fn in_sync(&self, _c: &Cluster) -> Result<(), String> {
        Ok(())
    }
    /// What the cluster reports now, in one line (leader, primary, link states).
    fn status(&self, _c: &Cluster) -> String {
        String::new()
    }
    /// Whether member `i` answers again after a restart or a resume.
    fn ready(&self, c: &Cluster, i: usize) -> Result<(), String>;
    /// After the faults: the address clients should read from now (the current primary or
    /// the whole list), waiting up to `timeout` for the cluster to serve, and a note of
    /// anything kvmeter did to get there (a promotion an operator would have made).
    fn serving(&self, c: &mut Cluster, timeout: Duration) -> Result<(String, String), String> {
        for i in 0..c.members.len() {
            if c.members[i].server.running() {
                c.wait_member(i, timeout)?;
            }
        }
        Ok((c.client_addrs(), String::new()))
    }
    /// Settings worth keeping in the manifest (replication factor, WAIT, quorum).
    fn settings(&self, _opts: &StoreOptions) -> Vec<(String, String)> {
        vec![]
    }
}

/// What a topology needs to start its members.
pub struct StartCtx<'a> {
    pub name: &'static str,
    pub spec: &'static ServerSpec,
    pub opts: &'a StoreOptions,
    /// The store's data directory; each member gets a subdirectory.
    pub dir: &'a Path,
    /// Where member logs go (the run directory).
    pub rundir: &'a Path,
    pub timeout: Duration,
}

impl StartCtx<'_> {
    /// Whether these options ask for one member only: its log is then the run directory's
    /// server.log, as for every single server.
    fn single(&self) -> bool {
        let t = (self.spec.topology)(self.opts);
        t.shape(self.opts).members.len() == 1
    }
    /// CPUs every member is pinned to (`--store-opt cpus=`).
    pub fn cpus(&self) -> Vec<usize> {
        managed::cpus_of(self.opts)
    }
    pub fn binary(&self) -> anyhow::Result<PathBuf> {
        Ok(managed::binary_for(self.name, self.spec)?)
    }
    /// A member's data directory (created) and log path.
    pub fn member_paths(&self, role: Role, i: usize) -> anyhow::Result<(PathBuf, PathBuf)> {
        let dir = self.dir.join(format!("{}-{i}", role.name()));
        std::fs::create_dir_all(&dir)
            .map_err(|e| anyhow::anyhow!("cannot create {}: {e}", dir.display()))?;
        if self.single() {
            return Ok((dir, self.rundir.join("server.log")));
        }
        let logs = self.rundir.join("members");
        std::fs::create_dir_all(&logs)
            .map_err(|e| anyhow::anyhow!("cannot create {}: {e}", logs.display()))?;
        Ok((dir, logs.join(format!("{}-{i}.log", role.name()))))
    }
}

/// A running cluster (or single server) kvmeter started.
pub struct Cluster {
    pub store: &'static str,
    pub members: Vec<Member>,
    pub topology: &'static dyn Topology,
    /// The options the topology and the clients use (`addr` holds the client address list).
    pub opts: StoreOptions,
    /// The run directory the logs are in (manifest paths are relative to it).
    pub rundir: PathBuf,
}

impl Cluster {
    /// The first member (primary, first etcd member, the single server): the one a profile
    /// follows and the reply-wait choice looks at.
    pub fn main(&self) -> &Managed {
        &self.members[0].server
    }

    /// Every member's current pid (0 while it is down), in member order, the main first:
    /// telemetry sums the server figures over them and follows each restart.
    pub fn live_pids(&self) -> Vec<std::sync::Arc<std::sync::atomic::AtomicU32>> {
        self.members.iter().map(|m| m.server.live_pid()).collect()
    }

    /// Member `i` answers the store's own ping (`ServerSpec::ping`, found by the store's name).
    pub fn ping(&self, i: usize) -> Result<(), String> {
        let spec = super::find(self.store)
            .and_then(|k| k.server)
            .ok_or("not a server store")?;
        (spec.ping)(&self.opts, &self.members[i].server.addr).map(|_| ())
    }

    /// The client address list, comma-separated.
    pub fn client_addrs(&self) -> String {
        self.opts.str("addr").to_string()
    }

    /// The member a fault targets: `member:i`, `replica:i`, `primary`, `master:i`,
    /// `sentinel:i`, `server`, or a run-time role ("leader").
    pub fn resolve(&self, target: &str) -> Result<usize, String> {
        if self.topology.shape(&self.opts).dynamic.contains(&target) {
            if let Ok(i) = self.topology.resolve(self, target) {
                return Ok(i);
            }
        }
        let (role, index) = match target.split_once(':') {
            Some((r, i)) => (r, i.parse::<usize>().map_err(|_| format!("'{target}'"))?),
            None => (target, 0),
        };
        if let Some(i) = self
            .members
            .iter()
            .position(|m| m.role.name() == role && m.index == index)
        {
            return Ok(i);
        }
        self.topology.resolve(self, target)
    }

    /// Waits (up to `timeout`) until member `i` answers.
    pub fn wait_member(&self, i: usize, timeout: Duration) -> Result<(), String> {
        let deadline = Instant::now() + timeout;
        loop {
            match self.topology.ready(self, i) {
                Ok(()) => return Ok(()),
                Err(e) if Instant::now() >= deadline => return Err(e),
                Err(_) => std::thread::sleep(Duration::from_millis(50)),
            }
        }
    }

    /// Waits (up to `timeout`) until every replica is in sync.
    pub fn wait_in_sync(&self, timeout: Duration) -> Result<(), String> {
        let deadline = Instant::now() + timeout;
        loop {
            match self.topology.in_sync(self) {
                Ok(()) => return Ok(()),
                Err(e) if Instant::now() >= deadline => return Err(e),
                Err(_) => std::thread::sleep(Duration::from_millis(50)),
            }
        }
    }

    pub fn status(&self) -> String {
        self.topology.status(self)
    }

    /// Stops every member (SIGTERM, then SIGKILL); returns how each ended.
    pub fn stop(&mut self) -> Vec<(String, String)> {
        // Sentinels first, so none starts a failover while the servers go down.
        let mut order: Vec<usize> = (0..self.members.len()).collect();
        order.sort_by_key(|&i| self.members[i].role != Role::Sentinel);
        let mut out = vec![];
        for i in order {
            let m = &mut self.members[i];
            let how = m.server.stop().unwrap_or_else(|e| format!("{e:#}"));
            out.push((m.label(), how));
        }
        out
    }

    /// Members for the manifest: role, pid, port, lives, CPU seconds, log.
    pub fn manifest(&self) -> Vec<MemberManifest> {
        self.members
            .iter()
            .map(|m| MemberManifest {
                role: m.role,
                index: m.index,
                addr: m.server.addr.clone(),
                pid: m.server.pid,
                version: m.server.version.clone(),
                lives: m.server.lives,
                cpus: m.server.cpus.clone(),
                cpu_seconds: (m.server.cpu_seconds() * 1000.0).round() / 1000.0,
                log: m
                    .server
                    .log
                    .strip_prefix(&self.rundir)
                    .map(|p| p.display().to_string())
                    .unwrap_or_else(|_| m.server.log.display().to_string()),
                command: m.server.command.clone(),
            })
            .collect()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.stop();
    }
}

#[derive(Clone, Debug, Serialize, serde::Deserialize)]
pub struct MemberManifest {
    pub role: Role,
    pub index: usize,
    pub addr: String,
    pub pid: u32,
    pub version: String,
    /// Times the member was started (restarts by faults add one each).
    pub lives: u32,
    /// CPU seconds over every life, while kvmeter ran (members share this machine's CPUs).
    pub cpu_seconds: f64,
    /// CPUs the member was pinned to (empty: not pinned).
    #[serde(default)]
    pub cpus: Vec<usize>,
    pub log: String,
    pub command: Vec<String>,
}

impl<'de> serde::Deserialize<'de> for Role {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Ok(match s.as_str() {
            "member" => Role::Member,
            "primary" => Role::Primary,
            "replica" => Role::Replica,
            "master" => Role::Master,
            "sentinel" => Role::Sentinel,
            _ => Role::Server,
        })
    }
}

/// The single-server topology every server store has: one member, started as before.
pub struct Single;

pub static SINGLE: Single = Single;

impl Topology for Single {
    fn shape(&self, _opts: &StoreOptions) -> Shape {
        Shape::single()
    }

    fn start(&self, ctx: &StartCtx) -> anyhow::Result<Cluster> {
        // One server keeps its log where it always was: server.log in the run directory.
        let log = ctx.rundir.join("server.log");
        let m = Managed::start(ctx.name, ctx.spec, ctx.opts, ctx.dir, &log, ctx.timeout)?;
        let mut opts = ctx.opts.clone();
        opts.set("addr", &m.addr);
        let port = m
            .addr
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .unwrap_or(0);
        Ok(Cluster {
            store: ctx.name,
            members: vec![Member {
                role: Role::Server,
                index: 0,
                server: m,
                ports: vec![port],
                dir: ctx.dir.to_path_buf(),
            }],
            topology: &SINGLE,
            opts,
            rundir: ctx.rundir.to_path_buf(),
        })
    }

    fn ready(&self, c: &Cluster, i: usize) -> Result<(), String> {
        c.ping(i)
    }
}

/// Checks a member count option: `what` must be within `lo..=hi`.
pub fn count_opt(
    opts: &StoreOptions,
    name: &str,
    lo: u64,
    hi: u64,
    why: &str,
) -> Result<usize, UsageError> {
    let n = opts.u64(name)?;
    if !(lo..=hi).contains(&n) {
        return Err(UsageError::new(format!(
            "--store-opt {name}={n}: expected {lo} to {hi}{why}"
        )));
    }
    Ok(n as usize)
}
