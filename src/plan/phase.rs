//! One phase slot → a fully resolved `PhasePlan`: its properties (files < command defaults <
//! `-p` < flags, each with its source), duration, pacing, operation count and warm-up.

use super::flags::Flags;
use super::layout::PhaseSlot;
use super::props::{load_workload_file, Props};
use super::{
    workload, PhaseKind, PhasePlan, PressurePhase, Request, OPEN_LOOP_WORKERS, SUITE_DURATION,
    SUITE_RECORDS, SUITE_WARMUP,
};
use crate::error::UsageError;
use std::collections::BTreeMap;
use std::time::Duration;

/// Resolves phases against one request and its checked flags.
pub(super) struct Resolver<'a> {
    pub req: &'a Request,
    pub flags: &'a Flags,
    pub warnings: &'a mut Vec<String>,
    /// Percentiles for `--format ycsb`; a phase's `hdrhistogram.percentiles` sets them.
    pub ycsb_percentiles: Vec<f64>,
}

impl Resolver<'_> {
    fn suite(&self) -> bool {
        self.req.command == "suite"
    }

    pub(super) fn resolve(&mut self, slot: PhaseSlot) -> Result<PhasePlan, UsageError> {
        if slot.kind == PhaseKind::Clear {
            return Ok(clear_phase(slot.name));
        }
        let (req, flags) = (self.req, self.flags);
        let mut p = self.properties(&slot)?;
        let user_gave_ops = flags.gave_ops(req);
        let pressure = slot.block_size.map(|block_size| PressurePhase {
            block_size,
            step: flags.step,
        });
        let mut phase_duration = None;
        if let Some(pp) = &pressure {
            if user_gave_ops {
                return Err(UsageError::new(
                    "kvmeter pressure runs each block size for warm-up + 26 steps; --ops does not apply (use --step)",
                ));
            }
            p.set(
                "operationcount",
                "0",
                "pressure: the schedule sets the duration",
            );
            let w = flags.warmup.unwrap_or(Duration::ZERO);
            phase_duration = Some(w + pp.step * crate::antagonist::schedule::STEPS as u32);
        }
        let duration = match (slot.kind, phase_duration.or(flags.duration)) {
            (PhaseKind::Load, _) => self.load_bound(&p)?,
            (_, Some(d)) => Some(d),
            (_, None) => self.max_execution_time(&p, slot.kind, user_gave_ops)?,
        };
        // `--duration` alone means "run this long": the files' operationcount (1000 in
        // YCSB's) would otherwise end the phase first. YCSB's own maxexecutiontime keeps the
        // whichever-comes-first rule.
        if flags.duration.is_some() && !user_gave_ops && slot.kind == PhaseKind::Run {
            p.set(
                "operationcount",
                "0",
                "--duration without --ops: until the duration ends",
            );
        }
        let mut w = workload::config(&p, self.warnings)?;
        let (open_loop, target, threads) = pacing(&mut p, &slot)?;
        let operations = match slot.kind {
            PhaseKind::Load if p.has("insertcount") => w.insertcount as u64,
            PhaseKind::Load => w.recordcount as u64,
            _ => w.operationcount as u64,
        };
        if slot.kind == PhaseKind::Run && operations == 0 && duration.is_none() {
            return Err(UsageError::new(format!(
                "phase '{}': operationcount is 0 and there is no --duration, so the phase would never end; give --ops N or --duration 30s",
                slot.name
            )));
        }
        self.percentiles(&p)?;
        if slot.kind == PhaseKind::Load {
            w.operationcount = operations as i64;
        }
        let warmup = match (slot.kind, flags.warmup) {
            (PhaseKind::Run, Some(d)) => d,
            (PhaseKind::Run, None) if self.suite() && duration.is_some() => SUITE_WARMUP,
            _ => Duration::ZERO,
        };
        if let Some(d) = duration {
            if warmup >= d {
                // Name the warm-up as the user gave it: a suite's default was never typed.
                let given = match flags.warmup {
                    Some(_) => format!("--warmup {warmup:?}"),
                    None => {
                        format!("the suite's default warm-up ({warmup:?}; set it with --warmup)")
                    }
                };
                return Err(UsageError::new(format!(
                    "{given} is not shorter than the phase duration {d:?}: nothing would be measured"
                )));
            }
        }
        Ok(PhasePlan {
            duration,
            name: slot.name,
            kind: slot.kind,
            workload_files: slot.files,
            threads: threads as usize,
            operations,
            target,
            open_loop,
            warmup,
            workload: Some(w),
            properties: p.into_map(),
            pressure,
            replay: None,
        })
    }

    /// The phase's properties: its files, the command's defaults, `-p`, then the flags.
    fn properties(&mut self, slot: &PhaseSlot) -> Result<Props, UsageError> {
        let req = self.req;
        let mut p = Props::default();
        for f in &slot.files {
            load_workload_file(f, &req.workload_texts, &mut p, self.warnings)?;
        }
        if self.suite() {
            p.set("recordcount", SUITE_RECORDS.to_string(), "suite default");
            p.set("operationcount", "0", "suite default");
        } else {
            for k in ["recordcount", "operationcount"] {
                if !p.has(k) {
                    p.set(
                        k,
                        "1000",
                        "kvmeter default (YCSB's code default 0 means 'unset')",
                    );
                }
            }
        }
        for (k, v) in &self.flags.props {
            p.set(k, v.clone(), format!("-p {k}"));
        }
        let flags: [(&str, Option<String>, &str); 6] = [
            (
                "threadcount",
                req.threads.map(|v| v.to_string()),
                "--threads",
            ),
            (
                "recordcount",
                req.records.map(|v| v.to_string()),
                "--records",
            ),
            ("operationcount", req.ops.map(|v| v.to_string()), "--ops"),
            ("target", req.target.map(|v| v.to_string()), "--target"),
            ("rate", req.rate.map(|v| v.to_string()), "--rate"),
            ("arrival", req.arrival.clone(), "--arrival"),
        ];
        for (k, v, flag) in flags {
            if let Some(v) = v {
                p.set(k, v, flag);
            }
        }
        if let Some(v) = p.get("workload") {
            if v.value != "site.ycsb.workloads.CoreWorkload"
                && v.value != "com.yahoo.ycsb.workloads.CoreWorkload"
                && v.value.trim() != "mixgraph"
            {
                return Err(p.bad(
                    "workload",
                    "site.ycsb.workloads.CoreWorkload (YCSB's core workload) or mixgraph (db_bench's model: docs/workloads-models.md)",
                ));
            }
        }
        Ok(p)
    }

    /// What may stop a load before it has inserted every record (issue 40 item 1): only a
    /// bound the user gave the load itself — `--duration` when the load is the only phase
    /// (`--phase load`), or YCSB's `maxexecutiontime`, which bounds every phase as YCSB's
    /// client does. `--duration` with a run phase after the load is the run phase's length: a
    /// load it cut short would leave the run reading keys that were never inserted.
    fn load_bound(&self, p: &Props) -> Result<Option<Duration>, UsageError> {
        if self.req.phase.as_deref() == Some("load") && !self.suite() {
            if let Some(d) = self.flags.duration {
                return Ok(Some(d));
            }
        }
        self.max_execution_time(p, PhaseKind::Load, false)
    }

    /// YCSB's `maxexecutiontime`, else the suite's default run length.
    fn max_execution_time(
        &self,
        p: &Props,
        kind: PhaseKind,
        user_gave_ops: bool,
    ) -> Result<Option<Duration>, UsageError> {
        let secs = p.int("maxexecutiontime", 0)?;
        if !(0..=crate::values::MAX_DURATION.as_secs() as i64).contains(&secs) {
            return Err(p.bad(
                "maxexecutiontime",
                "seconds from 0 to 3153600000 (100 years)",
            ));
        }
        Ok(if secs > 0 {
            Some(Duration::from_secs(secs as u64))
        } else if self.suite() && kind == PhaseKind::Run && !user_gave_ops {
            Some(SUITE_DURATION)
        } else {
            None
        })
    }

    fn percentiles(&mut self, p: &Props) -> Result<(), UsageError> {
        let Some(v) = p.get("hdrhistogram.percentiles") else {
            return Ok(());
        };
        let parsed: Result<Vec<f64>, _> = v
            .value
            .split(',')
            .map(|s| s.trim().parse::<f64>())
            .collect();
        match parsed {
            Ok(list) if list.iter().all(|x| (0.0..=100.0).contains(x)) => {
                self.ycsb_percentiles = list;
                Ok(())
            }
            _ => Err(p.bad(
                "hdrhistogram.percentiles",
                "a comma list of percentiles such as 50,95,99,99.9",
            )),
        }
    }
}

/// Open loop, `--target` and the thread count: (open loop, target ops/s, threads).
fn pacing(
    p: &mut Props,
    slot: &PhaseSlot,
) -> Result<(Option<super::OpenLoop>, Option<f64>, i64), UsageError> {
    let open_loop = if slot.kind == PhaseKind::Run {
        workload::open_loop(p)?
    } else {
        None
    };
    if open_loop.is_some() && p.has("target") {
        return Err(UsageError::new(format!(
            "phase '{}': both 'rate' ({}) and 'target' ({}) are set: choose one (rate: open loop; target: YCSB's per-thread pacing)",
            slot.name,
            p.get("rate").map(|v| v.source.as_str()).unwrap_or("?"),
            p.get("target").map(|v| v.source.as_str()).unwrap_or("?")
        )));
    }
    if open_loop.is_some() && !p.has("threadcount") {
        p.set(
            "threadcount",
            OPEN_LOOP_WORKERS.to_string(),
            "kvmeter default for open loop: workers serving the schedule",
        );
    }
    let threads = p.int("threadcount", 1)?;
    if !(1..=4096).contains(&threads) {
        return Err(p.bad("threadcount", "a whole number from 1 to 4096"));
    }
    let target = match p.get("target") {
        None => None,
        Some(_) => {
            let t = p.float("target", 0.0)?;
            if t < 0.0 {
                return Err(p.bad("target", "a rate ≥ 0 (0 = unthrottled)"));
            }
            (t > 0.0).then_some(t)
        }
    };
    Ok((open_loop, target, threads))
}

/// The suite's "clear the database" phase.
fn clear_phase(name: String) -> PhasePlan {
    PhasePlan {
        name,
        kind: PhaseKind::Clear,
        workload_files: vec![],
        threads: 1,
        operations: 0,
        duration: None,
        target: None,
        open_loop: None,
        warmup: Duration::ZERO,
        workload: None,
        properties: BTreeMap::new(),
        pressure: None,
        replay: None,
    }
}
