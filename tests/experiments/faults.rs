//! Clusters, faults and recovery against real servers on loopback (papers/002): an etcd
//! group whose leader is SIGKILLed mid-run, Redis with replicas and WAIT, a kvmeter that is
//! itself SIGKILLed (nothing left behind), and the fault input that is refused.

use serde_json::Value;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::common;
use common::*;

fn member_pids(manifest: &Value) -> Vec<i64> {
    manifest["store"]["server"]["members"]
        .as_array()
        .map(|a| a.iter().filter_map(|m| m["pid"].as_i64()).collect())
        .unwrap_or_default()
}

fn csv_rows(path: &Path) -> Vec<Vec<String>> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .skip(1)
        .map(|l| l.split(',').map(str::to_string).collect())
        .collect()
}

/// Waits (up to 60 s) until the run phase of the kvmeter writing `out` has written an interval.
fn wait_for_run_interval(out: &Path) {
    let t0 = Instant::now();
    while !std::fs::read_to_string(out.join("intervals.csv"))
        .map(|s| s.lines().any(|l| l.starts_with("run,")))
        .unwrap_or(false)
    {
        assert!(t0.elapsed() < Duration::from_secs(60), "no run interval");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Waits up to 5 s for every pid to be gone.
fn all_gone(pids: &[i64]) -> bool {
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(5) {
        if pids.iter().all(|&p| !alive(p)) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

#[test]
fn etcd_leader_kill_shows_the_gap_and_the_run_recovers() {
    let t = tempfile::tempdir().unwrap();
    let out = t.path().join("run");
    let o = kvmeter()
        .args(["run", "--store", "etcd", "--store-opt", "members=3"])
        .args(["--records", "500", "--threads", "2", "--duration", "9s"])
        .args(["--fault", "at=3s,kill=leader,restart_after=2s", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{stderr}");
    let s = json(&out.join("summary.json"));
    let m = json(&out.join("manifest.json"));
    validate("summary.schema.json", &s);
    validate("manifest.schema.json", &m);
    // Three members, each its own process and log; all stopped now.
    let members = m["store"]["server"]["members"].as_array().unwrap();
    assert_eq!(members.len(), 3);
    for mm in members {
        assert_eq!(mm["role"], "member");
        assert!(out.join(mm["log"].as_str().unwrap()).is_file());
    }
    assert_eq!(m["store"]["server"]["replication"]["quorum"], "2");
    // Telemetry's server figures sum the three (one member's would be a third of the
    // cluster's cost) and follow the restarted member: no warning that they are one's.
    assert!(!stderr.contains("are one process's"), "{stderr}");
    let server_cpu_s = |p: &Value| {
        let t = &p["telemetry"];
        t["server"]["cpu_pct"].as_f64().unwrap() / 100.0 * t["seconds"].as_f64().unwrap()
    };
    for p in s["phases"].as_array().unwrap() {
        assert_eq!(p["telemetry"]["server"]["processes"], 3, "{}", p["name"]);
    }
    // Against each member's CPU over its lives, from /proc at its stop (the manifest): the
    // phases' windows cover most of it (startup and the gaps between phases are outside).
    let whole: f64 = members
        .iter()
        .map(|mm| mm["cpu_seconds"].as_f64().unwrap())
        .sum();
    let largest = members
        .iter()
        .map(|mm| mm["cpu_seconds"].as_f64().unwrap())
        .fold(0.0, f64::max);
    let windows: f64 = s["phases"]
        .as_array()
        .unwrap()
        .iter()
        .map(server_cpu_s)
        .sum();
    assert!(
        windows <= whole * 1.02 + 0.05 && windows > largest * 1.2,
        "phases' server CPU {windows} s; members' {whole} s, the largest {largest} s"
    );
    assert!(all_gone(&member_pids(&m)));
    // The restarted member lived twice.
    let lives: Vec<i64> = members
        .iter()
        .map(|m| m["lives"].as_i64().unwrap())
        .collect();
    assert_eq!(lives.iter().filter(|&&l| l == 2).count(), 1, "{lives:?}");

    let run = phase(&s, "run");
    assert_eq!(run["outcome"], "completed");
    // events.csv: the kill at ~3 s, a new leader reported, the restart ~2 s later.
    let events = csv_rows(&out.join("events.csv"));
    let ev = |name: &str| events.iter().find(|r| r[3] == name).cloned();
    let kill = ev("kill").expect("a kill event");
    let at: f64 = kill[1].parse().unwrap();
    assert!((3.0..3.5).contains(&at), "{at}");
    // A leader again: elected among the two left, or, when the election outlasts the 2 s to
    // the restart on a loaded host (etcd randomizes its timeout over 1–2 s, then a pre-vote
    // round), possibly the restarted member itself (one CI run saw that): a "leader" event
    // either way, after the kill.
    let leader_event = ev("leader").unwrap_or_else(|| panic!("{events:?}"));
    let leader_at: f64 = leader_event[1].parse().unwrap();
    assert!(leader_at > at, "{events:?}");
    let restart: f64 = ev("restart").expect("a restart event")[1].parse().unwrap();
    assert!((restart - at - 2.0).abs() < 0.5, "{restart}");
    // etcd's own account (issue 43): the leader its /metrics sampler reads after the kill
    // saw one more leader change than the killed one had: a leader_change event after the
    // kill in store_events.csv.
    let store_events = csv_rows(&out.join("store_events.csv"));
    assert!(
        store_events
            .iter()
            .any(|r| r[0] == "run" && r[3] == "leader_change" && r[1].parse::<f64>().unwrap() > at),
        "{store_events:?}"
    );
    // The kill's pid was a member's first life and is gone.
    let victim: i64 = kill[6].parse().unwrap();
    assert!(!alive(victim));

    let f = &run["faults"][0];
    let unavailable = f["unavailable_s"].as_f64().unwrap();
    // The terminal says it too: one line per fault (issue 40 item 11).
    let table = String::from_utf8_lossy(&o.stdout);
    let line = format!("unavailable {unavailable:.3} s");
    assert_eq!(
        table.lines().filter(|l| l.starts_with("  fault ")).count(),
        1,
        "{table}"
    );
    assert!(table.contains(&line), "{line}: {table}");
    // About the election timeout (1 s by default, randomized up to 2 s). When the election
    // outlasts the 2 s to the restart on a loaded host (see above), the gap runs until the
    // restarted member has joined and voted: at most the restart plus two election timeouts
    // (one CI run saw 3.15 s).
    assert!((0.3..6.0).contains(&unavailable), "{f}");
    // The timeline shows the gap: 100 ms buckets with no success just after the kill, and
    // successes again before the phase ends.
    let rows = csv_rows(&out.join("timeline.csv"));
    let ok_at = |from: f64, to: f64| -> u64 {
        rows.iter()
            .filter(|r| r[0] == "run")
            .filter(|r| {
                let s: f64 = r[1].parse().unwrap();
                s >= from && s < to
            })
            .map(|r| r[4].parse::<u64>().unwrap())
            .sum()
    };
    assert!(ok_at(0.5, at - 0.2) > 0);
    assert_eq!(
        ok_at(at + 0.1, at + 0.3),
        0,
        "no success right after the kill"
    );
    assert!(ok_at(at + unavailable + 0.2, 9.0) > 0, "the run went on");
    let width = rows
        .iter()
        .map(|r| r[2].parse::<f64>().unwrap() - r[1].parse::<f64>().unwrap())
        .next()
        .unwrap();
    assert!((width - 0.1).abs() < 1e-6);
    // The report's detection time is that event's, after the kill; within the same bound as
    // the gap (one CI run saw the restarted member elected again, after the restart at +2 s).
    let reported = f["cluster_reported_after_s"].as_f64().unwrap();
    assert!((reported - (leader_at - at)).abs() < 0.01, "{f}");
    assert!((0.0..6.0).contains(&reported), "{f}");
    // Which member served: the old leader before the kill, the new one after (the clients
    // follow the leader), so at least two members served requests.
    let sent = run["sent_to"].as_object().unwrap();
    assert!(sent.len() >= 2, "{sent:?}");
    assert!(sent.keys().all(|k| k.starts_with("member:")), "{sent:?}");
    let leader = ev("leader").unwrap()[5].clone();
    assert!(sent[&leader].as_u64().unwrap() > 0, "{leader}: {sent:?}");
    // report.html shows the timeline (and figures/ has it), the fault table and the events.
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(html.contains("id=\"fig-run-timeline\""));
    assert!(html.contains("data-table=\"run-faults\""));
    assert!(html.contains("data-table=\"run-events\""));
    assert!(out.join("figures/run-timeline.svg").is_file());
}

/// A one-member group: the member killed is the only one that can lead again once
/// restarted; the report's detection time is its re-election, not "none", and the kernel's
/// I/O count, which died with the first process, is unavailable with that reason.
#[test]
fn etcd_member_killed_and_restarted_alone_is_reported_as_the_new_leader() {
    let r = run_ok(&[
        "run",
        "--store",
        "etcd",
        "--store-opt",
        "members=1",
        "--records",
        "100",
        "--threads",
        "1",
        "--duration",
        "4s",
        "--fault",
        "at=1s,kill=leader,restart_after=500ms",
    ]);
    let out = &r.out;
    let events = csv_rows(&out.join("events.csv"));
    let at = |name: &str| -> f64 {
        let r = events.iter().find(|r| r[3] == name);
        r.unwrap_or_else(|| panic!("{name}: {events:?}"))[1]
            .parse()
            .unwrap()
    };
    let (kill, restart, leader) = (at("kill"), at("restart"), at("leader"));
    assert!(kill < restart && restart < leader, "{events:?}");
    let row = events.iter().find(|r| r[3] == "leader").unwrap();
    assert_eq!(row[5], "member:0");
    assert!(row[7..].join(",").contains("elected again"), "{row:?}");
    let run = phase(&r.summary, "run");
    let reported = run["faults"][0]["cluster_reported_after_s"].as_f64();
    assert!(
        (reported.unwrap() - (leader - kill)).abs() < 0.01,
        "{}",
        run["faults"]
    );
    let why = run["storage_io"]["unavailable"].as_str().unwrap();
    assert!(why.contains("ended during the phase"), "{why}");
    // Telemetry follows the member to its new process: the run phase's server figures end on
    // the restarted pid (the manifest's, its last life) and count both lives' CPU.
    let server = &run["telemetry"]["server"];
    let manifest = json(&out.join("manifest.json"));
    let member = &manifest["store"]["server"]["members"][0];
    assert_eq!(member["lives"], 2);
    assert_eq!(server["pid"], member["pid"], "{server}");
    assert_eq!(server["processes"], 1, "{server}");
    assert!(server["cpu_pct"].as_f64().unwrap() > 0.0, "{server}");
}

#[test]
fn redis_with_two_replicas_and_wait_against_none() {
    let t = tempfile::tempdir().unwrap();
    let mut throughput = vec![];
    for (name, opts) in [
        ("rf3-wait", vec!["replicas=2", "wait_replicas=2"]),
        ("rf1", vec!["replicas=0"]),
    ] {
        let out = t.path().join(name);
        let mut c = kvmeter();
        c.args(["run", "--store", "redis", "--records", "1000"])
            .args(["-P", "workloada", "--threads", "2", "--duration", "2s"]);
        for o in &opts {
            c.args(["--store-opt", o]);
        }
        let o = c.arg("--out").arg(&out).output().unwrap();
        assert!(
            o.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let s = json(&out.join("summary.json"));
        let m = json(&out.join("manifest.json"));
        validate("manifest.schema.json", &m);
        let server = &m["store"]["server"];
        let members = server["members"].as_array().unwrap();
        let want = if name == "rf1" { 1 } else { 3 };
        assert_eq!(members.len(), want, "{name}");
        assert_eq!(members[0]["role"], "primary");
        for mm in members {
            assert!(mm["cpu_seconds"].as_f64().unwrap() > 0.0, "{name}: {mm}");
        }
        assert_eq!(
            server["replication"]["replication_factor"],
            want.to_string().as_str()
        );
        assert_eq!(
            server["replication"]["wait_replicas"],
            if name == "rf1" { "0" } else { "2" }
        );
        let run = phase(&s, "run");
        assert_eq!(run["outcome"], "completed", "{name}");
        // Every write was confirmed by both replicas (WAIT), none left unconfirmed.
        assert!(count(run, "UPDATE") > 0);
        assert!(
            run["ops"]["UPDATE"]["errors"]["unconfirmed"].is_null(),
            "{run}"
        );
        throughput.push(run["throughput_ops_per_s"].as_f64().unwrap());
        assert!(all_gone(&member_pids(&m)), "{name}");
    }
    assert!(throughput.iter().all(|&x| x > 0.0));
}

#[test]
fn sigkill_of_kvmeter_leaves_no_member_and_no_data_directory() {
    let t = tempfile::tempdir().unwrap();
    let out = t.path().join("run");
    let tmp = t.path().join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    let mut child = std::process::Command::new(bin())
        .env("TMPDIR", &tmp)
        .args(["run", "--store", "etcd", "--store-opt", "members=3"])
        .args(["--store-opt", "cpus=1"])
        .args(["--records", "200", "--duration", "60s", "--out"])
        .arg(&out)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Until the run phase writes its first interval.
    wait_for_run_interval(&out);
    let m = json(&out.join("manifest.json"));
    let pids = member_pids(&m);
    assert_eq!(pids.len(), 3);
    assert!(pids.iter().all(|&p| alive(p)));
    // Every member pinned to CPU 1, and the manifest says so.
    for (i, &p) in pids.iter().enumerate() {
        let status = std::fs::read_to_string(format!("/proc/{p}/status")).unwrap();
        let allowed = status
            .lines()
            .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
            .unwrap()
            .trim()
            .to_string();
        assert_eq!(allowed, "1", "member {i}");
        assert_eq!(
            m["store"]["server"]["members"][i]["cpus"],
            serde_json::json!([1])
        );
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    assert!(all_gone(&pids), "members outlived kvmeter");
    // The temporary data directory goes too; the run directory stays readable.
    let t1 = Instant::now();
    while std::fs::read_dir(&tmp).unwrap().next().is_some() {
        assert!(
            t1.elapsed() < Duration::from_secs(10),
            "left behind: {:?}",
            std::fs::read_dir(&tmp).unwrap().collect::<Vec<_>>()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(std::fs::read_to_string(out.join("intervals.csv"))
        .unwrap()
        .contains("run,"));
}

#[test]
fn bad_fault_and_cluster_input_is_one_line_and_exit_2() {
    let t = tempfile::tempdir().unwrap();
    let out = t.path().join("never");
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec!["--store", "etcd", "--store-opt", "members=2"],
            "members=2",
        ),
        (
            vec![
                "--store",
                "etcd",
                "--store-opt",
                "members=3",
                "--duration",
                "5s",
                "--fault",
                "at=6s,kill=leader",
            ],
            "not before the end",
        ),
        (
            vec![
                "--store",
                "redis",
                "--duration",
                "5s",
                "--fault",
                "at=1s,kill=leader",
            ],
            "has no 'leader'",
        ),
        (
            vec![
                "--store",
                "redis",
                "--store-opt",
                "replicas=1",
                "--duration",
                "5s",
                "--fault",
                "at=1s,kill=replica:1",
            ],
            "has no 'replica:1'",
        ),
        (
            vec![
                "--store",
                "redis",
                "--store-opt",
                "addr=127.0.0.1:1",
                "--duration",
                "5s",
                "--fault",
                "at=1s,kill=primary",
            ],
            "only servers it started",
        ),
        (
            vec![
                "--store",
                "rocksdb",
                "--duration",
                "5s",
                "--fault",
                "at=1s,kill=server",
            ],
            "embedded store",
        ),
        (
            vec![
                "--store",
                "etcd",
                "--store-opt",
                "members=3",
                "--ops",
                "100",
                "--fault",
                "at=1s,kill=leader",
            ],
            "give --duration",
        ),
        (
            vec![
                "--store",
                "etcd",
                "--store-opt",
                "members=3",
                "--duration",
                "5s",
                "--fault",
                "at=1s,stop=leader",
            ],
            "needs for=",
        ),
        (
            vec!["--store", "redis", "--store-opt", "wait_replicas=1"],
            "only 0 replica",
        ),
        (
            vec!["--store", "redis", "--store-opt", "sentinels=3"],
            "needs replicas=1",
        ),
        (
            vec!["--store", "redis", "--store-opt", "replicas=5"],
            "replicas=5",
        ),
        (
            vec!["--store", "redis", "--store-opt", "cpus=99"],
            "does not exist here",
        ),
        (
            vec!["--store", "etcd", "--store-opt", "cpus=x"],
            "expected CPU numbers",
        ),
        (
            vec!["--store", "redis", "--store-opt", "cluster=2"],
            "cluster=2",
        ),
        (
            vec![
                "--store",
                "redis",
                "--store-opt",
                "cluster=3",
                "--store-opt",
                "replicas=1",
            ],
            "leave replicas=",
        ),
        (
            vec![
                "--store",
                "etcd",
                "--store-opt",
                "members=3",
                "--store-opt",
                "addr=127.0.0.1:2379",
            ],
            "leave members out",
        ),
        (
            vec![
                "--store",
                "etcd",
                "--duration",
                "5s",
                "--timeline",
                "5s",
                "--fault",
                "at=1s,kill=leader",
            ],
            "--timeline",
        ),
    ];
    for (args, says) in cases {
        let o = kvmeter()
            .arg("run")
            .args(&args)
            .arg("--out")
            .arg(&out)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
        assert!(!out.exists(), "{args:?} created the run directory");
    }
}

fn durability(args: &[&str], out: &Path) -> Value {
    let o = kvmeter()
        .arg("durability")
        .args(args)
        .arg("--out")
        .arg(out)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    json(&out.join("durability.json"))
}

#[test]
fn rocksdb_with_a_synced_wal_loses_no_acknowledged_write_over_five_kills() {
    let t = tempfile::tempdir().unwrap();
    let d = durability(
        &[
            "--store",
            "rocksdb",
            "--store-opt",
            "wal=true",
            "--store-opt",
            "sync=true",
            "--kills",
            "5",
            "--seed",
            "7",
        ],
        &t.path().join("synced"),
    );
    let v = &d["verdict"];
    assert_eq!(d["rounds"].as_array().unwrap().len(), 5);
    assert!(v["acknowledged"].as_u64().unwrap() > 100, "{v}");
    assert_eq!(v["lost"], 0, "{v}");
    assert_eq!(v["unexpected"], 0, "{v}");
    assert_eq!(v["unreadable"], 0, "{v}");
    // One write in flight per kill.
    assert_eq!(v["indeterminate"], 5, "{v}");
    // Without a WAL the memtable dies with the process: the check finds the losses.
    let d = durability(
        &[
            "--store",
            "rocksdb",
            "--store-opt",
            "wal=false",
            "--kills",
            "2",
            "--seed",
            "7",
        ],
        &t.path().join("nowal"),
    );
    let v = &d["verdict"];
    assert!(v["lost"].as_u64().unwrap() > 0, "{v}");
    assert!(!v["lost_examples"].as_array().unwrap().is_empty());
}

#[test]
fn redis_async_replication_loses_acknowledged_writes_and_wait_does_not() {
    let t = tempfile::tempdir().unwrap();
    // The replica is stopped (it lags), then the primary is killed: what the primary
    // acknowledged after the stop is gone once the replica is promoted.
    let faults = [
        "--fault",
        "at=1s,stop=replica:0,for=20s",
        "--fault",
        "at=2s,kill=primary",
    ];
    let mut args = vec![
        "--store",
        "redis",
        "--store-opt",
        "replicas=1",
        "--duration",
        "3s",
    ];
    args.extend(faults);
    let d = durability(&args, &t.path().join("async"));
    let v = &d["verdict"];
    assert!(v["lost"].as_u64().unwrap() > 0, "{v}");
    assert!(
        d["note"].as_str().unwrap().contains("promoted replica:0"),
        "{d}"
    );
    // WAIT 1: a write the stopped replica did not confirm is not acknowledged.
    let mut args = vec![
        "--store",
        "redis",
        "--store-opt",
        "replicas=1",
        "--store-opt",
        "wait_replicas=1",
        "--store-opt",
        "wait_timeout_ms=200",
        "--duration",
        "3s",
    ];
    args.extend(faults);
    let d = durability(&args, &t.path().join("wait"));
    let v = &d["verdict"];
    assert!(v["acknowledged"].as_u64().unwrap() > 100, "{v}");
    assert_eq!(v["lost"], 0, "{v}");
    assert!(v["indeterminate"].as_u64().unwrap() > 0, "{v}");
    let pids: Vec<i64> = d["members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["pid"].as_i64().unwrap())
        .collect();
    assert_eq!(pids.len(), 2);
    assert!(all_gone(&pids), "members left running");
}

#[test]
fn etcd_loses_no_acknowledged_write_when_its_leader_is_killed() {
    let t = tempfile::tempdir().unwrap();
    let d = durability(
        &[
            "--store",
            "etcd",
            "--store-opt",
            "members=3",
            "--duration",
            "4s",
            "--fault",
            "at=1500ms,kill=leader,restart_after=1s",
        ],
        &t.path().join("etcd"),
    );
    let v = &d["verdict"];
    assert!(v["acknowledged"].as_u64().unwrap() > 100, "{v}");
    assert_eq!(v["lost"], 0, "{v}");
    assert_eq!(v["unexpected"], 0, "{v}");
    let events = d["rounds"].as_array().unwrap();
    assert!(events.iter().any(|e| e["event"] == "kill"), "{d}");
}

#[test]
fn durability_input_is_checked_before_anything_is_created() {
    let t = tempfile::tempdir().unwrap();
    let out = t.path().join("never");
    for (args, says) in [
        (
            vec!["--store", "rocksdb", "--fault", "at=1s,kill=server"],
            "--fault acts on servers",
        ),
        (
            vec!["--store", "redis", "--kills", "3"],
            "--kills is for embedded",
        ),
        (
            vec![
                "--store",
                "redis",
                "--duration",
                "2s",
                "--fault",
                "at=3s,kill=primary",
            ],
            "not before the end",
        ),
        (
            vec!["--store", "redis", "--store-opt", "addr=127.0.0.1:1"],
            "no redis answers",
        ),
        (vec!["--store", "null"], "keeps nothing"),
    ] {
        let o = kvmeter()
            .arg("durability")
            .args(&args)
            .arg("--out")
            .arg(&out)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
        assert!(!out.exists(), "{args:?}");
    }
}

#[test]
fn redis_cluster_master_kill_stops_its_keys_while_the_others_go_on() {
    let t = tempfile::tempdir().unwrap();
    let out = t.path().join("cluster");
    let o = kvmeter()
        .args(["run", "--store", "redis", "--store-opt", "cluster=3"])
        .args(["--store-opt", "cluster_replicas=1", "-P", "workloada"])
        .args([
            "-p",
            "dataintegrity=true",
            "--records",
            "2000",
            "--threads",
            "2",
        ])
        .args([
            "--duration",
            "8s",
            "--fault",
            "at=2s,kill=master:1",
            "--out",
        ])
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let s = json(&out.join("summary.json"));
    let m = json(&out.join("manifest.json"));
    validate("summary.schema.json", &s);
    let members = m["store"]["server"]["members"].as_array().unwrap();
    let roles: Vec<&str> = members
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(
        roles,
        ["master", "master", "master", "replica", "replica", "replica"]
    );
    assert!(all_gone(&member_pids(&m)));
    // Keys routed by slot: every read that succeeded found what was written (data
    // integrity); YCSB counts a failed read's check as unexpected too, so those match.
    let run = phase(&s, "run");
    assert!(count(run, "VERIFY") > 0);
    let read_errors: u64 = run["ops"]["READ"]["errors"]
        .as_object()
        .map(|e| e.values().map(|v| v.as_u64().unwrap()).sum())
        .unwrap_or(0);
    let unexpected = run["ops"]["VERIFY"]["errors"]["unexpected_state"]
        .as_u64()
        .unwrap_or(0);
    assert_eq!(unexpected, read_errors, "{run}");
    let f = &run["faults"][0];
    assert!(
        f["latency_of"].as_str().unwrap().contains("did not affect"),
        "{f}"
    );
    // The victim's keys wait for the replica's promotion (node timeout 1 s + election).
    let unavailable = f["unavailable_s"].as_f64().unwrap();
    assert!((0.5..6.0).contains(&unavailable), "{f}");
    assert!(
        f["latency_during_recovery"]["operations"].as_u64().unwrap() > 0,
        "{f}"
    );
    // timeline.csv: while the victim's keys see no success, the others still do.
    let rows = csv_rows(&out.join("timeline.csv"));
    let at = f["at_s"].as_f64().unwrap();
    let ok = |class: &str, from: f64, to: f64| -> u64 {
        rows.iter()
            .filter(|r| r[3] == class)
            .filter(|r| {
                let s: f64 = r[1].parse().unwrap();
                s >= from && s < to
            })
            .map(|r| r[4].parse::<u64>().unwrap())
            .sum()
    };
    let (gap_from, gap_to) = (at + 0.15, at + unavailable.min(1.0) - 0.05);
    assert_eq!(ok("affected", gap_from, gap_to), 0, "{unavailable}");
    assert!(ok("rest", gap_from, gap_to) > 0);
    assert!(
        ok("affected", at + unavailable + 0.3, 8.0) > 0,
        "the victim's keys came back"
    );
}

#[test]
fn sentinels_fail_over_and_the_client_finds_the_new_primary() {
    let t = tempfile::tempdir().unwrap();
    let out = t.path().join("sentinel");
    let o = kvmeter()
        .args(["run", "--store", "redis", "--store-opt", "replicas=1"])
        .args([
            "--store-opt",
            "sentinels=3",
            "-P",
            "workloada",
            "--records",
            "1000",
        ])
        .args([
            "--threads",
            "2",
            "--duration",
            "9s",
            "--fault",
            "at=2s,kill=primary",
        ])
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let s = json(&out.join("summary.json"));
    let m = json(&out.join("manifest.json"));
    let roles: Vec<&str> = m["store"]["server"]["members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(
        roles,
        ["primary", "replica", "sentinel", "sentinel", "sentinel"]
    );
    assert!(all_gone(&member_pids(&m)));
    let run = phase(&s, "run");
    // The Sentinels named the replica the new primary, and the clients then sent to it.
    let events = run["fault_events"].as_array().unwrap();
    let promoted = events
        .iter()
        .find(|e| e["event"] == "primary")
        .expect("a new primary");
    assert_eq!(promoted["member"], "replica:0");
    let sent = run["sent_to"].as_object().unwrap();
    assert!(sent["primary:0"].as_u64().unwrap() > 0, "{sent:?}");
    assert!(sent["replica:0"].as_u64().unwrap() > 0, "{sent:?}");
    let f = &run["faults"][0];
    // down-after-milliseconds (1 s), the Sentinels' vote and the promotion.
    let unavailable = f["unavailable_s"].as_f64().unwrap();
    assert!((0.8..6.0).contains(&unavailable), "{f}");
}

fn cli(port: &str, args: &[&str]) -> String {
    let o = std::process::Command::new("redis-cli")
        .args(["-p", port])
        .args(args)
        .output()
        .expect("redis-cli (Debian's redis-tools, a dependency of redis-server)");
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

/// Slots move between masters while kvmeter runs (CLUSTER SETSLOT, MIGRATE — what
/// `redis-cli --cluster reshard` does): requests for a migrated key get ASK while the slot is
/// migrating and MOVED afterwards; the client follows both, so no operation fails.
#[test]
fn redis_cluster_client_follows_ask_and_moved_while_slots_migrate() {
    let t = tempfile::tempdir().unwrap();
    let out = t.path().join("reshard");
    let mut child = std::process::Command::new(bin())
        .args([
            "run",
            "--store",
            "redis",
            "--store-opt",
            "cluster=3",
            "-P",
            "workloada",
        ])
        .args([
            "-p",
            "requestdistribution=uniform",
            "--records",
            "60",
            "--threads",
            "2",
        ])
        .args(["--duration", "7s", "--out"])
        .arg(&out)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    wait_for_run_interval(&out);
    let m = json(&out.join("manifest.json"));
    let ports: Vec<String> = m["store"]["server"]["members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            m["addr"]
                .as_str()
                .unwrap()
                .rsplit(':')
                .next()
                .unwrap()
                .to_string()
        })
        .collect();
    let ids: Vec<String> = ports.iter().map(|p| cli(p, &["CLUSTER", "MYID"])).collect();
    // Move the slots of 5 keys of master 0 to master 1.
    let (a, b) = (&ports[0], &ports[1]);
    let mut moved = vec![];
    for _ in 0..50 {
        let k = cli(a, &["RANDOMKEY"]);
        let slot = cli(a, &["CLUSTER", "KEYSLOT", &k]);
        if !k.is_empty() && !moved.contains(&slot) {
            moved.push(slot);
        }
        if moved.len() == 5 {
            break;
        }
    }
    assert_eq!(moved.len(), 5);
    for slot in &moved {
        cli(b, &["CLUSTER", "SETSLOT", slot, "IMPORTING", &ids[0]]);
        cli(a, &["CLUSTER", "SETSLOT", slot, "MIGRATING", &ids[1]]);
        for k in cli(a, &["CLUSTER", "GETKEYSINSLOT", slot, "100"]).lines() {
            cli(a, &["MIGRATE", "127.0.0.1", b, k, "0", "5000"]);
        }
    }
    // While the slots are still migrating, their keys answer ASK at master 0.
    std::thread::sleep(Duration::from_millis(1500));
    for slot in &moved {
        // The destination first, then the source, then the rest (the resharding order).
        for p in [b, a, &ports[2]] {
            cli(p, &["CLUSTER", "SETSLOT", slot, "NODE", &ids[1]]);
        }
        // The keys are on master 1 now (kvmeter's client is sent there by MOVED).
        let n: u64 = cli(b, &["CLUSTER", "COUNTKEYSINSLOT", slot])
            .parse()
            .unwrap();
        assert!(n >= 1, "slot {slot}");
    }
    let status = child.wait().unwrap();
    assert!(status.success());
    let s = json(&out.join("summary.json"));
    let run = phase(&s, "run");
    assert_eq!(run["outcome"], "completed");
    // Every redirected request was sent again where the reply said: no operation failed.
    assert_eq!(run["errors"], 0, "{}", run["error_samples"]);
    assert!(count(run, "READ") > 1000);
}
