//! The keep-alive HTTP/1.1 client of etcd's JSON gateway, written here: the worker's client
//! of the `etcd` store (`mod.rs`), the cluster's maintenance calls (`cluster.rs`) and `dist`'s
//! coordination channel (`Gateway`). A reply is framed by `frame.rs`, as on the engine, and
//! bounded by `max_reply`. The client follows the Raft leader and fails over across members;
//! with etcd's authentication it holds a token shared by every connection of one client
//! (`auth.rs` has the credentials and why a refused token is taken again once).

use super::auth::Access;
use super::frame;
use crate::store::kv::RawError;
use crate::store::net::{self, push_num, Conn};
use crate::store::ErrorKind;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Longest token accepted from etcd (simple tokens are ~20 bytes, JWTs a few hundred).
const MAX_TOKEN: usize = 4096;

/// Keep-alive HTTP/1.1 over `Conn`; the body of the latest reply is in `body`.
pub(super) struct Http {
    pub(super) conn: Conn,
    pub(super) body: Vec<u8>,
    pub(super) json: Vec<u8>,
    /// The most bytes one reply may hold (`max_reply`; the coordination channel's own).
    pub(super) max_reply: usize,
    pub(super) timeout: Duration,
    /// TLS and credentials (shared by the client's connections).
    pub(super) access: Arc<Access>,
    /// The authentication token sent with each request (empty: none yet, or no auth).
    pub(super) token: Vec<u8>,
    /// Every member's client address: a broken connection moves to the next one that accepts
    /// (a killed leader's clients go on with the rest of the group).
    pub(super) endpoints: Arc<[SocketAddr]>,
    /// After moving to a member that was not the leader (an election was under way): when to
    /// look for the leader again. Reads and writes through a follower cost it a round trip
    /// to the leader, so the client follows the leader.
    pub(super) find_leader_at: Option<Instant>,
}

impl Http {
    pub(super) fn connect(
        addr: SocketAddr,
        timeout: Duration,
        access: &Arc<Access>,
    ) -> Result<Http, RawError> {
        let conn = access
            .connect(addr, timeout)
            .map_err(|e| RawError::new(ErrorKind::Io, true, e))?;
        Ok(Http {
            conn,
            body: Vec::with_capacity(4096),
            json: Vec::with_capacity(4096),
            max_reply: net::DEFAULT_MAX_REPLY,
            timeout,
            access: access.clone(),
            token: Vec::new(),
            endpoints: std::sync::Arc::from([addr]),
            find_leader_at: None,
        })
    }

    /// Moves to the leader if another member leads now; looks again later while there is none.
    #[cold]
    pub(super) fn follow_leader(&mut self) {
        self.find_leader_at = None;
        match leader_endpoint(&self.endpoints, self.timeout, &self.access) {
            Some(l) if self.endpoints[l] == self.conn.addr => {}
            Some(l) => {
                if let Ok(c) = self.access.connect(self.endpoints[l], self.timeout) {
                    self.conn = c;
                }
            }
            None => self.find_leader_at = Some(Instant::now() + Duration::from_millis(200)),
        }
    }

    /// Reconnects: to the leader where one answers, else to the same member first, then to
    /// each other member in turn (and looks for the leader again shortly).
    #[cold]
    pub(super) fn reconnect(&mut self) -> Result<(), RawError> {
        if self.endpoints.len() > 1 {
            if let Some(l) = leader_endpoint(&self.endpoints, self.timeout, &self.access) {
                if let Ok(c) = self.access.connect(self.endpoints[l], self.timeout) {
                    self.conn = c;
                    return Ok(());
                }
            }
            self.find_leader_at = Some(Instant::now() + Duration::from_millis(200));
        }
        let n = self.endpoints.len();
        let at = self
            .endpoints
            .iter()
            .position(|a| *a == self.conn.addr)
            .unwrap_or(0);
        let mut last = String::new();
        for k in 0..n {
            let addr = self.endpoints[(at + k) % n];
            match self.access.connect(addr, self.timeout) {
                Ok(c) => {
                    self.conn = c;
                    return Ok(());
                }
                Err(e) => last = format!("reconnecting: {e}"),
            }
        }
        Err(RawError::new(ErrorKind::Io, true, last))
    }

    /// Sends a request with `body` and returns the reply's body (status 200 only).
    pub(super) fn request(
        &mut self,
        method: &[u8],
        path: &[u8],
        body: &[u8],
    ) -> Result<&[u8], RawError> {
        if self.conn.broken {
            self.reconnect()?;
        } else if self.find_leader_at.is_some_and(|t| Instant::now() >= t) {
            self.follow_leader();
        }
        let c = &mut self.conn;
        // Every connection the client opened (reconnects included) gets the bound.
        c.set_limit(self.max_reply);
        c.begin();
        let w = &mut c.wbuf;
        w.extend_from_slice(method);
        w.push(b' ');
        w.extend_from_slice(path);
        w.extend_from_slice(b" HTTP/1.1\r\nHost: etcd\r\nContent-Type: application/json\r\n");
        if !self.token.is_empty() {
            w.extend_from_slice(b"Authorization: ");
            w.extend_from_slice(&self.token);
            w.extend_from_slice(b"\r\n");
        }
        w.extend_from_slice(b"Content-Length: ");
        push_num(w, body.len());
        w.extend_from_slice(b"\r\n\r\n");
        w.extend_from_slice(body);
        c.send()?;
        // The reply is framed by `frame.rs`, as on the engine: a chunked error reply's trailer
        // is read with it, so the next request on this connection starts clean.
        let limit = c.limit();
        let body = &mut self.body;
        let ((status, range, close), at) =
            c.read_until(|b| match frame::frame(b, limit, body) {
                frame::Framed::More => Ok(None),
                frame::Framed::Broken(why) => Err(why),
                frame::Framed::Whole {
                    status,
                    used,
                    body,
                    close,
                } => Ok(Some(((status, body, close), used))),
            })?;
        if let Some(r) = range {
            self.body.clear();
            self.body
                .extend_from_slice(c.bytes(at.start + r.start..at.start + r.end));
        }
        if close {
            c.broken = true;
        }
        if status != 200 {
            return Err(http_error(status as usize, &self.body));
        }
        Ok(&self.body)
    }

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
                // A new token, then the request again on the same connection (once per token).
                self.refresh()?;
                self.request(method, path, body)
            }
            Err(e) => Err(e),
        }
    }

    /// Takes the shared token if another connection got a newer one than ours, else
    /// authenticates. The lock is held while authenticating (bounded by the timeout), so the
    /// workers that start together, or find the token refused together, authenticate once:
    /// etcd hashes the password with bcrypt for each.
    #[cold]
    pub(super) fn refresh(&mut self) -> Result<(), RawError> {
        let access = self.access.clone();
        let mut shared = access.token.lock().unwrap_or_else(|p| p.into_inner());
        if !shared.is_empty() && *shared != self.token {
            self.token.clone_from(&shared);
            return Ok(());
        }
        self.token = self.authenticate()?;
        shared.clone_from(&self.token);
        Ok(())
    }

    /// A new token for the credentials.
    #[cold]
    fn authenticate(&mut self) -> Result<Vec<u8>, RawError> {
        let Some(c) = &self.access.creds else {
            return Ok(Vec::new());
        };
        let body = serde_json::json!({"name": c.user, "password": c.password}).to_string();
        let user = c.user.clone();
        self.token.clear();
        let r = self
            .request(b"POST", b"/v3/auth/authenticate", body.as_bytes())
            .map(|_| ());
        if let Err(e) = r {
            return Err(RawError::new(
                e.kind,
                e.fatal,
                format!("etcd: authenticating as '{user}': {}", e.message),
            ));
        }
        let token = serde_json::from_slice::<serde_json::Value>(&self.body)
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
        Ok(token.into_bytes())
    }
}

#[cold]
pub(super) fn http_error(status: usize, body: &[u8]) -> RawError {
    let text = net::excerpt(body);
    let kind = if text.contains("too many requests") || status == 503 {
        ErrorKind::Busy
    } else if text.contains("space quota") {
        ErrorKind::Io
    } else {
        ErrorKind::Other
    };
    RawError::new(
        kind,
        kind == ErrorKind::Io,
        format!("etcd: HTTP {status}: {}", text.trim()),
    )
}

/// etcd refused the token held (expired, or issued before users or roles changed).
pub(super) fn token_refused(message: &str) -> bool {
    message.contains("invalid auth token") || message.contains("revision of auth store is old")
}

/// A member's own id, the leader it knows of and the Raft term (`None`: it did not answer).
/// (Maintenance status needs no authentication: no token is sent.)
pub(super) fn status(
    addr: SocketAddr,
    timeout: Duration,
    access: &Arc<Access>,
) -> Option<(String, String, u64)> {
    let mut h = Http::connect(addr, timeout, access).ok()?;
    let body = h.request(b"POST", b"/v3/maintenance/status", b"{}").ok()?;
    let v: serde_json::Value = serde_json::from_slice(body).ok()?;
    let text = |x: &serde_json::Value| x.as_str().map(str::to_string);
    let id = text(&v["header"]["member_id"])?;
    let leader = text(&v["leader"]).unwrap_or_default();
    let term = text(&v["raftTerm"])
        .or_else(|| text(&v["header"]["raft_term"]))
        .and_then(|t| t.parse().ok())
        .unwrap_or(0);
    Some((id, leader, term))
}

/// Which of `endpoints` leads (for the client's first connection).
pub(super) fn leader_endpoint(
    endpoints: &[SocketAddr],
    timeout: Duration,
    access: &Arc<Access>,
) -> Option<usize> {
    let t = timeout.min(Duration::from_millis(300));
    let all: Vec<_> = endpoints.iter().map(|a| status(*a, t, access)).collect();
    all.iter().position(|s| {
        s.as_ref()
            .is_some_and(|(id, leader, _)| !leader.is_empty() && id == leader)
    })
}

/// The most bytes one reply on the coordination channel may hold: a range over a distributed
/// run's keys (every agent's interval posts) is far above a store's `max_reply`.
const GATEWAY_MAX_REPLY: usize = 256 << 20;

/// etcd's v3 JSON gateway for kvmeter's own coordination (`dist`): any request, JSON in and
/// out, over the same keep-alive HTTP client the store uses, failing over across members.
pub struct Gateway(Http);

impl Gateway {
    /// Connects to the leader where one answers, else to the first member that accepts.
    pub fn connect(
        endpoints: &[SocketAddr],
        timeout: Duration,
        access: &Arc<Access>,
    ) -> Result<Gateway, String> {
        let mut order: Vec<SocketAddr> = endpoints.to_vec();
        if order.len() > 1 {
            if let Some(l) = leader_endpoint(&order, timeout, access) {
                order.swap(0, l);
            }
        }
        let mut last = String::from("no endpoint");
        for a in &order {
            match Http::connect(*a, timeout, access) {
                Ok(mut h) => {
                    h.endpoints = order.clone().into();
                    h.max_reply = GATEWAY_MAX_REPLY;
                    return Ok(Gateway(h));
                }
                Err(e) => last = e.message,
            }
        }
        Err(last)
    }

    /// POSTs `body` to `path` (e.g. /v3/kv/put); one retry on another member when the
    /// connection breaks. Returns the reply's JSON.
    pub fn post(
        &mut self,
        path: &str,
        body: &serde_json::Value,
    ) -> Result<serde_json::Value, String> {
        let text = body.to_string();
        let mut tries = 0;
        loop {
            let r = self
                .0
                .call(b"POST", path.as_bytes(), text.as_bytes())
                .map(serde_json::from_slice::<serde_json::Value>);
            match r {
                Ok(parsed) => {
                    return parsed.map_err(|e| format!("etcd {path}: reply is not JSON: {e}"))
                }
                Err(e) if tries < 2 && (self.0.conn.broken || e.kind == ErrorKind::Io) => {
                    self.0.conn.broken = true;
                    tries += 1;
                }
                Err(e) => return Err(format!("etcd {path}: {}", e.message)),
            }
        }
    }

    /// The member this client talks to now.
    pub fn addr(&self) -> SocketAddr {
        self.0.conn.addr
    }
}
