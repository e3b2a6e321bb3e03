//! `--profile` on a distributed run (docs/telemetry.md): each agent profiles its own process.

use crate::common;

use common::servers::*;
use common::{json, phase};

/// Tests whose figures need kvmeter to get a CPU when it wants one (here, at least 50 perf
/// samples of each agent in 2 s): `scripts/run-tests.sh` runs every `quiet` module after the
/// other tests, one test per CPU, as tests beside them would otherwise starve the agents.
mod quiet {
    use super::*;

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
            assert!(p["samples"].as_u64().unwrap_or(0) > 50, "agent {i}: {p}");
            let folded = d.path(&format!("agent{i}/profile/run.harness.folded"));
            let text = std::fs::read_to_string(&folded).unwrap_or_default();
            assert!(
                text.contains("kvmeter::"),
                "agent {i}: {}",
                folded.display()
            );
        }
        // The merge does not pretend: no profile summed from different processes.
        let merged = json(&d.path("merged/summary.json"));
        let m = phase(&merged, "run");
        assert!(m["telemetry"]["profile"].is_null(), "{m}");
        assert!(!d.path("merged/profile").exists());
    }
}
