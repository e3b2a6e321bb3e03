//! What `kvmeter dist run` checks before it touches etcd: the flags' bounds, the descriptors a
//! report connection per agent needs, the plan key, the plan itself (no faults, a server every
//! agent reaches, a new --out), and the request agents get with its hash. Each refusal is one
//! line naming the flag, exit 2, with nothing created.

use super::reports;
use crate::distributed::seal::{Seal, KEY_ENV};
use crate::error::UsageError;
use crate::plan::{self, Request};
use std::time::Duration;

/// `kvmeter dist run`'s settings (cli/dist.rs maps its flags here).
pub struct Settings {
    pub coord: crate::distributed::keys::CoordSpec,
    pub job: String,
    pub agents: usize,
    pub register_timeout: String,
    pub lease_ttl: String,
    pub start_delay: String,
    pub abort_on_loss: bool,
    pub plan_key_file: Option<std::path::PathBuf>,
    /// `--reports`: auto, etcd or HOST:PORT (`reports`).
    pub reports: String,
    /// `--reports-tls-cert` and `--reports-tls-key`: the report channel in TLS.
    pub reports_tls_cert: Option<std::path::PathBuf>,
    pub reports_tls_key: Option<std::path::PathBuf>,
    pub request: Request,
}

/// What `checked` resolves before etcd is touched.
pub(super) struct Checked {
    pub(super) plan: plan::Plan,
    /// The request to publish (host-own fields out, workload files as text) and its hash.
    pub(super) published: Request,
    pub(super) hash: String,
    pub(super) seal: Seal,
    pub(super) register: Duration,
    pub(super) ttl: i64,
    pub(super) delay: Duration,
    pub(super) reports: reports::ReportsFlag,
    pub(super) reports_tls: Option<crate::distributed::relay::ServerTls>,
}

/// The checks a coordinator makes before it touches etcd.
pub(super) fn checked(s: &Settings) -> Result<Checked, UsageError> {
    if !(1..=1024).contains(&s.agents) {
        return Err(UsageError::new(format!(
            "--agents {}: expected 1 to 1024 agents",
            s.agents
        )));
    }
    let register = plan::parse_duration("--register-timeout", &s.register_timeout)?;
    let ttl = plan::parse_duration("--lease-ttl", &s.lease_ttl)?;
    if ttl < Duration::from_secs(2) {
        return Err(UsageError::new(format!(
            "--lease-ttl {}: expected at least 2s (etcd's shortest lease)",
            s.lease_ttl
        )));
    }
    let delay = plan::parse_duration("--start-delay", &s.start_delay)?;
    if delay > Duration::from_secs(600) {
        return Err(UsageError::new(format!(
            "--start-delay {}: expected at most 10m",
            s.start_delay
        )));
    }
    let reports = reports::parse(&s.reports)?;
    if reports != reports::ReportsFlag::Etcd {
        // One connection per agent, plus etcd's, the run directory's files and headroom.
        let needed = s.agents as u64 + 8 + 256;
        let (_, hard) = plan::engine::fd_limits();
        if hard < needed {
            return Err(UsageError::new(format!(
                "--agents {}: the coordinator holds one report connection per agent and needs {needed} file descriptors; the hard limit is {hard} (raise 'ulimit -Hn', or --reports etcd)",
                s.agents
            )));
        }
        plan::engine::raise_fd_limit(needed);
    }
    let reports_tls = reports_tls(s, &reports)?;
    let seal = Seal::load(s.plan_key_file.as_deref(), std::env::var(KEY_ENV).ok())?;
    let mut req = s.request.clone();
    req.seed.get_or_insert_with(plan::fresh_seed);
    if req.out.is_none() {
        req.out = Some(plan::default_out("dist", &req.store));
    }
    let plan = plan::build(&req)?;
    if !plan.faults.is_empty() {
        return Err(UsageError::new(
            "--fault: a distributed run faults no server (kvmeter starts none for its agents); use 'kvmeter run --fault' on one host",
        ));
    }
    let adapter = crate::store::find(&plan.store).expect("validated store");
    if adapter.server.is_some() && plan.store_options.str("addr").is_empty() {
        return Err(UsageError::new(format!(
            "--store {}: a distributed run needs --store-opt addr=HOST:PORT that every agent reaches (kvmeter starts no server for agents)",
            adapter.name
        )));
    }
    // The server the agents will use answers here too (where the coordinator can reach it).
    crate::driver::check_user_server(adapter, &plan.store_options)?;
    let out = &plan.out;
    if out.exists()
        && std::fs::read_dir(out)
            .map(|mut d| d.next().is_some())
            .unwrap_or(true)
    {
        return Err(UsageError::new(format!(
            "--out {}: exists and is not empty; kvmeter never overwrites results: choose a new --out",
            out.display()
        )));
    }
    // What agents get, and the hash of what it resolves to with this host's own part (each
    // agent resolves it with its own part: the hash leaves those fields out).
    let (mut published, mine) = crate::distributed::trust::split(&req)?;
    published.seed = Some(plan.seed);
    let hash = plan::plan_hash(&plan::build(&crate::distributed::trust::join(
        &published, &mine,
    ))?);
    Ok(Checked {
        plan,
        published,
        hash,
        seal,
        register,
        ttl: ttl.as_secs() as i64,
        delay,
        reports,
        reports_tls,
    })
}

/// `--reports-tls-cert` with `--reports-tls-key`, loaded (a file that is not PEM, or a key
/// that does not match, is one line here).
fn reports_tls(
    s: &Settings,
    flag: &reports::ReportsFlag,
) -> Result<Option<crate::distributed::relay::ServerTls>, UsageError> {
    match (&s.reports_tls_cert, &s.reports_tls_key) {
        (None, None) => Ok(None),
        (Some(_), None) | (None, Some(_)) => Err(UsageError::new(
            "--reports-tls-cert and --reports-tls-key: give both (the report channel's certificate and its private key, PEM)",
        )),
        (Some(_), Some(_)) if *flag == reports::ReportsFlag::Etcd => Err(UsageError::new(
            "--reports-tls-cert: --reports etcd has no report channel to secure (use --reports auto or HOST:PORT, or leave the TLS flags out)",
        )),
        (Some(cert), Some(key)) => crate::distributed::relay::ServerTls::load(cert, key)
            .map(Some)
            .map_err(UsageError::new),
    }
}
