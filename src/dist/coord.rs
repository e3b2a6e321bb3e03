//! The keys of one distributed run in etcd v3 (`dist` module header lists them), through the
//! JSON gateway client the etcd store uses (`store::etcd::Gateway`): put, create-if-absent,
//! get, range and delete by prefix, leases. Off the measured path: a few requests a second.
//!
//! Reads are serializable (served by the member asked, no round of the Raft group): polling
//! then costs etcd no ReadIndex, which on a CPU-starved member (a loaded client host sharing
//! its CPUs) took seconds here and let leases expire. A stale read only delays what the
//! coordinator sees: a deleted interval seen again is ignored, a new key seen late is waited
//! for, and a lease's expiry is etcd's own decision either way.

use super::seal::{Seal, Unsealed};
use crate::error::UsageError;
use crate::store::etcd::Gateway;
use base64::Engine;
use serde_json::{json, Value};
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

/// `--coord` endpoints: `http://host:port` or `host:port`, comma-separated (a cluster's members).
pub fn endpoints(url: &str) -> Result<Vec<std::net::SocketAddr>, UsageError> {
    let bad = |why: String| UsageError::new(format!("--coord {url}: {why}"));
    let mut list = Vec::new();
    for part in url.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        if part.starts_with("https://") {
            return Err(bad(
                "https is not supported; use etcd's plain http client URL (http://HOST:2379)"
                    .into(),
            ));
        }
        let hostport = part.trim_start_matches("http://").trim_end_matches('/');
        let a = crate::store::net::resolve(hostport).map_err(|e| {
            bad(format!(
                "expected http://HOST:PORT[,…] of etcd members: {e}"
            ))
        })?;
        list.push(a);
    }
    if list.is_empty() {
        return Err(bad("expected http://HOST:PORT[,…] of etcd members".into()));
    }
    Ok(list)
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
    pub fn connect(url: &str, job: &str) -> Result<Coord, UsageError> {
        let eps = endpoints(url)?;
        let prefix = prefix(job)?;
        let gw = Gateway::connect(&eps, Duration::from_secs(3))
            .map_err(|e| UsageError::new(format!("--coord {url}: cannot reach etcd: {e} (is etcd running there? give its client URL, e.g. http://HOST:2379)")))?;
        let mut c = Coord {
            gw,
            prefix,
            url: url.to_string(),
            bytes_sent: 0,
            seal: None,
            rejected: Vec::new(),
        };
        c.get("plan")
            .map_err(|e| UsageError::new(format!("--coord {url}: etcd does not answer: {e}")))?;
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
            eprintln!(
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
