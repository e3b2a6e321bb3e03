//! Securing kvmeter's etcd clients — the `etcd` store and `dist`'s coordination channel
//! (`--coord`): client URLs, TLS and etcd's own authentication.
//!
//! - **URLs**: `[http://|https://][user[:password]@]host:port`, comma-separated for a
//!   cluster's members. The userinfo is split off (at the last `@`, percent-decoded) before
//!   the host is resolved, so a password is never looked up as a host name; messages show a
//!   URL with its password replaced ([`redact`]).
//! - **TLS**: rustls through `net::Tls` (the CA, an optional client certificate for etcd's
//!   `--client-cert-auth`). The server name each certificate must carry is the host of that
//!   member's URL (an IP address works: rustls checks IP SANs), unless one is given.
//! - **Authentication**: a token from `POST /v3/auth/authenticate`, sent as the
//!   `Authorization` header of every request. etcd's simple tokens expire after
//!   `--auth-token-ttl` (300 s) without use, and a change to users or roles makes older tokens
//!   "old revision": a request refused for either reason authenticates again once and is
//!   retried. The token is shared by every connection of one client (a store, a `--coord`),
//!   so a worker's connection that finds it refused takes a newer one if another already
//!   authenticated; that exchange takes a lock, but only on that error path.
//!
//! Kept apart from the HTTP client (`mod.rs`): this is setup and error-path code, the client
//! is the measured path. Passwords and key files come from the user's own flags, options,
//! files or environment, never from a reply.

use super::Http;
use crate::store::kv::RawError;
use crate::store::net::{self, Conn, Tls};
use crate::store::ErrorKind;
use rustls::pki_types::ServerName;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The environment variable of the `etcd` store's password (`user=`).
pub const STORE_PASSWORD_ENV: &str = "KVMETER_ETCD_PASSWORD";
/// The environment variable of `--coord-user`'s password.
pub const COORD_PASSWORD_ENV: &str = "KVMETER_COORD_PASSWORD";

/// Longest password file read (a password is a line; a larger file is a mistake).
const MAX_PASSWORD_FILE: u64 = 4096;
/// Longest token accepted from etcd (simple tokens are ~20 bytes, JWTs a few hundred).
const MAX_TOKEN: usize = 4096;

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

/// How the user names each setting, for messages (`--coord-ca`, `--store-opt tls_ca=`).
pub struct Names {
    pub ca: &'static str,
    pub cert: &'static str,
    pub key: &'static str,
    pub server_name: &'static str,
    pub user: &'static str,
    pub password: &'static str,
}

pub static STORE_NAMES: Names = Names {
    ca: "--store-opt tls_ca=",
    cert: "--store-opt tls_cert=",
    key: "--store-opt tls_key=",
    server_name: "--store-opt tls_server_name=",
    user: "--store-opt user=",
    password: "--store-opt password_file= or KVMETER_ETCD_PASSWORD",
};

pub static COORD_NAMES: Names = Names {
    ca: "--coord-ca ",
    cert: "--coord-cert ",
    key: "--coord-key ",
    server_name: "--coord-server-name ",
    user: "--coord-user ",
    password: "--coord-password-file or KVMETER_COORD_PASSWORD",
};

/// What TLS needs: PEM files (read when [`Access::new`] runs, so a missing one is an error
/// before anything is created).
pub struct TlsFiles<'a> {
    pub ca: &'a str,
    /// Client certificate and key, for etcd's `--client-cert-auth`.
    pub client: Option<(&'a str, &'a str)>,
    /// The name every member's certificate must carry; `None`: each URL's host.
    pub server_name: Option<&'a str>,
}

/// A user and password for etcd's authentication; `source` says where the password came from.
pub struct Credentials {
    pub user: String,
    pub password: String,
    pub source: String,
}

struct TlsAccess {
    tls: Tls,
    /// The server name for each member (from its URL), when no single name was given.
    names: Vec<(SocketAddr, ServerName<'static>)>,
}

/// How one client (a store, a `--coord`) reaches etcd: TLS, credentials and the shared token.
pub struct Access {
    tls: Option<TlsAccess>,
    creds: Option<Credentials>,
    /// The latest token any connection got.
    token: Mutex<Vec<u8>>,
    pub(super) names: &'static Names,
}

impl Access {
    /// Plain http, no authentication (kvmeter's own managed etcd).
    pub fn plain() -> Arc<Access> {
        Arc::new(Access {
            tls: None,
            creds: None,
            token: Mutex::new(Vec::new()),
            names: &STORE_NAMES,
        })
    }

    /// Reads the certificate files (errors name the setting and the file).
    pub fn new(
        tls: Option<TlsFiles>,
        creds: Option<Credentials>,
        targets: &[Target],
        names: &'static Names,
    ) -> Result<Arc<Access>, String> {
        let tls = match tls {
            None => None,
            Some(f) => {
                let first = f
                    .server_name
                    .or(targets.first().map(|t| t.host.as_str()))
                    .unwrap_or("localhost");
                let tls = Tls::new(f.ca, f.client, first).map_err(|e| rename(&e, names))?;
                let mut per_member = vec![];
                if f.server_name.is_none() {
                    for t in targets {
                        let n = ServerName::try_from(t.host.clone()).map_err(|e| {
                            format!(
                                "'{}' is not a name a TLS certificate can carry ({e}); give {}NAME",
                                t.host, names.server_name
                            )
                        })?;
                        per_member.push((t.addr, n));
                    }
                }
                Some(TlsAccess {
                    tls,
                    names: per_member,
                })
            }
        };
        Ok(Arc::new(Access {
            tls,
            creds,
            token: Mutex::new(Vec::new()),
            names,
        }))
    }

    pub fn is_tls(&self) -> bool {
        self.tls.is_some()
    }

    pub fn user(&self) -> Option<&str> {
        self.creds.as_ref().map(|c| c.user.as_str())
    }

    /// Connects to `addr`, with the TLS handshake where TLS is on; the error explains itself.
    pub(super) fn connect(&self, addr: SocketAddr, timeout: Duration) -> Result<Conn, String> {
        let tls = self.tls.as_ref().map(|t| {
            let name = t
                .names
                .iter()
                .find(|(a, _)| *a == addr)
                .map(|(_, n)| n.clone())
                // A member found otherwise than by its URL: its address is the name.
                .unwrap_or_else(|| {
                    if t.names.is_empty() {
                        t.tls.server_name.clone()
                    } else {
                        ServerName::IpAddress(addr.ip().into())
                    }
                });
            Tls {
                config: t.tls.config.clone(),
                server_name: name,
            }
        });
        Conn::connect_with(addr, timeout, tls.as_ref()).map_err(|e| self.explain_io(addr, &e))
    }

    #[cold]
    fn explain_io(&self, addr: SocketAddr, e: &std::io::Error) -> String {
        let inner = e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>());
        match (inner, &self.tls) {
            (Some(r @ rustls::Error::InvalidCertificate(why)), _) => {
                use rustls::CertificateError as C;
                let hint = match why {
                    C::NotValidForName | C::NotValidForNameContext { .. } => format!(
                        "it must name the host of the URL (or give {}NAME)",
                        self.names.server_name
                    ),
                    C::UnknownIssuer | C::BadSignature => {
                        format!("is {}FILE the CA that signed it?", self.names.ca)
                    }
                    _ => "is it valid now?".to_string(),
                };
                format!("TLS: etcd's certificate at {addr} is refused: {r}; {hint}")
            }
            (Some(r), _) => format!("TLS handshake with etcd at {addr} failed: {r}"),
            (None, Some(_))
                if e.kind() == std::io::ErrorKind::UnexpectedEof
                    || e.kind() == std::io::ErrorKind::ConnectionReset =>
            {
                format!("TLS handshake with etcd at {addr}: the server closed the connection (does it serve plain http? then use an http:// URL)")
            }
            _ => format!("cannot connect to etcd at {addr}: {e}"),
        }
    }

    /// A connect-time failure (the first requests), with what to do about it.
    #[cold]
    pub fn explain(&self, message: &str) -> String {
        let n = self.names;
        let hint = if message.contains("user name is empty") {
            format!(
                "etcd has authentication enabled: give {}USER and its password ({})",
                n.user, n.password
            )
        } else if message.contains("invalid user ID or password") {
            format!(
                "etcd refused user '{}': wrong user name or password (the password from {})",
                self.user().unwrap_or(""),
                self.creds.as_ref().map_or("nowhere", |c| c.source.as_str())
            )
        } else if message.contains("permission denied") {
            format!(
                "etcd user '{}' may not use these keys: grant it a role with readwrite on them",
                self.user().unwrap_or("")
            )
        } else if message.contains("authentication is not enabled") {
            format!(
                "etcd has no authentication enabled: leave out {}",
                n.user.trim_end()
            )
        } else if message.contains("fatal alert") && self.is_tls() {
            format!(
                "etcd refused the TLS connection (it asks for a client certificate: give {}FILE and {}FILE, signed by a CA it trusts)",
                n.cert, n.key
            )
        } else if message.contains("closed the connection") && !self.is_tls() {
            format!(
                "the server closed the connection without an answer (an etcd that serves TLS does this to plain http: use an https:// URL and {}FILE)",
                n.ca
            )
        } else {
            return message.to_string();
        };
        format!("{hint} [{}]", message.trim())
    }

    fn shared_token(&self) -> Vec<u8> {
        self.token.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// `net::Tls`'s messages name Redis's options; say the setting the user gave.
fn rename(e: &str, n: &Names) -> String {
    for (from, to) in [
        ("tls_cert/tls_key: ", format!("{}/{}: ", n.cert, n.key)),
        ("tls_ca=", n.ca.to_string()),
        ("tls_cert=", n.cert.to_string()),
        ("tls_key=", n.key.to_string()),
        ("tls_server_name=", n.server_name.to_string()),
    ] {
        if let Some(rest) = e.strip_prefix(from) {
            return format!("{to}{rest}");
        }
    }
    e.to_string()
}

/// A password from a file (its first line; bounded) with the setting's name in errors.
pub fn read_password_file(path: &str, setting: &str) -> Result<String, String> {
    use std::io::Read;
    let f = std::fs::File::open(path).map_err(|e| format!("{setting}{path}: {e}"))?;
    let mut text = String::new();
    f.take(MAX_PASSWORD_FILE + 1)
        .read_to_string(&mut text)
        .map_err(|e| format!("{setting}{path}: {e}"))?;
    if text.len() as u64 > MAX_PASSWORD_FILE {
        return Err(format!(
            "{setting}{path}: longer than {MAX_PASSWORD_FILE} bytes; expected the password on one line"
        ));
    }
    let pw = text.lines().next().unwrap_or("").to_string();
    if pw.is_empty() {
        return Err(format!(
            "{setting}{path}: empty; expected the password on its first line"
        ));
    }
    Ok(pw)
}

/// etcd refused the token held (expired, or issued before users or roles changed).
fn token_refused(message: &str) -> bool {
    message.contains("invalid auth token") || message.contains("revision of auth store is old")
}

impl Http {
    /// Sends a request with the token (authenticating first if this client has none yet);
    /// when etcd refuses the token, takes a newer one or authenticates again, and retries once.
    pub(super) fn call(
        &mut self,
        method: &[u8],
        path: &[u8],
        body: &[u8],
    ) -> Result<&[u8], RawError> {
        if self.token.is_empty() && self.access.creds.is_some() {
            self.refresh()?;
        }
        let r = self.request(method, path, body).map(|_| ());
        match r {
            Ok(()) => Ok(&self.body),
            Err(e) if self.access.creds.is_some() && token_refused(&e.message) => {
                self.refresh()?;
                self.request(method, path, body)
            }
            Err(e) => Err(e),
        }
    }

    /// Takes the shared token if another connection got a newer one than ours, else
    /// authenticates.
    #[cold]
    fn refresh(&mut self) -> Result<(), RawError> {
        let shared = self.access.shared_token();
        if !shared.is_empty() && shared != self.token {
            self.token = shared;
            return Ok(());
        }
        self.authenticate()
    }

    #[cold]
    fn authenticate(&mut self) -> Result<(), RawError> {
        let Some(c) = &self.access.creds else {
            return Ok(());
        };
        let body = serde_json::json!({"name": c.user, "password": c.password}).to_string();
        let user = c.user.clone();
        // etcd's error replies end with a trailer that `request` leaves unread: start on a
        // fresh connection (this runs at most once per token lifetime).
        self.conn.broken = true;
        self.token.clear();
        let r = self.request(b"POST", b"/v3/auth/authenticate", body.as_bytes());
        let reply = r.map_err(|e| {
            RawError::new(
                e.kind,
                e.fatal,
                format!("etcd: authenticating as '{user}': {}", e.message),
            )
        })?;
        let token = serde_json::from_slice::<serde_json::Value>(reply)
            .ok()
            .and_then(|v| v["token"].as_str().map(str::to_string))
            .filter(|t| {
                !t.is_empty() && t.len() <= MAX_TOKEN && t.bytes().all(|b| b.is_ascii_graphic())
            })
            .ok_or_else(|| {
                RawError::new(
                    ErrorKind::Other,
                    false,
                    format!("etcd: authenticating as '{user}': no usable token in the reply (at most {MAX_TOKEN} printable characters expected)"),
                )
            })?;
        self.token = token.into_bytes();
        *self.access.token.lock().unwrap_or_else(|p| p.into_inner()) = self.token.clone();
        Ok(())
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

    #[test]
    fn password_files_are_bounded_and_one_line() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("pw");
        std::fs::write(&p, "s3cret\n").unwrap();
        let path = p.to_str().unwrap();
        assert_eq!(read_password_file(path, "--x ").unwrap(), "s3cret");
        std::fs::write(&p, "\n").unwrap();
        assert!(read_password_file(path, "--x ")
            .unwrap_err()
            .contains("empty"));
        std::fs::write(&p, vec![b'a'; 5000]).unwrap();
        assert!(read_password_file(path, "--x ")
            .unwrap_err()
            .contains("longer than"));
        let e = read_password_file("/nonexistent/pw", "--x ").unwrap_err();
        assert!(e.starts_with("--x /nonexistent/pw: "), "{e}");
    }
}
