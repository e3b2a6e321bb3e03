//! How an agent's reports leave it, off the measured path: the poster thread (each report to
//! the coordinator's channel, or through etcd with a few retries when there is none or it
//! failed), the keep-alive thread (the agent's lease, the coordinator's abort and its plan's
//! presence), and the flags they share with the run (docs/distributed.md "Where reports go").

use super::Settings;
use crate::distributed::keys::Coord;
use crate::distributed::relay::Sender;
use crate::distributed::seal::Seal;
use crate::distributed::Published;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub(super) enum Post {
    Put(String, String),
    /// Everything queued before is sent: reply.
    Flush(mpsc::Sender<()>),
}

/// What the poster and keep-alive threads share with the run.
#[derive(Default)]
pub(super) struct Flags {
    pub(super) abort: AtomicBool,
    pub(super) coordinator_gone: AtomicBool,
    pub(super) stop: AtomicBool,
    pub(super) bytes: AtomicU64,
    /// Bytes pushed to the coordinator over `relay`.
    pub(super) bytes_direct: AtomicU64,
    pub(super) posts: AtomicU64,
    pub(super) failed_posts: AtomicU64,
    /// Why the latest report could not be sent.
    pub(super) last_error: std::sync::Mutex<String>,
    /// Why the channel to the coordinator failed, once reports went to etcd instead (the
    /// agent's record then says so: `"reports": "etcd: …"`).
    pub(super) fell_back: std::sync::Mutex<Option<String>>,
}

/// Keeps the agent's lease alive and watches for `abort` and for the coordinator's plan going
/// away (its lease expired: the coordinator died).
pub(super) fn keepalive(
    s: &Settings,
    seal: &Seal,
    lease: i64,
    ttl_s: i64,
    flags: Arc<Flags>,
) -> anyhow::Result<std::thread::JoinHandle<()>> {
    let mut c = Coord::connect(&s.coord, &s.job)?;
    c.set_seal(seal.clone());
    let every = Duration::from_millis((ttl_s.max(1) as u64 * 1000 / 3).clamp(200, 2000));
    Ok(std::thread::Builder::new()
        .name("kvm-agent-lease".into())
        .spawn(move || {
            let mut next = Instant::now();
            while !flags.stop.load(Ordering::Relaxed) {
                if Instant::now() >= next {
                    let _ = c.keepalive(lease);
                    let _ = c.take_rejected();
                    if let Ok(v) = c.get("abort") {
                        if v.is_some() {
                            flags.abort.store(true, Ordering::Relaxed);
                        }
                    }
                    // Presence only: the plan is sealed without the run's nonce.
                    if let Ok(None) = c.get_checked("plan") {
                        flags.coordinator_gone.store(true, Ordering::Relaxed);
                    }
                    next = Instant::now() + every;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        })?)
}

/// Sends the agent's reports in order from a thread of its own (retrying briefly; a report
/// that cannot be sent is still in the run directory).
pub(super) fn poster(
    s: &Settings,
    seal: &Seal,
    lease: i64,
    flags: Arc<Flags>,
    mut relay: Option<Sender>,
) -> anyhow::Result<(mpsc::Sender<Post>, std::thread::JoinHandle<()>)> {
    let mut c = Coord::connect(&s.coord, &s.job)?;
    c.set_seal(seal.clone());
    let (tx, rx) = mpsc::channel::<Post>();
    let h = std::thread::Builder::new()
        .name("kvm-agent-post".into())
        .spawn(move || {
            for p in rx {
                match p {
                    Post::Put(k, v) => {
                        if let Some(r) = relay.as_mut() {
                            let before = r.bytes_sent;
                            match r.send(&k, &v) {
                                Ok(()) => {
                                    flags.posts.fetch_add(1, Ordering::Relaxed);
                                    flags
                                        .bytes_direct
                                        .fetch_add(r.bytes_sent - before, Ordering::Relaxed);
                                    continue;
                                }
                                Err(e) => {
                                    // This report and the rest go through etcd instead.
                                    errln!(
                                        "warning: the channel to the coordinator failed ({e}); this agent's reports go through etcd from {k} on"
                                    );
                                    *flags.fell_back.lock().unwrap_or_else(|p| p.into_inner()) =
                                        Some(format!(
                                            "etcd: the channel to the coordinator failed at {k} ({e})"
                                        ));
                                    relay = None;
                                }
                            }
                        }
                        let before = c.bytes_sent;
                        let mut ok = false;
                        // A few quick retries ride out an election; once the coordinator's
                        // lease is gone nothing more is sent (the run directory has it all).
                        for attempt in 0..4 {
                            if flags.coordinator_gone.load(Ordering::Relaxed) {
                                let mut e =
                                    flags.last_error.lock().unwrap_or_else(|p| p.into_inner());
                                if e.is_empty() {
                                    *e = "the coordinator's plan is gone from etcd".into();
                                }
                                break;
                            }
                            match c.put(&k, &v, Some(lease)) {
                                Ok(()) => {
                                    ok = true;
                                    break;
                                }
                                Err(e) => {
                                    let gone = e.contains("lease not found");
                                    *flags.last_error.lock().unwrap_or_else(|p| p.into_inner()) = e;
                                    if gone {
                                        flags.coordinator_gone.store(true, Ordering::Relaxed);
                                    } else {
                                        std::thread::sleep(Duration::from_millis(50 << attempt));
                                    }
                                }
                            }
                        }
                        if ok {
                            flags.posts.fetch_add(1, Ordering::Relaxed);
                            flags
                                .bytes
                                .fetch_add(c.bytes_sent - before, Ordering::Relaxed);
                        } else {
                            flags.failed_posts.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    Post::Flush(ack) => {
                        let _ = ack.send(());
                    }
                }
            }
            if let Some(r) = relay {
                if let Err(e) = r.finish() {
                    *flags.last_error.lock().unwrap_or_else(|p| p.into_inner()) =
                        format!("the channel to the coordinator did not close cleanly: {e}");
                    flags.failed_posts.fetch_add(1, Ordering::Relaxed);
                }
            }
        })?;
    Ok((tx, h))
}

/// The channel to the coordinator's published report address, if it names one and it can be
/// reached (else reports go through etcd, and the registration says why).
pub(super) fn open_relay(
    published: &Published,
    seal: &Seal,
    prefix: &str,
    i: usize,
) -> (Option<Sender>, String) {
    let Some(addr) = &published.reports else {
        return (None, "etcd".into());
    };
    let pin = published.reports_tls_sha256.as_deref();
    // A second try rides out a flood of connections that pushed this one out before its hello.
    let mut tried = Sender::connect(addr, pin, seal.clone(), prefix.to_string(), i);
    if matches!(&tried, Err(e) if e.kind() != std::io::ErrorKind::TimedOut) {
        std::thread::sleep(Duration::from_millis(100));
        tried = Sender::connect(addr, pin, seal.clone(), prefix.to_string(), i);
    }
    match tried {
        Ok(s) => (Some(s), "direct".into()),
        Err(e) => {
            errln!(
                "warning: agent {i}: the coordinator's report address {addr} cannot be reached ({e}); this agent's reports go through etcd"
            );
            (None, format!("etcd: {addr} cannot be reached: {e}"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn published(reports: Option<&str>) -> Published {
        Published {
            kvmeter_version: "0".into(),
            agents: 1,
            hash: "ab".repeat(32),
            nonce: "00112233445566778899aabbccddeeff".into(),
            request: Default::default(),
            lease: 1,
            lease_ttl_s: 10,
            coordinator: crate::distributed::Host::here(),
            reports: reports.map(str::to_string),
            reports_tls_sha256: None,
        }
    }

    #[test]
    fn an_unreachable_report_address_falls_back_to_etcd_and_says_why() {
        let seal = Seal::load(None, Some("0123456789abcdef0123".into())).unwrap();
        // A port nothing listens on: bound, then closed.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let addr = format!("127.0.0.1:{port}");
        let (relay, via) = open_relay(&published(Some(&addr)), &seal, "/kvmeter/j/", 0);
        assert!(relay.is_none());
        assert!(
            via.starts_with(&format!("etcd: {addr} cannot be reached")),
            "{via}"
        );
        let (relay, via) = open_relay(&published(None), &seal, "/kvmeter/j/", 0);
        assert!(relay.is_none());
        assert_eq!(via, "etcd");
    }
}
