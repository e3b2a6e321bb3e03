//! The flags of `kvmeter compare`; `cli::compare` runs it.

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
    /// ops_per_s, p50_us, p99_us, p99_9_us, error_rate, ops_per_joule, cpu_s_per_op,
    /// server_cpu_s_per_op, context_switches_per_op, storage_write_bytes_per_op, cycles_per_op, for the
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
