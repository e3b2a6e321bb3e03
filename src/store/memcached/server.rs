//! memcached's server side for kvmeter: the options checked whole (`Settings`), the command
//! line of a managed server, and the readiness ping and the clear between runs, each on a
//! fresh text connection. Split from mod.rs, which keeps the sessions.

use super::super::net::{self, Conn};
use super::super::StoreOptions;
use super::*;
use crate::error::UsageError;
use std::path::Path;
use std::time::Duration;

#[derive(Clone, Copy, PartialEq)]
pub(super) enum Protocol {
    Text,
    Binary,
}

#[derive(Clone)]
pub(super) struct Settings {
    pub(super) protocol: Protocol,
    pub(super) udp: bool,
    pub(super) connections: usize,
    pub(super) timeout: Duration,
    pub(super) pipeline: usize,
    /// The most bytes one request's replies may hold (`max_reply`).
    pub(super) max_reply: usize,
    /// How a read waits for a reply (`reply_wait`, resolved by the run).
    pub(super) wait: crate::store::wait::Wait,
}

pub(super) fn settings(o: &StoreOptions) -> Result<Settings, UsageError> {
    let s = Settings {
        protocol: if o.choice("protocol", &["text", "binary"])? == "binary" {
            Protocol::Binary
        } else {
            Protocol::Text
        },
        udp: o.bool("udp")?,
        connections: o.positive("connections")? as usize,
        timeout: net::timeout(o)?,
        pipeline: match o.positive("pipeline")? {
            n @ 1..=10_000 => n as usize,
            n => {
                return Err(UsageError::new(format!(
                    "--store-opt pipeline={n}: expected 1 to 10000"
                )))
            }
        },
        max_reply: net::max_reply(o)?,
        wait: crate::store::wait::wait(o)?,
    };
    o.positive_mib("memory_mb")?;
    if o.str("max_clients") != "auto" {
        o.positive("max_clients")?;
    }
    o.positive("threads")?;
    if !o.str("addr").is_empty() {
        net::resolve(o.str("addr"))
            .map_err(|e| UsageError::new(format!("--store-opt addr={e}")))?;
    }
    Ok(s)
}

/// Why the event-driven engine (`--connections`) cannot serve these options yet, if it
/// cannot: it speaks the text protocol over TCP or UDP and the binary protocol over TCP, one
/// request per slot.
pub(super) fn engine_refusal(o: &StoreOptions) -> Option<String> {
    if o.str("protocol") == "binary" && o.bool("udp").unwrap_or(false) {
        return Some("--store-opt protocol=binary with udp=true: not served by the event-driven engine (--connections), which speaks the text protocol over UDP; without --connections, worker threads serve it".into());
    }
    for (opt, unset) in [("pipeline", "1")] {
        if o.str(opt) != unset {
            return Some(format!(
                "--store-opt {opt}={}: not served by the event-driven engine (--connections) yet; without --connections, worker threads serve it",
                o.str(opt)
            ));
        }
    }
    None
}

/// A managed server's connection limit (`-c`): `max_clients`, or 4096 (`auto`; the engine sets
/// it to what `--connections` needs).
pub(super) fn max_clients(o: &StoreOptions) -> u64 {
    o.str("max_clients").parse().unwrap_or(4096)
}

pub(super) fn server_args(o: &StoreOptions, ports: &[u16], _dir: &Path) -> Vec<String> {
    let mut a: Vec<String> = vec![
        "-l".into(),
        "127.0.0.1".into(),
        "-p".into(),
        ports[0].to_string(),
        "-U".into(),
        if o.bool("udp").unwrap_or(false) {
            ports[0].to_string()
        } else {
            "0".into()
        },
        "-m".into(),
        o.str("memory_mb").into(),
        "-t".into(),
        o.str("threads").into(),
        "-c".into(),
        max_clients(o).to_string(),
        "-b".into(),
        max_clients(o).min(65_535).to_string(),
    ];
    // memcached refuses to run as root unless told which user to be.
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        a.extend(["-u".into(), "root".into()]);
    }
    a
}

pub(super) fn connect(o: &StoreOptions) -> Result<(Conn, Settings), String> {
    let s = settings(o).map_err(|e| e.to_string())?;
    let addr = net::resolve(o.str("addr"))?;
    let mut c = Conn::connect(addr, s.timeout)
        .map_err(|e| format!("cannot connect to memcached at {addr}: {e}"))?;
    c.set_limit(s.max_reply);
    Ok((c, s))
}

/// A one-line text command and its one-line answer.
pub(super) fn command(c: &mut Conn, cmd: &[u8]) -> Result<String, String> {
    c.begin();
    c.wbuf.extend_from_slice(cmd);
    c.send().map_err(|e| e.message)?;
    let r = c.line().map_err(|e| e.message)?;
    // A version or stats line: shown and recorded, so no control characters.
    Ok(crate::console::printable(&String::from_utf8_lossy(c.bytes(r))).into_owned())
}

pub(super) fn ping(o: &StoreOptions, _addr: &str) -> Result<String, String> {
    let (mut c, s) = connect(o)?;
    let v = command(&mut c, b"version\r\n")?;
    let v = v
        .strip_prefix("VERSION ")
        .ok_or_else(|| format!("unexpected answer to 'version': {v}"))?
        .to_string();
    if s.udp {
        // The UDP port must answer too.
        let mut u =
            Udp::new(c.addr, s.timeout, s.max_reply).map_err(|e| format!("UDP socket: {e}"))?;
        u.get(b"kvmeter-ping").map_err(|e| {
            format!(
                "no UDP answer from {}: {} (is memcached listening on UDP, -U?)",
                c.addr, e.message
            )
        })?;
    }
    Ok(v)
}

pub(super) fn clear(o: &StoreOptions) -> anyhow::Result<()> {
    let (mut c, _) = connect(o).map_err(|e| anyhow::anyhow!(e))?;
    let a = command(&mut c, b"flush_all\r\n").map_err(|e| anyhow::anyhow!(e))?;
    anyhow::ensure!(a == "OK", "memcached flush_all answered {a}");
    Ok(())
}
