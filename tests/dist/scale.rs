//! Distributed runs at scale (issue 33): what the coordinator records about its merging.
//! Real etcd, memcached, a `kvmeter dist run` coordinator and `kvmeter agent` processes on
//! loopback; the expected rows come from the merged run's own intervals.csv, not from the
//! code that writes dist/merge.csv. Timings are written, never asserted.

use crate::common;

use common::json;
use common::servers::*;

#[test]
fn the_coordinator_writes_one_merge_row_per_merged_interval() {
    let tmp = tempfile::tempdir().unwrap();
    let (_etcd, url) = etcd(tmp.path(), 1);
    let (_mc, port) = memcached(tmp.path(), "mc", false);
    let run = s(&[
        "--store",
        "memcached",
        "--store-opt",
        &format!("addr=127.0.0.1:{port}"),
        "-P",
        "workloadb",
        "--records",
        "500",
        "--duration",
        "2s",
        "--threads",
        "1",
        "--target",
        "500",
        "--interval",
        "250ms",
        "--telemetry-interval",
        "0",
    ]);
    let mut d = Dist::start(&url, "merge-rows", 2, &[], &run);
    let code = d.finish();
    assert_eq!(code, 0, "{}", d.log("coord.log"));
    // The merged intervals, by phase and index, with the agents each merged.
    let intervals = std::fs::read_to_string(d.path("merged/intervals.csv")).unwrap();
    let mut lines = intervals.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let col = |name: &str| header.iter().position(|h| *h == name).unwrap();
    let (phase, index, agents) = (col("phase"), col("interval"), col("agents"));
    // One row per metric: an interval is its (phase, index).
    let mut merged: Vec<(String, String, String)> = lines
        .map(|l| l.split(',').collect::<Vec<_>>())
        .map(|f| (f[phase].into(), f[index].into(), f[agents].into()))
        .collect();
    merged.dedup();
    assert!(merged.len() >= 8, "{merged:?}");
    // dist/merge.csv: one row per merged interval, in the same order, with the same count of
    // reports; its figures are numbers.
    let rows = std::fs::read_to_string(d.path("merged/dist/merge.csv")).unwrap();
    let mut rows = rows.lines();
    assert_eq!(
        rows.next(),
        Some("phase,interval,reports,merge_ms,lateness_ms")
    );
    let rows: Vec<Vec<String>> = rows
        .map(|l| l.split(',').map(str::to_string).collect())
        .collect();
    assert_eq!(rows.len(), merged.len(), "{rows:?}\n{merged:?}");
    for (r, (p, k, n)) in rows.iter().zip(&merged) {
        assert_eq!((&r[0], &r[1], &r[2]), (p, k, n));
        let merge_ms: f64 = r[3].parse().unwrap();
        let lateness_ms: f64 = r[4].parse().unwrap();
        assert!(merge_ms >= 0.0 && lateness_ms.is_finite(), "{r:?}");
    }
    // dist.json summarises the same rows.
    let info = json(&d.path("merged/dist.json"));
    let m = &info["merge"];
    assert_eq!(m["intervals"], merged.len() as u64, "{m}");
    assert_eq!(m["reports_max"], 2, "{m}");
    for col in ["merge_ms", "lateness_ms"] {
        let (p50, p99, max) = (
            m[col]["p50"].as_f64().unwrap(),
            m[col]["p99"].as_f64().unwrap(),
            m[col]["max"].as_f64().unwrap(),
        );
        assert!(p50 <= p99 && p99 <= max, "{col}: {m}");
    }
}
