//! etcd secured (issue 27 item 2, review finding F3): a real etcd with TLS and client
//! certificates (made by `common::etcd` with the openssl command line: a CA, a server
//! certificate for IP 127.0.0.1, a client certificate), and a real etcd with its own authentication (a root
//! user, simple tokens that expire after one idle second). A distributed job (coordinator + 2
//! agents) and the `etcd` store run through each; a wrong CA, a wrong password, plain http to
//! the TLS etcd, https to a plain one and a missing certificate file are one line and exit 2,
//! before any run directory exists.

use crate::common;

use common::etcd::{certs, Certs, Etcd};
use common::servers::{wait_exit, Proc};
use common::{bin, json, phase};
use serde_json::Value;
use std::io::{Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

/// The root user's password: characters a URL must percent-encode.
const PASSWORD: &str = "s3cr:t@x/y";
const PASSWORD_IN_URL: &str = "s3cr%3At%40x%2Fy";

/// etcd members on loopback (`common::etcd::Etcd`: client URLs https with `tls`, peers plain
/// http). Returns the processes and the client ports.
fn etcd(dir: &Path, members: usize, tls: Option<&Certs>, extra: &[&str]) -> (Vec<Proc>, Vec<u16>) {
    let mut e = Etcd::new(dir, members).args(extra);
    if let Some(c) = tls {
        e = e.tls(c);
    }
    let m = e.start();
    (m.procs, m.clients)
}

/// A POST to a plain-http etcd (optionally with a token): status code and body.
fn post(port: u16, path: &str, body: &str, token: Option<&str>) -> (u32, String) {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let auth = token.map_or(String::new(), |t| format!("Authorization: {t}\r\n"));
    write!(
        s,
        "POST {path} HTTP/1.1\r\nHost: etcd\r\n{auth}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    let status = text[9..12].parse().unwrap();
    (
        status,
        text[text.find("\r\n\r\n").unwrap() + 4..].to_string(),
    )
}

/// A one-member etcd with authentication on (root user, simple tokens expiring after 1 s idle).
fn etcd_with_auth(dir: &Path) -> (Vec<Proc>, u16) {
    let (procs, ports) = etcd(dir, 1, None, &["--auth-token-ttl", "1"]);
    let p = ports[0];
    let user = serde_json::json!({"name": "root", "password": PASSWORD}).to_string();
    for (path, body) in [
        ("/v3/auth/user/add", user.as_str()),
        ("/v3/auth/user/grant", r#"{"user":"root","role":"root"}"#),
        ("/v3/auth/enable", "{}"),
    ] {
        let (status, reply) = post(p, path, body, None);
        assert_eq!(status, 200, "{path}: {reply}");
    }
    // Authentication is on: a request without a token is refused.
    let (status, reply) = post(p, "/v3/kv/range", r#"{"key":"AA=="}"#, None);
    assert_eq!(status, 400, "{reply}");
    assert!(reply.contains("user name is empty"), "{reply}");
    (procs, p)
}

fn kvmeter(args: &[String], env: &[(&str, &str)], log: &Path) -> std::process::Child {
    let f = std::fs::File::create(log).unwrap();
    let mut c = Command::new(bin());
    c.args(args)
        .env("NO_COLOR", "1")
        .env("KVMETER_PLAN_KEY", common::TEST_PLAN_KEY)
        .env_remove("KVMETER_COORD_PASSWORD")
        .env_remove("KVMETER_ETCD_PASSWORD")
        .stdout(f.try_clone().unwrap())
        .stderr(f);
    for (k, v) in env {
        c.env(k, v);
    }
    c.spawn().unwrap()
}

fn w(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

const JOB: &[&str] = &[
    "--store",
    "null",
    "-P",
    "workloadb",
    "--records",
    "1000",
    "--ops",
    "20000",
    "--threads",
    "1",
    "--telemetry-interval",
    "0",
];

/// A coordinator and two agents, each with its own `--coord*` flags and environment; checks
/// that the job completes and merges: every operation counted once.
/// An agent's `--coord*` flags and environment.
type AgentSetup<'a> = (Vec<String>, Vec<(&'a str, &'a str)>);

fn dist_job(dir: &Path, coord: &[String], agents: [AgentSetup; 2]) {
    let job = ["--job".to_string(), "secure".to_string()];
    let mut args = strings(&["dist", "run", "--agents", "2", "--register-timeout", "20s"]);
    args.extend(coord.iter().cloned());
    args.extend(job.iter().cloned());
    args.extend(["--out".into(), dir.join("merged").display().to_string()]);
    args.extend(strings(JOB));
    let mut c = kvmeter(&args, &[], &dir.join("coord.log"));
    let mut children = vec![];
    for (i, (flags, env)) in agents.iter().enumerate() {
        let mut a = strings(&["agent", "--index", &i.to_string(), "--count", "2"]);
        a.extend(flags.iter().cloned());
        a.extend(job.iter().cloned());
        a.extend([
            "--out".into(),
            dir.join(format!("agent{i}")).display().to_string(),
        ]);
        children.push(kvmeter(&a, env, &dir.join(format!("agent{i}.log"))));
    }
    let log = |f: &str| std::fs::read_to_string(dir.join(f)).unwrap_or_default();
    let code = wait_exit(&mut c, Duration::from_secs(40));
    for (i, a) in children.iter_mut().enumerate() {
        let code = wait_exit(a, Duration::from_secs(20));
        assert_eq!(code, 0, "agent {i}: {}", log(&format!("agent{i}.log")));
    }
    assert_eq!(code, 0, "{}", log("coord.log"));
    let merged = json(&dir.join("merged/summary.json"));
    assert_eq!(merged["status"], "completed");
    assert_eq!(phase(&merged, "load")["operations"], 1000);
    assert_eq!(phase(&merged, "run")["operations"], 20000);
    assert_eq!(phase(&merged, "run")["errors"], 0);
}

/// Keys under /kvmeter/ in etcd, through kvmeter's own client with the same settings.
fn keys_left(flags: kvmeter::distributed::keys::CoordFlags) -> usize {
    let spec = kvmeter::distributed::keys::CoordSpec::resolve(&flags, |_| None).unwrap();
    let mut c = kvmeter::distributed::keys::Coord::connect(&spec, "check").unwrap();
    c.count_all_runs().unwrap()
}

#[test]
fn a_distributed_job_runs_through_etcd_with_tls_and_client_certificates() {
    let tmp = tempfile::tempdir().unwrap();
    let c = certs(tmp.path(), "kvmeter test CA");
    let (_etcd, ports) = etcd(tmp.path(), 1, Some(&c), &[]);
    let url = format!("https://127.0.0.1:{}", ports[0]);
    let flags = strings(&[
        "--coord",
        &url,
        "--coord-ca",
        &c.ca,
        "--coord-cert",
        &c.client_cert,
        "--coord-key",
        &c.client_key,
    ]);
    dist_job(
        tmp.path(),
        &flags,
        [(flags.clone(), vec![]), (flags.clone(), vec![])],
    );
    let left = keys_left(kvmeter::distributed::keys::CoordFlags {
        url,
        ca: Some(c.ca.clone().into()),
        cert: Some(c.client_cert.clone().into()),
        key: Some(c.client_key.clone().into()),
        ..Default::default()
    });
    assert_eq!(left, 0, "the coordinator deletes every key at the end");
}

#[test]
fn a_distributed_job_runs_through_etcd_with_auth_and_expiring_tokens() {
    let tmp = tempfile::tempdir().unwrap();
    let (_etcd, port) = etcd_with_auth(tmp.path());
    let pw_file = tmp.path().join("pw");
    std::fs::write(&pw_file, format!("{PASSWORD}\n")).unwrap();
    let url = format!("http://127.0.0.1:{port}");
    // The coordinator: a password file; agent 0: the environment; agent 1: the URL.
    let coord = strings(&[
        "--coord",
        &url,
        "--coord-user",
        "root",
        "--coord-password-file",
        pw_file.to_str().unwrap(),
    ]);
    let by_env = strings(&["--coord", &url, "--coord-user", "root"]);
    let by_url = strings(&[
        "--coord",
        &format!("http://root:{PASSWORD_IN_URL}@127.0.0.1:{port}"),
    ]);
    dist_job(
        tmp.path(),
        &coord,
        [
            (by_env, vec![("KVMETER_COORD_PASSWORD", PASSWORD)]),
            (by_url, vec![]),
        ],
    );
    // The password in the URL never shows in what the agent printed.
    let agent1 = std::fs::read_to_string(tmp.path().join("agent1.log")).unwrap();
    assert!(!agent1.contains(PASSWORD_IN_URL), "{agent1}");
    assert!(!agent1.contains(PASSWORD), "{agent1}");

    // A token unused for longer than --auth-token-ttl is refused by etcd...
    let user = serde_json::json!({"name": "root", "password": PASSWORD}).to_string();
    let (_, reply) = post(port, "/v3/auth/authenticate", &user, None);
    let token = serde_json::from_str::<Value>(&reply).unwrap()["token"]
        .as_str()
        .unwrap()
        .to_string();
    let flags = kvmeter::distributed::keys::CoordFlags {
        url,
        user: Some("root".into()),
        password_file: Some(pw_file),
        ..Default::default()
    };
    let spec = kvmeter::distributed::keys::CoordSpec::resolve(&flags, |_| None).unwrap();
    let mut c = kvmeter::distributed::keys::Coord::connect(&spec, "refresh").unwrap();
    // A second connection of the same client shares the token.
    let mut c2 = kvmeter::distributed::keys::Coord::connect(&spec, "refresh").unwrap();
    c.put("k", "v", None).unwrap();
    std::thread::sleep(Duration::from_millis(3000));
    let (status, reply) = post(port, "/v3/kv/range", r#"{"key":"AA=="}"#, Some(&token));
    assert_eq!(status, 401, "{reply}");
    assert!(reply.contains("invalid auth token"), "{reply}");
    // ...and kvmeter's client, idle as long, authenticates again and goes on.
    assert_eq!(c.get("k").unwrap().as_deref(), Some("v"));
    // The other connection takes the token the first one got.
    assert_eq!(c2.get("k").unwrap().as_deref(), Some("v"));
    c.delete_all("").unwrap();
    assert_eq!(keys_left(flags), 0);
}

fn store_run(dir: &Path, name: &str, opts: &[String], env: &[(&str, &str)]) -> Value {
    let out = dir.join(name);
    let mut args = strings(&["run", "--store", "etcd"]);
    for o in opts {
        args.extend(["--store-opt".to_string(), o.clone()]);
    }
    args.extend(strings(&[
        "-P",
        "workloada",
        "--records",
        "200",
        "--ops",
        "2000",
        "--threads",
        "2",
        "--telemetry-interval",
        "0",
        "--out",
        out.to_str().unwrap(),
    ]));
    let log = dir.join(format!("{name}.log"));
    let mut c = kvmeter(&args, env, &log);
    let code = wait_exit(&mut c, Duration::from_secs(30));
    assert_eq!(code, 0, "{}", std::fs::read_to_string(&log).unwrap());
    let s = json(&out.join("summary.json"));
    assert_eq!(s["status"], "completed");
    assert_eq!(phase(&s, "load")["operations"], 200);
    assert_eq!(phase(&s, "run")["operations"], 2000);
    assert_eq!(phase(&s, "run")["errors"], 0);
    s
}

#[test]
fn the_etcd_store_runs_through_tls_to_the_leader_and_through_auth() {
    let tmp = tempfile::tempdir().unwrap();
    let c = certs(tmp.path(), "kvmeter test CA");
    // Three TLS members; the leader's URL last, so the client finds it over TLS.
    let (_etcd, ports) = etcd(tmp.path(), 3, Some(&c), &[]);
    let leader = (0..3)
        .find(|i| {
            std::fs::read_to_string(tmp.path().join(format!("etcd{i}.log")))
                .unwrap()
                .contains("became leader")
        })
        .expect("a member logs that it became leader");
    let mut order: Vec<usize> = (0..3).filter(|&i| i != leader).collect();
    order.push(leader);
    let addr = order
        .iter()
        .map(|&i| format!("https://127.0.0.1:{}", ports[i]))
        .collect::<Vec<_>>()
        .join(",");
    let tls = [
        format!("addr={addr}"),
        format!("tls_ca={}", c.ca),
        format!("tls_cert={}", c.client_cert),
        format!("tls_key={}", c.client_key),
    ];
    let s = store_run(tmp.path(), "tls", &tls, &[]);
    let sent = phase(&s, "run")["sent_to"].as_object().unwrap().clone();
    // Every request went to the leader (an update reads and puts: more than 2000).
    let leader_addr = format!("127.0.0.1:{}", ports[leader]);
    assert_eq!(sent.keys().collect::<Vec<_>>(), [&leader_addr], "{sent:?}");
    assert!(sent[&leader_addr].as_u64().unwrap() >= 2000, "{sent:?}");

    // etcd's authentication: the password from the environment, then from a file.
    let auth_dir = tmp.path().join("auth");
    std::fs::create_dir(&auth_dir).unwrap();
    let (_etcd2, port) = etcd_with_auth(&auth_dir);
    let addr = format!("addr=127.0.0.1:{port}");
    store_run(
        tmp.path(),
        "auth-env",
        &[addr.clone(), "user=root".into()],
        &[("KVMETER_ETCD_PASSWORD", PASSWORD)],
    );
    let pw = tmp.path().join("pw");
    std::fs::write(&pw, PASSWORD).unwrap();
    let s = store_run(
        tmp.path(),
        "auth-file",
        &[
            addr,
            "user=root".into(),
            format!("password_file={}", pw.display()),
        ],
        &[],
    );
    let manifest = std::fs::read_to_string(tmp.path().join("auth-file/manifest.json")).unwrap();
    assert!(!manifest.contains(PASSWORD), "the password is not recorded");
    assert_eq!(s["status"], "completed");
}

/// Runs kvmeter to its end; returns (exit code, stderr).
fn fails(args: &[String], env: &[(&str, &str)]) -> (i32, String) {
    let mut c = Command::new(bin());
    c.args(args)
        .env("NO_COLOR", "1")
        .env("KVMETER_PLAN_KEY", common::TEST_PLAN_KEY)
        .env_remove("KVMETER_COORD_PASSWORD")
        .env_remove("KVMETER_ETCD_PASSWORD")
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    for (k, v) in env {
        c.env(k, v);
    }
    let mut child = c.spawn().unwrap();
    let code = wait_exit(&mut child, Duration::from_secs(20));
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    (code, err)
}

/// One line, exit 2, containing each of `want`, and no run directory.
fn refused(what: &str, args: Vec<String>, env: &[(&str, &str)], out: &Path, want: &[&str]) {
    let (code, err) = fails(&args, env);
    assert_eq!(code, 2, "{what}: {err}");
    assert_eq!(err.trim().lines().count(), 1, "{what}: one line: {err}");
    assert!(err.starts_with("error: "), "{what}: {err}");
    for w in want {
        assert!(err.contains(w), "{what}: '{w}' in {err}");
    }
    assert!(
        !err.contains(PASSWORD) && !err.contains(PASSWORD_IN_URL) && !err.contains("wrongpw"),
        "{what}: {err}"
    );
    assert!(!out.exists(), "{what}: {} was created", out.display());
}

#[test]
fn a_wrong_ca_a_wrong_password_and_the_wrong_scheme_are_one_line_and_exit_2() {
    let tmp = tempfile::tempdir().unwrap();
    let c = certs(tmp.path(), "kvmeter test CA");
    let other_dir = tmp.path().join("other");
    std::fs::create_dir(&other_dir).unwrap();
    let other = certs(&other_dir, "another CA");
    let (_tls, ports) = etcd(tmp.path(), 1, Some(&c), &[]);
    let tls_port = ports[0];
    let auth_dir = tmp.path().join("auth");
    std::fs::create_dir(&auth_dir).unwrap();
    let (_auth, auth_port) = etcd_with_auth(&auth_dir);
    let out = tmp.path().join("out");
    let o = out.to_str().unwrap();
    let dist = |coord: &[&str]| {
        let mut a = strings(&["dist", "run", "--agents", "1", "--out", o]);
        a.extend(strings(coord));
        a.extend(strings(JOB));
        a
    };
    let agent = |coord: &[&str]| {
        let mut a = strings(&[
            "agent", "--index", "0", "--count", "1", "--wait", "2s", "--out", o,
        ]);
        a.extend(strings(coord));
        a
    };
    let https = format!("https://127.0.0.1:{tls_port}");
    let client = ["--coord-cert", &c.client_cert, "--coord-key", &c.client_key];
    let with = |url: &str, ca: &str| {
        let mut v = vec!["--coord", url, "--coord-ca", ca];
        v.extend(client);
        v.iter().map(|s| s.to_string()).collect::<Vec<_>>()
    };
    let wrong_ca = with(&https, &other.ca);
    refused(
        "agent, wrong CA",
        agent(&w(&wrong_ca)),
        &[],
        &out,
        &["UnknownIssuer", "--coord-ca"],
    );
    refused(
        "dist run, wrong CA",
        dist(&w(&wrong_ca)),
        &[],
        &out,
        &["UnknownIssuer"],
    );
    let plain_to_tls = format!("http://127.0.0.1:{tls_port}");
    refused(
        "dist run, http to TLS",
        dist(&["--coord", &plain_to_tls]),
        &[],
        &out,
        &["https://", "closed the connection"],
    );
    let tls_to_plain = format!("https://127.0.0.1:{auth_port}");
    refused(
        "agent, https to plain",
        agent(&w(&with(&tls_to_plain, &c.ca))),
        &[],
        &out,
        &["TLS handshake", "plain http"],
    );
    let no_client_cert = strings(&["--coord", &https, "--coord-ca", &c.ca]);
    refused(
        "agent, no client certificate",
        agent(&w(&no_client_cert)),
        &[],
        &out,
        &["--coord-cert", "client certificate"],
    );
    let mut missing = with(&https, &c.ca);
    missing[5] = "/nonexistent/client.pem".into();
    refused(
        "agent, missing cert file",
        agent(&w(&missing)),
        &[],
        &out,
        &["--coord-cert /nonexistent/client.pem"],
    );
    refused(
        "https without --coord-ca",
        dist(&["--coord", &https]),
        &[],
        &out,
        &["needs --coord-ca"],
    );

    // Authentication.
    let auth = format!("http://127.0.0.1:{auth_port}");
    let as_root = ["--coord", auth.as_str(), "--coord-user", "root"];
    let wrong = [("KVMETER_COORD_PASSWORD", "wrongpw")];
    refused(
        "dist run, wrong password",
        dist(&as_root),
        &wrong,
        &out,
        &["wrong user name or password", "KVMETER_COORD_PASSWORD"],
    );
    refused(
        "agent, wrong password",
        agent(&as_root),
        &wrong,
        &out,
        &["refused user 'root'"],
    );
    let in_url = format!("http://root:wrongpw@127.0.0.1:{auth_port}");
    refused(
        "agent, wrong password in the URL",
        agent(&["--coord", &in_url]),
        &[],
        &out,
        &["root:***@", "wrong user name or password"],
    );
    refused(
        "dist run, no user",
        dist(&["--coord", &auth]),
        &[],
        &out,
        &["authentication enabled", "--coord-user"],
    );
    refused(
        "dist run, no password",
        dist(&as_root),
        &[],
        &out,
        &["no password", "KVMETER_COORD_PASSWORD"],
    );

    // The etcd store.
    let run = |opts: &[String]| {
        let mut a = strings(&[
            "run",
            "--store",
            "etcd",
            "--out",
            o,
            "-P",
            "workloada",
            "--records",
            "10",
            "--ops",
            "10",
        ]);
        for x in opts {
            a.extend(["--store-opt".to_string(), x.clone()]);
        }
        a
    };
    let store_tls = |ca: &str| {
        vec![
            format!("addr={https}"),
            format!("tls_ca={ca}"),
            format!("tls_cert={}", c.client_cert),
            format!("tls_key={}", c.client_key),
        ]
    };
    refused(
        "store, wrong CA",
        run(&store_tls(&other.ca)),
        &[],
        &out,
        &["UnknownIssuer", "tls_ca"],
    );
    refused(
        "store, http to TLS",
        run(&[format!("addr={plain_to_tls}")]),
        &[],
        &out,
        &["https://"],
    );
    let root = [format!("addr=127.0.0.1:{auth_port}"), "user=root".into()];
    refused(
        "store, wrong password",
        run(&root),
        &[("KVMETER_ETCD_PASSWORD", "wrongpw")],
        &out,
        &["wrong user name or password"],
    );
    refused(
        "store, password in addr",
        run(&[format!(
            "addr=http://root:{PASSWORD_IN_URL}@127.0.0.1:{auth_port}"
        )]),
        &[],
        &out,
        &["root:***@", "password_file"],
    );
    let mut missing = store_tls(&c.ca);
    missing[1] = "tls_ca=/nonexistent/ca.pem".into();
    refused(
        "store, missing CA file",
        run(&missing),
        &[],
        &out,
        &["tls_ca=/nonexistent/ca.pem"],
    );
}
