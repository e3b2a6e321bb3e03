//! Securing kvmeter's etcd clients — the `etcd` store and `dist`'s coordination channel
//! (`--coord`): client URLs, TLS and etcd's own authentication.
//!
//! - **URLs**: `url.rs` (the userinfo split off before the host is resolved).
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
//! Kept apart from the HTTP client (`http.rs`): this is setup and error-path code, the client
//! is the measured path. Passwords and key files come from the user's own flags, options,
//! files or environment, never from a reply.

pub use super::url::{parse_urls, redact, Scheme, Target, Urls};
use crate::error::UsageError;
use crate::store::net::{Conn, Tls};
use crate::store::StoreOptions;
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
    pub(super) creds: Option<Credentials>,
    /// The latest token any connection got.
    pub(super) token: Mutex<Vec<u8>>,
    pub(super) names: &'static Names,
    /// Whether [`Access::explain`] adds hints (not for kvmeter's own etcd).
    hints: bool,
}

impl Access {
    /// Plain http, no authentication (kvmeter's own managed etcd).
    pub fn plain() -> Arc<Access> {
        Arc::new(Access {
            tls: None,
            creds: None,
            token: Mutex::new(Vec::new()),
            names: &STORE_NAMES,
            hints: false,
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
            hints: true,
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
        let hint = if !self.hints {
            return message.to_string();
        } else if message.contains("user name is empty") {
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
}

/// The members of addr= (`None`: managed).
fn targets(o: &StoreOptions) -> Result<Option<Urls>, UsageError> {
    if o.str("addr").is_empty() {
        return Ok(None);
    }
    let urls =
        parse_urls(o.str("addr")).map_err(|e| UsageError::new(format!("--store-opt addr={e}")))?;
    if urls.user.is_some() {
        return Err(UsageError::new(format!(
            "--store-opt addr={}: no user or password in addr (it is recorded in the manifest and the plan): give user=USER and password_file=FILE or {}",
            redact(o.str("addr")),
            STORE_PASSWORD_ENV
        )));
    }
    Ok(Some(urls))
}

/// TLS (`tls=true` or https:// in addr) and etcd's authentication (`user=`), from the user's
/// own options and environment; the files are read here, before anything is created.
pub(super) fn store_access(o: &StoreOptions) -> Result<Arc<Access>, UsageError> {
    let Some(urls) = targets(o)? else {
        for k in ["tls_ca", "tls_cert", "tls_key", "user", "password_file"] {
            if !o.str(k).is_empty() {
                return Err(UsageError::new(format!(
                    "--store-opt {k}= is for your own etcd (addr=https://HOST:PORT); the etcd kvmeter starts serves plain http on loopback"
                )));
            }
        }
        if o.bool("tls")? {
            return Err(UsageError::new("--store-opt tls=true is for your own etcd (addr=https://HOST:PORT); the etcd kvmeter starts serves plain http on loopback"));
        }
        return Ok(Access::plain());
    };
    let tls = o.bool("tls")? || urls.scheme == Scheme::Https;
    if tls && urls.scheme == Scheme::Http {
        return Err(UsageError::new(format!(
            "--store-opt tls=true and addr={}: an http:// URL is plain; write https://",
            o.str("addr")
        )));
    }
    let (ca, cert, key) = (o.str("tls_ca"), o.str("tls_cert"), o.str("tls_key"));
    if tls && ca.is_empty() {
        return Err(UsageError::new("--store-opt tls=true (or https:// in addr) needs tls_ca=FILE (PEM CA certificates that sign etcd's certificate)"));
    }
    let any_file = !(ca.is_empty() && cert.is_empty() && key.is_empty());
    if !tls && any_file {
        return Err(UsageError::new(
            "--store-opt tls_ca, tls_cert and tls_key need TLS: write https:// in addr (or tls=true)",
        ));
    }
    if cert.is_empty() != key.is_empty() {
        return Err(UsageError::new(
            "--store-opt tls_cert and tls_key go together: give both or neither",
        ));
    }
    let files = tls.then(|| TlsFiles {
        ca,
        client: (!cert.is_empty()).then_some((cert, key)),
        server_name: Some(o.str("tls_server_name")).filter(|n| !n.is_empty()),
    });
    let creds = match (o.str("user"), o.str("password_file")) {
        ("", "") => None,
        ("", _) => {
            return Err(UsageError::new(
                "--store-opt password_file= needs user=USER (etcd's user)",
            ))
        }
        (user, "") => {
            let password = std::env::var(STORE_PASSWORD_ENV).map_err(|_| {
                UsageError::new(format!(
                    "--store-opt user={user}: no password: set {} or give password_file=FILE",
                    STORE_PASSWORD_ENV
                ))
            })?;
            Some(Credentials {
                user: user.to_string(),
                password,
                source: STORE_PASSWORD_ENV.to_string(),
            })
        }
        (user, file) => Some(Credentials {
            user: user.to_string(),
            password: read_password_file(file, "--store-opt password_file=")
                .map_err(UsageError::new)?,
            source: format!("password_file={file}"),
        }),
    };
    Access::new(files, creds, &urls.targets, &STORE_NAMES).map_err(UsageError::new)
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

#[cfg(test)]
mod tests {
    use super::*;

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
