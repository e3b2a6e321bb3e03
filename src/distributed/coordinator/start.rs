//! What the coordinator does once its plan is published: it keeps its lease alive on a thread
//! of its own, and it tells the user how to start the agents (naming the key as this process got
//! it) and where their reports go.

use super::checks::Settings;
use crate::distributed::Published;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Keeps the coordinator's lease alive, every third of its TTL (200 ms to 2 s), until `stop`.
pub(super) fn keep_lease(
    s: &Settings,
    lease: i64,
    ttl: i64,
    stop: Arc<AtomicBool>,
) -> anyhow::Result<std::thread::JoinHandle<()>> {
    let mut c = crate::distributed::keys::Coord::connect(&s.coord, &s.job)?;
    let every = Duration::from_millis((ttl as u64 * 1000 / 3).clamp(200, 2000));
    Ok(std::thread::Builder::new()
        .name("kvm-dist-lease".into())
        .spawn(move || {
            let mut next = Instant::now();
            while !stop.load(Ordering::Relaxed) {
                if Instant::now() >= next {
                    let _ = c.keepalive(lease);
                    next = Instant::now() + every;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        })?)
}

/// Says how to start the agents (naming the key as this process got it) and where their
/// reports go.
pub(super) fn announce(
    s: &Settings,
    published: &Published,
    prefix: &str,
    reports_to: Option<&str>,
) {
    let (hash, n) = (&published.hash, published.agents);
    let key = match &s.plan_key_file {
        Some(f) => format!(" --plan-key-file {}", f.display()),
        None => String::new(),
    };
    let key_env = match &s.plan_key_file {
        Some(_) => String::new(),
        None => format!(
            ", with {} set to this run's key",
            crate::distributed::seal::KEY_ENV
        ),
    };
    errln!(
        "dist: plan {hash} published under {prefix} for {n} agents: start them with 'kvmeter agent --coord {} --job {}{key}'{key_env} (index 0..{} from --index or the placing engine)",
        s.coord,
        s.job,
        n - 1
    );
    match reports_to {
        Some(a) => errln!(
            "dist: agents push their reports to {a}{} (etcd keeps membership and start times)",
            if published.reports_tls_sha256.is_some() { " in TLS" } else { "" }
        ),
        None => errln!(
            "dist: --reports etcd: every report (2-4 KB) stays in etcd's history until etcd is compacted: {n} agents add about {} MB an hour at 1 s intervals",
            n * 11
        ),
    }
}
