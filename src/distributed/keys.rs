//! The keys of one distributed run in etcd v3 (`dist` module header lists them), through the
//! JSON gateway client the etcd store uses (`store::etcd::Gateway`): put, create-if-absent,
//! get, range and delete by prefix, leases. Off the measured path: a few requests a second.
//!
//! Reads are serializable (served by the member asked, no round of the Raft group): polling
//! then costs etcd no ReadIndex, which on a CPU-starved member (a loaded client host sharing
//! its CPUs) took seconds here and let leases expire. A stale read only delays what the
//! coordinator sees: a deleted interval seen again is ignored, a new key seen late is waited
//! for, and a lease's expiry is etcd's own decision either way.
//!
//! How etcd is reached ([`CoordSpec`]: https://, a CA and client certificate, a user and
//! password) comes only from the flags and environment of the process itself (`store::etcd::
//! auth` does the work), resolved once before anything is created.

use super::seal::{Seal, Unsealed};
use crate::error::UsageError;
use crate::store::etcd::auth::{self, Access};
use crate::store::etcd::Gateway;
use base64::Engine;
use serde_json::{json, Value};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;

pub struct Coord {
    gw: Gateway,
    /// `/kvmeter/<job>/`
    prefix: String,
    pub url: String,
    /// Request bytes sent (paths and bodies), for BENCHMARKS' bytes-per-interval figure.
    pub bytes_sent: u64,
    /// Values are sealed on the way in and must verify on the way out (`seal`).
    seal: Option<Seal>,
    /// Values read that were dropped (no or a wrong MAC, oversized): key and why, for the
    /// caller to say once.
    rejected: Vec<(String, String)>,
}

/// A value larger than this is not kvmeter's (a plan is a few KB, an interval report 2-4 KB).
pub const MAX_VALUE: usize = 4 << 20;
/// Keys one listing returns at most (etcd's `limit`): a flood of keys cannot make a poll
/// unbounded; what is left is listed at the next poll once merged keys are deleted.
const MAX_LIST: u64 = 20_000;

/// The `--coord*` flags as given (cli/dist.rs).
#[derive(Debug, Default, Clone)]
pub struct CoordFlags {
    pub url: String,
    pub ca: Option<PathBuf>,
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
    pub server_name: Option<String>,
    pub user: Option<String>,
    pub password_file: Option<PathBuf>,
}

/// Where etcd is and how to reach it: members, TLS, credentials — checked, with the
/// certificate and password files read. Shown (`Display`) as the URL without its password.
#[derive(Clone)]
pub struct CoordSpec {
    shown: String,
    endpoints: Vec<std::net::SocketAddr>,
    access: Arc<Access>,
}

impl std::fmt::Display for CoordSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.shown)
    }
}

impl std::fmt::Debug for CoordSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CoordSpec({})", self.shown)
    }
}

impl CoordSpec {
    /// The first etcd member's address (where the coordinator's reports address is routed).
    pub fn first_endpoint(&self) -> Option<std::net::SocketAddr> {
        self.endpoints.first().copied()
    }

    /// Checks the flags and reads their files; `env` gives the environment (the password).
    pub fn resolve(
        f: &CoordFlags,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<CoordSpec, UsageError> {
        let shown = auth::redact(&f.url);
        let bad = |why: String| UsageError::new(format!("--coord {shown}: {why}"));
        let urls = auth::parse_urls(&f.url).map_err(|e| {
            bad(format!(
                "expected http[s]://[USER[:PASSWORD]@]HOST:PORT[,…] of etcd members: {e}"
            ))
        })?;
        let https = urls.scheme == auth::Scheme::Https;
        let path = |p: &Option<PathBuf>| p.as_ref().map(|p| p.display().to_string());
        let (ca, cert, key) = (path(&f.ca), path(&f.cert), path(&f.key));
        if !https && (ca.is_some() || cert.is_some() || key.is_some() || f.server_name.is_some()) {
            return Err(bad(
                "--coord-ca, --coord-cert, --coord-key and --coord-server-name are for TLS: write https:// URLs".into(),
            ));
        }
        if https && ca.is_none() {
            return Err(bad(
                "https:// needs --coord-ca FILE (the PEM CA certificate that signed etcd's)".into(),
            ));
        }
        if cert.is_some() != key.is_some() {
            return Err(UsageError::new(
                "--coord-cert and --coord-key go together: give both or neither",
            ));
        }
        let files = ca.as_deref().map(|ca| auth::TlsFiles {
            ca,
            client: cert.as_deref().zip(key.as_deref()),
            server_name: f.server_name.as_deref(),
        });
        let creds = credentials(f, &urls, &env)?;
        let access = Access::new(files, creds, &urls.targets, &auth::COORD_NAMES)
            .map_err(UsageError::new)?;
        Ok(CoordSpec {
            shown,
            endpoints: urls.addrs(),
            access,
        })
    }
}

/// The user (the URL's or --coord-user) and its password: the URL's, else
/// --coord-password-file's, else the environment's.
fn credentials(
    f: &CoordFlags,
    urls: &auth::Urls,
    env: &impl Fn(&str) -> Option<String>,
) -> Result<Option<auth::Credentials>, UsageError> {
    let user = match (&urls.user, &f.user) {
        (Some(a), Some(b)) if a != b => {
            return Err(UsageError::new(format!(
                "--coord-user {b}: the --coord URL names user '{a}'; give the user once"
            )))
        }
        (Some(u), _) | (None, Some(u)) => u.clone(),
        (None, None) => {
            if let Some(p) = &f.password_file {
                return Err(UsageError::new(format!(
                    "--coord-password-file {}: needs --coord-user USER",
                    p.display()
                )));
            }
            return Ok(None);
        }
    };
    if user.is_empty() {
        return Err(UsageError::new("--coord-user: expected a user name"));
    }
    let (password, source) = if let Some(p) = &urls.password {
        (p.clone(), "the --coord URL".to_string())
    } else if let Some(file) = &f.password_file {
        let file = file.display().to_string();
        let p =
            auth::read_password_file(&file, "--coord-password-file ").map_err(UsageError::new)?;
        (p, format!("--coord-password-file {file}"))
    } else if let Some(p) = env(auth::COORD_PASSWORD_ENV).filter(|p| !p.is_empty()) {
        (p, auth::COORD_PASSWORD_ENV.to_string())
    } else {
        return Err(UsageError::new(format!(
            "--coord-user {user}: no password: set {} or give --coord-password-file FILE",
            auth::COORD_PASSWORD_ENV
        )));
    };
    Ok(Some(auth::Credentials {
        user,
        password,
        source,
    }))
}

/// `/kvmeter/<job>/`; a job name is letters, digits, `-`, `_`, `.`.
pub fn prefix(job: &str) -> Result<String, UsageError> {
    if job.is_empty()
        || !job
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    {
        return Err(UsageError::new(format!(
            "--job '{job}': expected letters, digits, '-', '_' or '.'"
        )));
    }
    Ok(format!("/kvmeter/{job}/"))
}

fn b64(s: &str) -> String {
    B64.encode(s.as_bytes())
}

fn unb64(v: &Value) -> String {
    v.as_str()
        .and_then(|s| B64.decode(s).ok())
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default()
}

/// The key just past every key that starts with `p`.
fn range_end(p: &str) -> String {
    let mut b = p.as_bytes().to_vec();
    if let Some(last) = b.last_mut() {
        *last += 1;
    }
    String::from_utf8_lossy(&b).into_owned()
}

/// A JSON number that the gateway may send as a string (int64 fields).
fn int(v: &Value) -> Option<i64> {
    v.as_i64()
        .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
}

impl Coord {
    /// Connects and checks that etcd answers (a range on the prefix).
    pub fn connect(spec: &CoordSpec, job: &str) -> Result<Coord, UsageError> {
        let prefix = prefix(job)?;
        let gw = Gateway::connect(&spec.endpoints, Duration::from_secs(3), &spec.access).map_err(
            |e| {
                let hint = if e.starts_with("cannot connect") {
                    " (is etcd running there? give its client URL, e.g. http://HOST:2379)"
                } else {
                    ""
                };
                UsageError::new(format!(
                    "--coord {spec}: cannot reach etcd: {}{hint}",
                    spec.access.explain(&e)
                ))
            },
        )?;
        let mut c = Coord {
            gw,
            prefix,
            url: spec.shown.clone(),
            bytes_sent: 0,
            seal: None,
            rejected: Vec::new(),
        };
        c.get("plan").map_err(|e| {
            UsageError::new(format!(
                "--coord {spec}: etcd does not answer: {}",
                spec.access.explain(&e)
            ))
        })?;
        Ok(c)
    }

    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// Seals every value put from now on and drops every value read that does not verify.
    pub fn set_seal(&mut self, seal: Seal) {
        self.seal = Some(seal);
    }

    /// Values dropped since the last call: (key under the prefix, why).
    pub fn take_rejected(&mut self) -> Vec<(String, String)> {
        std::mem::take(&mut self.rejected)
    }

    /// Keeps a dropped value's key for `take_rejected` (a bounded list: a writer flooding
    /// forged keys cannot grow it).
    fn reject(&mut self, key: &str, why: String) {
        if self.rejected.len() < 256 {
            self.rejected.push((key.to_string(), why));
        }
    }

    fn sealed(&self, key: &str, value: &str) -> String {
        match &self.seal {
            Some(s) => s.seal(&format!("{}{key}", self.prefix), value),
            None => value.to_string(),
        }
    }

    /// A value as read: its body if it verifies (or no seal is set).
    fn opened(&self, key: &str, value: String) -> Result<String, String> {
        if value.len() > MAX_VALUE {
            return Err(format!(
                "{} bytes, over the {MAX_VALUE}-byte limit",
                value.len()
            ));
        }
        match &self.seal {
            None => Ok(value),
            Some(s) => s
                .open(&format!("{}{key}", self.prefix), &value)
                .map(str::to_string)
                .map_err(|e: Unsealed| e.to_string()),
        }
    }

    fn post(&mut self, path: &str, body: Value) -> Result<Value, String> {
        self.bytes_sent += (path.len() + body.to_string().len()) as u64;
        let t = std::time::Instant::now();
        let r = self.gw.post(path, &body);
        if t.elapsed() > Duration::from_secs(1) {
            errln!(
                "warning: dist: etcd {path} took {} ms ({})",
                t.elapsed().as_millis(),
                match &r {
                    Ok(_) => "answered".to_string(),
                    Err(e) => e.clone(),
                }
            );
        }
        r
    }

    pub fn put(&mut self, key: &str, value: &str, lease: Option<i64>) -> Result<(), String> {
        let value = self.sealed(key, value);
        let mut body = json!({"key": b64(&format!("{}{key}", self.prefix)), "value": b64(&value)});
        if let Some(l) = lease {
            body["lease"] = json!(l.to_string());
        }
        self.post("/v3/kv/put", body).map(|_| ())
    }

    /// Puts `key` only if it does not exist; otherwise returns the value it holds (`Err`:
    /// one that does not verify).
    pub fn create(
        &mut self,
        key: &str,
        value: &str,
        lease: Option<i64>,
    ) -> Result<Option<Result<String, String>>, String> {
        let k = b64(&format!("{}{key}", self.prefix));
        let value = self.sealed(key, value);
        let mut put = json!({"key": k, "value": b64(&value)});
        if let Some(l) = lease {
            put["lease"] = json!(l.to_string());
        }
        let body = json!({
            "compare": [{"key": k, "result": "EQUAL", "target": "CREATE", "create_revision": "0"}],
            "success": [{"request_put": put}],
            "failure": [{"request_range": {"key": k}}],
        });
        let r = self.post("/v3/kv/txn", body)?;
        if r["succeeded"].as_bool() == Some(true) {
            return Ok(None);
        }
        let held = unb64(&r["responses"][0]["response_range"]["kvs"][0]["value"]);
        Ok(Some(self.opened(key, held)))
    }

    /// The value under `key`: `None` when absent; `Some(Err(why))` when present but not
    /// verifiable (no seal, a wrong one, oversized).
    pub fn get_checked(&mut self, key: &str) -> Result<Option<Result<String, String>>, String> {
        let r = self.post(
            "/v3/kv/range",
            json!({"key": b64(&format!("{}{key}", self.prefix)), "serializable": true}),
        )?;
        Ok(r["kvs"]
            .as_array()
            .and_then(|k| k.first())
            .map(|kv| self.opened(key, unb64(&kv["value"]))))
    }

    /// The value under `key` if present and verified; one that does not verify is dropped
    /// (and kept for `take_rejected`).
    pub fn get(&mut self, key: &str) -> Result<Option<String>, String> {
        match self.get_checked(key)? {
            None => Ok(None),
            Some(Ok(v)) => Ok(Some(v)),
            Some(Err(why)) => {
                self.reject(key, why);
                Ok(None)
            }
        }
    }

    /// Every key under `prefix/<sub>` with its value, keys without the run's prefix, in key
    /// order.
    pub fn list(&mut self, sub: &str) -> Result<Vec<(String, String)>, String> {
        let p = format!("{}{sub}", self.prefix);
        let r = self.post(
            "/v3/kv/range",
            json!({"key": b64(&p), "range_end": b64(&range_end(&p)), "serializable": true,
                   "limit": MAX_LIST.to_string()}),
        )?;
        let mut out = Vec::new();
        for kv in r["kvs"].as_array().map(Vec::as_slice).unwrap_or_default() {
            let k = unb64(&kv["key"]);
            let Some(k) = k.get(self.prefix.len()..).map(str::to_string) else {
                continue;
            };
            match self.opened(&k, unb64(&kv["value"])) {
                Ok(v) => out.push((k, v)),
                Err(why) => self.reject(&k, why),
            }
        }
        Ok(out)
    }

    /// Deletes every key under `prefix/<sub>` ("" for the whole run).
    pub fn delete_all(&mut self, sub: &str) -> Result<u64, String> {
        let p = format!("{}{sub}", self.prefix);
        let r = self.post(
            "/v3/kv/deleterange",
            json!({"key": b64(&p), "range_end": b64(&range_end(&p))}),
        )?;
        Ok(int(&r["deleted"]).unwrap_or(0) as u64)
    }

    pub fn grant(&mut self, ttl_s: i64) -> Result<i64, String> {
        let r = self.post("/v3/lease/grant", json!({"TTL": ttl_s.to_string()}))?;
        int(&r["ID"]).ok_or_else(|| format!("etcd granted no lease: {r}"))
    }

    /// Renews the lease; `false` once it has expired.
    pub fn keepalive(&mut self, id: i64) -> Result<bool, String> {
        let r = self.post("/v3/lease/keepalive", json!({"ID": id.to_string()}))?;
        Ok(int(&r["result"]["TTL"]).unwrap_or(0) > 0)
    }

    pub fn revoke(&mut self, id: i64) -> Result<(), String> {
        self.post("/v3/lease/revoke", json!({"ID": id.to_string()}))
            .map(|_| ())
    }

    /// Every key under any run's prefix (`/kvmeter/`), for tests and `dist` checks.
    pub fn count_all_runs(&mut self) -> Result<usize, String> {
        let p = "/kvmeter/";
        let r = self.post(
            "/v3/kv/range",
            json!({"key": b64(p), "range_end": b64(&range_end(p)), "count_only": true}),
        )?;
        Ok(int(&r["count"]).unwrap_or(0) as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolve(f: CoordFlags, env: Option<&str>) -> Result<CoordSpec, String> {
        CoordSpec::resolve(&f, |k| {
            (k == auth::COORD_PASSWORD_ENV)
                .then(|| env.map(str::to_string))
                .flatten()
        })
        .map_err(|e| e.0)
    }

    fn url(u: &str) -> CoordFlags {
        CoordFlags {
            url: u.into(),
            ..Default::default()
        }
    }

    #[test]
    fn flags_that_do_not_fit_together_are_one_line() {
        let e = |f: CoordFlags, env: Option<&str>| resolve(f, env).unwrap_err();
        assert!(e(url("https://127.0.0.1:2379"), None).contains("needs --coord-ca"));
        let ca_on_http = CoordFlags {
            ca: Some("/x/ca.pem".into()),
            ..url("http://127.0.0.1:2379")
        };
        assert!(e(ca_on_http, None).contains("write https://"));
        let cert_alone = CoordFlags {
            ca: Some("/x/ca.pem".into()),
            cert: Some("/x/c.pem".into()),
            ..url("https://127.0.0.1:2379")
        };
        assert!(e(cert_alone, None).contains("go together"));
        let missing_ca = CoordFlags {
            ca: Some("/nonexistent/ca.pem".into()),
            ..url("https://127.0.0.1:2379")
        };
        assert!(e(missing_ca, None).starts_with("--coord-ca /nonexistent/ca.pem: "));
        let file_no_user = CoordFlags {
            password_file: Some("/x/pw".into()),
            ..url("127.0.0.1:2379")
        };
        assert!(e(file_no_user, None).contains("needs --coord-user"));
        let user = CoordFlags {
            user: Some("root".into()),
            ..url("http://127.0.0.1:2379")
        };
        assert!(e(user.clone(), None).contains("no password: set KVMETER_COORD_PASSWORD"));
        assert!(resolve(user, Some("pw")).is_ok());
        let two_users = CoordFlags {
            user: Some("other".into()),
            ..url("http://root:pw@127.0.0.1:2379")
        };
        assert!(e(two_users, None).contains("give the user once"));
    }

    #[test]
    fn the_url_shown_hides_its_password() {
        let s = resolve(url("http://root:hunter2@127.0.0.1:2379"), None).unwrap();
        assert_eq!(s.to_string(), "http://root:***@127.0.0.1:2379");
        assert_eq!(s.access.user(), Some("root"));
        // No port: refused without a lookup (no DNS query leaves the host).
        let e = resolve(url("http://root:hunter2@127.0.0.1"), None).unwrap_err();
        assert!(e.contains("root:***@") && !e.contains("hunter2"), "{e}");
        assert!(e.contains("'127.0.0.1'"), "{e}");
        // The environment's password is not asked for without a user.
        assert!(resolve(url("http://127.0.0.1:2379"), Some("pw")).is_ok());
    }
}
