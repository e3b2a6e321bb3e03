//! etcd client URLs as the user writes them (`--coord`, the `etcd` store's `addr=`):
//! `[http://|https://][user[:password]@]host:port`, comma-separated for a cluster's members.
//! The userinfo is split off at the last `@` and percent-decoded before the host is resolved,
//! so a password is never looked up as a host name (RFC 3986 asks for `@` in a password to be
//! written `%40`; one left bare still parses). Messages show a URL through [`redact`].

use crate::store::net;
use std::net::SocketAddr;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Scheme {
    /// `host:port`: plain http unless TLS is asked for otherwise (the store's `tls=true`).
    Bare,
    Http,
    Https,
}

/// One member's client URL.
#[derive(Clone, Debug)]
pub struct Target {
    pub addr: SocketAddr,
    /// The host as written (brackets of an IPv6 address removed): the TLS server name.
    pub host: String,
}

/// A parsed list of client URLs.
#[derive(Debug)]
pub struct Urls {
    pub targets: Vec<Target>,
    pub scheme: Scheme,
    /// From `user[:password]@`, percent-decoded.
    pub user: Option<String>,
    pub password: Option<String>,
}

impl Urls {
    pub fn addrs(&self) -> Vec<SocketAddr> {
        self.targets.iter().map(|t| t.addr).collect()
    }
}

/// Parses `[scheme://][user[:password]@]host:port[/][,…]`. Errors never contain the password.
pub fn parse_urls(list: &str) -> Result<Urls, String> {
    let mut out = Urls {
        targets: vec![],
        scheme: Scheme::Bare,
        user: None,
        password: None,
    };
    for (i, part) in list
        .split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .enumerate()
    {
        let (scheme, creds, hostport) = split_url(part)?;
        if i > 0 && scheme != out.scheme {
            return Err(format!(
                "'{}': every URL of the list must use the same scheme (http://, https:// or none)",
                redact(list)
            ));
        }
        out.scheme = scheme;
        if let Some((user, password)) = creds {
            if out.user.is_some() && (out.user.as_ref() != Some(&user) || out.password != password)
            {
                return Err(format!(
                    "'{}': the URLs give different users or passwords; give them once",
                    redact(list)
                ));
            }
            out.user = Some(user);
            out.password = password;
        }
        let addr = net::resolve(hostport)?;
        let host = match hostport.strip_prefix('[') {
            Some(v6) => v6.split(']').next().unwrap_or(v6),
            None => hostport.rsplit_once(':').map_or(hostport, |(h, _)| h),
        };
        out.targets.push(Target {
            addr,
            host: host.to_string(),
        });
    }
    if out.targets.is_empty() {
        return Err(format!("'{list}': no URL in it"));
    }
    Ok(out)
}

type Creds = Option<(String, Option<String>)>;

/// One URL: its scheme, its userinfo (decoded) and `host:port`.
fn split_url(part: &str) -> Result<(Scheme, Creds, &str), String> {
    let lower = part.get(..8).unwrap_or(part).to_ascii_lowercase();
    let (scheme, rest) = if lower.starts_with("https://") {
        (Scheme::Https, &part[8..])
    } else if lower.starts_with("http://") {
        (Scheme::Http, &part[7..])
    } else if part.contains("://") {
        return Err(format!(
            "'{}': expected http:// or https://",
            redact_one(part)
        ));
    } else {
        (Scheme::Bare, part)
    };
    let rest = rest.strip_suffix('/').unwrap_or(rest);
    let (userinfo, hostport) = match rest.rfind('@') {
        Some(at) => (Some(&rest[..at]), &rest[at + 1..]),
        None => (None, rest),
    };
    if hostport.contains(['/', '?', '#']) {
        return Err(format!(
            "'{}': expected host:port with no path",
            redact_one(part)
        ));
    }
    let creds = match userinfo {
        None => None,
        Some(u) => {
            let (user, pw) = match u.split_once(':') {
                Some((user, pw)) => (user, Some(pw)),
                None => (u, None),
            };
            let bad = || {
                format!(
                    "'{}': the user:password before '@' has a bad percent-encoding (%XX, as in %40 for '@')",
                    redact_one(part)
                )
            };
            let user = percent_decode(user).ok_or_else(bad)?;
            if user.is_empty() {
                return Err(format!("'{}': no user name before '@'", redact_one(part)));
            }
            let pw = match pw {
                None => None,
                Some(p) => Some(percent_decode(p).ok_or_else(bad)?),
            };
            Some((user, pw))
        }
    };
    Ok((scheme, creds, hostport))
}

/// `%XX` decoded (UTF-8); `None` for a bad escape.
fn percent_decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = std::str::from_utf8(b.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// The URL list with every password replaced by `***` (for messages and records).
pub fn redact(list: &str) -> String {
    list.split(',')
        .map(redact_one)
        .collect::<Vec<_>>()
        .join(",")
}

fn redact_one(part: &str) -> String {
    let start = part.find("://").map_or(0, |i| i + 3);
    let end = part[start..].find('/').map_or(part.len(), |i| start + i);
    match part[start..end].rfind('@') {
        Some(at) => {
            let userinfo = &part[start..start + at];
            let user = userinfo.split(':').next().unwrap_or("");
            let hidden = if userinfo.contains(':') { ":***" } else { "" };
            format!("{}{user}{hidden}{}", &part[..start], &part[start + at..])
        }
        None => part.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn userinfo_is_split_off_and_decoded_never_resolved() {
        let u = parse_urls("http://root:s3cr%3At%40x@127.0.0.1:2379").unwrap();
        assert_eq!(u.scheme, Scheme::Http);
        assert_eq!(u.user.as_deref(), Some("root"));
        assert_eq!(u.password.as_deref(), Some("s3cr:t@x"));
        assert_eq!(u.targets[0].addr, "127.0.0.1:2379".parse().unwrap());
        assert_eq!(u.targets[0].host, "127.0.0.1");
        // An unencoded '@' in the password: the last '@' ends the userinfo.
        let u = parse_urls("https://root:a@b@127.0.0.1:2379/").unwrap();
        assert_eq!(u.password.as_deref(), Some("a@b"));
        assert_eq!(u.scheme, Scheme::Https);
        let u = parse_urls("127.0.0.1:1,127.0.0.1:2").unwrap();
        assert_eq!(u.scheme, Scheme::Bare);
        assert_eq!(u.targets.len(), 2);
        assert!(u.user.is_none());
        let u = parse_urls("https://[::1]:2379").unwrap();
        assert_eq!(u.targets[0].host, "::1");
    }

    #[test]
    fn bad_urls_are_refused_without_showing_the_password() {
        for (url, want) in [
            (
                "http://root:hunter2@127.0.0.1:2379,https://127.0.0.1:2",
                "same scheme",
            ),
            ("ftp://root:hunter2@127.0.0.1:2379", "expected http://"),
            ("http://root:hunter2%4@127.0.0.1:2379", "percent-encoding"),
            ("http://:hunter2@127.0.0.1:2379", "no user name"),
            ("http://root:hunter2@127.0.0.1:2379/v3", "no path"),
            ("http://root:hunter2@nohost", "nohost"),
            (
                "http://root:hunter2@127.0.0.1:1,http://root:other@127.0.0.1:2",
                "different",
            ),
        ] {
            let e = parse_urls(url).unwrap_err();
            assert!(e.contains(want), "{url}: {e}");
            assert!(!e.contains("hunter2"), "{url}: {e}");
        }
    }

    #[test]
    fn redaction() {
        assert_eq!(
            redact("http://root:pw@h:1,https://u@h:2,h:3"),
            "http://root:***@h:1,https://u@h:2,h:3"
        );
        assert_eq!(redact("a:b@h:1"), "a:***@h:1");
        assert_eq!(redact("http://h:1/x@y"), "http://h:1/x@y");
    }

    #[test]
    fn percent_decoding() {
        assert_eq!(percent_decode("a%20b%2f").as_deref(), Some("a b/"));
        assert_eq!(percent_decode("%zz"), None);
        assert_eq!(percent_decode("%2"), None);
        assert_eq!(percent_decode("%ff"), None); // not UTF-8
    }
}
