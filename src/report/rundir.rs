//! The run directory, written as the run goes so that a crash of the store or of kvmeter leaves
//! every completed interval readable: `intervals.csv` and the HDR logs are appended and flushed
//! at every interval; `manifest.json` and `summary.json` are replaced atomically (write, fsync,
//! rename), so they are always whole.

use crate::measure::{percentile, Stats};
use anyhow::Context;
use base64::Engine;
use hdrhistogram::serialization::{Serializer, V2DeflateSerializer};
use hdrhistogram::Histogram;
use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

pub const INTERVALS_HEADER: &str = "phase,interval,start_s,end_s,warmup,metric,count,errors,ops_per_s,mb_per_s,avg_us,p50_us,p90_us,p99_us,p99_9_us,max_us,intended_p50_us,intended_p99_us,intended_max_us,offered_ops_per_s,send_lag_p99_us,send_lag_max_us,behind_ms";

/// The schedule's side of an interval (paced and open-loop phases): the offered rate and, in
/// open loop, how far the schedule was behind at the interval's end.
#[derive(Clone, Copy, Debug)]
pub struct ScheduleFigures {
    pub offered_ops_per_s: f64,
    pub behind_ms: Option<f64>,
}

pub struct RunDir {
    root: PathBuf,
    intervals: BufWriter<File>,
    hlogs: HashMap<String, BufWriter<File>>,
    serializer: V2DeflateSerializer,
    scratch: Vec<u8>,
    /// A distributed run's merged directory: how many agents the next interval merges (the
    /// `agents` column of intervals.csv); `None` for one process's run.
    agents: Option<usize>,
}

fn epoch_secs(t: SystemTime) -> f64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// Makes `root` a new, empty results directory (a run's, or an experiment's holding many runs):
/// refuses one that exists with anything in it, since kvmeter never overwrites results.
pub fn claim(root: &Path) -> Result<(), crate::error::UsageError> {
    let bad =
        |why: String| crate::error::UsageError::new(format!("--out {}: {why}", root.display()));
    if root.exists() {
        let mut entries = fs::read_dir(root)
            .map_err(|e| bad(format!("cannot read it: {e}; choose another --out")))?;
        if entries.next().is_some() {
            return Err(bad(
                "exists and is not empty; kvmeter never overwrites results: choose a new --out"
                    .into(),
            ));
        }
    }
    fs::create_dir_all(root)
        .map_err(|e| bad(format!("cannot create it: {e}; choose a writable --out")))
}

/// Replaces `path` with `bytes` atomically (write, fsync, rename), so it is always whole.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    let tmp = path.with_extension("tmp");
    let written = File::create(&tmp)
        .and_then(|mut f| {
            f.write_all(bytes)?;
            f.sync_data()
        })
        .and_then(|()| fs::rename(&tmp, path));
    if let Err(e) = written {
        // A full disk must not leave a half-written temporary next to the last good file.
        let _ = fs::remove_file(&tmp);
        return Err(e).with_context(|| format!("cannot write {}", path.display()));
    }
    Ok(())
}

impl RunDir {
    /// Creates the run directory; refuses one that exists with anything in it.
    pub fn create(root: &Path) -> Result<Self, crate::error::UsageError> {
        Self::create_with(root, false)
    }

    /// The merged run directory of a distributed run: intervals.csv has an `agents` column.
    pub fn create_merged(root: &Path) -> Result<Self, crate::error::UsageError> {
        Self::create_with(root, true)
    }

    /// How many agents the intervals appended next merge.
    pub fn set_agents(&mut self, n: usize) {
        self.agents = Some(n);
    }

    fn create_with(root: &Path, merged: bool) -> Result<Self, crate::error::UsageError> {
        let bad =
            |why: String| crate::error::UsageError::new(format!("--out {}: {why}", root.display()));
        claim(root)?;
        fs::create_dir_all(root.join("latency"))
            .map_err(|e| bad(format!("cannot create it: {e}; choose a writable --out")))?;
        let f = OpenOptions::new()
            .create_new(true)
            .write(true)
            .open(root.join("intervals.csv"))
            .map_err(|e| bad(format!("cannot write intervals.csv: {e}")))?;
        let mut intervals = BufWriter::new(f);
        let extra = if merged { ",agents" } else { "" };
        writeln!(intervals, "{INTERVALS_HEADER}{extra}")
            .and_then(|_| intervals.flush())
            .map_err(|e| bad(format!("cannot write intervals.csv: {e}")))?;
        Ok(RunDir {
            root: root.to_path_buf(),
            intervals,
            hlogs: HashMap::new(),
            serializer: V2DeflateSerializer::new(),
            scratch: Vec::new(),
            agents: merged.then_some(0),
        })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Replaces `name` atomically with the pretty JSON of `value`.
    pub fn write_json<T: serde::Serialize>(&self, name: &str, value: &T) -> anyhow::Result<()> {
        let text = serde_json::to_string_pretty(value)? + "\n";
        self.write_file(name, text.as_bytes())
    }

    pub fn write_file(&self, name: &str, bytes: &[u8]) -> anyhow::Result<()> {
        let path = self.root.join(name);
        if let Some(dir) = path.parent() {
            fs::create_dir_all(dir)?;
        }
        write_atomic(&path, bytes)
    }

    /// Appends one row per metric for a closed interval and flushes.
    #[allow(clippy::too_many_arguments)]
    pub fn append_interval(
        &mut self,
        phase: &str,
        index: usize,
        start_s: f64,
        end_s: f64,
        warmup: bool,
        stats: &Stats,
        schedule: Option<ScheduleFigures>,
    ) -> anyhow::Result<()> {
        let secs = (end_s - start_s).max(1e-9);
        let us = |ns: u64| ns as f64 / 1000.0;
        let sched = match schedule {
            Some(f) => {
                let (lp99, lmax) = match stats.lag.as_deref().filter(|h| !h.is_empty()) {
                    Some(h) => (
                        format!("{:.3}", us(percentile::value_at(h, 99.0))),
                        format!("{:.3}", us(percentile::max(h))),
                    ),
                    None => (String::new(), String::new()),
                };
                let behind = f.behind_ms.map(|b| format!("{b:.3}")).unwrap_or_default();
                format!("{:.1},{lp99},{lmax},{behind}", f.offered_ops_per_s)
            }
            None => ",,,".to_string(),
        };
        let sched = match self.agents {
            Some(n) => format!("{sched},{n}"),
            None => sched,
        };
        for (m, o) in stats.metrics() {
            let h = &o.ok;
            let (ip50, ip99, imax) = match &o.intended {
                Some(i) => (
                    format!("{:.3}", us(percentile::value_at(i, 50.0))),
                    format!("{:.3}", us(percentile::value_at(i, 99.0))),
                    format!("{:.3}", us(percentile::max(i))),
                ),
                None => (String::new(), String::new(), String::new()),
            };
            writeln!(
                self.intervals,
                "{phase},{index},{start_s:.3},{end_s:.3},{},{},{},{},{:.1},{:.3},{:.3},{:.3},{:.3},{:.3},{:.3},{:.3},{ip50},{ip99},{imax},{sched}",
                warmup as u8,
                m.name(),
                o.count(),
                o.errors(),
                o.count() as f64 / secs,
                o.bytes as f64 / secs / 1e6,
                percentile::mean(h) / 1000.0,
                us(percentile::value_at(h, 50.0)),
                us(percentile::value_at(h, 90.0)),
                us(percentile::value_at(h, 99.0)),
                us(percentile::value_at(h, 99.9)),
                us(percentile::max(h)),
            )?;
        }
        // Open loop: one SCHEDULE row per interval, written even when nothing completed (a
        // stalled store), with the transactions completed and the backlog.
        if schedule.is_some_and(|f| f.behind_ms.is_some()) {
            let tx = stats.transactions();
            writeln!(
                self.intervals,
                "{phase},{index},{start_s:.3},{end_s:.3},{},SCHEDULE,{tx},,{:.1},,,,,,,,,,,{sched}",
                warmup as u8,
                tx as f64 / secs,
            )?;
        }
        self.intervals.flush()?;
        Ok(())
    }

    /// Appends this interval's histograms to the HDR logs (one file per phase and metric, the
    /// HdrHistogram interval log format 1.3, values in ns).
    pub fn log_histograms(
        &mut self,
        phase: &str,
        phase_start: SystemTime,
        start_s: f64,
        end_s: f64,
        stats: &Stats,
    ) -> anyhow::Result<()> {
        for (m, o) in stats.metrics() {
            self.log_one(phase, m.name(), phase_start, start_s, end_s, &o.ok)?;
            if let Some(f) = &o.failed {
                if !f.is_empty() {
                    self.log_one(
                        phase,
                        &format!("{}-FAILED", m.name()),
                        phase_start,
                        start_s,
                        end_s,
                        f,
                    )?;
                }
            }
            if let Some(i) = o.intended.as_ref().filter(|h| !h.is_empty()) {
                self.log_one(
                    phase,
                    &format!("Intended-{}", m.name()),
                    phase_start,
                    start_s,
                    end_s,
                    i,
                )?;
            }
        }
        Ok(())
    }

    fn log_one(
        &mut self,
        phase: &str,
        name: &str,
        phase_start: SystemTime,
        start_s: f64,
        end_s: f64,
        h: &Histogram<u64>,
    ) -> anyhow::Result<()> {
        let key = format!("{phase}.{name}");
        if !self.hlogs.contains_key(&key) {
            let path = self.root.join("latency").join(format!("{key}.hlog"));
            let mut w = BufWriter::new(File::create(&path)?);
            let start = epoch_secs(phase_start);
            writeln!(
                w,
                "#[Logging for: {name} (phase {phase}, values in nanoseconds)]"
            )?;
            writeln!(w, "#[Histogram log format version 1.3]")?;
            writeln!(
                w,
                "#[StartTime: {start:.3} (seconds since epoch), {}]",
                humantime::format_rfc3339_millis(phase_start)
            )?;
            writeln!(w, "#[BaseTime: {start:.3} (seconds since epoch)]")?;
            writeln!(
                w,
                "\"StartTimestamp\",\"Interval_Length\",\"Interval_Max\",\"Interval_Compressed_Histogram\""
            )?;
            self.hlogs.insert(key.clone(), w);
        }
        self.scratch.clear();
        self.serializer
            .serialize(h, &mut self.scratch)
            .map_err(|e| anyhow::anyhow!("cannot encode histogram: {e:?}"))?;
        let w = self.hlogs.get_mut(&key).expect("inserted above");
        // Interval_Max is in milliseconds (max / 1e6), as Java's writer does for ns values.
        writeln!(
            w,
            "{start_s:.3},{:.3},{:.3},{}",
            end_s - start_s,
            percentile::max(h) as f64 / 1e6,
            base64::engine::general_purpose::STANDARD.encode(&self.scratch)
        )?;
        w.flush()?;
        Ok(())
    }

    /// Appends a phase's pressure-scale rows to `pressure.csv` (created with its header).
    pub fn append_pressure(
        &mut self,
        phase: &str,
        r: &super::PressureResult,
    ) -> anyhow::Result<()> {
        let path = self.root.join("pressure.csv");
        let new = !path.exists();
        let mut f = OpenOptions::new().create(true).append(true).open(&path)?;
        if new {
            writeln!(f, "phase,block_size_kib,step,start_s,seconds,write_ratios,ops_per_s,normalized_pressure,antagonist_read_iops,antagonist_write_iops,antagonist_mb_per_s,antagonist_avg_latency_us")?;
        }
        for s in &r.steps {
            let wr: Vec<String> = s
                .write_ratios
                .iter()
                .map(|w| w.map(|x| format!("{x}")).unwrap_or_else(|| "-".into()))
                .collect();
            writeln!(
                f,
                "{phase},{},{},{:.3},{:.3},{},{:.1},{:.4},{:.1},{:.1},{:.3},{:.1}",
                r.block_size_kib,
                s.step,
                s.start_s,
                s.seconds,
                wr.join("/"),
                s.ops_per_s,
                s.normalized_pressure,
                s.antagonist_read_iops,
                s.antagonist_write_iops,
                s.antagonist_mb_per_s,
                s.antagonist_avg_latency_us
            )?;
        }
        f.sync_data()?;
        Ok(())
    }
}
