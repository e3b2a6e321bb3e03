//! Reading a run directory back: manifest and summary, the interval series, the telemetry
//! series and the HDR logs. The HTML report (and `compare`) read what the run wrote and never
//! recompute a measurement; an experiment's page reads its verdicts from findings.json
//! (report::experiment) in the same way. A directory cut short by SIGKILL still loads:
//! whatever files and whole rows are there, with a note that it is partial.

use super::{PhaseSummary, Summary};
use crate::error::UsageError;
use crate::fault::recovery::PowerSample;
use hdrhistogram::Histogram;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// One row of intervals.csv.
#[derive(Clone, Debug, PartialEq)]
pub struct IntervalRow {
    pub phase: String,
    pub start_s: f64,
    pub end_s: f64,
    pub warmup: bool,
    pub metric: String,
    pub count: u64,
    pub ops_per_s: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub p99_9_us: f64,
    pub max_us: f64,
    pub intended_p99_us: Option<f64>,
}

pub use super::csv::Table;

/// What a run directory holds.
pub struct RunData {
    pub dir: PathBuf,
    pub manifest: Option<Value>,
    pub summary: Option<Summary>,
    pub intervals: Vec<IntervalRow>,
    pub telemetry: Table,
    /// threads.csv: CPU by thread group per sample (a group is absent when it used none).
    pub threads: Table,
    /// timeline.csv: the recovery timeline's buckets (`--timeline`, `--fault`).
    pub timeline: Table,
    /// store_stats.csv and store_events.csv: what the store said about itself.
    pub store_stats: Table,
    pub store_events: Table,
    /// Why the directory is incomplete (a run cut short), if it is.
    pub partial: Option<String>,
}

fn read_json(path: &Path) -> Result<Option<Value>, UsageError> {
    match std::fs::read_to_string(path) {
        Ok(t) => serde_json::from_str(&t).map(Some).map_err(|e| {
            UsageError::new(format!(
                "{}: not valid JSON ({e}); a run directory holds kvmeter's own files",
                path.display()
            ))
        }),
        Err(_) => Ok(None),
    }
}

impl RunData {
    pub fn load(dir: &Path) -> Result<Self, UsageError> {
        let manifest = read_json(&dir.join("manifest.json"))?;
        let intervals = Table::read(&dir.join("intervals.csv"))?;
        if manifest.is_none() && intervals.is_none() {
            return Err(UsageError::new(format!(
                "{}: not a kvmeter run directory (no manifest.json or intervals.csv)",
                dir.display()
            )));
        }
        let summary = match read_json(&dir.join("summary.json"))? {
            Some(v) => Some(serde_json::from_value::<Summary>(v).map_err(|e| {
                UsageError::new(format!(
                    "{}: summary.json is not one this kvmeter reads ({e}); make the report with the kvmeter version that wrote the run",
                    dir.display()
                ))
            })?),
            None => None,
        };
        let status = manifest
            .as_ref()
            .and_then(|m| m["status"].as_str())
            .unwrap_or("unknown");
        // A plug-in that crashed the process left its signal in crash.txt (store/plugin/crash.rs).
        let crash = std::fs::read_to_string(dir.join(crate::store::plugin::crash::FILE))
            .ok()
            .map(|t| t.split_whitespace().collect::<Vec<_>>().join(" "));
        let partial = match (&summary, status) {
            (_, "running" | "failed") | (None, _) if crash.is_some() => crash,
            (None, _) => Some("no summary.json: the run ended before its first phase did (killed?); the figures show the intervals written".to_string()),
            (Some(_), "running") => Some("the manifest still says 'running': kvmeter was killed; completed phases and intervals are shown".to_string()),
            // Ended where kvmeter could not finish the directory itself (its guard's words).
            (Some(s), _) if s.error.as_deref().is_some_and(|e| {
                e.starts_with(super::current::ABANDONED) || e.starts_with(super::current::INTERRUPTED_AGAIN)
            }) => s.error.as_ref().map(|e| format!("{e}; completed phases and intervals are shown")),
            _ => None,
        };
        let intervals = intervals.map(|t| intervals_of(&t)).unwrap_or_default();
        // Phase and metric names become file names (figures/<phase>-….svg, latency/<phase>.
        // <metric>.hlog): a name that is not one plain component could reach outside the
        // directory (review F5), so such a directory is refused whole.
        let named = summary
            .iter()
            .flat_map(|s| s.phases.iter().map(|p| p.name.as_str()))
            .chain(
                intervals
                    .iter()
                    .flat_map(|r| [r.phase.as_str(), r.metric.as_str()]),
            );
        for name in named {
            if !is_plain_name(name) {
                return Err(UsageError::new(format!(
                    "{}: phase or operation name {:?} is not a plain file name (no '/', '\\' or control characters, not starting with '.'); a run directory holds kvmeter's own files",
                    dir.display(),
                    name.chars().take(80).collect::<String>()
                )));
            }
        }
        Ok(RunData {
            dir: dir.to_path_buf(),
            manifest,
            summary,
            intervals,
            telemetry: Table::read(&dir.join("telemetry.csv"))?.unwrap_or_default(),
            threads: Table::read(&dir.join("threads.csv"))?.unwrap_or_default(),
            store_stats: Table::read(&dir.join(super::store_stats::STORE_STATS_CSV))?
                .unwrap_or_default(),
            store_events: Table::read(&dir.join(super::store_events::STORE_EVENTS_CSV))?
                .unwrap_or_default(),
            timeline: Table::read(&dir.join("timeline.csv"))?.unwrap_or_default(),
            partial,
        })
    }

    /// The phases the summary has, then any other names in intervals.csv: the phase in
    /// progress when a run ended without summarising it (killed, interrupted twice).
    pub fn phase_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .summary
            .iter()
            .flat_map(|s| s.phases.iter().map(|p| p.name.clone()))
            .collect();
        for r in &self.intervals {
            if !names.contains(&r.phase) {
                names.push(r.phase.clone());
            }
        }
        names
    }

    pub fn phase(&self, name: &str) -> Option<&PhaseSummary> {
        self.summary
            .as_ref()?
            .phases
            .iter()
            .find(|p| p.name == name)
    }

    /// Where a phase starts on the run's clock, in seconds: its `started_at` less the
    /// manifest's (both written to the millisecond). telemetry.csv's `time_s` counts from the
    /// manifest's `started_at` too, so interval rows (phase time) plus this offset share the
    /// telemetry's axis (issue 40 item 9). None when either time is missing or unreadable.
    pub fn phase_start_s(&self, name: &str) -> Option<f64> {
        let run = self.manifest.as_ref()?["started_at"].as_str()?;
        let run = humantime::parse_rfc3339_weak(run).ok()?;
        let ph = humantime::parse_rfc3339_weak(&self.phase(name)?.started_at).ok()?;
        let d = match ph.duration_since(run) {
            Ok(d) => d.as_secs_f64(),
            Err(e) => -e.duration().as_secs_f64(),
        };
        Some(d)
    }

    /// The interval rows of one phase and metric, in order.
    pub fn series(&self, phase: &str, metric: &str) -> Vec<&IntervalRow> {
        self.intervals
            .iter()
            .filter(|r| r.phase == phase && r.metric == metric)
            .collect()
    }

    /// Metrics with interval rows in a phase, in first-seen order (SCHEDULE left out).
    pub fn metrics(&self, phase: &str) -> Vec<String> {
        let mut out: Vec<String> = vec![];
        for r in self.intervals.iter().filter(|r| r.phase == phase) {
            if r.metric != "SCHEDULE" && r.metric != "CLEANUP" && !out.contains(&r.metric) {
                out.push(r.metric.clone());
            }
        }
        out
    }

    /// The merged histogram of `latency/<phase>.<name>.hlog` over the intervals that start at
    /// or after `from_s` (the end of warm-up); `None` without such a log.
    pub fn histogram(&self, phase: &str, name: &str, from_s: f64) -> Option<Histogram<u64>> {
        if !is_plain_name(phase) || !is_plain_name(name) {
            return None;
        }
        let path = self
            .dir
            .join("latency")
            .join(format!("{phase}.{name}.hlog"));
        let text = std::fs::read_to_string(path).ok()?;
        read_hlog(&text, from_s)
    }
}

/// A phase or operation name usable as one component of a file name: 1-128 bytes, no path
/// separator or control character, not starting with '.' (so neither `.` nor `..`).
pub fn is_plain_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 128
        && !name.starts_with('.')
        && !name
            .chars()
            .any(|c| c == '/' || c == '\\' || c.is_control())
}

/// intervals.csv's rows, by column name (a merged run's file has an `agents` column more).
fn intervals_of(t: &Table) -> Vec<IntervalRow> {
    t.rows()
        .map(|r| {
            let num = |n: &str| r.num(n).unwrap_or(f64::NAN);
            IntervalRow {
                phase: r.get("phase").to_string(),
                start_s: num("start_s"),
                end_s: num("end_s"),
                warmup: r.get("warmup") == "1",
                metric: r.get("metric").to_string(),
                count: r.get("count").parse().unwrap_or(0),
                ops_per_s: num("ops_per_s"),
                p50_us: num("p50_us"),
                p99_us: num("p99_us"),
                p99_9_us: num("p99_9_us"),
                max_us: num("max_us"),
                intended_p99_us: r.num("intended_p99_us"),
            }
        })
        .collect()
}

/// The power samples of `phase` in telemetry.csv, for `fault::recovery::fill_energy`.
pub fn power_samples(t: &Table, phase: &str) -> Vec<PowerSample> {
    if t.index("power_w").is_none() || t.index("power_source").is_none() {
        return vec![];
    }
    t.rows_where("phase", phase)
        .filter_map(|r| {
            Some(PowerSample {
                t_s: r.num("time_s")?,
                power_w: r.num("power_w"),
                source: r.get("power_source").to_string(),
            })
        })
        .collect()
}

/// Sums the interval histograms of an HdrHistogram interval log (format 1.3) whose start is
/// at or after `from_s`.
pub fn read_hlog(text: &str, from_s: f64) -> Option<Histogram<u64>> {
    let mut total: Option<Histogram<u64>> = None;
    for l in text.lines() {
        if l.starts_with('#') || l.starts_with('"') || l.is_empty() {
            continue;
        }
        let f: Vec<&str> = l.splitn(4, ',').collect();
        if f.len() != 4 {
            continue;
        }
        let start: f64 = f[0].parse().ok()?;
        if start + 1e-6 < from_s {
            continue;
        }
        // Bounded: the file may come from anyone (F4a); a lying header is refused here.
        let h = crate::measure::hdr::decode_base64(f[3]).ok()?;
        match total.as_mut() {
            Some(t) => t.add(&h).ok()?,
            None => {
                let mut t = crate::measure::new_histogram();
                t.add(&h).ok()?;
                total = Some(t);
            }
        }
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hlog_intervals_after_warmup_are_summed() {
        use base64::Engine as _;
        let enc = |vals: &[u64]| {
            let mut h = crate::measure::new_histogram();
            for v in vals {
                h.record(*v).unwrap();
            }
            let mut buf = vec![];
            use hdrhistogram::serialization::Serializer as _;
            hdrhistogram::serialization::V2DeflateSerializer::new()
                .serialize(&h, &mut buf)
                .unwrap();
            base64::engine::general_purpose::STANDARD.encode(buf)
        };
        let text = format!(
            "#[Histogram log format version 1.3]\n\"StartTimestamp\",\"Interval_Length\",\"Interval_Max\",\"Interval_Compressed_Histogram\"\n0.000,1.000,0.001,{}\n1.000,1.000,0.001,{}\n2.000,0.500,0.001,{}\n",
            enc(&[5, 5, 5]),
            enc(&[100, 200]),
            enc(&[300])
        );
        let h = read_hlog(&text, 1.0).unwrap();
        assert_eq!(h.len(), 3);
        assert_eq!(h.max(), 300);
        assert_eq!(read_hlog(&text, 0.0).unwrap().len(), 6);
    }
}
