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

/// Mean, sample standard deviation and the 95 % confidence interval of the mean (Student's t
/// with n − 1 degrees of freedom; none for a single value).
#[derive(Clone, Debug, serde::Serialize, PartialEq)]
pub struct Spread {
    pub n: usize,
    pub mean: f64,
    pub stddev: Option<f64>,
    pub ci95_low: Option<f64>,
    pub ci95_high: Option<f64>,
    pub values: Vec<f64>,
}

/// Two-sided 95 % critical values of Student's t for 1..=30 degrees of freedom.
const T95: [f64; 30] = [
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160,
    2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056,
    2.052, 2.048, 2.045, 2.042,
];

pub fn t95(df: usize) -> f64 {
    match df {
        0 => f64::NAN,
        1..=30 => T95[df - 1],
        31..=60 => 2.000,
        61..=120 => 1.980,
        _ => 1.960,
    }
}

impl Spread {
    pub fn of(values: &[f64]) -> Self {
        let n = values.len();
        let mean = if n > 0 {
            values.iter().sum::<f64>() / n as f64
        } else {
            f64::NAN
        };
        let (stddev, lo, hi) = if n >= 2 {
            let var = values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
            let sd = var.sqrt();
            let half = t95(n - 1) * sd / (n as f64).sqrt();
            (Some(sd), Some(mean - half), Some(mean + half))
        } else {
            (None, None, None)
        };
        Spread {
            n,
            mean,
            stddev,
            ci95_low: lo,
            ci95_high: hi,
            values: values.to_vec(),
        }
    }
}

pub fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    let n = v.len();
    if n == 0 {
        f64::NAN
    } else if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_matches_hand_computation() {
        // 10, 12, 14: mean 12, s = 2, t(2) = 4.303, half-width 4.303·2/√3 = 4.9687.
        let s = Spread::of(&[10.0, 12.0, 14.0]);
        assert_eq!(s.n, 3);
        assert_eq!(s.mean, 12.0);
        assert!((s.stddev.unwrap() - 2.0).abs() < 1e-12);
        assert!((s.ci95_low.unwrap() - (12.0 - 4.968_68)).abs() < 1e-4);
        assert!((s.ci95_high.unwrap() - (12.0 + 4.968_68)).abs() < 1e-4);
        let one = Spread::of(&[5.0]);
        assert_eq!((one.mean, one.stddev, one.ci95_low), (5.0, None, None));
        assert_eq!(t95(1000), 1.960);
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
    }
}
