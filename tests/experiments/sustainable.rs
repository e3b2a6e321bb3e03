//! `kvmeter capacity --sustainable` (issue 43 item 5) on RocksDB with writes stopped at two
//! level-0 files (the compaction trigger too, so every second flush stops writes until its
//! compaction ends): a low rate flushes nothing in its 4 s and is sustainable; a higher one
//! flushes, stops writes, and is not — though its latency still meets a loose SLO. So the
//! sustainable capacity lies below the latency-only one. The stall is RocksDB's own account
//! (its stall time, its LOG's "Stopping writes" in store_events.csv), and it lies under the
//! interval whose p99 rose. No timing is asserted.

use crate::common::*;

#[test]
fn a_stalling_lsm_has_a_sustainable_capacity_below_its_latency_capacity() {
    let t = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let out = t.path().join("cap");
    let o = kvmeter()
        .args(["capacity", "-P", "workloada", "--records", "50000"])
        .args(["-p", "fieldcount=1", "-p", "fieldlength=1000"])
        .args(["-p", "readproportion=0", "-p", "updateproportion=1"])
        .args(["--store-opt", "write_buffer_mb=1"])
        .args(["--store-opt", "l0_compaction_trigger=2"])
        .args(["--store-opt", "l0_slowdown_trigger=2"])
        .args(["--store-opt", "l0_stop_trigger=2"])
        .args([
            "--slo",
            "p99<20s",
            "--start-rate",
            "50",
            "--max-rate",
            "3200",
        ])
        .args([
            "--step-factor",
            "8",
            "--precision",
            "0.5",
            "--max-points",
            "3",
        ])
        .args(["--duration", "4s", "--warmup", "1s", "--interval", "250ms"])
        .arg("--sustainable")
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{stderr}");
    let c = json(&out.join("capacity.json"));
    let lat = &c["latency_only"];
    let (sus, lat_cap) = (
        c["capacity_ops_per_s"].as_f64(),
        lat["capacity_ops_per_s"]
            .as_f64()
            .unwrap_or_else(|| panic!("{c}")),
    );
    // 50 ops/s writes 200 KB in 4 s: no flush, no stall.
    assert!(sus.is_some_and(|s| s >= 50.0 && s < lat_cap), "{c}");
    assert!(c["slo_text"].as_str().unwrap().contains("sustainable"));
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        stdout.contains(&format!(
            "Latency alone: {}",
            lat["capacity_text"].as_str().unwrap()
        )),
        "{stdout}"
    );

    // The rate that met the SLO and was not sustainable: RocksDB stalled there.
    let verdicts = c["verdicts"].as_array().unwrap();
    let v = verdicts
        .iter()
        .find(|v| v["latency_pass"] == true && v["sustainable"] == false)
        .unwrap_or_else(|| panic!("no rate met the SLO unsustainably: {c}"));
    assert_eq!(v["pass"], false);
    assert!(
        v["sustain_why"]
            .as_str()
            .unwrap()
            .starts_with("writes stalled"),
        "{v}"
    );
    let rate = v["offered_ops_per_s"].as_f64().unwrap();
    let point = c["points"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["offered_ops_per_s"].as_f64() == Some(rate))
        .unwrap();
    assert_eq!(point["sustain"]["sustainable"], false);
    let dir = std::path::PathBuf::from(point["run_dir"].as_str().unwrap());
    let summary = json(&dir.join("summary.json"));
    let run = summary["phases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["kind"] == "run")
        .unwrap();
    let stalled = run["store_stats"]["stats"]["stall_us"]["increase"]
        .as_u64()
        .unwrap();
    assert!(stalled > 0, "{run}");
    assert_eq!(point["sustain"]["stalled_us"].as_u64(), Some(stalled));

    // The LOG's stops in the run phase (store_events.csv), each lasting until the next
    // compaction ended (RocksDB lets writes go on then). Writes arrive every 2.5 ms at
    // 400 ops/s, so one arrives at the start of a long stop and waits it out: the intervals
    // under the longest stop hold a latency from intended start of at least half its length.
    // A stop under 50 ms is within the noise of a shared machine and is not judged.
    let events = std::fs::read_to_string(dir.join("store_events.csv")).unwrap();
    let run_events: Vec<(f64, String)> = events
        .lines()
        .filter(|l| l.starts_with("run,"))
        .map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            (f[1].parse().unwrap(), f[3].to_string())
        })
        .collect();
    let stops: Vec<(f64, f64)> = run_events
        .iter()
        .filter(|(t, e)| e == "write_stop" && *t >= 0.0)
        .filter_map(|(t, _)| {
            let end = run_events
                .iter()
                .find(|(u, e)| e == "compaction_finished" && u >= t)?;
            Some((*t, end.0))
        })
        .collect();
    assert!(!stops.is_empty(), "{events}");
    let (from, to) =
        stops
            .iter()
            .copied()
            .fold((0.0, 0.0), |b, x| if x.1 - x.0 > b.1 - b.0 { x } else { b });
    let intervals = std::fs::read_to_string(dir.join("intervals.csv")).unwrap();
    let mut lines = intervals.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let col = |n: &str| header.iter().position(|h| *h == n).unwrap();
    let (start, end, max) = (col("start_s"), col("end_s"), col("intended_max_us"));
    let under: f64 = lines
        .map(|l| l.split(',').collect::<Vec<_>>())
        .filter(|f| f[0] == "run" && f[col("metric")] == "UPDATE")
        .filter(|f| {
            let (a, b): (f64, f64) = (f[start].parse().unwrap(), f[end].parse().unwrap());
            b >= from && a <= to + 0.25
        })
        .filter_map(|f| f[max].parse::<f64>().ok())
        .fold(0.0, f64::max);
    let stop_us = (to - from) * 1e6;
    if stop_us < 50_000.0 {
        eprintln!("the longest stop lasted {stop_us:.0} µs: too short to judge");
    } else {
        assert!(
            under >= 0.5 * stop_us,
            "the stop {from}..{to} s: the latency under it is {under} µs"
        );
    }
}

/// An experiment file's capacity step takes `sustainable = true`; a store that reports no
/// statistics of its own (the null store) is judged on latency alone, and says so.
#[test]
fn a_store_without_statistics_is_judged_on_latency_alone_and_says_so() {
    let t = tempfile::tempdir().unwrap();
    let file = t.path().join("sus.toml");
    std::fs::write(
        &file,
        "[experiment]\nname = \"sus\"\n\n[[step]]\nname = \"c\"\ncommand = \"capacity\"\nstore = \"null\"\nsustainable = true\nmax_points = 1\nduration = \"1s\"\nwarmup = \"0s\"\nrecords = 100\n",
    )
    .unwrap();
    let out = t.path().join("out");
    let o = kvmeter()
        .arg("experiment")
        .arg(&file)
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let c = json(&out.join("steps/c/capacity.json"));
    let v = &c["verdicts"][0];
    assert_eq!(v["sustainable"], serde_json::Value::Null, "{c}");
    assert_eq!(v["latency_pass"], v["pass"]);
    assert!(
        c["note"].as_str().unwrap().contains(
            "the store reports no statistics of its own, so sustainability was not judged"
        ),
        "{c}"
    );
    assert_eq!(
        c["latency_only"]["capacity_ops_per_s"],
        c["capacity_ops_per_s"]
    );
}
