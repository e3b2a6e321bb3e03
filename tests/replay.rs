//! `kvmeter replay` end to end (issue 32): traces the tests write themselves in Twitter's
//! format, with known counts per operation, per key and per second, replayed against memcached
//! (whose own `stats` count what arrived) and an embedded store.

mod common;

use common::servers::{mc_stats, memcached};
use common::{count, json, kvmeter, phase};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

/// One Twitter-format line: `timestamp,key,key size,value size,client,op,ttl`.
fn line(t: u64, key: &str, vsize: u64, op: &str) -> String {
    format!("{t},{key},{},{vsize},7,{op},0\n", key.len())
}

/// A trace of `per_second[s]` records in second s (base time 1_600_000_000), cycling through
/// `ops` and over `keys` keys; returns the file and its counts by op and by (op, key).
struct Trace {
    path: PathBuf,
    by_op: BTreeMap<String, u64>,
    by_key: BTreeMap<(String, String), u64>,
}

fn trace(dir: &Path, per_second: &[u64], ops: &[&str], keys: u64) -> Trace {
    let mut text = String::new();
    let (mut by_op, mut by_key) = (BTreeMap::new(), BTreeMap::new());
    let mut i = 0u64;
    for (s, n) in per_second.iter().enumerate() {
        for _ in 0..*n {
            let op = ops[(i % ops.len() as u64) as usize];
            let key = format!("key:{}", (i * 7) % keys);
            text.push_str(&line(1_600_000_000 + s as u64, &key, 100 + i % 50, op));
            *by_op.entry(op.to_string()).or_insert(0) += 1;
            *by_key.entry((op.to_string(), key)).or_insert(0) += 1;
            i += 1;
        }
    }
    let path = dir.join("trace.csv");
    std::fs::write(&path, text).unwrap();
    Trace {
        path,
        by_op,
        by_key,
    }
}

fn sum(m: &BTreeMap<String, u64>, ops: &[&str]) -> u64 {
    ops.iter().map(|o| m.get(*o).copied().unwrap_or(0)).sum()
}

fn as_counts(v: &serde_json::Value) -> BTreeMap<String, u64> {
    v.as_object()
        .unwrap()
        .iter()
        .map(|(k, n)| (k.clone(), n.as_u64().unwrap()))
        .collect()
}

#[test]
fn replayed_counts_per_op_equal_the_traces_and_memcacheds_own_stats() {
    let t = tempfile::tempdir().unwrap();
    let (_mc, port) = memcached(t.path(), "mc", true);
    let ops = [
        "get", "set", "gets", "add", "get", "replace", "delete", "incr", "get", "append",
    ];
    let tr = trace(t.path(), &[120, 200, 80], &ops, 37);
    let before = mc_stats(port);
    let out = t.path().join("run");
    kvmeter()
        .arg("replay")
        .arg(&tr.path)
        .args(["--store", "memcached", "--store-opt"])
        .arg(format!("addr=127.0.0.1:{port}"))
        .args([
            "--speed",
            "10",
            "--threads",
            "4",
            "--telemetry-interval",
            "0",
        ])
        .arg("--out")
        .arg(&out)
        .timeout(Duration::from_secs(60))
        .assert()
        .success();
    let after = mc_stats(port);
    let d = |k: &str| after[k] - before.get(k).copied().unwrap_or(0);
    let (reads, writes, deletes) = (
        sum(&tr.by_op, &["get", "gets"]),
        sum(&tr.by_op, &["set", "add", "replace"]),
        sum(&tr.by_op, &["delete"]),
    );
    assert_eq!((reads, writes, deletes), (160, 120, 40));
    // kvmeter's own counts.
    let s = json(&out.join("summary.json"));
    let p = phase(&s, "replay");
    assert_eq!(count(p, "READ"), reads, "{p}");
    assert_eq!(count(p, "INSERT"), writes, "{p}");
    assert_eq!(count(p, "DELETE"), deletes, "{p}");
    // memcached's.
    assert_eq!(d("cmd_get"), reads);
    assert_eq!(d("cmd_set"), writes);
    assert_eq!(d("delete_hits") + d("delete_misses"), deletes);
    assert_eq!(d("incr_hits") + d("incr_misses"), 0);
    // The run directory's record of the replay.
    let r = json(&out.join("replay.json"));
    let mut replayed = tr.by_op.clone();
    let unreplayable: BTreeMap<String, u64> = ["incr", "append"]
        .iter()
        .map(|o| (o.to_string(), replayed.remove(*o).unwrap()))
        .collect();
    assert_eq!(as_counts(&r["replayed_by_op"]), replayed, "{r}");
    assert_eq!(as_counts(&r["unreplayable_by_op"]), unreplayable, "{r}");
    assert_eq!(r["records_read"], 400);
    assert_eq!(r["not_sent"], 0);
    assert_eq!(r["ended_by"], "end of trace");
    let m = json(&out.join("manifest.json"));
    common::validate("manifest.schema.json", &m);
    let rp = &m["plan"]["phases"][0]["replay"];
    let bytes = std::fs::read(&tr.path).unwrap();
    assert_eq!(rp["trace_bytes"], bytes.len() as u64, "{rp}");
    assert_eq!(rp["format"], "twitter");
    assert_eq!(rp["speed"], 10.0);
    assert_eq!(rp["trace_sha256"].as_str().unwrap().len(), 64);
    // Per key: memcached's -vv log names every command it served with its key.
    let log = std::fs::read_to_string(t.path().join("mc.log")).unwrap();
    let mut served: BTreeMap<(String, String), u64> = BTreeMap::new();
    for l in log.lines() {
        let mut f = l.split_whitespace();
        let (Some(_conn), Some(cmd), Some(key)) = (f.next(), f.next(), f.next()) else {
            continue;
        };
        if ["get", "set", "delete"].contains(&cmd) && key.starts_with("key:") {
            *served
                .entry((cmd.to_string(), key.to_string()))
                .or_insert(0) += 1;
        }
    }
    let mut want: BTreeMap<(String, String), u64> = BTreeMap::new();
    for ((op, key), n) in &tr.by_key {
        let cmd = match op.as_str() {
            "get" | "gets" => "get",
            "set" | "add" | "replace" => "set",
            "delete" => "delete",
            _ => continue,
        };
        *want.entry((cmd.to_string(), key.clone())).or_insert(0) += n;
    }
    assert_eq!(served, want);
}

#[test]
fn at_speed_1_the_intervals_follow_the_traces_seconds() {
    let t = tempfile::tempdir().unwrap();
    let tr = trace(t.path(), &[6, 20, 10], &["get", "set"], 1000);
    let out = t.path().join("run");
    kvmeter()
        .arg("replay")
        .arg(&tr.path)
        .args(["--store", "lmdb", "--amplify", "2", "--threads", "3"])
        .args(["--telemetry-interval", "0", "--interval", "1s"])
        .arg("--out")
        .arg(&out)
        .timeout(Duration::from_secs(60))
        .assert()
        .success();
    // Records are due at second + 10 ms + i/n s: each second's (× 2 copies) completes in its
    // interval.
    let text = std::fs::read_to_string(out.join("intervals.csv")).unwrap();
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let col = |n: &str| header.iter().position(|h| *h == n).unwrap();
    let (ph, iv, me, co) = (col("phase"), col("interval"), col("metric"), col("count"));
    let mut per: BTreeMap<u64, u64> = BTreeMap::new();
    for f in lines.map(|l| l.split(',').collect::<Vec<_>>()) {
        if f[ph] == "replay" && (f[me] == "READ" || f[me] == "INSERT") {
            *per.entry(f[iv].parse().unwrap()).or_insert(0) += f[co].parse::<u64>().unwrap();
        }
    }
    let got: Vec<u64> = per.values().copied().filter(|n| *n > 0).collect();
    assert_eq!(got, [12, 40, 20], "{text}");
    let s = json(&out.join("summary.json"));
    let p = phase(&s, "replay");
    // Nothing is sent before its time: the last record is due at 2 s + 10 ms + 19/20 s.
    assert!(p["wall_seconds"].as_f64().unwrap() > 2.9, "{p}");
    assert_eq!(count(p, "READ") + count(p, "INSERT"), 72);
}

#[test]
fn a_stalled_store_shows_in_from_intended_latency_not_in_from_send() {
    let t = tempfile::tempdir().unwrap();
    let (mc, port) = memcached(t.path(), "mc", false);
    // 200 records a second for 3 s: 100 of them fall in a 500 ms stall.
    let tr = trace(t.path(), &[200, 200, 200], &["get", "set"], 500);
    let out = t.path().join("run");
    let mut child = std::process::Command::new(common::bin())
        .arg("replay")
        .arg(&tr.path)
        .args(["--store", "memcached", "--store-opt"])
        .arg(format!("addr=127.0.0.1:{port}"))
        .args(["--threads", "2", "--interval", "200ms"])
        .args(["--telemetry-interval", "0"])
        .arg("--out")
        .arg(&out)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    common::servers::wait_for_phase(&out, "replay");
    std::thread::sleep(Duration::from_millis(700));
    let pid = mc.0.id() as i32;
    unsafe { libc::kill(pid, libc::SIGSTOP) };
    std::thread::sleep(Duration::from_millis(500));
    unsafe { libc::kill(pid, libc::SIGCONT) };
    assert_eq!(
        common::servers::wait_exit(&mut child, Duration::from_secs(30)),
        0
    );
    let s = json(&out.join("summary.json"));
    let p = phase(&s, "replay");
    // Writes always succeed (reads of keys not written yet miss, and only successful calls
    // have latency figures). ~50 of 300 writes (17 %) were due during the stall and waited
    // for its end, 0 to 500 ms: the 90th percentile from intended is ~200 ms. Only the 2 in
    // flight when it began (of 600) waited on the wire.
    let w = &p["ops"]["INSERT"];
    let intended_p90 = w["intended_latency_us"]["p90"].as_f64().unwrap();
    let send_p90 = w["latency_us"]["p90"].as_f64().unwrap();
    assert!(intended_p90 > 100_000.0, "{w}");
    assert!(send_p90 < 50_000.0, "{w}");
    let rj = json(&out.join("replay.json"));
    assert!(rj["behind"].as_u64().unwrap() >= 20, "{rj}");
    assert_eq!(count(p, "READ") + count(p, "INSERT"), 600);
}

#[test]
fn bad_lines_are_refused_with_file_and_line_or_counted_with_skip_bad() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path();
    let mut text = String::new();
    for i in 0..10 {
        text.push_str(&line(100, &format!("k{i}"), 10, "get"));
    }
    text.push_str("100,k,3,ten,7,get,0\n"); // line 11: a value size that is not a number
    text.push_str(&line(101, "k1", 10, "set"));
    text.push_str("101,k2,2,10"); // line 13: truncated
    let path = dir.join("bad.csv");
    std::fs::write(&path, &text).unwrap();
    let run = |extra: &[&str], out: &str| {
        kvmeter()
            .arg("replay")
            .arg(&path)
            .args([
                "--store",
                "lmdb",
                "--telemetry-interval",
                "0",
                "--speed",
                "100",
            ])
            .args(extra)
            .arg("--out")
            .arg(dir.join(out))
            .timeout(Duration::from_secs(60))
            .output()
            .unwrap()
    };
    // --check: every line before anything is created.
    let o = run(&["--check"], "checked");
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("bad.csv:11:"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(!dir.join("checked").exists());
    // A bad first line: refused before anything is created, without --check.
    let first = dir.join("first.csv");
    std::fs::write(&first, "x,k,1,10,7,get,0\n").unwrap();
    let o = kvmeter()
        .arg("replay")
        .arg(&first)
        .args(["--store", "lmdb", "--out"])
        .arg(dir.join("first"))
        .timeout(Duration::from_secs(30))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("first.csv:1:"));
    assert!(!dir.join("first").exists());
    // Without --check, the replay stops at the bad line: the run fails naming it.
    let o = run(&[], "stops");
    assert_eq!(o.status.code(), Some(1));
    let s = json(&dir.join("stops/summary.json"));
    assert!(s["error"].as_str().unwrap().contains("bad.csv:11:"), "{s}");
    // --skip-bad: counted, and the good records replayed.
    let o = run(&["--skip-bad", "--check"], "skipped");
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    let r = json(&dir.join("skipped/replay.json"));
    assert_eq!(r["bad_lines"], 2, "{r}");
    assert_eq!(as_counts(&r["replayed_by_op"])["get"], 10);
    assert_eq!(as_counts(&r["replayed_by_op"])["set"], 1);
    assert!(r["first_bad_lines"][1]
        .as_str()
        .unwrap()
        .contains("bad.csv:13:"));
    // A missing trace: one line, exit 2.
    let o = kvmeter()
        .args(["replay", "/nonexistent/trace.csv", "--store", "lmdb"])
        .timeout(Duration::from_secs(30))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("/nonexistent/trace.csv"));
}

#[test]
fn ops_skip_and_duration_windows() {
    let t = tempfile::tempdir().unwrap();
    let tr = trace(t.path(), &[50, 50], &["get", "set", "delete"], 100);
    let run = |extra: &[&str], out: &str| -> serde_json::Value {
        let dir = t.path().join(out);
        kvmeter()
            .arg("replay")
            .arg(&tr.path)
            .args(["--store", "lmdb", "--telemetry-interval", "0"])
            .args(extra)
            .arg("--out")
            .arg(&dir)
            .timeout(Duration::from_secs(60))
            .assert()
            .success();
        json(&dir.join("replay.json"))
    };
    let r = run(&["--ops", "30", "--skip", "10", "--speed", "100"], "ops");
    assert_eq!(r["skipped"], 10);
    assert_eq!(r["ended_by"], "--ops");
    // Records 10..40 of get, set, delete in turn: 10 of each.
    assert_eq!(
        as_counts(&r["replayed_by_op"]),
        [("delete", 10), ("get", 10), ("set", 10)]
            .iter()
            .map(|(k, v)| (k.to_string(), *v))
            .collect()
    );
    // At speed 1 the second second starts at 1.01 s: a 1 s duration ends before it.
    let r = run(&["--duration", "1s"], "dur");
    assert_eq!(r["ended_by"], "--duration");
    let total: u64 = as_counts(&r["replayed_by_op"]).values().sum();
    assert_eq!(total, 50, "{r}");
}
