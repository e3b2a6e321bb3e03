//! `kvmeter replay TRACE` as a plan (issue 32, docs/replay.md "Replaying"): one run phase,
//! named `replay`, whose operations come from a trace file instead of a workload, each at its
//! recorded time × 1/`--speed` (or evenly at `--rate`). Everything about the trace the run
//! directory must record — its path, size, SHA-256, format and how it is replayed — is
//! settled here, and the trace is checked as far as the user asked before anything is
//! created: the file opens and its first record parses (always), every line parses
//! (`--check`, a second full read of the trace). A bad line found later, during the replay,
//! fails the run (exit 1, file:line in the error) unless `--skip-bad` counts it.
//!
//! The rest of the phase (store, sessions, intervals, HDR logs, summary) is a `run` phase's:
//! `build_replay` plans the command as `kvmeter run --phase run` would and adds the replay.

use super::{Plan, Request};
use crate::error::UsageError;
use crate::trace::{Format, TraceReader, TraceRecord};
use std::path::PathBuf;

/// Workers replaying by default: the pool of an open-loop run (`--threads`).
pub const REPLAY_WORKERS: i64 = 16;
/// The most copies `--amplify` makes of each record.
pub const MAX_AMPLIFY: u64 = 10_000;

/// The replay's own flags, before resolution (`args::replay` fills it).
#[derive(Clone, Debug, Default)]
pub struct ReplayRequest {
    pub trace: PathBuf,
    pub format: Option<String>,
    pub speed: Option<f64>,
    /// Records per second, evenly spaced, the trace's times ignored.
    pub rate: Option<f64>,
    pub amplify: Option<u64>,
    pub skip: Option<u64>,
    pub skip_bad: bool,
    pub check: bool,
}

/// How a trace is replayed; recorded in the manifest with the phase.
#[derive(Clone, Debug, serde::Serialize)]
pub struct ReplayPlan {
    pub trace: PathBuf,
    /// The file's size in bytes, as stored (compressed for `.zst`).
    pub trace_bytes: u64,
    /// SHA-256 of the file as stored, hex.
    pub trace_sha256: String,
    pub format: Format,
    /// Gaps between recorded times are divided by this.
    pub speed: f64,
    /// `--rate`: records (after `--amplify`) every 1/rate s, the trace's times ignored.
    pub rate: Option<f64>,
    /// Each record replayed this many times, keys suffixed `~1`..`~K` (none when 1).
    pub amplify: u64,
    /// Records skipped at the start of the trace; the first replayed one is time zero.
    pub skip: u64,
    /// Bad lines are counted and skipped instead of failing the run.
    pub skip_bad: bool,
    /// Every line was parsed before the run (`--check`).
    pub checked: bool,
    /// The declared rules, for a reader of the manifest.
    pub spread: &'static str,
    pub behind: &'static str,
    pub order: &'static str,
}

pub const SPREAD_RULE: &str = "records of one whole-second timestamp are spread evenly within their second: the i-th of n replayed records (after --amplify) is due at second + i/n s; a second with more than 100000 records (or 64 MiB of keys) is spread at 100000 records/s, running into the next second";
pub const BEHIND_RULE: &str = "open loop: a record is sent at its intended time, or as soon as its worker is free; one already due when its worker took it is sent late and counted as behind; latency is measured from the intended time and from the send";
pub const ORDER_RULE: &str = "each record goes to worker hash(key) mod threads through a bounded FIFO queue: records of one key are sent in trace order, one at a time";

fn bad(msg: String) -> UsageError {
    UsageError::new(msg)
}

/// The replay's flags checked, and the trace checked as far as asked.
pub fn resolve(r: &ReplayRequest) -> Result<ReplayPlan, UsageError> {
    let format = match r.format.as_deref() {
        None => Format::Twitter,
        Some(f) => Format::parse(f).ok_or_else(|| {
            let names: Vec<&str> = Format::ALL.iter().map(|(n, _)| *n).collect();
            bad(format!(
                "--trace-format '{f}': expected one of {}",
                names.join(", ")
            ))
        })?,
    };
    let speed = r.speed.unwrap_or(1.0);
    if !(speed.is_finite() && (1e-6..=1e6).contains(&speed)) {
        return Err(bad(format!(
            "--speed {speed}: expected a factor from 0.000001 to 1000000 (2 = twice as fast)"
        )));
    }
    if let Some(rate) = r.rate {
        if r.speed.is_some() {
            return Err(bad(
                "--speed and --rate: give one (--rate replays evenly, ignoring the trace's times)"
                    .into(),
            ));
        }
        if !(rate.is_finite() && (0.001..=1e8).contains(&rate)) {
            return Err(bad(format!(
                "--rate {rate}: expected records per second from 0.001 to 100000000"
            )));
        }
    }
    let amplify = r.amplify.unwrap_or(1);
    if !(1..=MAX_AMPLIFY).contains(&amplify) {
        return Err(bad(format!(
            "--amplify {amplify}: expected copies per record from 1 to {MAX_AMPLIFY}"
        )));
    }
    let meta = std::fs::metadata(&r.trace)
        .map_err(|e| bad(format!("trace {}: cannot open it: {e}", r.trace.display())))?;
    if !meta.is_file() {
        return Err(bad(format!("trace {}: expected a file", r.trace.display())));
    }
    check_trace(r, format)?;
    Ok(ReplayPlan {
        trace: r.trace.clone(),
        trace_bytes: meta.len(),
        trace_sha256: sha256_file(&r.trace)?,
        format,
        speed,
        rate: r.rate,
        amplify,
        skip: r.skip.unwrap_or(0),
        skip_bad: r.skip_bad,
        checked: r.check,
        spread: SPREAD_RULE,
        behind: BEHIND_RULE,
        order: ORDER_RULE,
    })
}

/// The first record parses (or, with `--check`, every line does); a trace with no record
/// is refused.
fn check_trace(r: &ReplayRequest, format: Format) -> Result<(), UsageError> {
    let mut reader = TraceReader::open(&r.trace, format)?;
    let mut rec = TraceRecord::default();
    let mut records = 0u64;
    loop {
        match reader.next_into(&mut rec) {
            Ok(true) => records += 1,
            Ok(false) => break,
            Err(e) if r.skip_bad && !e.msg.starts_with("cannot read") => continue,
            Err(e) => return Err(bad(e.to_string())),
        }
        if !r.check {
            break;
        }
    }
    if records == 0 {
        return Err(bad(format!(
            "trace {}: no {} record in it",
            r.trace.display(),
            format.name()
        )));
    }
    Ok(())
}

/// SHA-256 of the file as stored, read in 1 MiB blocks.
fn sha256_file(path: &std::path::Path) -> Result<String, UsageError> {
    use std::io::Read;
    let mut f = std::fs::File::open(path)
        .map_err(|e| bad(format!("trace {}: cannot open it: {e}", path.display())))?;
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f
            .read(&mut buf)
            .map_err(|e| bad(format!("trace {}: cannot read it: {e}", path.display())))?;
        if n == 0 {
            break;
        }
        ctx.update(&buf[..n]);
    }
    Ok(ctx
        .finish()
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect())
}

/// Flags of `run` that mean nothing to a replay, refused by name.
fn refuse_inapplicable(req: &Request) -> Result<(), UsageError> {
    let given = [
        ("--connections", req.connections.is_some()),
        ("--depth", req.depth.is_some()),
        ("--when-full", req.when_full.is_some()),
        ("--probe-rate", req.probe_rate.is_some()),
        ("--probe-connections", req.probe_connections.is_some()),
        ("--send-slack", req.send_slack.is_some()),
        ("--target", req.target.is_some()),
        ("--arrival", req.arrival.is_some()),
        ("--records", req.records.is_some()),
    ];
    match given.iter().find(|(_, g)| *g) {
        Some((flag, _)) => Err(bad(format!(
            "{flag}: not a replay flag (the trace sets the operations and their times; the event-driven engine is not used for replay)"
        ))),
        None => Ok(()),
    }
}

/// `kvmeter replay`: the plan of `kvmeter run --phase run` with the same flags, its one
/// phase named `replay` and carrying the trace. `req.rate` and `req.ops` are the replay's
/// (records per second; records replayed, 0 = the whole trace).
pub fn build_replay(req: &Request, r: &ReplayRequest) -> Result<Plan, UsageError> {
    refuse_inapplicable(req)?;
    let mut req = req.clone();
    req.phase = Some("run".into());
    let mut r = r.clone();
    r.rate = req.rate.take();
    let ops = match req.ops.take() {
        Some(n) if n < 0 => {
            return Err(bad(format!(
                "--ops {n}: expected records to replay, 0 or more (0 = the whole trace)"
            )))
        }
        Some(n) => n as u64,
        None => 0,
    };
    req.threads.get_or_insert(REPLAY_WORKERS);
    // The run flags first (cheap), then the trace (its checksum reads all of it).
    let mut plan = super::build(&req)?;
    let replay = resolve(&r)?;
    let phase = plan
        .phases
        .first_mut()
        .expect("a run --phase run plan has one phase");
    phase.name = "replay".into();
    phase.operations = ops;
    phase.target = None;
    phase.open_loop = None;
    phase.replay = Some(replay);
    Ok(plan)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sha256_of_a_known_text() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("t");
        std::fs::write(&p, b"abc").unwrap();
        // FIPS 180-2's example.
        assert_eq!(
            sha256_file(&p).unwrap(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn flags_out_of_range_are_refused() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("t.csv");
        std::fs::write(&p, b"0,k,1,10,1,get,0\n1,k,1,10,1,frob,0\n").unwrap();
        let r = |f: &dyn Fn(&mut ReplayRequest)| {
            let mut r = ReplayRequest {
                trace: p.clone(),
                ..Default::default()
            };
            f(&mut r);
            resolve(&r).map(|_| ()).map_err(|e| e.to_string())
        };
        assert!(r(&|_| {}).is_ok());
        assert!(r(&|x| x.speed = Some(0.0)).unwrap_err().contains("--speed"));
        assert!(r(&|x| x.amplify = Some(0))
            .unwrap_err()
            .contains("--amplify"));
        assert!(r(&|x| x.format = Some("csv".into()))
            .unwrap_err()
            .contains("--trace-format"));
        // --check reads every line: line 2's operation is named.
        let e = r(&|x| x.check = true).unwrap_err();
        assert!(e.contains("t.csv:2:"), "{e}");
        assert!(r(&|x| {
            x.check = true;
            x.skip_bad = true
        })
        .is_ok());
    }
}
