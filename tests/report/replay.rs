//! `kvmeter replay` end to end (issue 32): traces the tests write themselves in Twitter's
//! format, with known counts per operation, per key and per second, replayed against memcached
//! (whose own `stats` count what arrived) and an embedded store.

use crate::common;

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
    let per_second = [6u64, 20, 10];
    let amplify = 2u64;
    let tr = trace(t.path(), &per_second, &["get", "set"], 1000);
    let out = t.path().join("run");
    kvmeter()
        .arg("replay")
        .arg(&tr.path)
        .args(["--store", "lmdb", "--store-opt", "sync=nosync"])
        .args(["--amplify", "2", "--threads", "3"])
        .args(["--telemetry-interval", "0", "--interval", "1s"])
        .arg("--out")
        .arg(&out)
        .timeout(Duration::from_secs(60))
        .assert()
        .success();
    // docs/replay.md "Times": the first record is due 10 ms after the phase starts and the n
    // records of one whole second (after --amplify) are spread evenly within it, so record j
    // of second s is due at s + 10 ms + j/n s. An operation belongs to the interval in which
    // it completed, never before it was due.
    let mut due = Vec::new();
    for (s, n) in per_second.iter().enumerate() {
        let n = n * amplify;
        due.extend((0..n).map(|j| s as f64 + 0.010 + j as f64 / n as f64));
    }
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
    // By each boundary b: no more completed than were due before b (nothing early), and at
    // least those due 100 ms before it (a loaded host may finish the last few of a second in
    // the next interval; a replay that ignored the seconds would be off by whole seconds).
    let mut done = 0;
    for b in 1..=per_second.len() as u64 {
        done += per.get(&(b - 1)).copied().unwrap_or(0);
        let due_by = |t: f64| due.iter().filter(|d| **d < t).count() as u64;
        let (most, least) = (due_by(b as f64), due_by(b as f64 - 0.1));
        assert!(
            (least..=most).contains(&done),
            "by {b} s: {done} completed, {least}..={most} expected\n{text}"
        );
    }
    assert_eq!(per.values().sum::<u64>(), 72, "{text}");
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
    // Every line is parsed before anything is created: the bad line 11 (not only a bad first
    // line) is refused with file:line, exit 2, and no run directory.
    let o = run(&[], "refused");
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("bad.csv:11:"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(!dir.join("refused").exists());
    // A truncated last line alone (a trace copied while it was written) is refused too.
    let cut = dir.join("cut.csv");
    std::fs::write(&cut, format!("{}101,k2,2,10", line(100, "k1", 10, "get"))).unwrap();
    let o = kvmeter()
        .arg("replay")
        .arg(&cut)
        .args(["--store", "lmdb", "--out"])
        .arg(dir.join("cut"))
        .timeout(Duration::from_secs(30))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("cut.csv:2:"));
    assert!(!dir.join("cut").exists());
    // A bad first line.
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
    // --skip-bad: counted, and the good records replayed.
    let o = run(&["--skip-bad"], "skipped");
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

/// Replays `trace` in `format` against `store` (embedded) at `--speed 100`, checks the run's
/// counts per metric (READ, INSERT, DELETE, SCAN) against `metrics`, and returns replay.json.
fn replay_other(
    dir: &Path,
    trace: &Path,
    format: &str,
    store: &str,
    metrics: &[(&str, u64)],
) -> serde_json::Value {
    let out = dir.join(format!("run-{format}"));
    kvmeter()
        .arg("replay")
        .arg(trace)
        .args(["--trace-format", format, "--store", store, "--speed", "100"])
        .args(["--threads", "3", "--telemetry-interval", "0"])
        .arg("--out")
        .arg(&out)
        .timeout(Duration::from_secs(60))
        .assert()
        .success();
    let s = json(&out.join("summary.json"));
    let p = phase(&s, "replay");
    for (m, n) in metrics {
        assert_eq!(count(p, m), *n, "{format} {m}: {p}");
    }
    let m = json(&out.join("manifest.json"));
    assert_eq!(m["plan"]["phases"][0]["replay"]["format"], format);
    json(&out.join("replay.json"))
}

fn split_by(
    all: &BTreeMap<String, u64>,
    unreplayable: &[&str],
) -> (BTreeMap<String, u64>, BTreeMap<String, u64>) {
    all.iter()
        .map(|(k, v)| (k.clone(), *v))
        .partition(|(k, _)| !unreplayable.contains(&k.as_str()))
}

#[test]
fn a_rocksdb_human_readable_trace_replays_its_counts_against_rocksdb() {
    let t = tempfile::tempdir().unwrap();
    // trace_analyzer's `hexkey type_id cf_id value_size time_us`, 40 records over 2 s: every
    // type_id 0..8 in turn (get, put, delete, single_delete, range_delete, merge,
    // iterator_Seek, iterator_SeekForPrev, multiget).
    let names = [
        "get",
        "put",
        "delete",
        "single_delete",
        "range_delete",
        "merge",
        "iterator_Seek",
        "iterator_SeekForPrev",
        "multiget",
    ];
    let mut text = String::new();
    let mut by_op = BTreeMap::<String, u64>::new();
    for i in 0..40u64 {
        let ty = (i % 9) as usize;
        let key: String = format!("key{}", i % 6)
            .bytes()
            .map(|b| format!("{b:02X}"))
            .collect();
        let time = 1_600_000_000_000_000 + i * 50_000;
        text += &format!("0x{key} {ty} 0 {} {time}\n", 10 + i);
        *by_op.entry(names[ty].into()).or_default() += 1;
    }
    let path = t.path().join("human_readable_trace.txt");
    std::fs::write(&path, text).unwrap();
    let (replayed, unreplayable) = split_by(
        &by_op,
        &["range_delete", "merge", "iterator_SeekForPrev", "multiget"],
    );
    let n = |op: &str| by_op.get(op).copied().unwrap_or(0);
    let metrics = [
        ("READ", n("get")),
        ("INSERT", n("put")),
        ("DELETE", n("delete") + n("single_delete")),
        ("SCAN", n("iterator_Seek")),
    ];
    // 0..40 by 9: types 0..3 five times, 4..8 four times.
    assert_eq!(metrics.map(|m| m.1), [5, 5, 10, 4]);
    let r = replay_other(t.path(), &path, "rocksdb", "rocksdb", &metrics);
    assert_eq!(as_counts(&r["replayed_by_op"]), replayed, "{r}");
    assert_eq!(as_counts(&r["unreplayable_by_op"]), unreplayable, "{r}");
    assert_eq!(r["records_read"], 40);
}

#[test]
fn a_cachebench_trace_replays_op_count_requests_per_line() {
    let t = tempfile::tempdir().unwrap();
    // cachebench's CSV: each line stands for op_count requests; ADD is not a kvmeter op.
    let mut text = String::from("op_time,key,key_size,op,op_count,size,cache_hits,ttl\n");
    let mut by_op = BTreeMap::<String, u64>::new();
    for i in 0..25u64 {
        let op = ["GET", "SET", "DELETE", "GET_LEASE", "ADD"][i as usize % 5];
        let n = 1 + i % 4;
        text += &format!(
            "{},{:x},16,{op},{n},{},0,0\n",
            1000 + 40 * i,
            0xabc0 + i % 7,
            50 + i
        );
        *by_op.entry(op.into()).or_default() += n;
    }
    let path = t.path().join("kvcache.csv");
    std::fs::write(&path, text).unwrap();
    let n = |op: &str| by_op.get(op).copied().unwrap_or(0);
    let metrics = [
        ("READ", n("GET") + n("GET_LEASE")),
        ("INSERT", n("SET")),
        ("DELETE", n("DELETE")),
    ];
    assert_eq!(metrics.map(|m| m.1), [25, 12, 13]);
    let r = replay_other(t.path(), &path, "cachebench", "lmdb", &metrics);
    let (replayed, unreplayable) = split_by(&by_op, &["ADD"]);
    assert_eq!(as_counts(&r["replayed_by_op"]), replayed, "{r}");
    assert_eq!(as_counts(&r["unreplayable_by_op"]), unreplayable, "{r}");
}

#[test]
fn a_redis_monitor_trace_replays_its_commands_and_counts_the_others() {
    let t = tempfile::tempdir().unwrap();
    // MONITOR's output, its first OK included; INCR and PING have no kvmeter op.
    let cmds: [(&str, &[&str]); 7] = [
        ("SET", &["\"v12345\""]),
        ("GET", &[]),
        ("HSET", &["\"f\"", "\"0123456789\""]),
        ("HGET", &["\"f\""]),
        ("DEL", &[]),
        ("INCR", &[]),
        ("PING", &[]),
    ];
    let mut text = String::from("OK\n");
    let mut by_op = BTreeMap::<String, u64>::new();
    for i in 0..50u64 {
        let (cmd, rest) = cmds[(i % 7) as usize];
        let key = match cmd {
            "PING" => String::new(),
            _ => format!(" \"user:{}\"", i % 5),
        };
        text += &format!(
            "1700000000.{:06} [0 127.0.0.1:51234] \"{cmd}\"{key}{}\n",
            i * 20_000,
            rest.iter().map(|a| format!(" {a}")).collect::<String>()
        );
        *by_op.entry(cmd.into()).or_default() += 1;
    }
    let path = t.path().join("monitor.log");
    std::fs::write(&path, text).unwrap();
    let n = |op: &str| by_op.get(op).copied().unwrap_or(0);
    let metrics = [
        ("READ", n("GET") + n("HGET")),
        ("INSERT", n("SET") + n("HSET")),
        ("DELETE", n("DEL")),
    ];
    assert_eq!(metrics.map(|m| m.1), [14, 15, 7]);
    let r = replay_other(t.path(), &path, "monitor", "lmdb", &metrics);
    let (replayed, unreplayable) = split_by(&by_op, &["INCR", "PING"]);
    assert_eq!(as_counts(&r["replayed_by_op"]), replayed, "{r}");
    assert_eq!(as_counts(&r["unreplayable_by_op"]), unreplayable, "{r}");
}
