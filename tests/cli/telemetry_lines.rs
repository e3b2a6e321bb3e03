//! The per-phase telemetry lines of the terminal summary (issue 28, item 8). A phase of a few
//! milliseconds spans a clock tick or two of CPU accounting: its CPU shares were printed as
//! "66.7 % busy (user 33.3, system 33.3, iowait 33.3)" and its process as "0 % of a CPU
//! (kvmeter 88)". Such a window now says it has too few samples; a normal window's printed
//! parts add up to its printed whole, and no group is printed empty.

use crate::common;

use common::*;

fn run(args: &[&str]) -> String {
    run_with_summary(args).0
}

/// As `run`, with the run's summary.json.
fn run_with_summary(args: &[&str]) -> (String, serde_json::Value) {
    let dir = tempfile::tempdir().unwrap();
    let o = kvmeter()
        .arg("run")
        .args(args)
        .arg("--out")
        .arg(dir.path().join("r"))
        .timeout(std::time::Duration::from_secs(60))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(
        o.status.success(),
        "{}\n{stdout}",
        String::from_utf8_lossy(&o.stderr)
    );
    (stdout, json(&dir.path().join("r/summary.json")))
}

/// (name, value) pairs of "name v, name v".
fn parts(group: &str) -> Vec<(String, f64)> {
    group
        .split(", ")
        .map(|p| {
            let (n, v) = p.rsplit_once(' ').unwrap_or_else(|| panic!("'{p}'"));
            (n.to_string(), v.parse().unwrap_or_else(|_| panic!("'{p}'")))
        })
        .collect()
}

#[test]
fn a_phase_of_a_few_milliseconds_says_it_has_too_few_samples() {
    // 200 inserts and 300 operations on the embedded store: each phase takes milliseconds.
    let (out, summary) = run_with_summary(&["--records", "200", "--ops", "300"]);
    let cpu: Vec<&str> = out.lines().filter(|l| l.starts_with("  cpu ")).collect();
    assert_eq!(cpu.len(), 2, "{out}");
    for l in cpu {
        assert!(
            l.starts_with("  cpu      unavailable: too few samples (")
                && l.contains("CPU shares need 50)"),
            "{l}"
        );
        // No shares, no process CPU, no empty group.
        assert!(
            !l.contains('%') && !l.contains("process") && !l.contains("()"),
            "{l}"
        );
    }
    // The estimate model's power is a function of CPU busy: not given either.
    for l in out.lines().filter(|l| l.starts_with("  power ")) {
        assert!(
            l.contains("ESTIMATE not given") || !l.contains("ESTIMATE"),
            "{l}"
        );
    }
    // And the summary gives none that the terminal does not: a measured meter's energy stays.
    for p in summary["phases"].as_array().unwrap() {
        let estimated = p["telemetry"]["power"]["estimate"]
            .as_bool()
            .unwrap_or(false);
        if estimated && p["telemetry"]["cpu"].is_null() {
            assert!(p["energy"].is_null(), "{}", p["energy"]);
        }
    }
}

#[test]
fn a_normal_phase_prints_parts_that_add_up() {
    let out = run(&["--records", "500", "--duration", "1500ms"]);
    let l = out
        .lines()
        .rfind(|l| l.starts_with("  cpu "))
        .unwrap_or_else(|| panic!("{out}"));
    // "  cpu      B % busy (user U, system S[, ...])[, I % iowait]; process P % of a CPU (g v, ...)"
    let (cpu, process) = l.split_once("; process ").unwrap_or_else(|| panic!("{l}"));
    let busy: f64 = cpu
        .trim_start_matches("  cpu")
        .trim()
        .split(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(busy > 0.0, "{l}");
    let open = cpu.find('(').unwrap_or_else(|| panic!("{l}"));
    let close = cpu.find(')').unwrap();
    let split = parts(&cpu[open + 1..close]);
    let sum: f64 = split.iter().map(|p| p.1).sum();
    assert!((sum - busy).abs() < 0.051, "{l}: parts sum to {sum}");
    assert!(split.iter().all(|p| p.1 > 0.0), "{l}");
    let total: f64 = process.split(' ').next().unwrap().parse().unwrap();
    if let (Some(a), Some(b)) = (process.find('('), process.find(')')) {
        let groups = parts(&process[a + 1..b]);
        let sum: f64 = groups.iter().map(|p| p.1).sum();
        assert!((sum - total).abs() < 0.51, "{l}: groups sum to {sum}");
        assert!(groups.iter().all(|g| g.1 > 0.0), "{l}");
    }
    assert!(!l.contains("()"), "{l}");
}
