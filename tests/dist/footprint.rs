//! Issue 33: a distributed run's etcd footprint does not grow with its length. Agents push
//! their interval reports to the coordinator (`--reports auto`, the default), so etcd holds
//! only membership, leases and start times: a run whose reports alone are larger than etcd's
//! whole backend quota completes, merges exactly, and adds a few dozen revisions. With
//! `--reports etcd` every report is a revision (the old design, kept for small runs).
//! Golden values: etcd's own status (revision, DB size, alarms), memcached's own `stats`, the
//! agents' own summaries.

use crate::common;

use common::servers::*;
use common::{json, phase};
use serde_json::Value;

/// etcd's (revision, DB size in bytes), from its own status.
fn etcd_status(url: &str) -> (u64, u64) {
    let v = etcd_post(url, "/v3/maintenance/status", "{}").expect("etcd answers");
    let num = |v: &Value| {
        v.as_str()
            .and_then(|s| s.parse().ok())
            .or_else(|| v.as_u64())
            .unwrap_or(0)
    };
    (num(&v["header"]["revision"]), num(&v["dbSize"]))
}

fn alarms(url: &str) -> Vec<Value> {
    let v = etcd_post(url, "/v3/maintenance/alarm", r#"{"action":"GET"}"#).expect("etcd answers");
    v["alarms"].as_array().cloned().unwrap_or_default()
}

fn run_flags(port: u16, duration: &str) -> Vec<String> {
    s(&[
        "--store",
        "memcached",
        "--store-opt",
        &format!("addr=127.0.0.1:{port}"),
        "-P",
        "workloada",
        "--records",
        "1000",
        "--duration",
        duration,
        "--threads",
        "1",
        // Paced: etcd, memcached and four kvmeter processes share the 2 vCPUs.
        "--target",
        "1500",
        "--interval",
        "100ms",
        "--telemetry-interval",
        "0",
    ])
}

/// The merged run's counts equal the sum of the agents' and memcached's own, per phase.
fn assert_exact(d: &Dist, agents: usize, port: u16) -> Value {
    let merged = json(&d.path("merged/summary.json"));
    let mut total = std::collections::BTreeMap::<String, u64>::new();
    for p in ["load", "run"] {
        for (op, n) in counts(phase(&merged, p)) {
            let sum: u64 = (0..agents)
                .map(|i| {
                    let a = json(&d.path(&format!("agent{i}/summary.json")));
                    counts(phase(&a, p)).get(&op).copied().unwrap_or(0)
                })
                .sum();
            assert_eq!(n, sum, "{p} {op}");
            *total.entry(op).or_default() += n;
        }
    }
    let st = mc_stats(port);
    // An UPDATE of one field reads the whole value first (memcached keeps a record as one
    // value): one get per READ and per UPDATE.
    assert_eq!(
        total["READ"] + total["UPDATE"],
        st["cmd_get"],
        "READs and UPDATEs against memcached's cmd_get"
    );
    assert_eq!(
        total["INSERT"] + total["UPDATE"],
        st["cmd_set"],
        "writes against memcached's cmd_set"
    );
    merged
}

/// Each phase's merged interval rows: one per interval any agent wrote.
fn assert_every_interval_merged(d: &Dist, agents: usize) -> usize {
    let indices = |csv: &str, p: &str| -> std::collections::BTreeSet<u64> {
        csv.lines()
            .filter(|l| l.starts_with(&format!("{p},")))
            .map(|l| l.split(',').nth(1).unwrap().parse().unwrap())
            .collect()
    };
    let merged = std::fs::read_to_string(d.path("merged/intervals.csv")).unwrap();
    let mut reports = 0;
    for p in ["load", "run"] {
        let mut want = std::collections::BTreeSet::new();
        for i in 0..agents {
            let csv = std::fs::read_to_string(d.path(&format!("agent{i}/intervals.csv"))).unwrap();
            let mine = indices(&csv, p);
            reports += mine.len();
            want.extend(mine);
        }
        assert_eq!(indices(&merged, p), want, "{p}: merged intervals");
    }
    reports
}

#[test]
fn a_run_whose_reports_exceed_etcds_quota_completes_and_leaves_etcd_as_it_was() {
    let tmp = tempfile::tempdir().unwrap();
    // A 512 KiB backend: through etcd, this run's reports alone would fill it (the old
    // design ended degraded with NOSPACE; see issue 33).
    const QUOTA: u64 = 512 << 10;
    let (_etcd, url) = etcd_with(
        tmp.path(),
        1,
        &["--quota-backend-bytes", &QUOTA.to_string()],
    );
    let (_m, port) = memcached(tmp.path(), "mc", false);
    let (rev0, db0) = etcd_status(&url);
    assert!(db0 < QUOTA / 4, "a fresh etcd's DB is {db0} bytes");
    let mut d = Dist::start(&url, "footprint", 3, &[], &run_flags(port, "20s"));
    let code = d.finish();
    assert_eq!(code, 0, "{}", d.log("coord.log"));
    let merged = assert_exact(&d, 3, port);
    assert_eq!(merged["status"], "completed");
    let reports = assert_every_interval_merged(&d, 3);
    let info = json(&d.path("merged/dist.json"));
    assert!(
        info["reports"]
            .as_str()
            .unwrap()
            .starts_with("direct to 127.0.0.1:"),
        "{}",
        info["reports"]
    );
    assert!(info.get("reports_via_etcd").is_none(), "{info}");
    // The reports were larger than the whole quota...
    let pushed: u64 = (0..3)
        .map(|i| {
            json(&d.path(&format!("agent{i}/dist/agent.json")))["bytes_to_coordinator"]
                .as_u64()
                .unwrap()
        })
        .sum();
    assert!(pushed > QUOTA, "{pushed} bytes pushed: make the run longer");
    // ...and etcd saw none of them: a few revisions per agent and phase, no alarm, nothing
    // left.
    let (rev1, db1) = etcd_status(&url);
    assert!(reports > 300, "{reports} interval reports");
    assert!(
        rev1 - rev0 <= 48,
        "{} revisions for {reports} reports",
        rev1 - rev0
    );
    assert!(db1 < QUOTA, "etcd's DB is {db1} bytes (was {db0})");
    assert!(alarms(&url).is_empty(), "{:?}", alarms(&url));
    assert_eq!(keys_left(&url), 0);
}

#[test]
fn through_etcd_every_report_is_a_revision_and_the_merge_is_the_same() {
    let tmp = tempfile::tempdir().unwrap();
    let (_etcd, url) = etcd(tmp.path(), 1);
    let (_m, port) = memcached(tmp.path(), "mc", false);
    let (rev0, _) = etcd_status(&url);
    let mut d = Dist::start(
        &url,
        "via-etcd",
        2,
        &["--reports", "etcd"],
        &run_flags(port, "3s"),
    );
    let code = d.finish();
    assert_eq!(code, 0, "{}", d.log("coord.log"));
    assert_exact(&d, 2, port);
    let reports = assert_every_interval_merged(&d, 2);
    let info = json(&d.path("merged/dist.json"));
    assert_eq!(info["reports"], "etcd");
    let (rev1, _) = etcd_status(&url);
    assert!(
        rev1 - rev0 >= reports as u64,
        "{} revisions for {reports} reports",
        rev1 - rev0
    );
    assert_eq!(keys_left(&url), 0);
}
