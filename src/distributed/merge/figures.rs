//! What merging costs the coordinator, interval by interval (issue 33: does one coordinator keep
//! up with a thousand agents?). Each merged interval is one row of `dist/merge.csv` in the merged
//! run directory, written as it happens (a run that dies keeps the rows so far):
//!
//! - `merge_ms`: the time `Merger::interval` took (decode and add every report's histograms,
//!   write the merged row and HDR logs);
//! - `lateness_ms`: when the merged interval was written, past the end of the interval on the
//!   phase's grid (T0 + its end): how far the merged view trails the measurement — the wait for
//!   the last agent's report, the poll period, then the merge itself;
//! - `reports`: how many agents' reports it merged.
//!
//! dist.json's `merge` summarises them (count, p50, p99, max). Only the live coordinator
//! records these: `kvmeter dist merge` rebuilds a run long after it ended, where lateness means
//! nothing.

use serde::Serialize;
use std::io::Write;

pub(super) const FILE: &str = "dist/merge.csv";
const HEADER: &str = "phase,interval,reports,merge_ms,lateness_ms\n";

/// dist.json's `merge`: the rows of dist/merge.csv, summarised.
#[derive(Serialize, Debug, Clone, Default, PartialEq)]
pub struct MergeSummary {
    /// Merged intervals (rows of dist/merge.csv).
    pub intervals: usize,
    /// Most reports one interval merged.
    pub reports_max: usize,
    pub merge_ms: Spread,
    pub lateness_ms: Spread,
}

/// Nearest-rank percentiles of one column.
#[derive(Serialize, Debug, Clone, Default, PartialEq)]
pub struct Spread {
    pub p50: f64,
    pub p99: f64,
    pub max: f64,
}

impl Spread {
    fn of(values: &[f64]) -> Spread {
        let mut v = values.to_vec();
        v.sort_by(f64::total_cmp);
        let rank = |q: f64| -> f64 {
            if v.is_empty() {
                return 0.0;
            }
            // Nearest rank: the smallest value with at least q of the values at or below it.
            let i = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1;
            v[i]
        };
        Spread {
            p50: rank(0.50),
            p99: rank(0.99),
            max: v.last().copied().unwrap_or(0.0),
        }
    }
}

/// One merged interval's figures.
pub(super) struct Row<'a> {
    pub phase: &'a str,
    pub interval: usize,
    pub reports: usize,
    pub merge_ms: f64,
    pub lateness_ms: f64,
}

/// The open dist/merge.csv and every row's figures so far.
pub(super) struct MergeLog {
    file: std::fs::File,
    merge_ms: Vec<f64>,
    lateness_ms: Vec<f64>,
    reports_max: usize,
}

impl MergeLog {
    /// Opens `dist/merge.csv` (already created with its header by `Merger`) for appending.
    pub(super) fn open(root: &std::path::Path) -> std::io::Result<MergeLog> {
        use std::os::unix::fs::OpenOptionsExt;
        let file = std::fs::OpenOptions::new()
            .append(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(root.join(FILE))?;
        Ok(MergeLog {
            file,
            merge_ms: Vec::new(),
            lateness_ms: Vec::new(),
            reports_max: 0,
        })
    }

    pub(super) fn header() -> &'static str {
        HEADER
    }

    /// Appends one row (one write: a reader never sees half a row).
    pub(super) fn row(&mut self, r: &Row) -> std::io::Result<()> {
        self.merge_ms.push(r.merge_ms);
        self.lateness_ms.push(r.lateness_ms);
        self.reports_max = self.reports_max.max(r.reports);
        let line = format!(
            "{},{},{},{:.3},{:.3}\n",
            r.phase, r.interval, r.reports, r.merge_ms, r.lateness_ms
        );
        self.file.write_all(line.as_bytes())
    }

    pub(super) fn summary(&self) -> MergeSummary {
        MergeSummary {
            intervals: self.merge_ms.len(),
            reports_max: self.reports_max,
            merge_ms: Spread::of(&self.merge_ms),
            lateness_ms: Spread::of(&self.lateness_ms),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        // 1..=100: p50 is the 50th value, p99 the 99th (nearest rank, by hand).
        let v: Vec<f64> = (1..=100).rev().map(f64::from).collect();
        let s = Spread::of(&v);
        assert_eq!((s.p50, s.p99, s.max), (50.0, 99.0, 100.0));
        // One value is every percentile; none is zeros.
        let one = Spread::of(&[7.5]);
        assert_eq!((one.p50, one.p99, one.max), (7.5, 7.5, 7.5));
        assert_eq!(Spread::of(&[]), Spread::default());
    }
}
