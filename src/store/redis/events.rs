//! What Redis did, on the run's clock (issue 43, events on the timeline), from its own books
//! on the statistics connection: each background save that ended (`INFO persistence`:
//! `rdb_saves` grew, or before Redis 7.0 `rdb_last_save_time` moved; how long it took), each
//! AOF rewrite that ended (`aof_rewrites`
//! grew: Redis keeps no time of it, so it is placed at the sample that saw it, which the detail
//! says) and each latency spike its latency monitor
//! recorded (`LATENCY LATEST`: a fork, a slow command, an AOF fsync, an eviction cycle, ... over
//! `latency-monitor-threshold`, which managed servers get at 10 ms). Both carry Redis's clock
//! in whole seconds, which the detail says. The first poll of a phase only notes where Redis's
//! books stand, so a phase gets only what happened in it.

use super::super::net::Conn;
use super::super::stats::{Poller, StoreEvent, MAX_EVENTS_PER_POLL};
use super::resp::{command, reply, skip, Reply};
use super::server::field;
use std::collections::BTreeMap;

/// Latency events Redis may name (its docs list about a dozen); more names is a hostile server.
const MAX_NAMES: usize = 64;

/// Where Redis's books stood at the last poll; None before the first.
#[derive(Default)]
pub(super) struct Seen {
    polled: bool,
    last_save: Option<u64>,
    saves: Option<u64>,
    aof_rewrites: Option<u64>,
    latency: BTreeMap<String, u64>,
}

pub(super) fn poll(
    poller: &Poller<Conn>,
    open: impl FnOnce() -> Result<Conn, String>,
    seen: &mut Seen,
    out: &mut Vec<StoreEvent>,
) -> Result<(), String> {
    let first = !seen.polled;
    poller.sample(open, |c| {
        let persistence = info_persistence(c)?;
        let latest = latency_latest(c)?;
        seen.polled = true;
        let num = |k: &str| field(&persistence, k).and_then(|v| v.parse::<u64>().ok());
        if let Some(at) = num("rdb_last_save_time") {
            let ended = match num("rdb_saves") {
                // Redis 7.0 counts its saves as they start (a background one at its fork), so
                // one still in progress is not yet finished. The count tells apart two saves
                // in one second, or one in the second the books were first read, where the
                // time alone would not move.
                Some(n) => {
                    let running = u64::from(num("rdb_bgsave_in_progress") == Some(1));
                    let done = n.saturating_sub(running);
                    let was = seen.saves.replace(done);
                    was.filter(|_| !first).map_or(0, |w| done.saturating_sub(w))
                }
                None => u64::from(!first && seen.last_save.is_some_and(|was| at > was)),
            };
            let took = num("rdb_last_bgsave_time_sec")
                .map_or(String::new(), |s| format!("the latest background save took {s} s; "));
            // A hostile count is bounded by the poll's limit; the latest is always kept.
            let room = MAX_EVENTS_PER_POLL.saturating_sub(out.len()) as u64;
            for k in (0..ended.min(room)).rev() {
                let which = match k {
                    0 => String::new(),
                    _ => format!(
                        "an earlier one of {ended} saves since the last sample, placed at the latest's time (Redis keeps no other); "
                    ),
                };
                out.push(StoreEvent {
                    unix_us: at * 1_000_000,
                    event: "save_finished",
                    job: None,
                    bytes: None,
                    duration_us: None,
                    detail: format!("{which}{took}Redis's clock, whole seconds"),
                });
            }
            seen.last_save = Some(at);
        }
        if let Some(n) = num("aof_rewrites") {
            if let Some(was) = seen.aof_rewrites.filter(|w| !first && n > *w) {
                let took = num("aof_last_rewrite_time_sec")
                    .map_or(String::new(), |s| format!("the latest took {s} s; "));
                out.push(StoreEvent {
                    unix_us: now_unix_us(),
                    event: "aof_rewrite_finished",
                    job: None,
                    bytes: None,
                    duration_us: None,
                    detail: format!(
                        "{} AOF rewrite(s) since the last sample; {took}placed at kvmeter's sample: Redis keeps no time of them",
                        n - was
                    ),
                });
            }
            seen.aof_rewrites = Some(n);
        }
        for (name, at, latest_ms, max_ms) in latest {
            let was = seen.latency.get(&name).copied();
            if !first && was.is_none_or(|w| at > w) && out.len() < MAX_EVENTS_PER_POLL {
                // Redis stamps a spike when it ends (`time(NULL)` after the slow command, fork
                // or cycle), in whole seconds: it ended in [at, at + 1) and began `latest_ms`
                // before. Its row is at the earliest it can have begun, with its length, so a
                // figure shades [at − latest, at + 1), which holds it wherever it fell.
                out.push(StoreEvent {
                    unix_us: (at * 1_000_000).saturating_sub(latest_ms.saturating_mul(1000)),
                    event: "latency_spike",
                    job: None,
                    bytes: None,
                    duration_us: Some(latest_ms.saturating_mul(1000)),
                    detail: format!(
                        "{name}: {latest_ms} ms (its highest {max_ms} ms); Redis's latency monitor stamps its end in whole seconds ({at}): it began up to 1 s after this time"
                    ),
                });
            }
            if was.is_some() || seen.latency.len() < MAX_NAMES {
                seen.latency.insert(name, at);
            }
        }
        Ok(())
    })
}

fn now_unix_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

fn info_persistence(c: &mut Conn) -> Result<String, String> {
    c.begin();
    command(&mut c.wbuf, &[b"INFO", b"persistence"]);
    c.send().map_err(|e| e.message)?;
    match reply(c).map_err(|e| format!("INFO persistence: {}", e.message))? {
        Reply::Bulk(Some(r)) => Ok(String::from_utf8_lossy(c.bytes(r)).into_owned()),
        _ => Err(c.protocol("INFO persistence: not a bulk string").message),
    }
}

/// `LATENCY LATEST`: for each event, its name, the time of its latest spike (Unix seconds),
/// that spike and the highest (ms).
fn latency_latest(c: &mut Conn) -> Result<Vec<(String, u64, u64, u64)>, String> {
    c.begin();
    command(&mut c.wbuf, &[b"LATENCY", b"LATEST"]);
    c.send().map_err(|e| e.message)?;
    let bad = |c: &mut Conn, what: &str| c.protocol(format!("LATENCY LATEST: {what}")).message;
    let n = match reply(c).map_err(|e| format!("LATENCY LATEST: {}", e.message))? {
        Reply::Array(Some(n)) if n <= MAX_NAMES => n,
        Reply::Array(None) => 0,
        Reply::Array(Some(n)) => return Err(bad(c, &format!("{n} events named"))),
        // A server whose latency monitor is off or refused (an ACL) has no events.
        Reply::Error(_) => return Ok(vec![]),
        _ => return Err(bad(c, "not an array")),
    };
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let k = match reply(c).map_err(|e| e.message)? {
            Reply::Array(Some(k)) if k >= 4 => k,
            _ => return Err(bad(c, "an event that is not [name, time, latest, max]")),
        };
        let name = match reply(c).map_err(|e| e.message)? {
            Reply::Bulk(Some(r)) | Reply::Simple(r) => {
                let b = c.bytes(r);
                String::from_utf8_lossy(&b[..b.len().min(64)]).into_owned()
            }
            _ => return Err(bad(c, "an event without a name")),
        };
        let mut ints = [0u64; 3];
        for v in ints.iter_mut() {
            *v = match reply(c).map_err(|e| e.message)? {
                Reply::Int(i) if i >= 0 => i as u64,
                _ => return Err(bad(c, "an event's time or latency is not a number")),
            };
        }
        skip(c, k - 4).map_err(|e| e.message)?;
        out.push((name, ints[0], ints[1], ints[2]));
    }
    Ok(out)
}
