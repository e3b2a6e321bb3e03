//! The event-driven engine's transports besides plain TCP (issue 30), against real servers on
//! loopback: Redis over TLS (rustls driven by hand on non-blocking sockets), memcached over
//! UDP (one datagram per request, replies put back in request order), and Redis behind
//! Sentinels (a killed primary: connections move to the replica the Sentinels promote), and
//! Redis Cluster (a socket per master, a killed master, a reshard followed through MOVED and ASK).
//! The servers' own counters are the ground truth; no timing is asserted.

use crate::common;

use common::servers::{mc_stats, tls_files, Launch};
use common::{count, json, kvmeter, phase};
use std::process::{Command, Stdio};
use std::time::Duration;

/// The tests here run one at a time: managed multi-server stores (Sentinels, clusters) and the
/// servers the tests start each pick free ports on loopback, and two picked at once can be the
/// same port.
static MANAGED: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    MANAGED.lock().unwrap_or_else(|p| p.into_inner())
}

/// Calls of `cmd` in Redis's INFO commandstats, asked over TLS.
fn tls_calls(port: u16, ca: &str, cmd: &str) -> u64 {
    let o = Command::new("redis-cli")
        .args(["--tls", "--cacert", ca, "-p", &port.to_string()])
        .args(["info", "commandstats"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("cmdstat_{cmd}:calls=")))
        .map(|r| r.split(',').next().unwrap().parse().unwrap())
        .unwrap_or(0)
}

#[test]
fn redis_over_tls_on_the_engine_matches_the_servers_own_counts() {
    let _one = one_at_a_time();
    let t = tempfile::tempdir().unwrap();
    let (ca, cert, key) = tls_files(t.path());
    let (_r, port) = Launch::redis_tls(t.path(), &cert, &key, &ca).start();
    let out = t.path().join("run");
    let o = kvmeter()
        .args(["run", "-P", "workloada", "--store", "redis"])
        .args(["--store-opt", &format!("addr=127.0.0.1:{port}")])
        .args([
            "--store-opt",
            "tls=true",
            "--store-opt",
            &format!("tls_ca={ca}"),
        ])
        .args(["--connections", "200", "--depth", "4", "--threads", "2"])
        .args(["--records", "2000", "--ops", "20000", "--seed", "3"])
        .args(["-p", "fieldcount=4", "-p", "fieldlength=300"])
        .args(["-p", "dataintegrity=true"])
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let s = json(&out.join("summary.json"));
    let (load, run) = (phase(&s, "load"), phase(&s, "run"));
    assert_eq!(count(load, "INSERT"), 2000);
    let (reads, updates) = (count(run, "READ"), count(run, "UPDATE"));
    assert_eq!(reads + updates, 20000);
    assert_eq!(run["errors"], 0, "{run}");
    assert_eq!(run["ops"]["VERIFY"]["ok"].as_u64(), Some(reads));
    assert_eq!(run["engine"]["connections"], 200);
    assert_eq!(run["engine"]["reconnects"], 0);
    // Every read was an HGETALL and every update an HSET the server decrypted and served (an
    // insert is a DEL and an HSET).
    assert_eq!(tls_calls(port, &ca, "hgetall"), reads);
    assert_eq!(tls_calls(port, &ca, "hset"), 2000 + updates);
}

fn errors_of(p: &serde_json::Value, op: &str, kind: &str) -> u64 {
    p["ops"][op]["errors"][kind].as_u64().unwrap_or(0)
}

#[test]
fn memcached_over_udp_on_the_engine_sends_every_request_as_a_datagram() {
    let _one = one_at_a_time();
    let (_mc, port) = Launch::memcached_udp().start();
    let before = mc_stats(port);
    let t = tempfile::tempdir().unwrap();
    let out = t.path().join("run");
    // Values of 3 x 1,000 bytes: replies of three datagrams, put back together in order.
    let o = kvmeter()
        .args(["run", "-P", "workloada", "--store", "memcached"])
        .args(["--store-opt", &format!("addr=127.0.0.1:{port}")])
        .args(["--store-opt", "udp=true"])
        .args(["--connections", "20", "--depth", "2", "--threads", "2"])
        .args(["--records", "1000", "--ops", "10000", "--seed", "5"])
        .args(["-p", "fieldcount=3", "-p", "fieldlength=1000"])
        .args(["-p", "writeallfields=true", "-p", "dataintegrity=true"])
        .args(["--store-opt", "timeout_ms=1000"])
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let s = json(&out.join("summary.json"));
    let (load, run) = (phase(&s, "load"), phase(&s, "run"));
    let after = mc_stats(port);
    let d = |k: &str| after[k] - before[k];
    // The 20 connections of each phase went over UDP: over TCP only the test's `stats` and
    // kvmeter's own session per phase (its readiness check and cleanup) and its statistics
    // connection per phase (`stats`), not 40.
    assert!(d("total_connections") <= 7, "{after:?}");
    let (reads, updates) = (count(run, "READ"), count(run, "UPDATE"));
    assert_eq!(reads + updates, 10000);
    // UDP may lose a datagram: a lost request or reply is a timeout, never a wrong answer.
    // (A record whose insert was lost is then not found.)
    let lost = errors_of(run, "READ", "timeout") + errors_of(run, "UPDATE", "timeout");
    let lost_load = errors_of(load, "INSERT", "timeout");
    assert_eq!(load["errors"].as_u64().unwrap(), lost_load, "{load}");
    let not_found = errors_of(run, "READ", "not_found") + errors_of(run, "UPDATE", "not_found");
    assert_eq!(run["errors"].as_u64().unwrap(), lost + not_found, "{run}");
    assert!(not_found == 0 || lost_load > 0, "{run}");
    assert!(lost + lost_load < 500, "{lost} {lost_load}");
    let read_ok = run["ops"]["READ"]["ok"].as_u64().unwrap();
    // Every read that came back whole was checked against the value its key derives.
    assert_eq!(run["ops"]["VERIFY"]["ok"].as_u64(), Some(read_ok));
    assert_eq!(count(run, "VERIFY"), read_ok);
    // The server answered at least every get kvmeter counted, at most every one it sent,
    // plus the ping's one UDP get (kvmeter checks the UDP port answers before it starts).
    let gets = d("cmd_get") - 1;
    assert!(gets >= read_ok && gets <= reads, "{gets} {read_ok} {reads}");
    assert!(d("cmd_set") <= 1000 + updates && d("cmd_set") + lost + lost_load >= 1000 + updates);
    assert_eq!(run["engine"]["connections"], 20);
}

#[test]
fn the_engine_follows_sentinels_to_the_promoted_replica() {
    let _one = one_at_a_time();
    let t = tempfile::tempdir().unwrap();
    let out = t.path().join("run");
    let o = kvmeter()
        .args(["run", "-P", "workloada", "--store", "redis"])
        .args(["--store-opt", "replicas=1", "--store-opt", "sentinels=3"])
        .args(["--records", "1000", "--connections", "20", "--depth", "2"])
        .args(["--duration", "9s", "--fault", "at=2s,kill=primary"])
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let s = json(&out.join("summary.json"));
    let run = phase(&s, "run");
    assert_eq!(run["outcome"], "completed");
    let events = run["fault_events"].as_array().unwrap();
    let promoted = events
        .iter()
        .find(|e| e["event"] == "primary")
        .expect("a new primary");
    assert_eq!(promoted["member"], "replica:0");
    // Every connection was opened again, on the server the Sentinels named, and served there:
    // the last second's operations all succeeded.
    assert!(
        run["engine"]["reconnects"].as_u64().unwrap() >= 20,
        "{}",
        run["engine"]
    );
    let tl = std::fs::read_to_string(out.join("timeline.csv")).unwrap();
    let mut lines = tl.lines();
    let head: Vec<&str> = lines.next().unwrap().split(',').collect();
    let col = |n: &str| {
        head.iter()
            .position(|h| *h == n)
            .unwrap_or_else(|| panic!("{n}: {head:?}"))
    };
    let (ph, t_s, ok, errs) = (col("phase"), col("t_start_s"), col("ok"), col("errors"));
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    let num = |r: &Vec<&str>, c: usize| r[c].parse::<f64>().unwrap();
    let last: Vec<&Vec<&str>> = rows
        .iter()
        .filter(|r| r[ph] == "run" && num(r, t_s) >= 8.0)
        .collect();
    assert!(!last.is_empty());
    assert!(last.iter().map(|r| num(r, ok)).sum::<f64>() > 0.0, "{tl}");
    assert_eq!(last.iter().map(|r| num(r, errs)).sum::<f64>(), 0.0, "{tl}");
}

fn sent_to(p: &serde_json::Value, member: &str) -> u64 {
    p["sent_to"][member].as_u64().unwrap_or(0)
}

#[test]
fn redis_cluster_on_the_engine_sends_each_key_to_its_masters_socket() {
    let _one = one_at_a_time();
    let t = tempfile::tempdir().unwrap();
    let out = t.path().join("run");
    let o = kvmeter()
        .args(["run", "-P", "workloada", "--store", "redis"])
        .args(["--store-opt", "cluster=3"])
        .args(["--connections", "40", "--depth", "4", "--threads", "2"])
        .args(["--records", "2000", "--ops", "20000", "--seed", "11"])
        .args(["-p", "dataintegrity=true"])
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let s = json(&out.join("summary.json"));
    let (load, run) = (phase(&s, "load"), phase(&s, "run"));
    assert_eq!(load["errors"], 0, "{load}");
    assert_eq!(run["errors"], 0, "{run}");
    let reads = count(run, "READ");
    assert_eq!(reads + count(run, "UPDATE"), 20000);
    // A MOVED reply would be an error: every key went to its slot's master at once, and every
    // value read back was the one written for its key.
    assert_eq!(run["ops"]["VERIFY"]["ok"].as_u64(), Some(reads));
    let masters = ["master:0", "master:1", "master:2"];
    // An insert is DEL + HSET on one socket (one operation), a read HGETALL, an update HSET.
    assert_eq!(masters.iter().map(|m| sent_to(load, m)).sum::<u64>(), 2000);
    assert_eq!(masters.iter().map(|m| sent_to(run, m)).sum::<u64>(), 20000);
    for m in masters {
        // Slots are split in three equal ranges: each master gets about a third.
        assert!(sent_to(run, m) > 20000 / 5, "{m}: {}", run["sent_to"]);
    }
    assert_eq!(run["engine"]["connections"], 40);
    assert_eq!(run["engine"]["reconnects"], 0);
}

#[test]
fn a_killed_cluster_master_stops_its_keys_on_the_engine_while_the_others_go_on() {
    let _one = one_at_a_time();
    let t = tempfile::tempdir().unwrap();
    let out = t.path().join("run");
    let o = kvmeter()
        .args(["run", "-P", "workloada", "--store", "redis"])
        .args([
            "--store-opt",
            "cluster=3",
            "--store-opt",
            "cluster_replicas=1",
        ])
        .args(["--connections", "30", "--depth", "2", "--records", "2000"])
        .args(["-p", "dataintegrity=true", "--duration", "8s"])
        .args(["--fault", "at=2s,kill=master:1"])
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let s = json(&out.join("summary.json"));
    let run = phase(&s, "run");
    assert_eq!(run["outcome"], "completed");
    // The victim's keys failed fast (io) until its replica took over; then they went there.
    assert!(sent_to(run, "replica:1") > 0, "{}", run["sent_to"]);
    assert_eq!(sent_to(run, "replica:0") + sent_to(run, "replica:2"), 0);
    let read_errors = run["ops"]["READ"]["errors"]["io"].as_u64().unwrap_or(0);
    assert!(read_errors > 0, "{run}");
    let unexpected = run["ops"]["VERIFY"]["errors"]["unexpected_state"]
        .as_u64()
        .unwrap_or(0);
    assert_eq!(unexpected, 0, "{run}");
    let f = &run["faults"][0];
    let unavailable = f["unavailable_s"].as_f64().unwrap();
    assert!((0.5..6.0).contains(&unavailable), "{f}");
    let at = f["at_s"].as_f64().unwrap();
    let tl = std::fs::read_to_string(out.join("timeline.csv")).unwrap();
    let rows: Vec<Vec<&str>> = tl.lines().skip(1).map(|l| l.split(',').collect()).collect();
    // phase,t_start_s,t_end_s,class,ok,...
    let ok = |class: &str, from: f64, to: f64| -> u64 {
        rows.iter()
            .filter(|r| r[0] == "run" && r[3] == class)
            .filter(|r| {
                let s: f64 = r[1].parse().unwrap();
                s >= from && s < to
            })
            .map(|r| r[4].parse::<u64>().unwrap())
            .sum()
    };
    let (gap_from, gap_to) = (at + 0.15, at + unavailable.min(1.0) - 0.05);
    assert_eq!(ok("affected", gap_from, gap_to), 0, "{tl}");
    assert!(ok("rest", gap_from, gap_to) > 0, "{tl}");
    assert!(ok("affected", at + unavailable + 0.3, 8.0) > 0, "{tl}");
}

#[test]
fn a_reshard_mid_run_is_followed_through_moved_and_ask_on_the_engine() {
    let _one = one_at_a_time();
    let t = tempfile::tempdir().unwrap();
    let out = t.path().join("run");
    let mut k = std::process::Command::new(common::bin());
    k.env("NO_COLOR", "1")
        .args(["run", "-P", "workloada", "--store", "redis"])
        .args(["--store-opt", "cluster=3", "--records", "2000"])
        .args(["--connections", "20", "--depth", "2", "--duration", "10s"])
        .args(["--timeline", "100ms"])
        .args(["-p", "dataintegrity=true"])
        .arg("--out")
        .arg(&out)
        .stdout(Stdio::null())
        // A file, not a pipe: nobody reads a pipe until kvmeter ends, and a full one would
        // stop kvmeter at its next progress line.
        .stderr(std::fs::File::create(t.path().join("stderr")).unwrap());
    let mut k = k.spawn().unwrap();
    let t0 = std::time::Instant::now();
    while !std::fs::read_to_string(out.join("intervals.csv"))
        .unwrap_or_default()
        .lines()
        .any(|l| l.starts_with("run,"))
    {
        let said = || std::fs::read_to_string(t.path().join("stderr")).unwrap_or_default();
        if let Some(st) = k.try_wait().unwrap() {
            panic!("kvmeter ended ({st}) before its run phase: {}", said());
        }
        assert!(
            t0.elapsed() < Duration::from_secs(120),
            "no run interval: {}",
            said()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let m = json(&out.join("manifest.json"));
    let port = |i: usize| {
        let a = m["store"]["server"]["members"][i]["addr"].as_str().unwrap();
        a.rsplit(':').next().unwrap().to_string()
    };
    let id = |p: &str| {
        let o = Command::new("redis-cli")
            .args(["-p", p, "cluster", "myid"])
            .output()
            .unwrap();
        String::from_utf8_lossy(&o.stdout).trim().to_string()
    };
    let (p0, p1) = (port(0), port(1));
    let masters = m["store"]["server"]["members"].as_array().unwrap().len();
    // redis-cli moves 2,000 of master:0's slots to master:1, key by key (MIGRATING/IMPORTING:
    // ASK for keys already moved), then hands each slot over (MOVED).
    let r = Command::new("redis-cli")
        .args(["--cluster", "reshard", &format!("127.0.0.1:{p0}")])
        .args(["--cluster-from", &id(&p0), "--cluster-to", &id(&p1)])
        .args(["--cluster-slots", "2000", "--cluster-yes"])
        .output()
        .unwrap();
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    // No slot is migrating any more, so no ASK is answered from here on: the masters' count
    // of ASKING calls (asked while kvmeter, which owns the cluster, still runs) is final.
    std::thread::sleep(Duration::from_millis(300));
    let asking: u64 = (0..masters)
        .map(|i| {
            let o = Command::new("redis-cli")
                .args(["-p", &port(i), "info", "commandstats"])
                .output()
                .unwrap();
            let text = String::from_utf8_lossy(&o.stdout).to_string();
            text.lines()
                .find_map(|l| l.strip_prefix("cmdstat_asking:calls="))
                .map(|v| v.split(',').next().unwrap().parse::<u64>().unwrap())
                .unwrap_or(0)
        })
        .sum();
    assert!(
        k.try_wait().unwrap().is_none(),
        "the reshard outlasted the run: the ASKING count was read too late"
    );
    let st = k.wait().unwrap();
    let said = std::fs::read_to_string(t.path().join("stderr")).unwrap_or_default();
    assert!(st.success(), "{said}");
    let s = json(&out.join("summary.json"));
    let run = phase(&s, "run");
    assert_eq!(run["outcome"], "completed");
    // Every redirect was followed (reads and updates are one command each): no error, no
    // value read wrong. Each ASK's ASKING reached a master: the servers' own count of ASKING
    // calls equals kvmeter's count of requests sent again after ASK.
    assert_eq!(run["errors"], 0, "{}", run["error_samples"]);
    let unexpected = run["ops"]["VERIFY"]["errors"]["unexpected_state"]
        .as_u64()
        .unwrap_or(0);
    assert_eq!(unexpected, 0, "{run}");
    let engine = &run["engine"];
    let moved = engine["moved"].as_u64().unwrap_or(0);
    eprintln!("redirects followed: {engine}; ASKING calls by the masters' count: {asking}");
    assert!(moved > 0, "{engine}");
    assert_eq!(engine["asked"].as_u64().unwrap_or(0), asking, "{engine}");
    // After the reshard the map was asked again: master:1 served the moved slots' keys, and
    // the last second had no error.
    assert!(
        sent_to(run, "master:1") > sent_to(run, "master:0"),
        "{}",
        run["sent_to"]
    );
    let tl = std::fs::read_to_string(out.join("timeline.csv")).unwrap();
    let last_errors: u64 = tl
        .lines()
        .skip(1)
        .map(|l| l.split(',').collect::<Vec<_>>())
        .filter(|r| r[0] == "run" && r[1].parse::<f64>().unwrap() >= 9.0)
        .map(|r| r[6].parse::<u64>().unwrap())
        .sum();
    assert_eq!(last_errors, 0, "{tl}");
}
