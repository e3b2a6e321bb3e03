//! The commands made of many runs, and the one value they all become: `job` (a measuring
//! command — run, suite, pressure, sweep, capacity — checked without side effects, then
//! executed; the command line and experiment files share it), `capacity` (the highest offered
//! load meeting a latency SLO, papers/003), `sweep` (any parameter over a list, repeated, with
//! confidence intervals; papers/000 Fig. 7 and 8, papers/002 Table II), `durability`
//! (acknowledged writes read back after faults or writer kills) and `file` (`kvmeter
//! experiment`: a TOML file of steps, figures and findings, run resumably).
//!
//! Each point is an ordinary run — its own plan, run directory, manifest and summary — made in
//! this process one after another. The experiment reads each point's figures back from its
//! `summary.json`, so every number in the experiment's own files traces to a run directory.
//! Their directories' models and pages live in `report`, which never imports this module.

pub mod capacity;
pub mod durability;
pub mod file;
pub mod job;
pub mod sweep;

use crate::plan::Request;
use crate::report::Summary;
use std::path::{Path, PathBuf};

/// Runs one point (a whole plan) into `out`; returns its exit code and summary.
pub fn run_point(req: &Request, out: &Path) -> anyhow::Result<(i32, Summary)> {
    let mut r = req.clone();
    r.out = Some(out.to_path_buf());
    r.quiet = true;
    let plan = crate::plan::build(&r)?;
    let code = crate::driver::execute(plan)?;
    let text = std::fs::read_to_string(out.join("summary.json"))?;
    Ok((code, serde_json::from_str(&text)?))
}

/// The experiment's directory: `--out`, or kvmeter-runs/<time>-<command>-<store>; new or
/// empty, as a run directory.
pub fn experiment_dir(given: Option<&Path>, command: &str, store: &str) -> anyhow::Result<PathBuf> {
    let root = experiment_dir_plain(given, command, store)?;
    std::fs::create_dir_all(root.join("points"))?;
    Ok(root)
}

/// An output directory without points (`kvmeter durability`): `--out` or the default, new or
/// empty.
pub fn experiment_dir_plain(
    given: Option<&Path>,
    command: &str,
    store: &str,
) -> anyhow::Result<PathBuf> {
    let root = given
        .map(Path::to_path_buf)
        .unwrap_or_else(|| crate::plan::default_out(command, store));
    Ok(crate::report::rundir::claim(&root)?)
}

pub use crate::report::rundir::write_atomic;
