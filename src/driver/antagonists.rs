//! The `--antagonist` loads of a run phase (docs/interference.md): I/O instances (sharing the
//! pressure scale's files, after its four), memory-bandwidth and CPU threads. Started with
//! the phase, stopped with it, and reported with the load they achieved.

use super::companion::Companion;
use super::datadir::DataDir;
use crate::antagonist::io::{IoAntagonists, Sample};
use crate::antagonist::{schedule, Cpu, MemBw};
use crate::plan::{Antagonist, Plan};
use crate::report::rundir::RunDir;
use crate::report::{AntagonistReport, IoAntagonistReport, PhaseSummary};
use std::time::{Duration, Instant};

/// Instances the pressure scale drives (0..4); `--antagonist io:` instances come after them.
pub(super) fn pressure_instances(plan: &Plan) -> usize {
    if plan.phases.iter().any(|p| p.pressure.is_some()) {
        schedule::INSTANCES
    } else {
        0
    }
}

/// Lays out the antagonists' O_DIRECT files (pressure scale and `--antagonist io:`), if any.
pub(super) fn prepare_io(plan: &Plan, data: &DataDir) -> anyhow::Result<Option<IoAntagonists>> {
    let generic: usize = plan
        .antagonists
        .iter()
        .map(|a| match a {
            Antagonist::Io { instances, .. } => *instances,
            _ => 0,
        })
        .sum();
    let n = pressure_instances(plan) + generic;
    if n == 0 {
        return Ok(None);
    }
    let rr = plan
        .antagonists
        .iter()
        .find_map(|a| match a {
            Antagonist::Io { random_ratio, .. } => Some(*random_ratio),
            _ => None,
        })
        .unwrap_or(plan.random_ratio);
    let parent = plan
        .io_dir
        .clone()
        .unwrap_or_else(|| data.root().to_path_buf());
    errln!(
        "antagonists: writing {n} files of {:.1} GiB in {} (O_DIRECT) ...",
        plan.io_file_size as f64 / (1u64 << 30) as f64,
        parent.display()
    );
    Ok(Some(IoAntagonists::prepare(
        &parent,
        n,
        plan.io_file_size,
        rr,
    )?))
}

/// The `--antagonist` loads running during one run phase.
pub(super) struct RunningAntagonists<'a> {
    plan: &'a Plan,
    io: Option<&'a IoAntagonists>,
    membw: Vec<MemBw>,
    cpu: Vec<Cpu>,
    io_before: Vec<Sample>,
    started: Instant,
}

impl<'a> RunningAntagonists<'a> {
    pub(super) fn start(
        plan: &'a Plan,
        io: Option<&'a IoAntagonists>,
        peak_gbps: Option<f64>,
    ) -> Self {
        let mut r = RunningAntagonists {
            plan,
            io,
            membw: vec![],
            cpu: vec![],
            io_before: io.map(|a| a.sample()).unwrap_or_default(),
            started: Instant::now(),
        };
        let mut next = pressure_instances(plan);
        for a in &plan.antagonists {
            match a {
                Antagonist::Io {
                    block_size,
                    write_ratio,
                    instances,
                    ..
                } => {
                    if let Some(io) = io {
                        for i in next..next + instances {
                            io.set(i, Some(*write_ratio), *block_size);
                        }
                    }
                    next += instances;
                }
                Antagonist::Membw {
                    threads,
                    gb_per_s,
                    share,
                    cpus,
                } => {
                    let target = gb_per_s.or_else(|| share.and_then(|s| peak_gbps.map(|p| s * p)));
                    r.membw.push(MemBw::start(*threads, target, cpus))
                }
                Antagonist::Cpu {
                    threads,
                    duty,
                    cpus,
                } => r.cpu.push(Cpu::start(*threads, *duty, cpus)),
            }
        }
        r
    }

    /// Stops every load and reports what each achieved, in the order they were given.
    fn stop(self) -> Vec<AntagonistReport> {
        let secs = self.started.elapsed().as_secs_f64();
        let mut out = vec![];
        let mut next = pressure_instances(self.plan);
        let after = self.io.map(|a| a.sample()).unwrap_or_default();
        let (mut membw, mut cpu) = (self.membw.into_iter(), self.cpu.into_iter());
        for a in &self.plan.antagonists {
            match a {
                Antagonist::Io {
                    block_size,
                    write_ratio,
                    random_ratio,
                    instances,
                } => {
                    let d = Sample::delta(&after, &self.io_before, next..next + instances);
                    if let Some(io) = self.io {
                        for i in next..next + instances {
                            io.set(i, None, *block_size);
                        }
                    }
                    next += instances;
                    out.push(AntagonistReport::Io(IoAntagonistReport {
                        achieved_mb_per_s: d.bytes as f64 / secs / 1e6,
                        achieved_read_iops: d.reads as f64 / secs,
                        achieved_write_iops: d.writes as f64 / secs,
                        avg_latency_us: d.avg_latency_us(),
                        block_size: *block_size,
                        error: self.io.and_then(|x| x.error()),
                        instances: *instances,
                        random_ratio: *random_ratio,
                        write_ratio: *write_ratio,
                    }));
                }
                Antagonist::Membw { .. } => {
                    if let Some(m) = membw.next() {
                        out.push(AntagonistReport::Membw { report: m.stop() });
                    }
                }
                Antagonist::Cpu { .. } => {
                    if let Some(c) = cpu.next() {
                        out.push(AntagonistReport::Cpu { report: c.stop() });
                    }
                }
            }
        }
        out
    }
}

impl Companion for RunningAntagonists<'_> {
    fn finish(
        self: Box<Self>,
        _end: Duration,
        ps: &mut PhaseSummary,
        _rundir: &mut RunDir,
    ) -> anyhow::Result<()> {
        ps.antagonists = self.stop();
        Ok(())
    }
}
