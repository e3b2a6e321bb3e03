//! Helpers shared by the end-to-end test files: the binary, JSON files, schema checks.
#![allow(dead_code)]

pub mod etcd;
pub mod servers;

use assert_cmd::Command;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// The key every test's distributed runs share (docs/distributed.md "Security").
pub const TEST_PLAN_KEY: &str = "kvmeter-test-plan-key-0123456789";

pub fn kvmeter() -> Command {
    let mut c = Command::cargo_bin("kvmeter").unwrap();
    c.env("NO_COLOR", "1")
        .env("KVMETER_PLAN_KEY", TEST_PLAN_KEY);
    c
}

pub fn json(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A status file (manifest.json, summary.json) once the guard of a killed kvmeter has had its
/// moment: it reads end of file when kvmeter dies and rewrites at once; 10 s is far beyond that.
pub fn sealed(path: &Path) -> Value {
    let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let v = json(path);
        if v["status"] != "running" || std::time::Instant::now() > until {
            return v;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

pub fn validate(schema_file: &str, doc: &Value) {
    let schema: Value = serde_json::from_str(
        &std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("docs/schema")
                .join(schema_file),
        )
        .unwrap(),
    )
    .unwrap();
    let v = jsonschema::validator_for(&schema).unwrap();
    let errors: Vec<String> = v
        .iter_errors(doc)
        .map(|e| format!("{} at {}", e, e.instance_path))
        .collect();
    assert!(errors.is_empty(), "{schema_file}: {errors:#?}");
}

pub fn phase<'a>(summary: &'a Value, name: &str) -> &'a Value {
    summary["phases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == name)
        .unwrap_or_else(|| panic!("no phase {name}"))
}

pub fn count(p: &Value, op: &str) -> u64 {
    p["ops"][op]["count"].as_u64().unwrap_or(0)
}

/// A run that succeeded: its summary (checked against the schema), its directory and what it
/// printed. The temporary directory holding it lives as long as this.
pub struct RunOk {
    pub summary: Value,
    pub out: PathBuf,
    pub stdout: String,
    pub stderr: String,
    pub tmp: tempfile::TempDir,
}

/// Runs `kvmeter ARGS --out <a new temporary directory>/run` with `envs`, asserts that it
/// exited 0 (its standard error is the message) and that summary.json matches its schema.
pub fn run_ok_with(args: &[&str], envs: &[(&str, &str)]) -> RunOk {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("run");
    let mut c = kvmeter();
    for (k, v) in envs {
        c.env(k, v);
    }
    let o = c.args(args).arg("--out").arg(&out).output().unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(o.status.success(), "kvmeter {}: {stderr}", args.join(" "));
    let summary = json(&out.join("summary.json"));
    validate("summary.schema.json", &summary);
    RunOk {
        summary,
        out,
        stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
        stderr,
        tmp,
    }
}

/// `run_ok_with` without extra environment.
pub fn run_ok(args: &[&str]) -> RunOk {
    run_ok_with(args, &[])
}

/// The built binary's path, for tests that spawn it themselves (signals).
pub fn bin() -> PathBuf {
    assert_cmd::cargo::cargo_bin("kvmeter")
}

/// A loopback port nothing listens on right now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Copies a directory tree (a run or experiment directory) into `to`, which it creates.
pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let t = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &t);
        } else {
            std::fs::copy(e.path(), &t).unwrap();
        }
    }
}

/// Whether a process (a member kvmeter started) still exists.
pub fn alive(pid: i64) -> bool {
    // SAFETY: signal 0 only checks that the process exists.
    unsafe { libc::kill(pid as i32, 0) == 0 }
}

/// A process this test started, killed when the test ends (pass or fail).
pub struct Proc(pub std::process::Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
