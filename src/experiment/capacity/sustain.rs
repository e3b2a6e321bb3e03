//! Sustainable capacity (issue 43 item 5; Pebble's benchmarks search for the highest load
//! with no write stall and a compaction debt that does not grow): a point that meets the
//! latency SLO may still be borrowing from the future — an LSM store that queues compaction
//! work faster than it does it meets the SLO for a while, then stalls. Under
//! `kvmeter capacity --sustainable` a point also must have had no write stall (the store's
//! stall time, or its logged stops and slowdowns where it counts no time) and a backlog (each
//! statistic the store declares as one: RocksDB's L0 files and pending compaction bytes) that
//! did not grow over the phase's second half: the mean of its last quarter of samples is at
//! most 10 % (and one unit: a file, 1 MiB) above the mean of the quarter before. Fewer than
//! eight samples in the phase cannot show a trend: the point is not taken as sustainable.

use crate::report::csv::Table;
use crate::report::store_stats::{StoreStats, STORE_STATS_CSV};
use serde::Serialize;
use std::path::Path;

/// The samples a phase needs for a trend: two quarters of at least two.
const MIN_SAMPLES: usize = 8;

/// One backlog statistic's trend over a point's run phase.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Trend {
    pub name: String,
    /// The means of the third and the last quarter of the phase's samples.
    pub earlier: f64,
    pub later: f64,
    pub grows: bool,
}

/// What a point says about sustainability.
#[derive(Clone, Debug, Serialize, PartialEq, Default)]
pub struct Sustain {
    /// The store's stall time over the phase (µs), where it counts it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stalled_us: Option<u64>,
    /// Write stops and slowdowns the store logged in the phase.
    pub stall_events: u64,
    pub backlog: Vec<Trend>,
    /// Whether the point is sustainable; null where the store declares nothing to judge by.
    pub sustainable: Option<bool>,
    /// Why, in a line.
    pub why: String,
}

/// Judges the run phase `phase` of the point in `dir`, whose figures are `stats`.
pub fn judge(stats: Option<&StoreStats>, dir: &Path, phase: &str) -> Sustain {
    let Some(stats) = stats else {
        return Sustain {
            why: "unknown: the store reports no statistics of its own, so only latency is judged"
                .into(),
            ..Default::default()
        };
    };
    let role = |r: &'static str| {
        stats
            .stats
            .iter()
            .filter(move |(_, f)| f.role.as_deref() == Some(r))
    };
    let mut s = Sustain::default();
    for (_, f) in role("stall") {
        *s.stalled_us.get_or_insert(0) += f.increase.unwrap_or(0);
    }
    let logged = |k: &str| stats.events.get(k).copied().unwrap_or(0);
    s.stall_events = logged("write_stop") + logged("write_slowdown");
    let stalled =
        s.stalled_us.is_some_and(|us| us > 0) || (s.stalled_us.is_none() && s.stall_events > 0);
    let backlog: Vec<(&String, String)> =
        role("backlog").map(|(n, f)| (n, f.unit.clone())).collect();
    let mut reasons = vec![];
    if stalled {
        reasons.push(match s.stalled_us {
            Some(us) => format!("writes stalled {:.3} s", us as f64 / 1e6),
            None => format!("{} write stops or slowdowns logged", s.stall_events),
        });
    }
    let mut inconclusive = None;
    if !backlog.is_empty() {
        match trends(dir, phase, &backlog) {
            Ok(t) => s.backlog = t,
            Err(why) => inconclusive = Some(why),
        }
    }
    for t in s.backlog.iter().filter(|t| t.grows) {
        reasons.push(format!(
            "{} grew ({:.1} → {:.1} in the phase's second half)",
            t.name, t.earlier, t.later
        ));
    }
    if let Some(why) = &inconclusive {
        reasons.push(format!("backlog trend inconclusive: {why}"));
    }
    s.sustainable = Some(reasons.is_empty());
    s.why = if !reasons.is_empty() {
        reasons.join("; ")
    } else if backlog.is_empty() {
        "no write stall; the store declares no backlog, so none was judged".into()
    } else {
        "no write stall; backlog steady".into()
    };
    s
}

/// Each backlog statistic's trend in `dir`/store_stats.csv's rows of `phase`.
fn trends(dir: &Path, phase: &str, backlog: &[(&String, String)]) -> Result<Vec<Trend>, String> {
    let path = dir.join(STORE_STATS_CSV);
    let table = Table::read(&path)
        .map_err(|e| e.to_string())?
        .ok_or_else(|| format!("{} could not be read", path.display()))?;
    let mut out = vec![];
    for (name, unit) in backlog {
        let xs: Vec<f64> = table
            .rows_where("phase", phase)
            .filter_map(|r| r.num(name))
            .collect();
        if xs.len() < MIN_SAMPLES {
            return Err(format!(
                "{} samples of {name} in the phase, {MIN_SAMPLES} needed (a longer --duration or a shorter --interval)",
                xs.len()
            ));
        }
        let q = xs.len() / 4;
        let mean = |s: &[f64]| s.iter().sum::<f64>() / s.len() as f64;
        let (earlier, later) = (
            mean(&xs[xs.len() - 2 * q..xs.len() - q]),
            mean(&xs[xs.len() - q..]),
        );
        let unit_slack = if unit == "bytes" { 1048576.0 } else { 1.0 };
        out.push(Trend {
            name: name.to_string(),
            earlier,
            later,
            grows: later > earlier * 1.1 && later - earlier > unit_slack,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::store_stats::StatFigure;
    use crate::store::stats::StatKind;

    fn stats(stall_us: Option<u64>, stops: u64) -> StoreStats {
        let mut s = StoreStats::default();
        let fig = |kind, unit: &str, role: &str, increase| StatFigure {
            kind,
            unit: unit.into(),
            role: Some(role.into()),
            increase,
            end: None,
            max: None,
        };
        if let Some(us) = stall_us {
            s.stats.insert(
                "stall_us".into(),
                fig(StatKind::Counter, "us", "stall", Some(us)),
            );
        }
        s.stats.insert(
            "l0_files".into(),
            fig(StatKind::Gauge, "files", "backlog", None),
        );
        if stops > 0 {
            s.events.insert("write_stop".into(), stops);
        }
        s
    }

    fn dir_with(l0: &[u32]) -> tempfile::TempDir {
        let t = tempfile::tempdir().unwrap();
        let mut csv = "phase,t_s,unix_us,stall_us,l0_files\n".to_string();
        for (i, v) in l0.iter().enumerate() {
            csv.push_str(&format!("load,{i},0,0,99\nrun,{i},0,0,{v}\n"));
        }
        std::fs::write(t.path().join(STORE_STATS_CSV), csv).unwrap();
        t
    }

    #[test]
    fn a_steady_sawtooth_is_sustainable_and_a_climb_is_not() {
        let d = dir_with(&[0, 1, 2, 3, 1, 2, 3, 1, 2, 3, 1, 2]);
        let s = judge(Some(&stats(Some(0), 0)), d.path(), "run");
        assert_eq!(s.sustainable, Some(true), "{s:?}");
        assert_eq!(s.why, "no write stall; backlog steady");
        let d = dir_with(&[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]);
        let s = judge(Some(&stats(Some(0), 0)), d.path(), "run");
        assert_eq!(s.sustainable, Some(false));
        // Quarters of 3: samples 6..9 (mean 7) against 9..12 (mean 10).
        assert_eq!(
            s.backlog,
            vec![Trend {
                name: "l0_files".into(),
                earlier: 7.0,
                later: 10.0,
                grows: true
            }]
        );
        assert!(s.why.contains("l0_files grew (7.0 → 10.0"), "{}", s.why);
    }

    #[test]
    fn a_stall_fails_and_too_few_samples_cannot_pass() {
        let d = dir_with(&[1; 12]);
        let s = judge(Some(&stats(Some(1_500_000), 0)), d.path(), "run");
        assert_eq!(s.sustainable, Some(false));
        assert!(s.why.starts_with("writes stalled 1.500 s"), "{}", s.why);
        // Logged stops count where the store keeps no stall time.
        let s = judge(Some(&stats(None, 2)), d.path(), "run");
        assert_eq!(s.sustainable, Some(false));
        let d = dir_with(&[1; 5]);
        let s = judge(Some(&stats(Some(0), 0)), d.path(), "run");
        assert_eq!(s.sustainable, Some(false));
        assert!(s.why.contains("5 samples of l0_files"), "{}", s.why);
        let s = judge(None, d.path(), "run");
        assert_eq!(s.sustainable, None);
    }
}
