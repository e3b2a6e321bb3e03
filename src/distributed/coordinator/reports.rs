//! Where the coordinator takes its agents' reports (`--reports`, docs/distributed.md "Where
//! reports go"): a listening `relay::Inbox` whose address goes into the sealed plan, or etcd.
//!
//! `auto` listens on the address this host uses to reach etcd (the kernel's route, asked with
//! an unconnected UDP socket: no packet is sent), on a port the kernel picks: agents reach
//! etcd, so they are likely to reach that address too; one that cannot says so in its
//! registration and posts through etcd instead.

use crate::distributed::relay::{self, Inbox};
use crate::distributed::seal::Seal;
use crate::error::UsageError;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs, UdpSocket};

/// `--reports` as given, checked before anything is created.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum ReportsFlag {
    Etcd,
    Auto,
    Listen(SocketAddr),
}

pub(crate) fn parse(v: &str) -> Result<ReportsFlag, UsageError> {
    match v {
        "etcd" => Ok(ReportsFlag::Etcd),
        "auto" => Ok(ReportsFlag::Auto),
        a => a
            .to_socket_addrs()
            .ok()
            .and_then(|mut it| it.next())
            .map(ReportsFlag::Listen)
            .ok_or_else(|| {
                UsageError::new(format!(
                    "--reports {a}: expected auto, etcd, or HOST:PORT for the coordinator to listen on (agents push their reports there)"
                ))
            }),
    }
}

/// The source address this host uses toward `etcd`.
fn route_to(etcd: SocketAddr) -> Option<IpAddr> {
    let any: SocketAddr = if etcd.is_ipv4() {
        "0.0.0.0:0".parse().ok()?
    } else {
        "[::]:0".parse().ok()?
    };
    let s = UdpSocket::bind(any).ok()?;
    s.connect(etcd).ok()?;
    s.local_addr().ok().map(|a| a.ip())
}

/// Binds the inbox for `flag` (none for `etcd`) and says where agents will push. A port in use
/// or an address not of this host is one line, exit 2, before etcd is written.
pub(crate) fn listen(
    flag: &ReportsFlag,
    tls: Option<relay::ServerTls>,
    etcd: Option<SocketAddr>,
    seal: Seal,
    prefix: &str,
    agents: usize,
) -> Result<Option<(Inbox, String)>, UsageError> {
    let routed = || {
        etcd.and_then(route_to).ok_or_else(|| {
            UsageError::new(
                "--reports auto: cannot tell which address of this host reaches etcd; give --reports HOST:PORT (or etcd)",
            )
        })
    };
    let (bind, shown) = match flag {
        ReportsFlag::Etcd => return Ok(None),
        ReportsFlag::Auto => (SocketAddr::new(routed()?, 0), "--reports auto".to_string()),
        ReportsFlag::Listen(a) => (*a, format!("--reports {a}")),
    };
    // Each agent holds one authenticated connection (relay/inbox.rs).
    let inbox = Inbox::bind(bind, tls, seal, prefix.to_string(), agents, report_agent)
        .map_err(|e| UsageError::new(format!("{shown}: cannot listen on {bind}: {e}")))?;
    let mut advertised = inbox.addr();
    if advertised.ip().is_unspecified() {
        advertised.set_ip(routed()?);
    }
    let text = advertised.to_string();
    relay::parse_published_addr(&text).map_err(|e| UsageError::new(format!("{shown}: {e}")))?;
    Ok(Some((inbox, text)))
}

/// The keys an agent may push, its intervals (`iv/<p>/<k>/<i>`) and its phase ends
/// (`done/<p>/<i>`), with the agent `<i>` each belongs to.
fn report_agent(k: &str) -> Option<usize> {
    let parts: Vec<&str> = k.split('/').collect();
    // At least this many digits (the agent writes `{:06}` and `{:04}`).
    let digits = |s: &str, n: usize| s.len() >= n && s.bytes().all(|b| b.is_ascii_digit());
    let ok = match parts.as_slice() {
        ["iv", p, i, a] => digits(p, 1) && digits(i, 6) && digits(a, 4),
        ["done", p, a] => digits(p, 1) && digits(a, 4),
        _ => false,
    };
    if ok {
        parts.last()?.parse().ok()
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_flag_takes_auto_etcd_or_an_address() {
        assert_eq!(parse("etcd").unwrap(), ReportsFlag::Etcd);
        assert_eq!(parse("auto").unwrap(), ReportsFlag::Auto);
        assert_eq!(
            parse("127.0.0.1:7070").unwrap(),
            ReportsFlag::Listen("127.0.0.1:7070".parse().unwrap())
        );
        let e = parse("nowhere").unwrap_err().to_string();
        assert!(
            e.starts_with("--reports nowhere: expected auto, etcd, or HOST:PORT"),
            "{e}"
        );
    }

    #[test]
    fn a_report_key_names_its_agent() {
        assert_eq!(report_agent("iv/0/000012/0003"), Some(3));
        assert_eq!(report_agent("done/1/0010"), Some(10));
        for bad in [
            "plan",
            "iv/0/12/0003",
            "done/1/10",
            "iv/x/000012/0003",
            "agent/0001",
            "iv/0/000012/0003/x",
        ] {
            assert_eq!(report_agent(bad), None, "{bad}");
        }
    }

    #[test]
    fn auto_listens_where_etcd_is_reached_from() {
        let seal = Seal::load(None, Some("0123456789abcdef0123".into())).unwrap();
        let (inbox, addr) = listen(
            &ReportsFlag::Auto,
            None,
            Some("127.0.0.1:2379".parse().unwrap()),
            seal,
            "/kvmeter/x/",
            2,
        )
        .unwrap()
        .unwrap();
        assert!(addr.starts_with("127.0.0.1:"), "{addr}");
        assert_eq!(inbox.addr().to_string(), addr);
    }
}
