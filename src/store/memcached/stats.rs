//! memcached's own accounting (`stats`, protocol.txt "General-purpose statistics") on the
//! run's clock (issue 43): hits and misses, evictions, connections, memory, the times it
//! stopped accepting connections (`listen_disabled_num`) and a worker yielded a busy
//! connection (`conn_yields`). Read on a connection of its own (`stats::Poller`), bounded by
//! the request's limit and a deadline of at most a second; memcached names each statistic as
//! it is declared here.

use super::super::net::Conn;
use super::super::stats::{self, stat, Poller, Role, StatKind, StatSpec};
use std::net::SocketAddr;
use std::time::Duration;

use StatKind::{Counter, Gauge};

pub static STATS: &[StatSpec] = &[
    stat(
        "get_hits",
        "count",
        Counter,
        Role::CacheHit,
        "keys found by get",
    ),
    stat(
        "get_misses",
        "count",
        Counter,
        Role::CacheMiss,
        "keys not found by get",
    ),
    stat(
        "evictions",
        "count",
        Counter,
        Role::Work,
        "valid items removed to make room for new ones",
    ),
    stat(
        "expired_unfetched",
        "count",
        Counter,
        Role::Plain,
        "items expired before any get",
    ),
    stat(
        "evicted_unfetched",
        "count",
        Counter,
        Role::Plain,
        "items evicted before any get",
    ),
    stat(
        "cmd_get",
        "count",
        Counter,
        Role::Plain,
        "get requests (each key of a multi-get)",
    ),
    stat("cmd_set", "count", Counter, Role::Plain, "set requests"),
    stat(
        "bytes_read",
        "bytes",
        Counter,
        Role::Plain,
        "bytes read from the network",
    ),
    stat(
        "bytes_written",
        "bytes",
        Counter,
        Role::Plain,
        "bytes written to the network",
    ),
    stat(
        "total_connections",
        "count",
        Counter,
        Role::Plain,
        "connections opened",
    ),
    stat(
        "rejected_connections",
        "count",
        Counter,
        Role::Work,
        "connections refused at the connection limit (-c)",
    ),
    stat(
        "listen_disabled_num",
        "count",
        Counter,
        Role::Work,
        "times it stopped accepting at the connection limit",
    ),
    stat(
        "conn_yields",
        "count",
        Counter,
        Role::Work,
        "times a worker yielded a connection that sent too many requests at once (-R)",
    ),
    stat(
        "curr_connections",
        "count",
        Gauge,
        Role::Plain,
        "open connections (kvmeter's statistics connection too)",
    ),
    stat("curr_items", "count", Gauge, Role::Plain, "items stored"),
    stat(
        "bytes",
        "bytes",
        Gauge,
        Role::Plain,
        "bytes of items stored",
    ),
    stat(
        "limit_maxbytes",
        "bytes",
        Gauge,
        Role::Plain,
        "item memory (-m)",
    ),
];

/// Reads `stats` into `out`: `STAT <name> <value>` lines up to `END`.
pub(super) fn sample(
    poller: &Poller<Conn>,
    addr: SocketAddr,
    timeout: Duration,
    out: &mut [Option<u64>],
) -> Result<(), String> {
    let timeout = stats::deadline(timeout);
    poller.sample(
        || {
            let mut c = Conn::connect(addr, timeout)
                .map_err(|e| format!("memcached at {addr}: statistics connection: {e}"))?;
            c.set_limit(stats::REPLY_LIMIT);
            Ok(c)
        },
        |c| {
            out.fill(None);
            c.begin();
            c.wbuf.extend_from_slice(b"stats\r\n");
            c.send().map_err(|e| e.message)?;
            loop {
                // Every line counts against the limit (memcached's answer is about 3 KB) and
                // the deadline.
                let r = c
                    .line()
                    .map_err(|e| format!("memcached stats: {}", e.message))?;
                let line = c.bytes(r);
                if line == b"END" {
                    return Ok(());
                }
                let text = std::str::from_utf8(line).unwrap_or("");
                let mut words = text.split(' ');
                match (words.next(), words.next(), words.next(), words.next()) {
                    (Some("STAT"), Some(name), Some(value), None) => {
                        stats::set(STATS, out, name, value)
                    }
                    _ => {
                        out.fill(None);
                        let shown = super::super::net::excerpt(line);
                        return Err(c
                            .protocol(format!("memcached stats: not a STAT line: {shown}"))
                            .message);
                    }
                }
            }
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A scripted memcached (net::tests::serve) that answers `stats` with `reply`.
    fn sampled(reply: &[u8]) -> (Result<(), String>, Vec<Option<u64>>) {
        let addr = super::super::super::net::tests::serve(vec![reply.to_vec()], Duration::ZERO);
        let mut out = vec![Some(7); STATS.len()];
        let r = sample(&Poller::default(), addr, Duration::from_secs(2), &mut out);
        (r, out)
    }

    fn at(name: &str) -> usize {
        STATS.iter().position(|s| s.name == name).unwrap()
    }

    #[test]
    fn stat_lines_up_to_end_are_read_by_name() {
        let (r, out) = sampled(b"STAT pid 1\r\nSTAT evictions 12\r\nSTAT get_hits 5\r\nSTAT rusage_user 0.5\r\nEND\r\n");
        assert_eq!(r, Ok(()));
        assert_eq!(out[at("evictions")], Some(12));
        assert_eq!(out[at("get_hits")], Some(5));
        assert_eq!(out[at("curr_items")], None);
    }

    #[test]
    fn a_reply_that_is_not_stats_leaves_every_value_unset() {
        let (r, out) = sampled(b"STAT evictions 12\r\nSERVER_ERROR out of memory\r\n");
        assert!(r.unwrap_err().contains("not a STAT line: SERVER_ERROR"));
        assert!(out.iter().all(Option::is_none));
    }
}
