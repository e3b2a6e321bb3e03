//! `--profile` on a distributed run (docs/telemetry.md): each agent profiles its own process.

use crate::common;

use common::servers::*;
use common::{json, phase};

/// `--profile` on a distributed run: each agent samples its own process and writes its own
/// profile (folded stacks, flame graphs, figures in its summary); the merged run holds none
/// (docs/telemetry.md) instead of summing samples of different processes.
#[test]
fn with_profile_every_agent_profiles_itself_and_the_merge_holds_none() {
    if !std::path::Path::new("/usr/bin/perf").exists() {
        panic!("perf (linux-perf) is installed by scripts/setup.sh for the tests");
    }
    let tmp = tempfile::tempdir().unwrap();
    let (_etcd, url) = etcd(tmp.path(), 1);
    let run = s(&[
        "--store",
        "null",
        "-P",
        "workloadc",
        "--phase",
        "run",
        "--ops",
        "0",
        "--duration",
        "2s",
        "--threads",
        "1",
        "--profile",
    ]);
    let mut d = Dist::start(&url, "profile", 2, &[], &run);
    let code = d.finish();
    assert_eq!(code, 0, "{}", d.log("coord.log"));
    for i in 0..2 {
        let a = json(&d.path(&format!("agent{i}/summary.json")));
        let p = &phase(&a, "run")["telemetry"]["profile"];
        // How many samples an agent gets depends on the CPU it is given (two agents and two
        // system-wide perfs share two CPUs here: as few as 15 in 2 s); the figures must say so.
        let harness = &p["groups"]["harness"];
        let n = harness["samples"].as_u64().unwrap_or(0);
        assert!(n > 0, "agent {i}: {p}");
        if n < 50 {
            assert!(harness["share_pct"].is_null(), "agent {i}: {p}");
            assert_eq!(
                harness["too_few"],
                format!("{n} samples: shares need at least 50"),
                "agent {i}: {p}"
            );
        } else {
            assert!(harness["share_pct"].as_f64().is_some(), "agent {i}: {p}");
        }
        // The folded stacks are the agent's own, and hold every one of its samples.
        let folded = d.path(&format!("agent{i}/profile/run.harness.folded"));
        let text = std::fs::read_to_string(&folded).unwrap_or_default();
        assert!(
            text.contains("kvmeter::"),
            "agent {i}: {}",
            folded.display()
        );
        let in_file: u64 = text
            .lines()
            .filter_map(|l| l.rsplit_once(' ')?.1.parse::<u64>().ok())
            .sum();
        assert_eq!(in_file, n, "agent {i}: {}", folded.display());
    }
    // The merge does not pretend: no profile summed from different processes.
    let merged = json(&d.path("merged/summary.json"));
    let m = phase(&merged, "run");
    assert!(m["telemetry"]["profile"].is_null(), "{m}");
    assert!(!d.path("merged/profile").exists());
}
