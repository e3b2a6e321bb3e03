//! Distributed runs end to end (docs/distributed.md): real etcd (one member and three),
//! real memcached and Redis, 2–4 `kvmeter agent` processes and a `kvmeter dist run`
//! coordinator on loopback. Golden values are independent: the one-host run of the same plan,
//! the agents' own run directories, memcached's own log of the commands it served.

mod common;

use common::{bin, free_port, json, kvmeter};
use hdrhistogram::serialization::Deserializer;
use hdrhistogram::Histogram;
use serde_json::Value;
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A process this test started, killed when the test ends (pass or fail).
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn wait_port(port: u16) {
    let t = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "nothing on port {port}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A POST to etcd's JSON gateway (the first member that answers); the reply's JSON.
fn etcd_post(url: &str, path: &str, body: &str) -> Option<Value> {
    url.split(',').find_map(|u| etcd_post_one(u, path, body))
}

fn etcd_post_one(url: &str, path: &str, body: &str) -> Option<Value> {
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
fn keys_left(url: &str) -> u64 {
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
fn etcd(dir: &Path, members: usize) -> (Vec<Proc>, String) {
    let ports: Vec<(u16, u16)> = (0..members).map(|_| (free_port(), free_port())).collect();
    let cluster: Vec<String> = ports
        .iter()
        .enumerate()
        .map(|(i, (_, peer))| format!("m{i}=http://127.0.0.1:{peer}"))
        .collect();
    let mut procs = vec![];
    for (i, (client, peer)) in ports.iter().enumerate() {
        let log = std::fs::File::create(dir.join(format!("etcd{i}.log"))).unwrap();
        let c = Command::new("etcd")
            .args([
                "--name",
                &format!("m{i}"),
                "--data-dir",
                dir.join(format!("etcd{i}")).to_str().unwrap(),
                "--listen-client-urls",
                &format!("http://127.0.0.1:{client}"),
                "--advertise-client-urls",
                &format!("http://127.0.0.1:{client}"),
                "--listen-peer-urls",
                &format!("http://127.0.0.1:{peer}"),
                "--initial-advertise-peer-urls",
                &format!("http://127.0.0.1:{peer}"),
                "--initial-cluster",
                &cluster.join(","),
                "--initial-cluster-state",
                "new",
            ])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("etcd (Debian's etcd-server) is installed");
        procs.push(Proc(c));
    }
    let url = ports
        .iter()
        .map(|(c, _)| format!("http://127.0.0.1:{c}"))
        .collect::<Vec<_>>()
        .join(",");
    // Ready: a write goes through (the group has a leader).
    let t = Instant::now();
    while etcd_post(&url, "/v3/kv/range", r#"{"key":"AA=="}"#)
        .and_then(|v| v.get("header").cloned())
        .is_none()
    {
        assert!(t.elapsed() < Duration::from_secs(20), "etcd did not start");
        std::thread::sleep(Duration::from_millis(100));
    }
    (procs, url)
}

/// memcached on loopback with one worker thread; `-vv` logs every command it serves.
fn memcached(dir: &Path, name: &str, verbose: bool) -> (Proc, u16) {
    let port = free_port();
    let log = std::fs::File::create(dir.join(format!("{name}.log"))).unwrap();
    let mut args = vec![
        "-u".to_string(),
        "root".into(),
        "-l".into(),
        "127.0.0.1".into(),
        "-p".into(),
        port.to_string(),
        "-t".into(),
        "1".into(),
        "-U".into(),
        "0".into(),
    ];
    if verbose {
        args.push("-vv".into());
    }
    let c = Command::new("memcached")
        .args(&args)
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("memcached is installed");
    wait_port(port);
    (Proc(c), port)
}

fn redis(dir: &Path) -> (Proc, u16) {
    let port = free_port();
    let c = Command::new("redis-server")
        .args([
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            dir.to_str().unwrap(),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("redis-server is installed");
    wait_port(port);
    (Proc(c), port)
}

fn spawn(args: &[String], log: &Path) -> Child {
    let f = std::fs::File::create(log).unwrap();
    Command::new(bin())
        .args(args)
        .env("NO_COLOR", "1")
        .stdout(f.try_clone().unwrap())
        .stderr(f)
        .spawn()
        .unwrap()
}

fn s(v: &[&str]) -> Vec<String> {
    v.iter().map(|x| x.to_string()).collect()
}

fn wait_exit(c: &mut Child, limit: Duration) -> i32 {
    let t = Instant::now();
    loop {
        if let Some(st) = c.try_wait().unwrap() {
            return st.code().unwrap_or(-1);
        }
        if t.elapsed() > limit {
            let _ = c.kill();
            panic!("process did not end within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn phase<'a>(summary: &'a Value, name: &str) -> &'a Value {
    common::phase(summary, name)
}

fn counts(p: &Value) -> BTreeMap<String, u64> {
    p["ops"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), v["count"].as_u64().unwrap()))
        .collect()
}

/// Every histogram of an HDR log, added.
fn hlog_sum(path: &Path) -> Histogram<u64> {
    use base64::Engine;
    let mut sum = Histogram::<u64>::new_with_bounds(1, 3_600_000_000_000, 3).unwrap();
    for line in std::fs::read_to_string(path).unwrap().lines() {
        if line.starts_with('#') || line.starts_with('"') {
            continue;
        }
        let b64 = line.rsplit(',').next().unwrap();
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(b64)
            .unwrap();
        let h: Histogram<u64> = Deserializer::new()
            .deserialize(&mut std::io::Cursor::new(bytes))
            .unwrap();
        sum.add(&h).unwrap();
    }
    sum
}

/// Each client connection's commands (`get KEY`, `set KEY`) from memcached's `-vv` log, for
/// connections that read (the run phase's), in arrival order per connection.
fn run_phase_streams(log: &Path) -> Vec<Vec<String>> {
    let mut open: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut done = vec![];
    for line in std::fs::read_to_string(log).unwrap().lines() {
        let Some(rest) = line.strip_prefix('<') else {
            continue;
        };
        let mut parts = rest.split_whitespace();
        let (Some(fd), Some(cmd)) = (parts.next(), parts.next()) else {
            continue;
        };
        match cmd {
            "new" => {
                open.insert(fd.to_string(), vec![]);
            }
            "connection" => {
                if let Some(seq) = open.remove(fd) {
                    if seq.iter().any(|c| c.starts_with("get")) {
                        done.push(seq);
                    }
                }
            }
            "get" | "set" => {
                let key = parts.next().unwrap_or("");
                if let Some(seq) = open.get_mut(fd) {
                    seq.push(format!("{cmd} {key}"));
                }
            }
            _ => {}
        }
    }
    done.sort();
    done
}

struct Dist {
    dir: tempfile::TempDir,
    coord: Child,
    agents: Vec<Child>,
}

impl Drop for Dist {
    fn drop(&mut self) {
        for c in self
            .agents
            .iter_mut()
            .chain(std::iter::once(&mut self.coord))
        {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Dist {
    /// A coordinator for `n` agents with `run` flags, then the agents (T threads each).
    fn start(url: &str, job: &str, n: usize, coord_flags: &[&str], run: &[String]) -> Dist {
        let dir = tempfile::tempdir().unwrap();
        let mut args = s(&[
            "dist",
            "run",
            "--coord",
            url,
            "--job",
            job,
            "--agents",
            &n.to_string(),
            "--out",
            dir.path().join("merged").to_str().unwrap(),
            "--register-timeout",
            "30s",
        ]);
        args.extend(s(coord_flags));
        args.extend(run.iter().cloned());
        let coord = spawn(&args, &dir.path().join("coord.log"));
        let agents = (0..n)
            .map(|i| {
                spawn(
                    &s(&[
                        "agent",
                        "--coord",
                        url,
                        "--job",
                        job,
                        "--index",
                        &i.to_string(),
                        "--out",
                        dir.path().join(format!("agent{i}")).to_str().unwrap(),
                    ]),
                    &dir.path().join(format!("agent{i}.log")),
                )
            })
            .collect();
        Dist { dir, coord, agents }
    }

    fn path(&self, p: &str) -> PathBuf {
        self.dir.path().join(p)
    }

    fn log(&self, p: &str) -> String {
        std::fs::read_to_string(self.path(p)).unwrap_or_default()
    }

    /// Waits for everything; returns the coordinator's exit code.
    fn finish(&mut self) -> i32 {
        let code = wait_exit(&mut self.coord, Duration::from_secs(90));
        for a in &mut self.agents {
            wait_exit(a, Duration::from_secs(30));
        }
        code
    }
}

#[test]
fn three_agents_replay_one_host_on_memcached_and_merge_exactly() {
    let tmp = tempfile::tempdir().unwrap();
    let (_etcd, url) = etcd(tmp.path(), 1);
    let (_m1, one_port) = memcached(tmp.path(), "one-host", true);
    let (_m2, dist_port) = memcached(tmp.path(), "dist", true);
    let run = |port: u16, threads: &str| {
        s(&[
            "--store",
            "memcached",
            "--store-opt",
            &format!("addr=127.0.0.1:{port}"),
            "-P",
            "workloada",
            "--records",
            "3000",
            "--ops",
            "24001",
            "--threads",
            threads,
            "--seed",
            "11",
            "--interval",
            "500ms",
            "--telemetry-interval",
            "0",
        ])
    };
    // One host with 3·2 threads.
    let one = tmp.path().join("one");
    let mut args = s(&["run", "--out", one.to_str().unwrap()]);
    args.extend(run(one_port, "6"));
    kvmeter().args(&args).assert().success();
    // Three agents with 2 threads each.
    let mut d = Dist::start(&url, "replay", 3, &[], &run(dist_port, "2"));
    let code = d.finish();
    assert_eq!(code, 0, "{}", d.log("coord.log"));
    let merged = json(&d.path("merged/summary.json"));
    let one_host = json(&one.join("summary.json"));
    assert_eq!(merged["status"], "completed");
    // The same operation counts per type, load and run, as one host with N·T threads.
    for p in ["load", "run"] {
        assert_eq!(
            counts(phase(&merged, p)),
            counts(phase(&one_host, p)),
            "{p}"
        );
        assert_eq!(phase(&merged, p)["threads"], 6);
    }
    assert_eq!(counts(phase(&merged, "load"))["INSERT"], 3000);
    // Merged counts are the sum of the agents' own.
    let agents: Vec<Value> = (0..3)
        .map(|i| json(&d.path(&format!("agent{i}/summary.json"))))
        .collect();
    for p in ["load", "run"] {
        for (op, n) in counts(phase(&merged, p)) {
            let sum: u64 = agents.iter().map(|a| counts(phase(a, p))[&op]).sum();
            assert_eq!(n, sum, "{p} {op}");
        }
    }
    // Load slices: 1000 records each.
    for a in &agents {
        assert_eq!(counts(phase(a, "load"))["INSERT"], 1000);
    }
    // The merged histogram is the union of the agents' logs, exactly.
    for m in ["READ", "UPDATE"] {
        let merged_h = hlog_sum(&d.path(&format!("merged/latency/run.{m}.hlog")));
        let mut union = Histogram::<u64>::new_with_bounds(1, 3_600_000_000_000, 3).unwrap();
        for i in 0..3 {
            union
                .add(hlog_sum(&d.path(&format!("agent{i}/latency/run.{m}.hlog"))))
                .unwrap();
        }
        assert_eq!(merged_h, union, "{m}");
        assert_eq!(
            merged_h.len(),
            counts(phase(&merged, "run"))[m],
            "{m}: the log holds every operation"
        );
        // The summary's max is the union's max (µs, from ns).
        let max_us = phase(&merged, "run")["ops"][m]["latency_us"]["max"]
            .as_f64()
            .unwrap();
        assert!(
            (max_us - union.max() as f64 / 1000.0).abs() < 0.01 * max_us,
            "{m}: summary max {max_us} µs, union max {} ns",
            union.max()
        );
    }
    // Every interval row says how many agents it merges.
    let csv = std::fs::read_to_string(d.path("merged/intervals.csv")).unwrap();
    let header: Vec<&str> = csv.lines().next().unwrap().split(',').collect();
    let col = header.iter().position(|h| *h == "agents").unwrap();
    // All three in the first interval of each phase; an agent that finished its share earlier
    // (an --ops run) is not in the last ones, so the count never rises within a phase.
    for p in ["load", "run"] {
        let per_interval: Vec<u64> = csv
            .lines()
            .filter(|l| l.starts_with(&format!("{p},")))
            .map(|l| l.split(',').nth(col).unwrap().parse().unwrap())
            .collect();
        assert_eq!(per_interval[0], 3, "{p}: {per_interval:?}");
        assert!(
            per_interval.windows(2).all(|w| w[1] <= w[0]),
            "{p}: {per_interval:?}"
        );
    }
    // The same key streams: each run-phase connection's commands, one host against agents.
    let one_streams = run_phase_streams(&tmp.path().join("one-host.log"));
    let dist_streams = run_phase_streams(&tmp.path().join("dist.log"));
    assert_eq!(one_streams.len(), 6);
    assert_eq!(dist_streams.len(), 6);
    assert!(
        one_streams == dist_streams,
        "the agents' key streams differ from one host's"
    );
    // Start skew is recorded per phase; the clock state per agent.
    let info = json(&d.path("merged/dist.json"));
    for p in info["phases"].as_array().unwrap() {
        assert_eq!(p["late_ms"].as_object().unwrap().len(), 3);
        let skew = p["start_skew_ms"].as_f64().unwrap();
        assert!((0.0..1000.0).contains(&skew), "skew {skew}");
    }
    assert!(info["agent_hosts"]["2"]["host"]["clock"]
        .get("synchronized")
        .is_some());
    assert!(info["bytes_per_interval_report"].as_f64().unwrap() > 100.0);
    // Nothing left registered.
    assert_eq!(keys_left(&url), 0);
    // The same result offline from the agents' directories.
    let offline = d.path("offline");
    kvmeter()
        .args(["dist", "merge"])
        .args((0..3).map(|i| d.path(&format!("agent{i}"))))
        .arg("--out")
        .arg(&offline)
        .assert()
        .success();
    let again = json(&offline.join("summary.json"));
    for p in ["load", "run"] {
        assert_eq!(
            phase(&again, p)["ops"],
            phase(&merged, p)["ops"],
            "{p}: dist merge differs from the live merge"
        );
    }
}

/// Polls `dir/intervals.csv` until a row of `phase` is there.
fn wait_for_phase(dir: &Path, phase: &str) {
    let t = Instant::now();
    loop {
        let csv = std::fs::read_to_string(dir.join("intervals.csv")).unwrap_or_default();
        if csv.lines().any(|l| l.starts_with(&format!("{phase},"))) {
            return;
        }
        assert!(t.elapsed() < Duration::from_secs(60), "no {phase} interval");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_killed_agent_degrades_the_run_on_redis_with_a_three_member_etcd() {
    let tmp = tempfile::tempdir().unwrap();
    let (_etcd, url) = etcd(tmp.path(), 3);
    let (_r, port) = redis(tmp.path());
    let run = s(&[
        "--store",
        "redis",
        "--store-opt",
        &format!("addr=127.0.0.1:{port}"),
        "-P",
        "workloadb",
        "--records",
        "2000",
        "--duration",
        "6s",
        "--threads",
        "1",
        // Paced, so etcd (sharing the 2 vCPUs) answers keep-alives on time: only the killed
        // agent's lease may expire.
        "--target",
        "4000",
        "--interval",
        "500ms",
        "--telemetry-interval",
        "0",
    ]);
    let mut d = Dist::start(&url, "loss", 4, &["--lease-ttl", "2s"], &run);
    wait_for_phase(&d.path("agent3"), "run");
    std::thread::sleep(Duration::from_millis(1500));
    let _ = d.agents[3].kill(); // SIGKILL
    let code = d.finish();
    assert_eq!(code, 0, "degrade is the default: {}", d.log("coord.log"));
    let merged = json(&d.path("merged/summary.json"));
    assert_eq!(merged["status"], "degraded");
    let info = json(&d.path("merged/dist.json"));
    assert_eq!(info["degraded"], true);
    let lost = &info["lost"][0];
    assert_eq!(lost["agent"], 3);
    assert_eq!(lost["phase"], "run");
    // The loss is on the timeline: run intervals go from 4 agents to 3.
    let csv = std::fs::read_to_string(d.path("merged/intervals.csv")).unwrap();
    let agents_by_interval: Vec<(usize, String)> = csv
        .lines()
        .filter(|l| l.starts_with("run,") && l.contains(",READ,"))
        .map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            (f[1].parse().unwrap(), f.last().unwrap().to_string())
        })
        .collect();
    assert_eq!(agents_by_interval.first().unwrap().1, "4");
    assert_eq!(agents_by_interval.last().unwrap().1, "3");
    let first_three = agents_by_interval
        .iter()
        .position(|(_, a)| a == "3")
        .unwrap();
    assert!(
        agents_by_interval[first_three..]
            .iter()
            .all(|(_, a)| a == "3"),
        "{agents_by_interval:?}"
    );
    // The survivors' operations are all in the merged run, with what the lost one posted.
    let survivors: u64 = (0..3)
        .map(|i| {
            let a = json(&d.path(&format!("agent{i}/summary.json")));
            counts(phase(&a, "run"))["READ"]
        })
        .sum();
    let merged_reads = counts(phase(&merged, "run"))["READ"];
    assert!(merged_reads > survivors, "{merged_reads} vs {survivors}");
    assert!(merged["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .any(|w| w.as_str().unwrap().contains("agent 3 lost")));
    assert_eq!(keys_left(&url), 0);
}

#[test]
fn a_killed_coordinator_leaves_agents_to_finish_and_dist_merge_rebuilds_the_run() {
    let tmp = tempfile::tempdir().unwrap();
    let (_etcd, url) = etcd(tmp.path(), 1);
    let (_m, port) = memcached(tmp.path(), "mc", false);
    let run = s(&[
        "--store",
        "memcached",
        "--store-opt",
        &format!("addr=127.0.0.1:{port}"),
        "-P",
        "workloadc",
        "--records",
        "1000",
        "--duration",
        "4s",
        "--threads",
        "1",
        "--rate",
        "2000",
        "--arrival",
        "fixed",
        "--interval",
        "500ms",
        "--telemetry-interval",
        "0",
    ]);
    let mut d = Dist::start(&url, "orphan", 2, &["--lease-ttl", "2s"], &run);
    wait_for_phase(&d.path("agent0"), "run");
    std::thread::sleep(Duration::from_millis(1000));
    let _ = d.coord.kill();
    let _ = d.coord.wait();
    for a in &mut d.agents {
        assert_eq!(wait_exit(a, Duration::from_secs(30)), 0);
    }
    let out = d.path("offline");
    kvmeter()
        .args(["dist", "merge"])
        .arg(d.path("agent0"))
        .arg(d.path("agent1"))
        .arg("--out")
        .arg(&out)
        .assert()
        .success();
    let merged = json(&out.join("summary.json"));
    assert_eq!(merged["status"], "completed");
    let a: Vec<Value> = (0..2)
        .map(|i| json(&d.path(&format!("agent{i}/summary.json"))))
        .collect();
    let sum: u64 = a.iter().map(|a| counts(phase(a, "run"))["READ"]).sum();
    let reads = counts(phase(&merged, "run"))["READ"];
    assert_eq!(reads, sum);
    // The rate is split: each agent offers 1000/s, phased half a gap apart; together 2000/s.
    for (i, m) in (0..2).map(|i| (i, json(&d.path(&format!("agent{i}/manifest.json"))))) {
        let ol = &m["plan"]["phases"][1]["open_loop"];
        assert_eq!(ol["rate"].as_f64().unwrap(), 1000.0);
        assert_eq!(ol["offset_gaps"].as_f64().unwrap_or(0.0), i as f64 * 0.5);
    }
    assert!(
        (7_600..=8_400).contains(&reads),
        "2000/s for 4 s offered: {reads} reads"
    );
    // The coordinator's keys expire with its lease; the agents revoked their own.
    let t = Instant::now();
    while keys_left(&url) > 0 {
        assert!(t.elapsed() < Duration::from_secs(10), "keys left in etcd");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Runs kvmeter to completion; (exit code, stderr).
fn fails(args: &[String]) -> (i32, String) {
    let o = kvmeter().args(args).output().unwrap();
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

fn one_error_line(err: &str) -> String {
    let lines: Vec<&str> = err.lines().filter(|l| l.starts_with("error:")).collect();
    assert_eq!(lines.len(), 1, "{err}");
    lines[0].to_string()
}

#[test]
fn bad_input_is_one_line_and_exit_2_and_leaves_nothing_in_etcd() {
    let tmp = tempfile::tempdir().unwrap();
    let (_etcd, url) = etcd(tmp.path(), 1);
    let (_m, port) = memcached(tmp.path(), "mc", false);
    let addr = format!("addr=127.0.0.1:{port}");
    let out = tmp.path().join("never");
    let run = |extra: &[&str]| {
        let mut v = s(&[
            "dist",
            "run",
            "--coord",
            &url,
            "--out",
            out.to_str().unwrap(),
            "--store",
            "memcached",
            "--store-opt",
            &addr,
            "-P",
            "workloadc",
            "--records",
            "100",
            "--ops",
            "100",
        ]);
        v.extend(s(extra));
        v
    };
    // Unreachable etcd, for the coordinator and for an agent.
    let dead = format!("http://127.0.0.1:{}", free_port());
    let mut v = run(&["--agents", "2"]);
    v[3] = dead.clone();
    let (code, err) = fails(&v);
    assert_eq!(code, 2);
    assert!(one_error_line(&err).contains("cannot reach etcd"), "{err}");
    let (code, err) = fails(&s(&["agent", "--coord", &dead, "--index", "0"]));
    assert_eq!(code, 2);
    assert!(one_error_line(&err).contains("cannot reach etcd"), "{err}");
    // Flags checked before etcd is touched.
    for (extra, expect) in [
        (vec!["--agents", "0"], "--agents 0"),
        (vec!["--agents", "2", "--lease-ttl", "1s"], "--lease-ttl 1s"),
        (vec!["--agents", "2", "--job", "a/b"], "--job 'a/b'"),
    ] {
        let (code, err) = fails(&run(&extra));
        assert_eq!(code, 2, "{extra:?}");
        assert!(one_error_line(&err).contains(expect), "{extra:?}: {err}");
    }
    let (code, err) = fails(&s(&[
        "dist",
        "run",
        "--coord",
        &url,
        "--agents",
        "2",
        "--store",
        "memcached",
    ]));
    assert_eq!(code, 2);
    assert!(
        one_error_line(&err).contains("needs --store-opt addr="),
        "{err}"
    );
    let o = kvmeter()
        .args(["agent", "--coord", &url])
        .env("SLURM_PROCID", "x")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("SLURM_PROCID='x'"));
    // No agent within the timeout: nothing run, nothing left.
    let (code, err) = fails(&run(&["--agents", "2", "--register-timeout", "1s"]));
    assert_eq!(code, 2);
    assert!(
        one_error_line(&err).contains(
            "0 of 2 agents registered under /kvmeter/default/ (missing: 0, 1); nothing was run"
        ),
        "{err}"
    );
    assert!(!out.exists());
    assert_eq!(keys_left(&url), 0);
    // A coordinator waiting for 2 agents: one registers; an index out of range, a taken index
    // and a wrong plan hash are refused; the wrong hash stops the coordinator too.
    let log = tmp.path().join("coord.log");
    let mut coord = Proc(spawn(&run(&["--agents", "2", "--job", "bad"]), &log));
    let agent = |extra: &[&str]| {
        let mut v = s(&["agent", "--coord", &url, "--job", "bad", "--wait", "10s"]);
        v.extend(s(extra));
        v
    };
    let first = tmp.path().join("agent0");
    let mut a0 = Proc(spawn(
        &agent(&["--index", "0", "--out", first.to_str().unwrap()]),
        &tmp.path().join("agent0.log"),
    ));
    let t = Instant::now();
    while !std::fs::read_to_string(tmp.path().join("agent0.log"))
        .unwrap_or_default()
        .contains("registered")
        && !first.exists()
    {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "agent 0 never registered"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let (code, err) = fails(&agent(&["--index", "5"]));
    assert_eq!(code, 2);
    assert!(
        one_error_line(&err)
            .contains("--index 5: out of range: the plan under /kvmeter/bad/ has 2 agents (0..1)"),
        "{err}"
    );
    let (code, err) = fails(&agent(&["--index", "0"]));
    assert_eq!(code, 2);
    assert!(one_error_line(&err).contains("--index 0: taken"), "{err}");
    let (code, err) = fails(&agent(&["--index", "1", "--plan-hash", "0123456789abcdef"]));
    assert_eq!(code, 2);
    assert!(
        one_error_line(&err).contains(
            "--plan-hash 0123456789abcdef: the plan published under /kvmeter/bad/ has hash"
        ),
        "{err}"
    );
    assert_eq!(wait_exit(&mut coord.0, Duration::from_secs(20)), 2);
    let coord_log = std::fs::read_to_string(&log).unwrap();
    assert!(
        one_error_line(&coord_log).contains("--plan-hash"),
        "{coord_log}"
    );
    assert!(!out.exists(), "the coordinator created its run directory");
    let code = wait_exit(&mut a0.0, Duration::from_secs(20));
    assert_ne!(code, 0, "agent 0 ran without a coordinator");
    assert_eq!(keys_left(&url), 0);
}

#[test]
fn on_agent_loss_abort_stops_the_run_and_an_etcd_leader_kill_does_not_disturb_it() {
    let tmp = tempfile::tempdir().unwrap();
    let (mut etcd_members, url) = etcd(tmp.path(), 3);
    let (_m, port) = memcached(tmp.path(), "mc", false);
    let run = |secs: &str| {
        s(&[
            "--store",
            "memcached",
            "--store-opt",
            &format!("addr=127.0.0.1:{port}"),
            "-P",
            "workloadc",
            "--records",
            "1000",
            "--duration",
            secs,
            "--threads",
            "1",
            "--target",
            "2000",
            "--interval",
            "500ms",
            "--telemetry-interval",
            "0",
        ])
    };
    // The etcd leader dies mid-run: the agents' data path does not notice, the run completes
    // with every interval merged from both agents.
    let mut d = Dist::start(&url, "leader", 2, &["--lease-ttl", "3s"], &run("5s"));
    wait_for_phase(&d.path("agent0"), "run");
    std::thread::sleep(Duration::from_millis(1000));
    let leader = (0..3)
        .find(|i| {
            let u = url.split(',').nth(*i).unwrap();
            etcd_post_one(u, "/v3/maintenance/status", "{}")
                .map(|v| v["leader"] == v["header"]["member_id"])
                .unwrap_or(false)
        })
        .expect("a leader");
    etcd_members[leader].0.kill().unwrap();
    assert_eq!(d.finish(), 0, "{}", d.log("coord.log"));
    let merged = json(&d.path("merged/summary.json"));
    assert_eq!(merged["status"], "completed", "{}", d.log("coord.log"));
    let run_phase = phase(&merged, "run");
    assert_eq!(run_phase["errors"], 0);
    // 2000/s for 5 s, paced: every interval of both agents is in.
    let reads = counts(run_phase)["READ"];
    assert!((9_000..=10_100).contains(&reads), "{reads}");
    let csv = std::fs::read_to_string(d.path("merged/intervals.csv")).unwrap();
    assert!(csv
        .lines()
        .filter(|l| l.starts_with("run,"))
        .all(|l| l.ends_with(",2")));
    drop(d);
    // --on-agent-loss abort: a killed agent stops the run (exit 1, the reason in the summary).
    let mut d = Dist::start(
        &url,
        "abort",
        2,
        &["--lease-ttl", "2s", "--on-agent-loss", "abort"],
        &run("30s"),
    );
    wait_for_phase(&d.path("agent1"), "run");
    std::thread::sleep(Duration::from_millis(500));
    let _ = d.agents[1].kill();
    let killed = Instant::now();
    assert_eq!(d.finish(), 1, "{}", d.log("coord.log"));
    assert!(
        killed.elapsed() < Duration::from_secs(20),
        "the run was not stopped"
    );
    let merged = json(&d.path("merged/summary.json"));
    assert_eq!(merged["status"], "failed");
    assert!(merged["error"]
        .as_str()
        .unwrap()
        .contains("agent 1 was lost"));
    assert_eq!(keys_left(&url), 0);
}
