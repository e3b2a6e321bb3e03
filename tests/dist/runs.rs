//! Distributed runs end to end (docs/distributed.md): real etcd (one member and three),
//! real memcached and Redis, 2–4 `kvmeter agent` processes and a `kvmeter dist run`
//! coordinator on loopback. Golden values are independent: the one-host run of the same plan,
//! the agents' own run directories, memcached's own log of the commands it served.

use crate::common;

use common::servers::*;
use common::{json, kvmeter, phase};
use hdrhistogram::Histogram;
use serde_json::Value;
use std::time::{Duration, Instant};

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
    // memcached's own statistics (issue 43): every agent sampled the one server, so the
    // merged phase has the lowest agent's figures, not their sum, and says so.
    for p in ["load", "run"] {
        let ss = &phase(&merged, p)["store_stats"];
        assert_eq!(
            ss["merged_from"], "agent 0's samples: every agent samples the same server",
            "{p}"
        );
        assert_eq!(
            ss["stats"],
            phase(&agents[0], p)["store_stats"]["stats"],
            "{p}"
        );
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
    // Reports went to the coordinator directly (the default): a loss is still seen by the
    // agent's lease in etcd.
    assert!(info["reports"].as_str().unwrap().starts_with("direct to "));
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

#[test]
fn on_agent_loss_abort_stops_the_run_and_an_etcd_leader_kill_does_not_disturb_it() {
    let tmp = tempfile::tempdir().unwrap();
    let (mut etcd_members, url) = etcd(tmp.path(), 3);
    let (_m, port) = memcached(tmp.path(), "mc", false);
    let run = |records: &str, secs: &str| {
        s(&[
            "--store",
            "memcached",
            "--store-opt",
            &format!("addr=127.0.0.1:{port}"),
            "-P",
            "workloadc",
            "--records",
            records,
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
    let mut d = Dist::start(
        &url,
        "leader",
        2,
        &["--lease-ttl", "3s"],
        &run("1000", "5s"),
    );
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
    // It dies in the load (60,000 records at 2,000/s), so the run phase never starts.
    let mut d = Dist::start(
        &url,
        "abort",
        2,
        &["--lease-ttl", "2s", "--on-agent-loss", "abort"],
        &run("60000", "30s"),
    );
    wait_for_phase(&d.path("agent1"), "load");
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
    // The load that was cut says so; the phase that never started is named, as in a run on
    // one machine.
    let load = phase(&merged, "load");
    assert_ne!(load["outcome"], "completed", "{load}");
    assert_eq!(merged["not_run"], serde_json::json!(["run"]), "{merged}");
    assert_eq!(keys_left(&url), 0);
}

/// Two agents, each with its own embedded RocksDB: the merged phase's storage I/O is the sum
/// of the agents' own (the kernel's bytes, kvmeter's bytes, RocksDB's user bytes) and its
/// ratios are those sums divided again, not any agent's ratio.
#[test]
fn embedded_stores_storage_io_is_summed_over_agents() {
    let tmp = tempfile::tempdir().unwrap();
    let (_etcd, url) = etcd(tmp.path(), 1);
    let run = s(&[
        "--store",
        "rocksdb",
        "-P",
        "workloada",
        "--records",
        "4000",
        "--duration",
        "2s",
        "--warmup",
        "500ms",
        "--threads",
        "1",
        "--interval",
        "250ms",
        "--telemetry-interval",
        "0",
    ]);
    let mut d = Dist::start(&url, "storage-io", 2, &[], &run);
    let code = d.finish();
    assert_eq!(code, 0, "{}", d.log("coord.log"));
    let merged = json(&d.path("merged/summary.json"));
    let agents: Vec<Value> = (0..2)
        .map(|i| json(&d.path(&format!("agent{i}/summary.json"))))
        .collect();
    let load = |v: &Value| phase(v, "load")["storage_io"].clone();
    let m = load(&merged);
    assert_eq!(m["merged_from"], "the sum of 2 agents' own stores", "{m}");
    let sum = |k: &str| -> u64 { agents.iter().map(|a| load(a)[k].as_u64().unwrap()).sum() };
    for k in [
        "write_bytes",
        "cancelled_write_bytes",
        "read_bytes",
        "kvmeter_write_bytes",
        "user_write_bytes",
        "on_disk_bytes",
        "reserved_bytes",
    ] {
        assert_eq!(m[k].as_u64(), Some(sum(k)), "{k}: {m}");
    }
    // RocksDB's own user bytes: 2 × 2,000 inserts, each at least its 1,000-byte record.
    assert!(sum("user_write_bytes") >= 4000 * 1000, "{m}");
    let wa = m["write_amplification"].as_f64().unwrap();
    // What reached the device: written less what a deleted log cancelled before writeback.
    let device = sum("write_bytes") - sum("cancelled_write_bytes");
    let want = device as f64 / sum("user_write_bytes") as f64;
    assert!((wa - want).abs() <= 1e-9 * want, "{wa} ≠ {want}");
    let space = m["space_amplification"].as_f64().unwrap();
    let want = sum("on_disk_bytes") as f64 / sum("kvmeter_write_bytes") as f64;
    assert!((space - want).abs() <= 1e-9 * want, "{space} ≠ {want}");

    // The run phase's warm-up: its operations are the agents' own added, and the merged
    // storage bytes per operation divide the merged phase's bytes by them and the measured
    // ones, as one host's phase does. The CPU per operation is each agent's, not merged.
    let run = phase(&merged, "run");
    let warm: u64 = agents
        .iter()
        .map(|a| phase(a, "run")["warmup_operations"].as_u64().unwrap())
        .sum();
    assert!(warm > 0, "{run}");
    assert_eq!(run["warmup_operations"].as_u64(), Some(warm));
    let io = &run["storage_io"];
    let device =
        io["write_bytes"].as_u64().unwrap() - io["cancelled_write_bytes"].as_u64().unwrap();
    let ops = run["operations"].as_u64().unwrap() + warm;
    let per_op = run["per_op"]["storage_write_bytes"].as_f64().unwrap();
    assert!(
        (per_op - device as f64 / ops as f64).abs() <= 1e-9 * per_op.max(1.0),
        "{run}"
    );
    let why = run["per_op"]["unavailable"]["cpu_us"].as_str().unwrap();
    assert!(why.contains("a merged phase has no telemetry"), "{why}");
}
