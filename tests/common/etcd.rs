//! etcd for the tests: one builder (`Etcd`) for every member set a test starts — one member
//! or three, clients over plain http or TLS with client certificates, extra flags (a quota, a
//! token TTL), a plain-http metrics listener — the certificates TLS needs (made with the
//! openssl command line: a CA, a server certificate for IP 127.0.0.1, a client certificate),
//! and a client for etcd's JSON gateway to read its books.

use super::{free_port, Proc};
use serde_json::Value;
use std::io::{Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A POST to etcd's JSON gateway (the first member that answers); the reply's JSON.
pub fn etcd_post(url: &str, path: &str, body: &str) -> Option<Value> {
    url.split(',').find_map(|u| etcd_post_one(u, path, body))
}

pub fn etcd_post_one(url: &str, path: &str, body: &str) -> Option<Value> {
    let hostport = url.trim_start_matches("http://");
    let mut s = std::net::TcpStream::connect(hostport).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(3))).ok()?;
    write!(
        s,
        "POST {path} HTTP/1.1\r\nHost: etcd\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    let at = text.find("\r\n\r\n")? + 4;
    let body = &text[at..];
    // A chunked reply: the JSON is the line between the chunk sizes.
    let json_text = if text[..at].to_ascii_lowercase().contains("chunked") {
        body.lines().nth(1)?.to_string()
    } else {
        body.to_string()
    };
    serde_json::from_str(&json_text).ok()
}

/// Keys under /kvmeter/ in etcd (every run's).
pub fn keys_left(url: &str) -> u64 {
    // base64 of "/kvmeter/" and of "/kvmeter0" (the range end).
    let r = etcd_post(
        url,
        "/v3/kv/range",
        r#"{"key":"L2t2bWV0ZXIv","range_end":"L2t2bWV0ZXIw","count_only":true}"#,
    )
    .expect("etcd answers");
    r["count"]
        .as_str()
        .and_then(|c| c.parse().ok())
        .or_else(|| r["count"].as_u64())
        .unwrap_or(0)
}

/// An etcd cluster of `members` on loopback; returns the processes and the client URL list.
pub fn etcd(dir: &Path, members: usize) -> (Vec<Proc>, String) {
    etcd_with(dir, members, &[])
}

/// As `etcd`, each member started with `extra` flags besides (e.g. a backend quota).
pub fn etcd_with(dir: &Path, members: usize, extra: &[&str]) -> (Vec<Proc>, String) {
    let m = Etcd::new(dir, members).args(extra).start();
    let url = m.url();
    (m.procs, url)
}

/// A CA, and a server and a client certificate it signs (P-256 keys: quick to make), as paths.
pub struct Certs {
    pub ca: String,
    pub server_cert: String,
    pub server_key: String,
    pub client_cert: String,
    pub client_key: String,
}

pub fn openssl(dir: &Path, args: &[&str]) {
    let o = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("openssl is installed (scripts/setup.sh)");
    assert!(
        o.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// `ca.pem`, `server.pem`/`.key` (for IP 127.0.0.1, server and client use) and
/// `client.pem`/`.key` in `dir`, the CA named `ca_name`.
pub fn certs(dir: &Path, ca_name: &str) -> Certs {
    let ec = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
    let ca = format!("req -x509 {ec} -keyout ca.key -out ca.pem -days 2");
    let mut a: Vec<String> = ca.split_whitespace().map(str::to_string).collect();
    a.extend(["-subj".to_string(), format!("/CN={ca_name}")]);
    openssl(dir, &a.iter().map(String::as_str).collect::<Vec<_>>());
    for (name, ext) in [
        (
            "server",
            "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n",
        ),
        ("client", "extendedKeyUsage=clientAuth\n"),
    ] {
        let req = format!("req {ec} -keyout {name}.key -out {name}.csr");
        let mut a: Vec<String> = req.split_whitespace().map(str::to_string).collect();
        a.extend(["-subj".to_string(), format!("/CN=kvmeter test {name}")]);
        openssl(dir, &a.iter().map(String::as_str).collect::<Vec<_>>());
        std::fs::write(dir.join(format!("{name}.cnf")), ext).unwrap();
        let sign = format!("x509 -req -in {name}.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out {name}.pem -days 2 -extfile {name}.cnf");
        openssl(dir, &sign.split_whitespace().collect::<Vec<_>>());
    }
    let p = |f: &str| dir.join(f).display().to_string();
    Certs {
        ca: p("ca.pem"),
        server_cert: p("server.pem"),
        server_key: p("server.key"),
        client_cert: p("client.pem"),
        client_key: p("client.key"),
    }
}

/// etcd members to start on loopback: member `i` is named `m{i}`, keeps its data in
/// `dir/etcd{i}` and logs to `dir/etcd{i}.log`; peers talk plain http.
pub struct Etcd<'a> {
    dir: &'a Path,
    members: usize,
    tls: Option<&'a Certs>,
    extra: Vec<String>,
    metrics: bool,
}

/// Started members: their processes and ports (client, and metrics where asked for).
pub struct Members {
    pub procs: Vec<Proc>,
    pub clients: Vec<u16>,
    pub metrics: Vec<u16>,
    scheme: &'static str,
    dir: std::path::PathBuf,
}

impl Members {
    /// Every member's client URL, comma-separated.
    pub fn url(&self) -> String {
        self.clients
            .iter()
            .map(|c| format!("{}://127.0.0.1:{c}", self.scheme))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// What went wrong, with the last lines of every member's log.
    fn failure(&self, what: &str) -> String {
        let mut out = what.to_string();
        for i in 0..self.procs.len() {
            let log = self.log(i);
            let lines: Vec<&str> = log.lines().collect();
            let tail = lines[lines.len().saturating_sub(8)..].join("\n  ");
            out.push_str(&format!("\n--- etcd{i}.log (last lines)\n  {tail}"));
        }
        out
    }

    /// Member `i`'s log so far.
    pub fn log(&self, i: usize) -> String {
        std::fs::read_to_string(self.dir.join(format!("etcd{i}.log"))).unwrap_or_default()
    }
}

impl<'a> Etcd<'a> {
    pub fn new(dir: &'a Path, members: usize) -> Self {
        Etcd {
            dir,
            members,
            tls: None,
            extra: vec![],
            metrics: false,
        }
    }

    /// Clients over TLS with client certificates (`--client-cert-auth`).
    pub fn tls(mut self, certs: &'a Certs) -> Self {
        self.tls = Some(certs);
        self
    }

    /// Flags every member gets besides.
    pub fn args(mut self, extra: &[&str]) -> Self {
        self.extra.extend(extra.iter().map(|s| s.to_string()));
        self
    }

    /// A plain-http metrics listener on each member (`Members::metrics`).
    pub fn metrics(mut self) -> Self {
        self.metrics = true;
        self
    }

    /// Starts the members and waits (at most 60 s: a loaded 2-CPU CI machine runs other
    /// servers' tests beside this) until each logs that it serves clients and, over plain
    /// http, a read goes through (the group has a leader). A member that exits before that
    /// (its port was taken between `free_port` and etcd's bind) starts the group again on
    /// new ports, at most three times; the panic carries every member's log tail.
    pub fn start(self) -> Members {
        let mut why = String::new();
        for _ in 0..3 {
            match self.try_start() {
                Ok(m) => return m,
                Err(e) => why = e,
            }
        }
        panic!("{why}");
    }

    fn try_start(&self) -> Result<Members, String> {
        let n = self.members;
        let ports: Vec<[u16; 3]> = (0..n)
            .map(|_| [free_port(), free_port(), free_port()])
            .collect();
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        let cluster: Vec<String> = ports
            .iter()
            .enumerate()
            .map(|(i, p)| format!("m{i}=http://127.0.0.1:{}", p[1]))
            .collect();
        let mut procs = vec![];
        for (i, [client, peer, metrics]) in ports.iter().enumerate() {
            let client_url = format!("{scheme}://127.0.0.1:{client}");
            let peer_url = format!("http://127.0.0.1:{peer}");
            let data = self.dir.join(format!("etcd{i}"));
            // An earlier try's members were killed; their data names the old ports.
            let _ = std::fs::remove_dir_all(&data);
            let mut args: Vec<String> = format!(
                "--name m{i} --data-dir {} --listen-client-urls {client_url} --advertise-client-urls \
                 {client_url} --listen-peer-urls {peer_url} --initial-advertise-peer-urls {peer_url} \
                 --initial-cluster {} --initial-cluster-state new",
                data.display(),
                cluster.join(",")
            )
            .split_whitespace()
            .map(str::to_string)
            .collect();
            if self.metrics {
                args.push("--listen-metrics-urls".into());
                args.push(format!("http://127.0.0.1:{metrics}"));
            }
            if let Some(c) = self.tls {
                for (flag, v) in [
                    ("--cert-file", &c.server_cert),
                    ("--key-file", &c.server_key),
                    ("--trusted-ca-file", &c.ca),
                ] {
                    args.extend([flag.to_string(), v.clone()]);
                }
                args.push("--client-cert-auth".into());
            }
            args.extend(self.extra.iter().cloned());
            let log = std::fs::File::create(self.dir.join(format!("etcd{i}.log"))).unwrap();
            let c = Command::new("etcd")
                .args(&args)
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()
                .expect("etcd (Debian's etcd-server) is installed");
            procs.push(Proc(c));
        }
        let m = Members {
            procs,
            clients: ports.iter().map(|p| p[0]).collect(),
            metrics: if self.metrics {
                ports.iter().map(|p| p[2]).collect()
            } else {
                vec![]
            },
            scheme,
            dir: self.dir.to_path_buf(),
        };
        let mut m = m;
        let t = Instant::now();
        let deadline = Duration::from_secs(60);
        let started =
            |m: &Members| (0..n).all(|i| m.log(i).contains("ready to serve client requests"));
        while !started(&m) {
            if m.procs
                .iter_mut()
                .any(|p| matches!(p.0.try_wait(), Ok(Some(_))))
            {
                return Err(m.failure("an etcd member exited before it served clients"));
            }
            if t.elapsed() > deadline {
                return Err(m.failure("etcd did not start within 60 s"));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        if self.tls.is_none() {
            let url = m.url();
            while etcd_post(&url, "/v3/kv/range", r#"{"key":"AA=="}"#)
                .and_then(|v| v.get("header").cloned())
                .is_none()
            {
                if t.elapsed() > deadline {
                    return Err(m.failure("etcd has no leader after 60 s"));
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        Ok(m)
    }
}
