//! `kvmeter replay TRACE` as a plan (issue 32, docs/replay.md "Replaying"): one run phase,
//! named `replay`, whose operations come from a trace file instead of a workload, each at its
//! recorded time × 1/`--speed` (or evenly at `--rate`). Everything about the trace the run
//! directory must record — its path, size, SHA-256, format and how it is replayed — is
//! settled here, and the whole trace is read before anything is created: every line parses
//! (a bad one is `file:line: why`, exit 2, unless `--skip-bad` counts it) while a second thread
//! computes the file's SHA-256. Why a full pre-scan rather than failing mid-run: the checksum
//! already reads every byte of the file, and the parse runs beside it on another core, so the
//! pre-scan adds the parse's time beyond the hash's, not a read (docs/replay.md "Bad lines"
//! has the measured cost); in return a bad or truncated line anywhere is refused before a run
//! directory exists. A line that goes bad after the check (a file rewritten during the run)
//! still fails the run mid-way (exit 1, file:line), with the results so far.
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
    /// Every line was parsed before the run (always true: the pre-scan).
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

/// The replay's flags checked, the whole trace parsed and its SHA-256 computed (both reads
/// at once, on two threads).
pub fn resolve(r: &ReplayRequest) -> Result<ReplayPlan, UsageError> {
    let (format, speed, amplify) = check_flags(r)?;
    let meta = trace_file(r)?;
    // A refused trace stops the hash too: the error comes at once, not after the whole file.
    let stop = std::sync::atomic::AtomicBool::new(false);
    let (scan, sha) = std::thread::scope(|s| {
        let sha = s.spawn(|| sha256_file(&r.trace, &stop));
        let scan = check_trace(r, format);
        if scan.is_err() {
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
        }
        (scan, sha.join())
    });
    scan?;
    let sha = sha.map_err(|_| {
        bad(format!(
            "trace {}: computing its SHA-256 failed",
            r.trace.display()
        ))
    })??;
    Ok(ReplayPlan {
        trace: r.trace.clone(),
        trace_bytes: meta.len(),
        trace_sha256: sha,
        format,
        speed,
        rate: r.rate,
        amplify,
        skip: r.skip.unwrap_or(0),
        skip_bad: r.skip_bad,
        checked: true,
        spread: SPREAD_RULE,
        behind: BEHIND_RULE,
        order: ORDER_RULE,
    })
}

/// The flags alone: the format, the speed (or the rate) and `--amplify` in range.
fn check_flags(r: &ReplayRequest) -> Result<(Format, f64, u64), UsageError> {
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
    Ok((format, speed, amplify))
}

/// The trace is a file kvmeter can open.
fn trace_file(r: &ReplayRequest) -> Result<std::fs::Metadata, UsageError> {
    let meta = std::fs::metadata(&r.trace)
        .map_err(|e| bad(format!("trace {}: cannot open it: {e}", r.trace.display())))?;
    if !meta.is_file() {
        return Err(bad(format!("trace {}: expected a file", r.trace.display())));
    }
    Ok(meta)
}

/// Every line parses (with `--skip-bad`, bad lines are passed over; a read error, e.g. a
/// corrupt `.zst`, is still refused); a trace with no record is refused.
fn check_trace(r: &ReplayRequest, format: Format) -> Result<(), UsageError> {
    let mut reader = TraceReader::open(&r.trace, format)?;
    let mut rec = TraceRecord::default();
    let mut records = 0u64;
    // A record's intended start, (time - first) / speed, must lie within kvmeter's longest
    // phase: past it, a replay would end as if by a --duration nobody gave, with the record
    // counted nowhere (security review, minor findings).
    let horizon_us = crate::values::MAX_DURATION.as_micros() as f64;
    let speed = r.speed.unwrap_or(1.0);
    let mut first: Option<u64> = None;
    loop {
        match reader.next_into(&mut rec) {
            Ok(true) => {
                records += 1;
                if r.rate.is_none() && records > r.skip.unwrap_or(0) {
                    let t0 = *first.get_or_insert(rec.time_us);
                    let gap = rec.time_us.saturating_sub(t0) as f64 / speed;
                    if gap > horizon_us {
                        return Err(bad(format!(
                            "{}:{}: time {} µs comes {:.0} years after the first replayed record's{}; a replay reaches at most 100 years: correct the trace's times, or replay it with --rate",
                            r.trace.display(),
                            rec.line,
                            rec.time_us,
                            gap / 1e6 / (365.0 * 24.0 * 3600.0),
                            if speed == 1.0 { String::new() } else { format!(" at --speed {speed}") }
                        )));
                    }
                }
            }
            Ok(false) => break,
            Err(e) if r.skip_bad && !e.msg.starts_with("cannot read") => continue,
            Err(e) => return Err(bad(e.to_string())),
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

/// SHA-256 of the file as stored, read in 1 MiB blocks (given up, with an error, once `stop`).
fn sha256_file(
    path: &std::path::Path,
    stop: &std::sync::atomic::AtomicBool,
) -> Result<String, UsageError> {
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
        if stop.load(std::sync::atomic::Ordering::Relaxed) {
            return Err(bad(format!(
                "trace {}: not hashed (refused)",
                path.display()
            )));
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

/// Flags of `run` that mean nothing to a replay, refused by name (an experiment file's
/// shared settings with these keys are not given to its replay steps).
pub const NOT_REPLAY_FLAGS: [&str; 9] = [
    "--connections",
    "--depth",
    "--when-full",
    "--probe-rate",
    "--probe-connections",
    "--send-slack",
    "--target",
    "--arrival",
    "--records",
];

fn refuse_inapplicable(req: &Request) -> Result<(), UsageError> {
    let given = [
        req.connections.is_some(),
        req.depth.is_some(),
        req.when_full.is_some(),
        req.probe_rate.is_some(),
        req.probe_connections.is_some(),
        req.send_slack.is_some(),
        req.target.is_some(),
        req.arrival.is_some(),
        req.records.is_some(),
    ];
    match NOT_REPLAY_FLAGS.iter().zip(given).find(|(_, g)| *g) {
        Some((flag, _)) => Err(bad(format!(
            "{flag}: not a replay flag (the trace sets the operations and their times; the event-driven engine is not used for replay)"
        ))),
        None => Ok(()),
    }
}

/// The run's request as a replay plans it: `kvmeter run --phase run` with the same flags, its
/// `--rate` the replay's and its `--ops` the records to replay (0 = the whole trace).
fn split(req: &Request, r: &ReplayRequest) -> Result<(Request, ReplayRequest, u64), UsageError> {
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
    Ok((req, r, ops))
}

/// Everything `build_replay` refuses, refused without the checksum (an experiment file's
/// replay step at load): the run flags, the replay's flags, and every line of the trace.
pub fn check_replay(req: &Request, r: &ReplayRequest) -> Result<(), UsageError> {
    let (req, r, _) = split(req, r)?;
    super::build(&req)?;
    let (format, ..) = check_flags(&r)?;
    trace_file(&r)?;
    check_trace(&r, format)
}

/// `kvmeter replay`: the plan of `kvmeter run --phase run` with the same flags, its one
/// phase named `replay` and carrying the trace.
pub fn build_replay(req: &Request, r: &ReplayRequest) -> Result<Plan, UsageError> {
    let (req, r, ops) = split(req, r)?;
    // The run flags first (cheap), then the trace (read whole: the pre-scan and checksum).
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
            sha256_file(&p, &Default::default()).unwrap(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn a_record_past_100_years_is_refused_by_line_unless_rate_is_given() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("t.csv");
        let far = 101u64 * 365 * 24 * 3600; // Twitter's times are whole seconds
        std::fs::write(&p, format!("0,k,1,10,1,get,0\n{far},k,1,10,1,get,0\n")).unwrap();
        let r = |rate: Option<f64>| {
            let r = ReplayRequest {
                trace: p.clone(),
                rate,
                ..Default::default()
            };
            resolve(&r).map(|_| ()).map_err(|e| e.to_string())
        };
        let e = r(None).unwrap_err();
        assert!(e.contains("t.csv:2:") && e.contains("101 years"), "{e}");
        assert!(r(Some(100.0)).is_ok());
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
        assert!(r(&|x| x.speed = Some(0.0)).unwrap_err().contains("--speed"));
        assert!(r(&|x| x.amplify = Some(0))
            .unwrap_err()
            .contains("--amplify"));
        assert!(r(&|x| x.format = Some("csv".into()))
            .unwrap_err()
            .contains("--trace-format"));
        // Every line is read: line 2's operation is named.
        let e = r(&|_| {}).unwrap_err();
        assert!(e.contains("t.csv:2:"), "{e}");
        assert!(r(&|x| x.skip_bad = true).is_ok());
    }
}
