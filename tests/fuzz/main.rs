//! Fuzzing every parser kvmeter exposes (docs/fuzzing.md; issue 27 item 6).
//!
//! `cargo test --release --features all-stores --test fuzz` runs each target for
//! KVMETER_FUZZ_SECS seconds (2 by default: the CI run) and fails on any panic, hang, abort
//! or a peak RSS above 256 MiB. `bench/fuzz.sh SECONDS [TARGET...]` runs the same test with a
//! longer time and prints the table.
//!
//! Each target runs in its own child process (this test binary again, running the ignored
//! test `fuzz_one`) under RLIMIT_AS, so a memory bomb aborts that child, not the campaign, and
//! each target's peak RSS is its own process's VmHWM.

mod engine;
mod files;
mod inputs;
mod replies;
mod targets;

use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::time::Duration;

/// The RSS the issue allows a parser (≤ 256 MB).
const MAX_RSS_MB: f64 = 256.0;
/// Address space of each child: a bomb that gets past a bound fails here, loudly.
const CHILD_AS: u64 = 4 << 30;

fn env_f64(k: &str, d: f64) -> f64 {
    std::env::var(k)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(d)
}

fn crash_dir() -> PathBuf {
    std::env::var_os("KVMETER_FUZZ_CRASHES")
        .map(PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join("kvmeter-fuzz-crashes"))
}

/// The child: runs the one target named by KVMETER_FUZZ_ONE and prints its figures as one
/// `FUZZ-RESULT` JSON line.
#[test]
#[ignore = "run by fuzz_every_target in a child process"]
fn fuzz_one() {
    let Ok(name) = std::env::var("KVMETER_FUZZ_ONE") else {
        return;
    };
    let all = targets::all();
    let t = all.iter().find(|t| t.name == name).expect("a known target");
    engine::install_panic_hook();
    let o = engine::fuzz(
        t,
        &engine::Settings {
            secs_per_target: env_f64("KVMETER_FUZZ_SECS", 2.0),
            hang_limit: Duration::from_secs_f64(env_f64("KVMETER_FUZZ_HANG_S", 2.0)),
            seed: env_f64("KVMETER_FUZZ_SEED", 1.0) as u64,
            crash_dir: crash_dir(),
            trace: std::env::var_os("KVMETER_FUZZ_TRACE").is_some(),
            skip_seeds: std::env::var_os("KVMETER_FUZZ_SKIP_SEEDS").is_some(),
        },
    );
    let _ = std::panic::take_hook();
    let crashes: Vec<String> = o
        .crashes
        .iter()
        .map(|(p, m)| format!("{}: {m}", p.display()))
        .collect();
    println!(
        "\nFUZZ-RESULT {}",
        serde_json::json!({
            "target": o.target, "inputs": o.inputs, "accepted": o.accepted,
            "panics": o.panics, "hangs": o.hangs, "peak_rss_mb": o.peak_rss_mb,
            "secs": o.secs, "crashes": crashes,
        })
    );
    // Abandoned (hung) workers must not keep the child alive.
    std::process::exit(0);
}

/// One child process fuzzing `name` for `secs`: its figures, or why it died (an allocation
/// past RLIMIT_AS aborts the process).
fn run_child(
    name: &str,
    secs: f64,
    attempt: u64,
) -> Result<(engine::Outcome, Vec<String>), String> {
    let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
    cmd.args([
        "--exact",
        "fuzz_one",
        "--ignored",
        "--nocapture",
        "--test-threads=1",
    ])
    .env("KVMETER_FUZZ_ONE", name)
    .env("KVMETER_FUZZ_SECS", secs.to_string())
    .env(
        "KVMETER_FUZZ_SEED",
        (env_f64("KVMETER_FUZZ_SEED", 1.0) as u64 + attempt).to_string(),
    );
    if attempt > 0 {
        // After an abort: record each input first (to find the culprit), seeds already ran.
        cmd.env("KVMETER_FUZZ_TRACE", "1")
            .env("KVMETER_FUZZ_SKIP_SEEDS", "1");
    }
    unsafe {
        cmd.pre_exec(|| {
            let lim = libc::rlimit {
                rlim_cur: CHILD_AS,
                rlim_max: CHILD_AS,
            };
            libc::setrlimit(libc::RLIMIT_AS, &lim);
            Ok(())
        });
    }
    let out = cmd.output().expect("run the fuzz child");
    let stdout = String::from_utf8_lossy(&out.stdout);
    // The harness prints "test fuzz_one ... " on the same line.
    let line = stdout
        .lines()
        .find_map(|l| l.split_once("FUZZ-RESULT ").map(|(_, r)| r));
    let Some(v) = line.and_then(|l| serde_json::from_str::<serde_json::Value>(l).ok()) else {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let why = stderr
            .lines()
            .find(|l| l.contains("memory allocation") || l.contains("panicked"))
            .unwrap_or("");
        return Err(format!("the child died ({}): {why}", out.status));
    };
    let o = engine::Outcome {
        target: name.to_string(),
        inputs: v["inputs"].as_u64().unwrap_or(0),
        accepted: v["accepted"].as_u64().unwrap_or(0),
        panics: v["panics"].as_u64().unwrap_or(0),
        hangs: v["hangs"].as_u64().unwrap_or(0),
        peak_rss_mb: v["peak_rss_mb"].as_f64().unwrap_or(0.0),
        secs: v["secs"].as_f64().unwrap_or(0.0),
        crashes: vec![],
    };
    let crashes = v["crashes"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|c| c.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    Ok((o, crashes))
}

/// Fuzzes `name` for its whole time, restarting a child that died (at most 5 times); each
/// death counts as a crash, with the input it was running when the child traced its inputs.
fn run_target(name: &str) -> (engine::Outcome, Vec<String>) {
    let secs = env_f64("KVMETER_FUZZ_SECS", 2.0);
    let t0 = std::time::Instant::now();
    let mut total = engine::Outcome {
        target: name.to_string(),
        ..Default::default()
    };
    let mut crashes = vec![];
    for attempt in 0..6 {
        let left = secs - t0.elapsed().as_secs_f64();
        if attempt > 0 && left < 0.5 {
            break;
        }
        match run_child(name, left.max(0.1), attempt) {
            Ok((o, c)) => {
                total.inputs += o.inputs;
                total.accepted += o.accepted;
                total.panics += o.panics;
                total.hangs += o.hangs;
                total.peak_rss_mb = total.peak_rss_mb.max(o.peak_rss_mb);
                crashes.extend(c);
                break;
            }
            Err(why) => {
                total.panics += 1;
                let last = crash_dir().join(format!("{name}-last-input"));
                let kept = crash_dir().join(format!("{name}-abort-{attempt}"));
                let which = match std::fs::rename(&last, &kept) {
                    Ok(()) => kept.display().to_string(),
                    Err(_) => format!("{name} (input not traced on the first run)"),
                };
                crashes.push(format!("{which}: {why}"));
            }
        }
    }
    total.secs = t0.elapsed().as_secs_f64();
    (total, crashes)
}

/// CI and bench/fuzz.sh: every target (or those in KVMETER_FUZZ_TARGETS, space-separated).
#[test]
fn fuzz_every_target() {
    let all = targets::all();
    let wanted: Vec<String> = std::env::var("KVMETER_FUZZ_TARGETS")
        .unwrap_or_default()
        .split_whitespace()
        .map(str::to_string)
        .collect();
    for w in &wanted {
        assert!(
            all.iter().any(|t| t.name == w),
            "unknown target {w}; targets: {}",
            all.iter().map(|t| t.name).collect::<Vec<_>>().join(" ")
        );
    }
    let names: Vec<&str> = all
        .iter()
        .filter(|t| wanted.is_empty() || wanted.iter().any(|w| w == t.name))
        .map(|t| t.name)
        .collect();
    // One child per CPU at a time: each target is a single-threaded, CPU-bound child, so each
    // still has a CPU of its own for its seconds, and the campaign takes 1/CPUs the time.
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let next = std::sync::atomic::AtomicUsize::new(0);
    let done = std::sync::Mutex::new(vec![None; names.len()]);
    std::thread::scope(|s| {
        for _ in 0..cpus.min(names.len()) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(name) = names.get(i) else { break };
                let (o, c) = run_target(name);
                eprintln!(
                    "fuzz {:<18} {:>9} inputs {:>3} panics {:>2} hangs {:>7.1} MB",
                    o.target, o.inputs, o.panics, o.hangs, o.peak_rss_mb
                );
                done.lock().unwrap()[i] = Some((o, c));
            });
        }
    });
    let (rows, crashes): (Vec<_>, Vec<_>) =
        done.into_inner().unwrap().into_iter().flatten().unzip();
    let crashes: Vec<String> = crashes.into_iter().flatten().collect();
    let table = engine::table(&rows);
    println!("{table}");
    if let Some(p) = std::env::var_os("KVMETER_FUZZ_TABLE") {
        std::fs::write(p, &table).unwrap();
    }
    for c in &crashes {
        println!("crash: {c}");
    }
    let bad: Vec<String> = rows
        .iter()
        .filter(|r| r.panics > 0 || r.hangs > 0 || r.peak_rss_mb > MAX_RSS_MB || r.inputs == 0)
        .map(|r| r.target.clone())
        .collect();
    assert!(
        bad.is_empty(),
        "targets with panics, hangs, no inputs or RSS > {MAX_RSS_MB} MB: {bad:?}\n{table}\n{}",
        crashes.join("\n")
    );
}
