//! etcd on the event-driven engine (`--store etcd --connections N --depth D`; issue 30): keep-
//! alive HTTP/1.1 connections to etcd's JSON gateway with requests pipelined, against a real
//! etcd the test starts on loopback. The counts are checked against etcd's own books, read by
//! the test: every put raises the store's revision by one, so a run's revision delta is its
//! puts, and the key count is the records inserted. With authentication the connections send a
//! token (a wrong password is one line before the phase; a token etcd stops accepting mid-run
//! breaks the connections, which authenticate again). A hostile HTTP server in the test
//! (garbage status line, a Content-Length past max_reply, header lines that never end)
//! costs protocol errors, never a hang or a panic. No timing is asserted.

use crate::common;

use common::etcd::{certs, Etcd};
use common::servers::Proc;
use common::{count, json, kvmeter, phase};
use serde_json::Value;
use std::io::{Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

const PASSWORD: &str = "engine-pw";

/// A one-member etcd on loopback (`extra` arguments added); its client port.
fn etcd(dir: &Path, extra: &[&str]) -> (Proc, u16) {
    let mut m = Etcd::new(dir, 1).args(extra).start();
    (m.procs.remove(0), m.clients[0])
}

/// A POST to etcd's gateway (optionally with a token): the status and the reply's JSON
/// (a chunked error reply's JSON is its one chunk). Status 0: no answer.
fn post(port: u16, path: &str, body: &str, token: Option<&str>) -> (u32, Value) {
    let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return (0, Value::Null);
    };
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let auth = token.map_or(String::new(), |t| format!("Authorization: {t}\r\n"));
    let req = format!(
        "POST {path} HTTP/1.1\r\nHost: etcd\r\n{auth}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let mut text = String::new();
    if s.write_all(req.as_bytes()).is_err() || s.read_to_string(&mut text).is_err() {
        return (0, Value::Null);
    }
    let status = text.get(9..12).and_then(|c| c.parse().ok()).unwrap_or(0);
    let at = text.find("\r\n\r\n").map_or(text.len(), |p| p + 4);
    let json = text[at..]
        .lines()
        .find(|l| l.starts_with('{'))
        .and_then(|l| serde_json::from_str(l).ok())
        .unwrap_or(Value::Null);
    (status, json)
}

/// The store's revision and how many keys it holds, from etcd itself.
fn revision_and_keys(port: u16, token: Option<&str>) -> (u64, u64) {
    let (st, v) = post(
        port,
        "/v3/kv/range",
        r#"{"key":"AA==","range_end":"AA==","count_only":true}"#,
        token,
    );
    assert_eq!(st, 200, "{v}");
    let n = |x: &Value| x.as_str().map_or(0, |s| s.parse().unwrap());
    (n(&v["header"]["revision"]), n(&v["count"]))
}

fn errors(p: &Value) -> u64 {
    p["errors"].as_u64().unwrap()
}

#[test]
fn two_hundred_connections_at_depth_4_match_etcds_own_revision_and_key_count() {
    let t = tempfile::tempdir().unwrap();
    let (_etcd, port) = etcd(t.path(), &[]);
    let (rev0, keys0) = revision_and_keys(port, None);
    assert_eq!(keys0, 0);
    let out = t.path().join("run");
    let o = kvmeter()
        .args(["run", "-P", "workloada", "--store", "etcd", "--store-opt"])
        .arg(format!("addr=http://127.0.0.1:{port}"))
        .args(["--connections", "200", "--depth", "4", "--threads", "2"])
        .args(["--records", "1000", "--ops", "6000", "--seed", "11"])
        .args(["-p", "readproportion=0.5", "-p", "updateproportion=0.3"])
        .args(["-p", "insertproportion=0.2", "-p", "fieldcount=4"])
        .args(["-p", "fieldlength=50", "-p", "dataintegrity=true"])
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{stderr}");
    let s = json(&out.join("summary.json"));
    let (load, run) = (phase(&s, "load"), phase(&s, "run"));
    assert_eq!(errors(load) + errors(run), 0, "{run}");
    assert_eq!(count(load, "INSERT"), 1000);
    let (reads, updates, inserts) = (
        count(run, "READ"),
        count(run, "UPDATE"),
        count(run, "INSERT"),
    );
    assert_eq!(reads + updates + inserts, 6000);
    assert!(reads > 0 && updates > 0 && inserts > 0, "{run}");
    // Every read's value (base64 in JSON, decoded) was the one derived from its key; an update
    // of one field read, merged and put the whole record.
    assert_eq!(run["ops"]["VERIFY"]["ok"].as_u64(), Some(reads));
    let e = &run["engine"];
    assert_eq!(
        (e["connections"].as_u64(), e["depth"].as_u64()),
        (Some(200), Some(4))
    );
    assert_eq!(e["reconnects"], 0);
    // etcd's books: one revision per put (load inserts, run updates and inserts), and the keys.
    let (rev1, keys1) = revision_and_keys(port, None);
    assert_eq!(rev1 - rev0, 1000 + updates + inserts);
    assert_eq!(keys1, 1000 + inserts);
}

/// A one-member etcd with authentication on (root user, simple tokens).
fn etcd_with_auth(dir: &Path) -> (Proc, u16) {
    let (p, port) = etcd(dir, &["--auth-token-ttl", "2"]);
    let user = serde_json::json!({"name": "root", "password": PASSWORD}).to_string();
    for (path, body) in [
        ("/v3/auth/user/add", user.as_str()),
        ("/v3/auth/user/grant", r#"{"user":"root","role":"root"}"#),
        ("/v3/auth/enable", "{}"),
    ] {
        let (st, reply) = post(port, path, body, None);
        assert_eq!(st, 200, "{path}: {reply}");
    }
    (p, port)
}

fn root_token(port: u16) -> String {
    let user = serde_json::json!({"name": "root", "password": PASSWORD}).to_string();
    let (st, v) = post(port, "/v3/auth/authenticate", &user, None);
    assert_eq!(st, 200, "{v}");
    v["token"].as_str().unwrap().to_string()
}

#[test]
fn engine_connections_authenticate_and_a_wrong_password_is_one_line() {
    let t = tempfile::tempdir().unwrap();
    let (_etcd, port) = etcd_with_auth(t.path());
    let pw = t.path().join("pw");
    std::fs::write(&pw, format!("{PASSWORD}\n")).unwrap();
    let out = t.path().join("run");
    let mut child = Command::new(common::bin())
        .env("NO_COLOR", "1")
        .env_remove("KVMETER_ETCD_PASSWORD")
        .args(["run", "-P", "workloada", "--store", "etcd", "--store-opt"])
        .arg(format!("addr=http://127.0.0.1:{port}"))
        .args(["--store-opt", "user=root", "--store-opt"])
        .arg(format!("password_file={}", pw.display()))
        .args(["--connections", "50", "--depth", "2", "--records", "300"])
        .args(["--duration", "3s", "--interval", "500ms"])
        .arg("--out")
        .arg(&out)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Mid-run, root's password is set again (to the same one): etcd's auth revision moves and
    // every token issued before is refused ("revision of auth store is old").
    common::servers::wait_for_phase(&out, "run");
    std::thread::sleep(Duration::from_millis(500));
    let tok = root_token(port);
    let change = serde_json::json!({"name": "root", "password": PASSWORD}).to_string();
    let (st, v) = post(port, "/v3/auth/user/changepw", &change, Some(&tok));
    assert_eq!(st, 200, "{v}");
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(child.wait().unwrap().success(), "{err}");
    let s = json(&out.join("summary.json"));
    let (load, run) = (phase(&s, "load"), phase(&s, "run"));
    assert_eq!(count(load, "INSERT"), 300);
    assert_eq!(errors(load), 0);
    assert_eq!(run["outcome"], "completed");
    // The connections whose token was refused were replaced and went on: what was in flight
    // on them (at most 2 each) failed, counted as protocol errors.
    let e = &run["engine"];
    let reconnects = e["reconnects"].as_u64().unwrap();
    assert!((1..=50).contains(&reconnects), "{e}");
    let failed = errors(run);
    assert!((1..=100).contains(&failed), "{failed} {run}");
    assert!(
        run["error_samples"].to_string().contains("auth token"),
        "{run}"
    );
    let iv = std::fs::read_to_string(out.join("intervals.csv")).unwrap();
    let reads: Vec<u64> = iv
        .lines()
        .filter(|l| l.starts_with("run,") && l.contains(",READ,"))
        .map(|l| l.split(',').nth(6).unwrap().parse().unwrap())
        .collect();
    assert!(reads.len() >= 5 && reads[reads.len() - 2] > 0, "{iv}");
    // The connections authenticated once for all, before the run and after the change, not
    // once each (etcd's own count; the test's own authentication is one of them).
    let auths = handled(port, "Authenticate");
    assert!((3..=8).contains(&auths), "{auths} authentications");

    // A wrong password: one line, before any phase.
    std::fs::write(&pw, "not-the-password\n").unwrap();
    let bad = t.path().join("bad");
    let o = kvmeter()
        .env_remove("KVMETER_ETCD_PASSWORD")
        .args(["run", "-P", "workloadc", "--store", "etcd", "--store-opt"])
        .arg(format!("addr=http://127.0.0.1:{port}"))
        .args(["--store-opt", "user=root", "--store-opt"])
        .arg(format!("password_file={}", pw.display()))
        .args(["--connections", "10", "--records", "100", "--ops", "100"])
        .arg("--out")
        .arg(&bad)
        .output()
        .unwrap();
    // etcd's refusal is one line, exit 2, before the run directory exists (the store's check
    // authenticates before the engine opens its connections).
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("wrong user name or password"), "{err}");
    assert!(!bad.exists());
}

/// What the hostile server answers to every request.
#[derive(Clone, Copy)]
enum Hostile {
    Garbage,
    HugeLength,
    EndlessHeaders,
}

/// One request read whole from `s` (`buf` keeps what follows): its request line and body.
fn read_request(s: &mut std::net::TcpStream, buf: &mut Vec<u8>) -> Option<(String, String)> {
    let mut b = [0u8; 4096];
    loop {
        if let Some(h) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..h]).to_string();
            let len: usize = head
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length:")
                        .map(|v| v.trim().parse().unwrap())
                })
                .unwrap_or(0);
            if buf.len() >= h + 4 + len {
                let body = String::from_utf8_lossy(&buf[h + 4..h + 4 + len]).to_string();
                buf.drain(..h + 4 + len);
                return Some((head.lines().next().unwrap_or("").to_string(), body));
            }
        }
        let n = s.read(&mut b).ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&b[..n]);
    }
}

fn http_ok(body: &str) -> String {
    format!(
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
}

/// A hostile HTTP server on 127.0.0.1: it answers kvmeter's check that etcd is there (GET
/// /version and a range of one key with limit 1) as etcd would, and every other request
/// (the engine's) with `how`.
fn hostile(how: Hostile) -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { return };
            std::thread::spawn(move || {
                let _ = s.set_read_timeout(Some(Duration::from_secs(20)));
                let _ = s.set_write_timeout(Some(Duration::from_secs(20)));
                let mut buf = Vec::new();
                while let Some((line, body)) = read_request(&mut s, &mut buf) {
                    let r = if line.starts_with("GET /version") {
                        s.write_all(
                            http_ok(r#"{"etcdserver":"3.4.23","etcdcluster":"3.4.0"}"#).as_bytes(),
                        )
                    } else if body.contains("\"limit\":1") {
                        s.write_all(http_ok(r#"{"header":{"revision":"1"}}"#).as_bytes())
                    } else {
                        match how {
                            Hostile::Garbage => s.write_all(b"SSH-2.0-OpenSSH_9.0\r\n\r\n"),
                            Hostile::HugeLength => s.write_all(
                                b"HTTP/1.1 200 OK\r\nContent-Length: 999999999999\r\n\r\n{\"kvs\":[",
                            ),
                            Hostile::EndlessHeaders => {
                                let _ = s.write_all(b"HTTP/1.1 200 OK\r\n");
                                // Headers until the client hangs up (at most 4 MB).
                                let mut r = Ok(());
                                for _ in 0..100_000 {
                                    r = s.write_all(b"X-Padding: aaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n");
                                    if r.is_err() {
                                        break;
                                    }
                                }
                                r
                            }
                        }
                    };
                    if r.is_err() {
                        return;
                    }
                }
            });
        }
    });
    port
}

#[test]
fn a_hostile_http_server_costs_protocol_errors_not_a_hang() {
    let t = tempfile::tempdir().unwrap();
    for (name, how, why) in [
        ("garbage", Hostile::Garbage, "not HTTP/1.x"),
        ("huge", Hostile::HugeLength, "Content-Length past max_reply"),
        (
            "endless",
            Hostile::EndlessHeaders,
            "more than 64 HTTP headers",
        ),
    ] {
        let port = hostile(how);
        // Each phase on its own: a phase in which no call is answered fails and ends the run,
        // so a load that failed would leave no run phase to look at.
        for p in ["load", "run"] {
            let out = t.path().join(format!("{name}-{p}"));
            let o = kvmeter()
                .args(["run", "-P", "workloadc", "--store", "etcd", "--store-opt"])
                .arg(format!("addr=http://127.0.0.1:{port}"))
                .args([
                    "--store-opt",
                    "max_reply=65536",
                    "--store-opt",
                    "timeout_ms=5000",
                ])
                .args(["--connections", "4", "--depth", "2", "--threads", "1"])
                .args(["--records", "20", "--ops", "40", "--phase", p])
                .arg("--out")
                .arg(&out)
                .output()
                .unwrap();
            let err = String::from_utf8_lossy(&o.stderr);
            assert!(!err.contains("panicked"), "{name}: {err}");
            assert_eq!(o.status.code(), Some(1), "{name} {p}: {err}");
            let s = json(&out.join("summary.json"));
            let p = phase(&s, p);
            assert_eq!(p["outcome"], "failed", "{name}: {p}");
            let kinds = p["error_samples"].to_string();
            assert!(errors(p) > 0, "{name}: {p}");
            assert!(kinds.contains("\"kind\":\"protocol\""), "{name}: {kinds}");
            assert!(!kinds.contains("\"kind\":\"timeout\""), "{name}: {kinds}");
            assert!(kinds.contains(why), "{name}: {kinds}");
        }
    }
}

/// etcd's own count of the gRPC calls of `method` one member handled (its plain-http metrics
/// listener): the gateway calls the member's own handler for each request it serves.
fn handled(metrics_port: u16, method: &str) -> u64 {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", metrics_port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    write!(
        s,
        "GET /metrics HTTP/1.1\r\nHost: etcd\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    let want = format!("grpc_method=\"{method}\"");
    text.lines()
        .filter(|l| l.starts_with("grpc_server_handled_total{") && l.contains(&want))
        .map(|l| l.rsplit(' ').next().unwrap().parse::<f64>().unwrap() as u64)
        .sum()
}

#[test]
fn engine_connections_go_to_the_leader_of_a_tls_cluster() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path();
    // Three members, clients over TLS with client certificates, metrics on plain http.
    let c = certs(d, "engine-ca");
    let m = Etcd::new(d, 3).tls(&c).metrics().start();
    let log = |i: usize| m.log(i);
    let leader = (0..3)
        .find(|&i| log(i).contains("became leader"))
        .expect("a member logs that it became leader");
    // The leader's URL last: the engine must find it.
    let mut order: Vec<usize> = (0..3).filter(|&i| i != leader).collect();
    order.push(leader);
    let addr = order
        .iter()
        .map(|&i| format!("https://127.0.0.1:{}", m.clients[i]))
        .collect::<Vec<_>>()
        .join(",");
    let out = d.join("run");
    let o = kvmeter()
        .args(["run", "-P", "workloada", "--store", "etcd"])
        .args(["--store-opt", &format!("addr={addr}")])
        .args(["--store-opt", &format!("tls_ca={}/ca.pem", d.display())])
        .args([
            "--store-opt",
            &format!("tls_cert={}/client.pem", d.display()),
        ])
        .args([
            "--store-opt",
            &format!("tls_key={}/client.key", d.display()),
        ])
        .args(["--connections", "20", "--depth", "4", "--records", "300"])
        .args(["--ops", "2000", "-p", "dataintegrity=true"])
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let s = json(&out.join("summary.json"));
    let (load, run) = (phase(&s, "load"), phase(&s, "run"));
    assert_eq!(errors(load) + errors(run), 0, "{run}");
    let (reads, updates) = (count(run, "READ"), count(run, "UPDATE"));
    assert_eq!(reads + updates, 2000);
    assert_eq!(run["ops"]["VERIFY"]["ok"].as_u64(), Some(reads));
    // Every put went to the leader (followers forward none: they handled no Put), and so did
    // the reads (a follower handled at most kvmeter's check that it answers: one range).
    for (i, &p) in m.metrics.iter().enumerate() {
        let (puts, ranges) = (handled(p, "Put"), handled(p, "Range"));
        if i == leader {
            assert_eq!(puts, 300 + updates, "leader m{i}");
            assert!(ranges >= reads, "leader m{i}: {ranges} < {reads}");
        } else {
            assert_eq!(puts, 0, "follower m{i}");
            assert!(ranges <= 2, "follower m{i}: {ranges}");
        }
    }
}
