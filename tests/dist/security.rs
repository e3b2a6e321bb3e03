//! Distributed runs against a hostile writer to etcd (issue 27; review F1, F2, F6, F7): a real
//! etcd on loopback, real agents and coordinator, and the test playing the attacker through
//! etcd's JSON gateway. A marker file written by the attacker's payload (a `--power cmd:`
//! command, a shared library's constructor) must never appear; forged registrations, reports,
//! ends, refusals and aborts must change nothing; the legitimate job completes and merges
//! exactly (the merged counts are the sum of the agents' own).

use crate::common;
// The report channel (issue 41): idle connections and replayed reports.
mod channel;

use base64::Engine;
use common::servers::*;
use common::{copy_dir, json, kvmeter, phase, TEST_PLAN_KEY};
use kvmeter::distributed::seal::Seal;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

fn b64(s: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(s)
}

fn put(url: &str, key: &str, value: &str) {
    let body = format!(r#"{{"key":"{}","value":"{}"}}"#, b64(key), b64(value));
    etcd_post(url, "/v3/kv/put", &body).expect("etcd answers the attacker");
}

/// A shared library whose constructor appends to `marker` when loaded (F2's evil.so).
fn evil_library(dir: &Path, marker: &Path) -> std::path::PathBuf {
    let src = dir.join("evil.c");
    std::fs::write(
        &src,
        format!(
            "#include <stdio.h>\n__attribute__((constructor)) static void evil(void) {{ FILE *f = fopen(\"{}\", \"a\"); if (f) {{ fputs(\"loaded\\n\", f); fclose(f); }} }}\n",
            marker.display()
        ),
    )
    .unwrap();
    let so = dir.join("libevil.so");
    let ok = std::process::Command::new("cc")
        .args(["-shared", "-fPIC", "-o"])
        .arg(&so)
        .arg(&src)
        .status()
        .expect("a C compiler (scripts/setup.sh installs one)");
    assert!(ok.success());
    so
}

/// A plan as a coordinator would publish it, with `edit` applied to its request.
fn plan_text(edit: impl Fn(&mut kvmeter::plan::Request)) -> String {
    let mut request = kvmeter::plan::Request {
        command: "run".into(),
        store: "null".into(),
        workload_files: vec!["workloadc".into()],
        records: Some(100),
        duration: Some("2s".into()),
        seed: Some(1),
        ..Default::default()
    };
    edit(&mut request);
    let p = kvmeter::distributed::Published {
        kvmeter_version: env!("CARGO_PKG_VERSION").into(),
        agents: 1,
        hash: "ab".repeat(32),
        nonce: "00112233445566778899aabbccddeeff".into(),
        request,
        lease: 7,
        lease_ttl_s: 10,
        coordinator: kvmeter::distributed::Host::here(),
        reports: None,
        reports_tls_sha256: None,
    };
    serde_json::to_string(&p).unwrap()
}

fn agent(url: &str, job: &str) -> std::process::Output {
    kvmeter()
        .args([
            "agent", "--coord", url, "--job", job, "--index", "0", "--wait", "5s",
        ])
        .output()
        .unwrap()
}

#[test]
fn a_forged_plan_runs_no_command_and_loads_no_library_on_an_agent() {
    let tmp = tempfile::tempdir().unwrap();
    let (_etcd, url) = etcd(tmp.path(), 1);
    let marker = tmp.path().join("MARKER");
    let so = evil_library(tmp.path(), &marker);
    let power = format!("cmd:/bin/sh -c touch${{IFS}}{}", marker.display());
    let right = Seal::load(None, Some(TEST_PLAN_KEY.into())).unwrap();
    let wrong = Seal::load(None, Some("another-key-0123456789".into())).unwrap();
    let cases: Vec<(&str, String, &str)> = vec![
        // F1 as the review ran it: an unauthenticated plan asking for a power command.
        (
            "unsealed",
            plan_text(|r| r.power = Some(power.clone())),
            "carries no authentication",
        ),
        (
            "wrong-key",
            wrong.seal(
                "/kvmeter/wrong-key/plan",
                &plan_text(|r| r.power = Some(power.clone())),
            ),
            "does not verify",
        ),
        // Sealed with the right key (a coordinator never publishes these): still refused,
        // by field, before anything is resolved or loaded.
        (
            "sealed-power",
            right.seal(
                "/kvmeter/sealed-power/plan",
                &plan_text(|r| r.power = Some(power.clone())),
            ),
            "the plan asks for 'power'",
        ),
        (
            "sealed-plugin",
            right.seal(
                "/kvmeter/sealed-plugin/plan",
                &plan_text(|r| r.store = format!("plugin:{}", so.display())),
            ),
            "the plan asks for 'store (a plug-in's path)'",
        ),
        (
            "sealed-plugin-name",
            right.seal(
                "/kvmeter/sealed-plugin-name/plan",
                &plan_text(|r| r.store = "plugin:libevil.so".into()),
            ),
            "give this agent --store plugin:PATH",
        ),
        (
            "sealed-file",
            right.seal(
                "/kvmeter/sealed-file/plan",
                &plan_text(|r| r.workload_files = vec!["/etc/passwd".into()]),
            ),
            "an agent opens no file a plan names",
        ),
        (
            "sealed-secret",
            right.seal(
                "/kvmeter/sealed-secret/plan",
                &plan_text(|r| r.store_opts = vec!["password=x".into()]),
            ),
            "store option password",
        ),
    ];
    for (job, value, expect) in cases {
        put(&url, &format!("/kvmeter/{job}/plan"), &value);
        let o = agent(&url, job);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{job}: {err}");
        let lines: Vec<&str> = err.lines().filter(|l| l.starts_with("error:")).collect();
        assert_eq!(lines.len(), 1, "{job}: {err}");
        assert!(lines[0].contains(expect), "{job}: {err}");
        // Nothing of /etc/passwd comes back, and nothing ran or loaded.
        assert!(!err.contains("root"), "{job}: {err}");
        assert!(!marker.exists(), "{job}: the attacker's payload ran");
    }
}

#[test]
fn a_hostile_writer_cannot_join_stop_or_stall_a_job_that_completes_and_merges_exactly() {
    let tmp = tempfile::tempdir().unwrap();
    let (_etcd, url) = etcd(tmp.path(), 1);
    let job = "hostile";
    let pre = format!("/kvmeter/{job}/");
    let wrong = Seal::load(None, Some("another-key-0123456789".into())).unwrap();
    // A forged registration for agent 1 before any agent runs (the old coordinator counted it
    // and started without the real one), and one sealed with another key for agent 0.
    let forged_reg = |i: usize| {
        serde_json::to_string(&kvmeter::distributed::Registration {
            index: i,
            count: 2,
            placed_by: "--index".into(),
            hash: "00".repeat(32),
            host: kvmeter::distributed::Host {
                host: "evil".into(),
                pid: 1,
                clock: kvmeter::distributed::ClockSync::read(),
            },
            threads: 1,
            reports: "etcd".into(),
        })
        .unwrap()
    };
    let stop = Arc::new(AtomicBool::new(false));
    let attacker = {
        let (url, pre, stop) = (url.clone(), pre.clone(), stop.clone());
        let reg1 = forged_reg(1);
        let reg0 = wrong.seal(&format!("{pre}agent/0000"), &forged_reg(0));
        std::thread::spawn(move || {
            let done = r#"{"agent":0,"phase_index":0,"phase":"load","intervals":1,"outcome":"completed","error":null,"threads":1,"started_at":"x","wall_seconds":1.0,"measured_seconds":1.0,"late_ms":0.0,"operations":1}"#;
            // Once, before the agents: keys the real agents write later (overwriting them
            // while the run goes would be a denial of service, which any writer to etcd can
            // do and which is out of scope: docs/distributed.md "Security").
            put(&url, &format!("{pre}agent/0001"), &reg1);
            for p in 0..2 {
                put(&url, &format!("{pre}done/{p}/0000"), done);
            }
            // All along: keys no real agent writes.
            while !stop.load(Ordering::Relaxed) {
                put(&url, &format!("{pre}agent/0000x"), &reg0);
                put(
                    &url,
                    &format!("{pre}refused/0001"),
                    "agent 1: forged refusal",
                );
                put(&url, &format!("{pre}abort"), "forged abort");
                for p in 0..2 {
                    put(
                        &url,
                        &format!("{pre}iv/{p}/999999/0000"),
                        "{\"index\":999999}",
                    );
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        })
    };
    std::thread::sleep(Duration::from_millis(500));
    let run = s(&[
        "--store",
        "null",
        "-P",
        "workloadc",
        "--records",
        "2000",
        "--ops",
        "40000",
        "--threads",
        "1",
        "--interval",
        "200ms",
        "--telemetry-interval",
        "0",
        "--target",
        "20000",
    ]);
    let mut d = Dist::start(&url, job, 2, &[], &run);
    let code = d.finish();
    stop.store(true, Ordering::Relaxed);
    attacker.join().unwrap();
    let coord_log = d.log("coord.log");
    assert_eq!(
        code,
        0,
        "{coord_log}\n{}\n{}",
        d.log("agent0.log"),
        d.log("agent1.log")
    );
    // The forgeries were seen and ignored, each said once.
    for k in [
        "agent/0001",
        "refused/0001",
        "agent/0000x",
        "iv/0/999999/0000",
    ] {
        let w = format!("warning: dist: ignoring {pre}{k}:");
        assert_eq!(coord_log.matches(&w).count(), 1, "{k}: {coord_log}");
    }
    let merged = json(&d.path("merged/summary.json"));
    assert_eq!(merged["status"], "completed", "{coord_log}");
    let dist = json(&d.path("merged/dist.json"));
    assert!(!dist.to_string().contains("\"evil\""), "{dist}");
    // Exact: the merged counts are the agents' own, summed, and the plan's.
    let agents: Vec<_> = (0..2)
        .map(|i| json(&d.path(&format!("agent{i}/summary.json"))))
        .collect();
    for (p, op, total) in [("load", "INSERT", 2000u64), ("run", "READ", 40000)] {
        let sum: u64 = agents.iter().map(|a| counts(phase(a, p))[op]).sum();
        assert_eq!(counts(phase(&merged, p))[op], sum, "{p}");
        assert_eq!(sum, total, "{p}");
    }
    // The agents' own records: an offline merge of a directory whose request was edited to
    // load a library refuses it before loading anything (F2's dist merge route).
    let marker = tmp.path().join("MARKER");
    let so = evil_library(tmp.path(), &marker);
    let copy = tmp.path().join("edited-agent0");
    copy_dir(&d.path("agent0"), &copy);
    let rec_path = copy.join("dist/agent.json");
    let mut rec: serde_json::Value = json(&rec_path);
    rec["published"]["request"]["store"] = format!("plugin:{}", so.display()).into();
    std::fs::write(&rec_path, rec.to_string()).unwrap();
    let o = kvmeter()
        .args(["dist", "merge", copy.to_str().unwrap(), "--out"])
        .arg(tmp.path().join("merged-edited"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("plug-in's path"), "{err}");
    assert!(!marker.exists(), "dist merge loaded the library");
    // The untouched directories still merge, to the same counts.
    let o = kvmeter()
        .args(["dist", "merge"])
        .arg(d.path("agent0"))
        .arg(d.path("agent1"))
        .arg("--out")
        .arg(tmp.path().join("merged-offline"))
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let offline = json(&tmp.path().join("merged-offline/summary.json"));
    assert_eq!(
        counts(phase(&offline, "run")),
        counts(phase(&merged, "run"))
    );
}

#[test]
fn without_the_plan_key_neither_side_starts() {
    for args in [
        vec!["agent", "--coord", "http://127.0.0.1:9", "--index", "0"],
        vec![
            "dist",
            "run",
            "--coord",
            "http://127.0.0.1:9",
            "--agents",
            "1",
            "--store",
            "null",
        ],
    ] {
        let o = kvmeter()
            .args(&args)
            .env_remove("KVMETER_PLAN_KEY")
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(
            err.contains("--plan-key-file: a distributed run needs a key"),
            "{err}"
        );
    }
    // A key file that is too short is named.
    let d = tempfile::tempdir().unwrap();
    let f = d.path().join("k");
    std::fs::write(&f, "short").unwrap();
    let o = kvmeter()
        .args([
            "agent",
            "--coord",
            "http://127.0.0.1:9",
            "--index",
            "0",
            "--plan-key-file",
        ])
        .arg(&f)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("at least 16"));
}

/// A key holder posing as an agent (the worst a buggy or compromised agent can do): a huge
/// interval index and a gap in its reports. The coordinator used to wait forever for the
/// missing intervals (F7); it now ignores indexes past the agent's own count and merges around
/// a gap no agent will fill, with a warning.
#[test]
fn an_interval_gap_or_a_huge_index_does_not_stall_the_coordinator() {
    let tmp = tempfile::tempdir().unwrap();
    let (_etcd, url) = etcd(tmp.path(), 1);
    let job = "gap";
    let pre = format!("/kvmeter/{job}/");
    let log = tmp.path().join("coord.log");
    let mut coord = Proc(spawn(
        &s(&[
            "dist",
            "run",
            "--coord",
            &url,
            "--job",
            job,
            "--agents",
            "1",
            "--out",
            tmp.path().join("merged").to_str().unwrap(),
            "--store",
            "null",
            "-P",
            "workloadc",
            "--records",
            "10",
            "--duration",
            "2s",
            "--interval",
            "200ms",
            "--start-delay",
            "100ms",
        ]),
        &log,
    ));
    let key = Seal::load(None, Some(TEST_PLAN_KEY.into())).unwrap();
    let get = |k: &str| -> Option<String> {
        let r = etcd_post(
            &url,
            "/v3/kv/range",
            &format!(r#"{{"key":"{}"}}"#, b64(&format!("{pre}{k}"))),
        )?;
        let v = r["kvs"][0]["value"].as_str()?;
        String::from_utf8(base64::engine::general_purpose::STANDARD.decode(v).ok()?).ok()
    };
    let wait_for = |k: &str| -> String {
        let t = std::time::Instant::now();
        loop {
            if let Some(v) = get(k) {
                return v;
            }
            assert!(
                t.elapsed() < Duration::from_secs(20),
                "no {k}: {}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    let plan_value = wait_for("plan");
    let published: kvmeter::distributed::Published =
        serde_json::from_str(key.open(&format!("{pre}plan"), &plan_value).unwrap()).unwrap();
    let run = key.for_run(&published.nonce);
    let lease = etcd_post(&url, "/v3/lease/grant", r#"{"TTL":"30"}"#).unwrap()["ID"]
        .as_str()
        .unwrap()
        .to_string();
    let sealed_put = |k: &str, body: &str, lease: Option<&str>| {
        let v = run.seal(&format!("{pre}{k}"), body);
        let mut b = format!(
            r#"{{"key":"{}","value":"{}""#,
            b64(&format!("{pre}{k}")),
            b64(&v)
        );
        if let Some(l) = lease {
            b += &format!(r#","lease":"{l}""#);
        }
        b.push('}');
        etcd_post(&url, "/v3/kv/put", &b).unwrap();
    };
    let reg = kvmeter::distributed::Registration {
        index: 0,
        count: 1,
        placed_by: "--index".into(),
        hash: published.hash.clone(),
        host: kvmeter::distributed::Host::here(),
        threads: 1,
        reports: "etcd".into(),
    };
    sealed_put(
        "agent/0000",
        &serde_json::to_string(&reg).unwrap(),
        Some(&lease),
    );
    for (p, name) in ["load", "run"].into_iter().enumerate() {
        wait_for(&format!("start/{p}"));
        let post = |k: usize| {
            serde_json::to_string(&kvmeter::distributed::IntervalPost {
                agent: 0,
                phase_index: p,
                phase: name.into(),
                index: k,
                start_s: k as f64 * 0.2,
                end_s: (k + 1) as f64 * 0.2,
                warmup: false,
                stats: kvmeter::measure::wire::WireStats {
                    paced: false,
                    lag: None,
                    ops: vec![],
                },
            })
            .unwrap()
        };
        // Intervals 0 and 2 of 3 (1 never arrives), and one at index 999999.
        for k in [0usize, 2, 999_999] {
            sealed_put(&format!("iv/{p}/{k:06}/0000"), &post(k), None);
        }
        let done = format!(
            r#"{{"agent":0,"phase_index":{p},"phase":"{name}","intervals":3,"outcome":"completed","error":null,"threads":1,"started_at":"x","wall_seconds":0.6,"measured_seconds":0.6,"late_ms":0.0,"operations":0}}"#
        );
        sealed_put(&format!("done/{p}/0000"), &done, None);
    }
    let code = wait_exit(&mut coord.0, Duration::from_secs(40));
    let text = std::fs::read_to_string(&log).unwrap();
    assert_eq!(code, 0, "{text}");
    assert!(
        text.contains("phase load: intervals 1..1 have no report from some agents"),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "ignoring {pre}iv/0/999999/0000: an interval past the agent's own count"
        )),
        "{text}"
    );
}
