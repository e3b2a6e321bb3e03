//! `kvmeter compare`: its flags, the like-with-like check and the files it writes
//! (report::compare does the statistics).

use crate::error::EXIT_OK;
use clap::Args;
use std::path::PathBuf;

#[derive(Args, Debug)]
pub struct CompareArgs {
    /// Baseline runs: run directories, or directories holding run directories.
    #[arg(value_name = "A", required = true)]
    pub a: Vec<PathBuf>,
    /// Candidate runs, the same way.
    #[arg(long = "vs", value_name = "B", required = true, num_args = 1..)]
    pub b: Vec<PathBuf>,
    /// The smallest change that gets a verdict (a share): a significant change within it is
    /// "below --noise" (run-to-run drift on a shared machine is of this order).
    #[arg(
        long,
        visible_alias = "threshold",
        value_name = "SHARE",
        default_value_t = 0.02
    )]
    pub noise: f64,
    /// The metrics to decide on (repeatable; default: the run phase's ops_per_s). Only these
    /// are tested, each at 0.05 / their number; every other row is shown without a verdict.
    /// ops_per_s, p50_us, p99_us, p99_9_us, error_rate, ops_per_joule, cpu_s_per_op, for the
    /// run phase; PHASE.METRIC (e.g. load.ops_per_s) for another phase.
    #[arg(long = "metric", value_name = "NAME")]
    pub metric: Vec<String>,
    /// Refuse (exit 2) when the manifests differ in anything (store, options, workload,
    /// threads, machine, clock); without it the differences are warnings.
    #[arg(long)]
    pub require_match: bool,
    /// Exit 1 when any tested metric is worse (for CI).
    #[arg(long)]
    pub fail_on_regression: bool,
    /// Where compare.json and compare.html go (default: a new kvmeter-runs/<time>-compare-runs,
    /// with a suffix when that name is taken; nothing is ever overwritten).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
}

pub(super) fn compare(a: CompareArgs) -> anyhow::Result<i32> {
    use crate::error::UsageError;
    use crate::report::compare;
    if !(0.0..1.0).contains(&a.noise) {
        return Err(UsageError::new(format!(
            "--noise {}: expected a share from 0 to 1 (e.g. 0.02)",
            a.noise
        ))
        .into());
    }
    let runs_a = compare::collect(&a.a, "A")?;
    let runs_b = compare::collect(&a.b, "--vs")?;
    let c = compare::compare(&runs_a, &runs_b, a.noise, &a.metric)?;
    // One difference is the variable under test; more than one is not like with like.
    if a.require_match && c.mismatches.len() > 1 {
        return Err(UsageError::new(format!(
            "--require-match: the runs differ in {} fields, not only the one under test: {}",
            c.mismatches.len(),
            c.mismatches.join("; ")
        ))
        .into());
    }
    let out = a
        .out
        .unwrap_or_else(|| crate::plan::default_out("compare", "runs"));
    let out = crate::report::rundir::claim(&out)?;
    match c.mismatches.as_slice() {
        [] => {}
        [one] => eprintln!(
            "compare: the one difference between the runs (the variable under test): {one}"
        ),
        many => {
            for m in many {
                eprintln!("warning: not like with like: {m}");
            }
        }
    }
    crate::report::rundir::write_atomic(
        &out.join("compare.json"),
        (serde_json::to_string_pretty(&c)? + "\n").as_bytes(),
    )?;
    crate::report::rundir::write_atomic(&out.join("compare.html"), c.html().as_bytes())?;
    print!("{}", c.render());
    eprintln!("results: {}", out.display());
    Ok(if a.fail_on_regression && c.regressed() {
        crate::error::EXIT_FAILED
    } else {
        EXIT_OK
    })
}
