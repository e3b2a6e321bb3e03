//! memcached's and Redis's own statistics on the run's clock (issue 43), against the servers'
//! own accounting read by the test on its own connection (`stats`, `INFO`): each server is
//! given less memory than the data, so it evicts, and kvmeter's per-phase increases of
//! evictions, hits and misses must add up to what the server counted between the test's two
//! reads; the last row of store_stats.csv must equal the server's counters once the run is
//! over (nothing else talks to it). No timing is asserted.

use crate::common::servers::{mc_stats, Launch};
use crate::common::*;
use serde_json::Value;
use std::collections::{BTreeSet, HashMap};

/// kvmeter's `store_stats` increase of `name` in phase `p`.
fn increase_in(p: &Value, name: &str) -> u64 {
    p["store_stats"]["stats"][name]["increase"]
        .as_u64()
        .unwrap_or_else(|| panic!("{name} in {}: {}", p["name"], p["store_stats"]))
}

/// kvmeter's `store_stats` increase of `name` in each phase, added.
fn increase(summary: &Value, name: &str) -> u64 {
    summary["phases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| increase_in(p, name))
        .sum()
}

/// The last row of store_stats.csv, by column.
fn last_row(run: &std::path::Path) -> HashMap<String, String> {
    let text = std::fs::read_to_string(run.join("store_stats.csv")).unwrap();
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let last: Vec<&str> = lines.last().unwrap().split(',').collect();
    header
        .iter()
        .zip(last)
        .map(|(h, v)| (h.to_string(), v.to_string()))
        .collect()
}

/// A workload C run against the server at `addr`, through the one `common::run_ok`.
fn run_at(store: &str, addr: String, extra: &[&str]) -> RunOk {
    let addr = format!("addr={addr}");
    let mut args = vec![
        "run",
        "-P",
        "workloadc",
        "--store",
        store,
        "--store-opt",
        &addr,
    ];
    args.extend(["--records", "20000", "--ops", "5000", "--seed", "7"]);
    args.extend(["-p", "requestdistribution=uniform", "--interval", "200ms"]);
    args.extend(extra);
    run_ok(&args)
}

#[test]
fn memcached_evictions_hits_and_misses_are_its_own_stats() {
    // 8 MB of item memory for 20,000 records of 1 KB.
    let (_mc, port) = Launch::memcached().args(&["-m", "8"]).start();
    let before = mc_stats(port);
    let r = run_at("memcached", format!("127.0.0.1:{port}"), &[]);
    let s = &r.summary;
    let after = mc_stats(port);
    let d = |k: &str| after[k] - before[k];
    assert!(d("evictions") > 1000, "{after:?}");
    assert_eq!(increase(s, "evictions"), d("evictions"));
    assert_eq!(increase(s, "get_hits"), d("get_hits"));
    assert_eq!(increase(s, "get_misses"), d("get_misses"));
    assert!(d("get_misses") > 0, "evicted records are read too");
    // kvmeter's reads are the server's gets, and its misses the server's.
    let run = phase(s, "run");
    assert_eq!(count(run, "READ"), d("cmd_get"));
    assert_eq!(run["ops"]["READ"]["misses"].as_u64(), Some(d("get_misses")));
    let ratio = d("get_hits") as f64 / d("cmd_get") as f64;
    let shown = run["store_stats"]["cache_hit_ratio"].as_f64().unwrap();
    assert!((shown - ratio).abs() < 1e-9, "{shown} {ratio}");
    let row = last_row(&r.out);
    for k in [
        "evictions",
        "get_hits",
        "get_misses",
        "cmd_set",
        "curr_items",
    ] {
        assert_eq!(row[k], after[k].to_string(), "{k}");
    }
    assert_eq!(row["limit_maxbytes"], (8u64 << 20).to_string());
    // `kvmeter stores` names exactly the columns the run wrote, in their order.
    let header = std::fs::read_to_string(r.out.join("store_stats.csv")).unwrap();
    let columns: Vec<&str> = header.lines().next().unwrap().split(',').skip(3).collect();
    assert_eq!(listed_statistics("memcached"), columns);
}

/// The statistics `kvmeter stores` lists for `store`.
fn listed_statistics(store: &str) -> Vec<String> {
    let o = kvmeter().arg("stores").output().unwrap();
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    let block = text
        .split("\n\n")
        .find(|b| b.starts_with(&format!("{store} ")))
        .unwrap();
    let list = block.split("statistics (store_stats.csv):").nth(1).unwrap();
    list.split([',', ' ', '\n'])
        .filter(|w| !w.is_empty())
        .map(str::to_string)
        .collect()
}

/// Redis's INFO fields, read with redis-cli.
fn redis_info(port: u16) -> HashMap<String, u64> {
    let o = std::process::Command::new("redis-cli")
        .args(["-p", &port.to_string(), "info", "all"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter_map(|l| {
            let (k, v) = l.trim_end().split_once(':')?;
            if let Some(cmd) = k.strip_prefix("cmdstat_") {
                let calls = v.split(',').next()?.strip_prefix("calls=")?;
                return Some((format!("cmdstat_{cmd}_calls"), calls.parse().ok()?));
            }
            Some((k.to_string(), v.parse().ok()?))
        })
        .collect()
}

/// A managed Redis Cluster of three masters: the cluster's statistics are its masters' summed,
/// so the run's hits are every read the test asked for (3,000 of loaded records, none missed)
/// and the load's HSETs every record, though each master served about a third of them.
#[test]
fn redis_cluster_statistics_are_its_masters_summed() {
    let t = tempfile::tempdir().unwrap();
    let out = t.path().join("run");
    let o = kvmeter()
        .args(["run", "-P", "workloadc", "--store", "redis"])
        .args([
            "--store-opt",
            "cluster=3",
            "--records",
            "2000",
            "--ops",
            "3000",
        ])
        .args(["--threads", "2", "--interval", "200ms", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let s = json(&out.join("summary.json"));
    validate("summary.schema.json", &s);
    let stat = |p: &str, name: &str| increase_in(phase(&s, p), name);
    assert_eq!(stat("run", "keyspace_hits"), 3000);
    assert_eq!(stat("run", "keyspace_misses"), 0);
    assert_eq!(stat("run", "cmdstat_hgetall_calls"), 3000);
    assert_eq!(stat("load", "cmdstat_hset_calls"), 2000);
    // Three masters' flags are each 0 or 1; their highest, not their sum.
    let flag = &phase(&s, "run")["store_stats"]["stats"]["rdb_bgsave_in_progress"];
    assert!(flag["max"].as_u64().unwrap() <= 1, "{flag}");
    let sent: u64 = phase(&s, "run")["sent_to"]
        .as_object()
        .unwrap()
        .values()
        .map(|v| v.as_u64().unwrap())
        .sum();
    assert_eq!(sent, 3000);
}

#[test]
fn redis_evicted_keys_hits_and_misses_are_its_own_info() {
    let t = tempfile::tempdir().unwrap();
    let (_r, port) = Launch::redis(t.path())
        .args(&["--maxmemory", "4mb", "--maxmemory-policy", "allkeys-random"])
        .start();
    let before = redis_info(port);
    let r = run_at(
        "redis",
        format!("127.0.0.1:{port}"),
        &["--store-opt", "scan_index=false"],
    );
    let s = &r.summary;
    let after = redis_info(port);
    let d = |k: &str| after[k] - before.get(k).copied().unwrap_or(0);
    assert!(d("evicted_keys") > 1000, "{after:?}");
    // Redis evicts before it serves any command once it is over its limit, and a new client's
    // buffers count against the limit: the test's own redis-cli after the run can cost a few
    // keys that no phase of kvmeter's saw. Never fewer, and never more than those few.
    let evicted = increase(s, "evicted_keys");
    assert!(
        (d("evicted_keys") - 10..=d("evicted_keys")).contains(&evicted),
        "kvmeter {evicted}, Redis {}",
        d("evicted_keys")
    );
    assert_eq!(increase(s, "keyspace_hits"), d("keyspace_hits"));
    assert_eq!(increase(s, "keyspace_misses"), d("keyspace_misses"));
    assert!(d("keyspace_misses") > 0, "evicted records are read too");
    let run = phase(s, "run");
    // Every read is one HGETALL: the server's count of them, before kvmeter's first sample
    // of the phase and after its last.
    assert_eq!(
        run["store_stats"]["stats"]["cmdstat_hgetall_calls"]["increase"].as_u64(),
        Some(count(run, "READ"))
    );
    assert_eq!(d("cmdstat_hgetall_calls"), count(run, "READ"));
    let row = last_row(&r.out);
    for k in ["keyspace_hits", "keyspace_misses", "maxmemory"] {
        assert_eq!(row[k], after[k].to_string(), "{k}");
    }
    let last: u64 = row["evicted_keys"].parse().unwrap();
    assert!((after["evicted_keys"] - 10..=after["evicted_keys"]).contains(&last));
    let header = std::fs::read_to_string(r.out.join("store_stats.csv")).unwrap();
    let columns: Vec<&str> = header.lines().next().unwrap().split(',').skip(3).collect();
    assert_eq!(listed_statistics("redis"), columns);
}

/// A redis-cli command against the test's server; its output.
fn redis_cli(port: u16, args: &[&str]) -> String {
    let o = std::process::Command::new("redis-cli")
        .args(["-p", &port.to_string()])
        .args(args)
        .output()
        .unwrap();
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Redis's events on the run's clock: mid-run the test makes Redis sleep 300 ms in a command
/// (its latency monitor records it), save twice in the foreground (most likely within one
/// second, which `rdb_last_save_time` cannot tell apart) and once in the background.
/// store_events.csv must hold each at the times Redis's own books give: `LATENCY LATEST`, and
/// as many saves as `rdb_saves` counted, the last at `rdb_last_save_time`.
#[test]
fn redis_latency_spikes_and_saves_are_its_own_books() {
    let t = tempfile::tempdir().unwrap();
    let (_r, port) = Launch::redis(t.path())
        .args(&["--latency-monitor-threshold", "100"])
        .args(&["--enable-debug-command", "yes"])
        .start();
    let out = t.path().join("run");
    let mut child = std::process::Command::new(bin())
        .args(["run", "-P", "workloadc", "--store", "redis"])
        .args(["--store-opt", &format!("addr=127.0.0.1:{port}")])
        .args([
            "--records",
            "1000",
            "--duration",
            "4s",
            "--interval",
            "200ms",
        ])
        .arg("--out")
        .arg(&out)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    crate::common::servers::wait_for_phase(&out, "run");
    std::thread::sleep(std::time::Duration::from_millis(500));
    assert!(redis_cli(port, &["debug", "sleep", "0.3"]).contains("OK"));
    assert!(redis_cli(port, &["save"]).contains("OK"));
    assert!(redis_cli(port, &["save"]).contains("OK"));
    assert!(redis_cli(port, &["bgsave"]).contains("Background saving started"));
    // Redis runs one fork at a time: the rewrite is scheduled behind the save if need be.
    let rewrite = redis_cli(port, &["bgrewriteaof"]);
    assert!(rewrite.contains("rewriting"), "{rewrite}");
    assert!(child.wait().unwrap().success());

    // Redis's books: the latency monitor's "command" event and the latest save.
    let latest = redis_cli(port, &["latency", "latest"]);
    let words: Vec<&str> = latest.split_whitespace().collect();
    let at = words
        .iter()
        .position(|w| *w == "command")
        .expect("a command spike");
    let spike_s: u64 = words[at + 1].parse().unwrap();
    let spike_ms: u64 = words[at + 2].parse().unwrap();
    assert!(spike_ms >= 300, "{latest}");
    let info = redis_cli(port, &["info", "persistence"]);
    let saved_s: u64 = info
        .lines()
        .find_map(|l| l.trim().strip_prefix("rdb_last_save_time:"))
        .unwrap()
        .parse()
        .unwrap();

    let csv = std::fs::read_to_string(out.join("store_events.csv")).unwrap();
    let rows: Vec<Vec<&str>> = csv
        .lines()
        .skip(1)
        .map(|l| l.splitn(8, ',').collect())
        .collect();
    let spike = rows
        .iter()
        .find(|r| r[3] == "latency_spike")
        .unwrap_or_else(|| panic!("{csv}"));
    assert_eq!(spike[0], "run");
    // Redis stamps the spike's end in whole seconds: the row is at the earliest it can have
    // begun, the stamp less its length, and carries the length.
    assert_eq!(
        spike[2],
        (spike_s * 1_000_000 - spike_ms * 1000).to_string()
    );
    assert_eq!(spike[6], format!("{:.3}", spike_ms as f64 / 1000.0));
    assert!(
        spike[7].contains(&format!("command: {spike_ms} ms")),
        "{csv}"
    );
    let saves: Vec<u64> = rows
        .iter()
        .filter(|r| r[3] == "save_finished")
        .map(|r| r[2].parse().unwrap())
        .collect();
    let counted: u64 = info
        .lines()
        .find_map(|l| l.trim().strip_prefix("rdb_saves:"))
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(saves.len() as u64, counted, "{info}\n{csv}");
    assert_eq!(saves.len(), 3, "{csv}");
    assert_eq!(saves.last(), Some(&(saved_s * 1_000_000)), "{csv}");
    assert!(saves.iter().all(|t| *t <= saved_s * 1_000_000), "{csv}");
    let rewrites: u64 = info
        .lines()
        .find_map(|l| l.trim().strip_prefix("aof_rewrites:"))
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(rewrites, 1, "{info}");
    let rewrite = rows
        .iter()
        .find(|r| r[3] == "aof_rewrite_finished")
        .unwrap_or_else(|| panic!("{csv}"));
    assert!(rewrite[7].contains("1 AOF rewrite(s)"), "{csv}");
    let s = json(&out.join("summary.json"));
    let events = &phase(&s, "run")["store_stats"]["events"];
    assert_eq!(events["latency_spike"], 1, "{events}");
    assert_eq!(events["save_finished"], 3, "{events}");
    assert_eq!(events["aof_rewrite_finished"], 1, "{events}");
    let stat = |p: &str, name: &str| increase_in(phase(&s, p), name);
    assert_eq!(stat("run", "aof_rewrites"), rewrites);
    assert_eq!(stat("run", "rdb_saves"), 3);
    assert_eq!(stat("load", "aof_rewrites"), 0);
    // The load phase had neither.
    assert!(phase(&s, "load")["store_stats"]["events"].is_null());
    // The run page marks the second of each under the phase's figures.
    kvmeter().arg("report").arg(&out).assert().success();
    let svg = std::fs::read_to_string(out.join("figures/run-read-latency.svg")).unwrap();
    assert_eq!(svg.matches("class=\"band spike\"").count(), 1);
    // One band a second: saves in the same second share it.
    let seconds: BTreeSet<&u64> = saves.iter().collect();
    assert_eq!(
        svg.matches("class=\"band save\"").count(),
        seconds.len(),
        "{csv}"
    );
    assert_eq!(svg.matches("class=\"band rewrite\"").count(), 1);
}

/// etcd's `/metrics` (issue 43): each put is one Raft proposal, committed and synced to its
/// WAL, so loading 1,500 records and then inserting 500 more shows that many proposals and
/// WAL fsyncs in each phase (the test's own count; etcd makes a few of its own at start, before
/// the load). The managed member knows its leader throughout and saw no leader change.
#[test]
fn etcd_proposals_and_fsyncs_are_the_puts_asked_for() {
    let t = tempfile::tempdir().unwrap();
    let out = t.path().join("run");
    let o = kvmeter()
        .args([
            "run",
            "-P",
            "workloada",
            "--store",
            "etcd",
            "--records",
            "1500",
        ])
        .args(["-p", "operationcount=500", "-p", "readproportion=0"])
        .args(["-p", "updateproportion=0", "-p", "insertproportion=1"])
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let s = json(&out.join("summary.json"));
    validate("summary.schema.json", &s);
    for (name, puts) in [("load", 1500u64), ("run", 500)] {
        let st = &phase(&s, name)["store_stats"]["stats"];
        let inc = |n: &str| {
            st[n]["increase"]
                .as_u64()
                .unwrap_or_else(|| panic!("{n}: {st}"))
        };
        for n in ["proposals_committed", "proposals_applied", "wal_fsyncs"] {
            // A few proposals of etcd's own may fall in a phase; none is missing.
            assert!((puts..=puts + 5).contains(&inc(n)), "{name} {n}: {st}");
        }
        assert_eq!(inc("leader_changes"), 0);
        assert_eq!(inc("proposals_failed"), 0);
        assert_eq!(st["has_leader"]["end"], 1);
        assert!(inc("wal_fsync_us") > 0);
    }
    // etcd makes its WAL segment 64 MB long at once (wal.SegmentSizeBytes, 64,000,000) and
    // creates the next one ahead: reserved space, not data. Counted as data it made the space
    // amplification of this 1.6 MB load 60 and more.
    let io = &phase(&s, "load")["storage_io"];
    let bytes = |k: &str| io[k].as_u64().unwrap_or_else(|| panic!("{k}: {io}"));
    let (data, reserved) = (bytes("on_disk_bytes"), bytes("reserved_bytes"));
    assert!(
        reserved > 40_000_000 && data + reserved >= 64_000_000 && data < 30_000_000,
        "{io}"
    );
    assert!(io["space_amplification"].as_f64().unwrap() < 15.0, "{io}");
    assert!(
        !out.join("store_events.csv").exists(),
        "no leader change, no event"
    );
}

/// A Redis Cluster's events are each master's own: mid-run the test has each of the three
/// masters kvmeter started save in the background; store_events.csv holds one save of each,
/// named by the master, at the time its own `rdb_last_save_time` gives.
#[test]
fn redis_cluster_saves_are_each_masters_own() {
    let t = tempfile::tempdir().unwrap();
    let out = t.path().join("run");
    let mut child = std::process::Command::new(bin())
        .args(["run", "-P", "workloadc", "--store", "redis"])
        .args(["--store-opt", "cluster=3", "--records", "1000"])
        .args(["--duration", "4s", "--interval", "200ms", "--out"])
        .arg(&out)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    crate::common::servers::wait_for_phase(&out, "run");
    std::thread::sleep(std::time::Duration::from_millis(500));
    let m = json(&out.join("manifest.json"));
    let members: Vec<(String, u16)> = m["store"]["server"]["members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| {
            let a = x["addr"].as_str().unwrap().to_string();
            let port = a.rsplit(':').next().unwrap().parse().unwrap();
            (a, port)
        })
        .collect();
    assert_eq!(members.len(), 3, "{m}");
    // Each master's books before its save, then the save. Its count of saves (counted at the
    // fork) with none in progress, not the time of the last (whole seconds): a save in the
    // second the master started leaves that unmoved.
    let books = |port: u16| -> (u64, u64) {
        let info = redis_cli(port, &["info", "persistence"]);
        let num = |k: &str| -> u64 {
            let v = info.lines().find_map(|l| l.trim().strip_prefix(k));
            v.unwrap_or_else(|| panic!("{k} {info}")).parse().unwrap()
        };
        let done = num("rdb_saves:") - num("rdb_bgsave_in_progress:");
        (done, num("rdb_last_save_time:"))
    };
    let before: Vec<u64> = members.iter().map(|(_, p)| books(*p).0).collect();
    for (_, p) in &members {
        assert!(redis_cli(*p, &["bgsave"]).contains("Background saving started"));
    }
    // Read each master's books while it still runs (kvmeter stops them at its end).
    let (mut saves, mut saved) = (before.clone(), vec![0; members.len()]);
    let t0 = std::time::Instant::now();
    while saves.iter().zip(&before).any(|(s, b)| s <= b) {
        assert!(t0.elapsed() < std::time::Duration::from_secs(3), "no save");
        for (i, (_, p)) in members.iter().enumerate() {
            (saves[i], saved[i]) = books(*p);
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert!(child.wait().unwrap().success());
    let csv = std::fs::read_to_string(out.join("store_events.csv")).unwrap();
    // phase,t_s,unix_us,event,job,bytes,duration_s,detail
    for ((addr, _), at) in members.iter().zip(&saved) {
        let rows: Vec<Vec<&str>> = csv
            .lines()
            .skip(1)
            .map(|l| l.splitn(8, ',').collect())
            .filter(|r: &Vec<&str>| r[3] == "save_finished")
            .filter(|r| r[7].contains(&format!("master {addr}: ")))
            .collect();
        assert_eq!(rows.len(), 1, "{addr}: {csv}");
        assert_eq!(rows[0][0], "run");
        assert_eq!(rows[0][2].parse::<u64>().unwrap(), at * 1_000_000, "{addr}");
    }
}

/// `CONFIG RESETSTAT` in the middle of a phase: Redis's counters go back to 0. Their increase
/// over the phase is not the end less the start (which may have grown past the start again),
/// so it is left out and named with why: from what to what (two samples of store_stats.csv, one
/// after the other), by which sample; Redis's own count after the run is at least the latter.
#[test]
fn a_redis_counter_reset_in_the_middle_of_a_phase_is_named_not_misread() {
    let t = tempfile::tempdir().unwrap();
    let (_r, port) = Launch::redis(t.path()).start();
    let out = t.path().join("run");
    let mut child = std::process::Command::new(bin())
        .args(["run", "-P", "workloadc", "--store", "redis"])
        .args(["--store-opt", &format!("addr=127.0.0.1:{port}")])
        .args([
            "--records",
            "1000",
            "--duration",
            "3s",
            "--interval",
            "200ms",
        ])
        .arg("--out")
        .arg(&out)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    crate::common::servers::wait_for_phase(&out, "run");
    std::thread::sleep(std::time::Duration::from_millis(1000));
    assert!(redis_cli(port, &["config", "resetstat"]).contains("OK"));
    assert!(child.wait().unwrap().success());
    let hits_now = redis_info(port)["keyspace_hits"];
    let s = json(&out.join("summary.json"));
    let ss = &phase(&s, "run")["store_stats"];
    assert!(ss["stats"]["keyspace_hits"].is_null(), "{ss}");
    let why = ss["unavailable"]["keyspace_hits"].as_str().unwrap();
    let nums: Vec<u64> = why
        .split(' ')
        .filter_map(|w| w.parse().ok())
        .take(2)
        .collect();
    assert!(why.contains("went back from") && nums.len() == 2, "{why}");
    assert!(
        nums[1] < nums[0] && hits_now >= nums[1],
        "{why}: {hits_now}"
    );
    // The two samples, one after the other, in store_stats.csv.
    let csv = std::fs::read_to_string(out.join("store_stats.csv")).unwrap();
    let header: Vec<&str> = csv.lines().next().unwrap().split(',').collect();
    let col = header.iter().position(|h| *h == "keyspace_hits").unwrap();
    let hits: Vec<u64> = csv
        .lines()
        .skip(1)
        .filter(|l| l.starts_with("run,"))
        .filter_map(|l| l.split(',').nth(col)?.parse().ok())
        .collect();
    assert!(hits.windows(2).any(|w| w == nums), "{why}: {hits:?}");
    // What Redis never reset is still a figure.
    assert!(ss["stats"]["maxmemory"]["end"].is_u64(), "{ss}");
}
