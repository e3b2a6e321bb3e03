//! The command's own flags, checked once for every phase: counts, durations, pacing and the
//! pressure step. A bad value is refused here with the flag's name, before any phase is
//! resolved and long before anything is created.

use super::props::check_known;
use super::Request;
use crate::error::UsageError;
use crate::values::parse_duration;
use std::time::Duration;

pub(super) struct Flags {
    /// `-p name=value` items, in order.
    pub props: Vec<(String, String)>,
    pub duration: Option<Duration>,
    pub warmup: Option<Duration>,
    pub interval: Duration,
    pub telemetry_interval: Duration,
    pub status_interval: Duration,
    /// `--give-up-after`; zero never gives up.
    pub give_up_after: Duration,
    /// `kvmeter pressure`: the length of each of the 26 steps.
    pub step: Duration,
}

impl Flags {
    pub(super) fn parse(req: &Request, warnings: &mut Vec<String>) -> Result<Self, UsageError> {
        let step = match req.step.as_deref() {
            Some(s) => parse_duration("--step", s)?,
            None => super::PRESSURE_STEP,
        };
        let mut props = Vec::new();
        for item in &req.props {
            let (k, v) = item.split_once('=').ok_or_else(|| {
                UsageError::new(format!(
                    "-p '{item}': expected name=value (for example -p recordcount=100000)"
                ))
            })?;
            check_known(k, &format!("-p {k}"), warnings)?;
            props.push((k.to_string(), v.to_string()));
        }
        check_counts(req)?;
        let duration = req
            .duration
            .as_deref()
            .map(|d| parse_duration("--duration", d))
            .transpose()?;
        if duration == Some(Duration::ZERO) {
            return Err(UsageError::new(
                "--duration 0: expected a positive duration such as 30s",
            ));
        }
        check_pacing(req)?;
        let warmup = req
            .warmup
            .as_deref()
            .map(|d| parse_duration("--warmup", d))
            .transpose()?;
        let interval = parse_duration("--interval", req.interval.as_deref().unwrap_or("1s"))?;
        if interval < Duration::from_millis(10) {
            return Err(UsageError::new(format!(
                "--interval {:?}: expected at least 10ms",
                interval
            )));
        }
        let telemetry_interval = parse_duration(
            "--telemetry-interval",
            req.telemetry_interval.as_deref().unwrap_or("100ms"),
        )?;
        if !telemetry_interval.is_zero() && telemetry_interval < Duration::from_millis(10) {
            return Err(UsageError::new(format!(
                "--telemetry-interval {telemetry_interval:?}: expected 0 (off) or at least 10ms"
            )));
        }
        let status_interval = parse_duration(
            "--status-interval",
            req.status_interval.as_deref().unwrap_or("10s"),
        )?;
        let give_up_after = parse_duration(
            "--give-up-after",
            req.give_up_after.as_deref().unwrap_or("30s"),
        )?;
        let flags = Flags {
            props,
            duration,
            warmup,
            interval,
            telemetry_interval,
            status_interval,
            give_up_after,
            step,
        };
        if req.command == "pressure" {
            flags.check_pressure_alignment()?;
        }
        Ok(flags)
    }

    /// Pressure steps start when warm-up ends and must line up with intervals.
    fn check_pressure_alignment(&self) -> Result<(), UsageError> {
        let (step, interval) = (self.step, self.interval);
        if step < Duration::from_secs(1) || step.as_millis() % interval.as_millis().max(1) != 0 {
            return Err(UsageError::new(format!(
                "--step {step:?}: expected at least 1s and a whole number of --interval ({interval:?})"
            )));
        }
        if let Some(w) = self.warmup {
            if w.as_millis() % interval.as_millis().max(1) != 0 {
                return Err(UsageError::new(format!(
                    "--warmup {w:?}: for pressure, a whole number of --interval ({interval:?}) so steps align with intervals"
                )));
            }
        }
        Ok(())
    }

    /// Whether the user set the operation count (`--ops` or `-p operationcount`).
    pub(super) fn gave_ops(&self, req: &Request) -> bool {
        req.ops.is_some() || self.props.iter().any(|(k, _)| k == "operationcount")
    }
}

fn check_counts(req: &Request) -> Result<(), UsageError> {
    for (flag, v) in [("--threads", req.threads), ("--records", req.records)] {
        if let Some(v) = v {
            if v < 1 {
                return Err(UsageError::new(format!(
                    "{flag} {v}: expected a whole number ≥ 1"
                )));
            }
        }
    }
    if let Some(v) = req.ops {
        if v < 0 {
            return Err(UsageError::new(format!(
                "--ops {v}: expected a whole number ≥ 0 (0 = run until --duration)"
            )));
        }
    }
    Ok(())
}

fn check_pacing(req: &Request) -> Result<(), UsageError> {
    if let Some(r) = req.rate {
        if !(r.is_finite() && r > 0.0) {
            return Err(UsageError::new(format!(
                "--rate {r}: expected a positive offered load in operations per second"
            )));
        }
        if req.target.is_some() {
            return Err(UsageError::new(
                "--rate and --target: choose one (--rate is an open loop of intended starts served by a pool; --target is YCSB's per-thread pacing)",
            ));
        }
    }
    if let Some(t) = req.target {
        if !(t.is_finite() && t > 0.0) {
            return Err(UsageError::new(format!(
                "--target {t}: expected a positive rate in operations per second"
            )));
        }
    }
    Ok(())
}
