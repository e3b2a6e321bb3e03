//! One measuring command made into a value: what `kvmeter run`, `suite`, `pressure`, `sweep`,
//! `capacity` and `replay` do, checked without side effects, then executed. The command line and an
//! experiment file's steps (`kvmeter experiment`) both go through here, so a step is checked and
//! run exactly as the same command typed by hand.

use super::capacity::{self, Settings};
use super::sweep::Param;
use crate::args::Command;
use crate::error::UsageError;
use crate::plan::replay::ReplayRequest;
use crate::plan::Request;

/// A measuring command, fully parsed.
#[derive(Clone, Debug)]
pub enum Job {
    /// run, suite, pressure: one request, planned into one run (one run directory).
    Run(Request),
    Sweep {
        base: Request,
        params: Vec<Param>,
        repeat: usize,
    },
    Capacity {
        base: Request,
        settings: Settings,
    },
    /// A trace replayed (`kvmeter replay`): one run with one `replay` phase.
    Replay {
        base: Request,
        replay: ReplayRequest,
    },
}

/// Seconds assumed for an operation-bounded phase per operation (for the ETA only; the
/// experiment rescales its estimates by the time its finished steps really took).
const GUESS_OPS_PER_S: f64 = 100_000.0;

impl Job {
    /// A measuring command as a `Job` (checked and run the same way from the command line and
    /// from an experiment file's steps); `None` for the others.
    pub fn from_command(command: Command) -> Result<Option<Job>, UsageError> {
        Ok(Some(match command {
            Command::Run(r) => Job::Run(r.common.into_request("run", r.workload, Some(r.phase))),
            Command::Suite(c) => Job::Run(c.into_request("suite", vec![], None)),
            Command::Pressure(p) => {
                let mut r = p.common.into_request("pressure", p.workload, Some(p.phase));
                r.block_sizes = p.block_sizes;
                r.step = p.step;
                r.random_ratio = p.random_ratio;
                Job::Run(r)
            }
            Command::Capacity(a) => {
                let settings = Settings {
                    slo: Settings::parse_slo(&a.slo)?,
                    require_achieved: a.require_achieved,
                    start_rate: a.start_rate,
                    max_rate: a.max_rate,
                    factor: a.step_factor,
                    precision: a.precision,
                    repeat: a.repeat,
                    max_points: a.max_points,
                    sustainable: a.sustainable,
                };
                let mut r = a
                    .common
                    .into_request("capacity", a.workload, Some("both".into()));
                r.duration
                    .get_or_insert_with(|| capacity::POINT_DURATION.into());
                r.warmup
                    .get_or_insert_with(|| capacity::POINT_WARMUP.into());
                Job::Capacity { base: r, settings }
            }
            Command::Sweep(a) => {
                let params = a
                    .param
                    .iter()
                    .map(|p| Param::parse(p))
                    .collect::<Result<Vec<_>, _>>()?;
                Job::Sweep {
                    base: a.common.into_request("sweep", a.workload, Some(a.phase)),
                    params,
                    repeat: a.repeat,
                }
            }
            Command::Replay(a) => {
                let (base, replay) = a.into_requests();
                Job::Replay { base, replay }
            }
            _ => return Ok(None),
        }))
    }

    pub fn request(&self) -> &Request {
        match self {
            Job::Run(r) => r,
            Job::Sweep { base, .. } | Job::Capacity { base, .. } | Job::Replay { base, .. } => base,
        }
    }

    pub fn request_mut(&mut self) -> &mut Request {
        match self {
            Job::Run(r) => r,
            Job::Sweep { base, .. } | Job::Capacity { base, .. } | Job::Replay { base, .. } => base,
        }
    }

    /// Everything `execute` would refuse, refused now: nothing is created or started.
    pub fn check(&self) -> Result<(), UsageError> {
        match self {
            Job::Run(r) => crate::plan::build(r).map(|_| ()),
            Job::Sweep {
                base,
                params,
                repeat,
            } => super::sweep::check(base, params, *repeat),
            Job::Capacity { base, settings } => super::capacity::check(base, settings),
            Job::Replay { base, replay } => crate::plan::replay::check_replay(base, replay),
        }
    }

    /// Runs it; the exit code as the command's. With `--metrics-addr` (and no endpoint serving
    /// yet in this process), the command is checked, the endpoint bound — a bad address or a
    /// port in use refused before anything is created — and, after the last run, the final
    /// values served until a scrape reads them (`--metrics-linger`).
    pub fn execute(self) -> anyhow::Result<i32> {
        let metrics = crate::plan::MetricsPlan::from_request(self.request())?;
        let Some(m) = metrics.filter(|_| crate::metrics::current().is_none()) else {
            return self.execute_runs();
        };
        self.check()?;
        let exporter = crate::metrics::Exporter::bind(&m.addr)?;
        crate::metrics::install(exporter.clone());
        let code = self.execute_runs()?;
        exporter.finish(m.linger, &crate::driver::install_signals());
        Ok(code)
    }

    fn execute_runs(self) -> anyhow::Result<i32> {
        match self {
            Job::Run(r) => crate::plan::build(&r)
                .map_err(anyhow::Error::from)
                .and_then(crate::driver::execute),
            Job::Sweep {
                base,
                params,
                repeat,
            } => {
                let out = base.out.clone();
                super::sweep::run(&base, out.as_deref(), params, repeat)
            }
            Job::Capacity { base, settings } => {
                let out = base.out.clone();
                super::capacity::run(&base, out.as_deref(), settings)
            }
            Job::Replay { base, replay } => crate::plan::replay::build_replay(&base, &replay)
                .map_err(anyhow::Error::from)
                .and_then(crate::driver::execute),
        }
    }

    /// A rough length in seconds (phases' durations, or operations at a guessed rate), for
    /// an experiment's ETA.
    pub fn estimate_s(&self) -> f64 {
        let plan_s = |r: &Request| -> f64 {
            let Ok(p) = crate::plan::build(r) else {
                return 10.0;
            };
            p.phases
                .iter()
                .map(|ph| {
                    // A pressure phase's duration is already its warm-up and 26 steps
                    // (plan::phase), with no operation count.
                    let by_ops = ph.operations as f64 / GUESS_OPS_PER_S;
                    1.0 + match ph.duration {
                        Some(d) if ph.operations > 0 => d.as_secs_f64().min(by_ops),
                        Some(d) => d.as_secs_f64(),
                        None => by_ops,
                    }
                })
                .sum()
        };
        match self {
            Job::Run(r) => plan_s(r),
            Job::Sweep {
                base,
                params,
                repeat,
            } => {
                let points: usize = params.iter().map(|p| p.values.len()).product();
                plan_s(base) * (points * repeat) as f64
            }
            Job::Capacity { base, settings } => {
                let mut r = base.clone();
                r.rate = Some(settings.start_rate);
                plan_s(&r) * (settings.max_points.min(12)) as f64
            }
            Job::Replay { base, replay } => replay_estimate_s(base, replay),
        }
    }
}

/// A replay's rough length without reading its trace: `--duration`, else `--ops` at `--rate`
/// (or the guessed rate), else a minute (the trace's span is unknown until it is read).
fn replay_estimate_s(base: &Request, replay: &ReplayRequest) -> f64 {
    let duration = base
        .duration
        .as_deref()
        .and_then(|d| crate::plan::parse_duration("--duration", d).ok())
        .map(|d| d.as_secs_f64());
    let by_ops = base
        .ops
        .filter(|n| *n > 0)
        .map(|n| n as f64 / base.rate.or(replay.rate).unwrap_or(GUESS_OPS_PER_S));
    1.0 + match (duration, by_ops) {
        (Some(d), Some(o)) => d.min(o),
        (Some(d), None) => d,
        (None, Some(o)) => o,
        (None, None) => 60.0,
    }
}
