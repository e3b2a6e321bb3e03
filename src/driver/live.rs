//! The run's feed of the live metrics endpoint (`crate::metrics`, `--metrics-addr`): once per
//! interval, from the interval loop beside the agent's post, the interval's statistics, the
//! schedule's figures and telemetry's newest sample. Nothing here runs per operation.

use crate::fault::schedule::EventSink;
use crate::measure::Stats;
use crate::metrics::{Exporter, Interval, SeriesKey};
use crate::report::rundir::ScheduleFigures;
use crate::telemetry::Telemetry;
use std::sync::Arc;

pub(super) struct Live {
    exporter: Arc<Exporter>,
    /// The `run` label that tells a sweep's or an experiment's runs apart (`metrics::run_label`).
    run: String,
    store: String,
    /// A distributed run's agent index (`plan.share`); empty for one process.
    agent: String,
}

/// One written interval, as the feed takes it.
pub(super) struct Row<'a> {
    pub phase: &'a str,
    pub stats: &'a Stats,
    pub seconds: f64,
    pub warmup: bool,
    pub sched: Option<ScheduleFigures>,
}

impl Live {
    /// The process's exporter (`--metrics-addr`), if one serves.
    pub(super) fn new(rundir: &std::path::Path, plan: &crate::plan::Plan) -> Option<Live> {
        let exporter = crate::metrics::current()?;
        let live = Live {
            exporter,
            run: crate::metrics::run_label(rundir),
            store: plan.store.clone(),
            agent: plan.share.map(|s| s.index.to_string()).unwrap_or_default(),
        };
        Some(live)
    }

    pub(super) fn key(&self, phase: &str) -> SeriesKey {
        SeriesKey {
            run: self.run.clone(),
            phase: phase.to_string(),
            store: self.store.clone(),
            agent: self.agent.clone(),
        }
    }

    /// Publishes one interval with telemetry's newest figures.
    pub(super) fn interval(&self, row: &Row, t: Option<&Telemetry>) {
        let key = self.key(row.phase);
        if let Some(t) = t {
            if let Some(p) = t.power_info() {
                self.exporter.power_source(&key, &p.source, p.estimate);
            }
            let l = t.latest();
            let gauges: Vec<(&'static str, f64)> = [
                ("kvmeter_cpu_utilization", l.cpu_busy),
                ("kvmeter_process_cpu_cores", l.process_cores),
                (
                    "kvmeter_disk_read_bytes_per_second",
                    l.disk_read_bytes_per_s,
                ),
                (
                    "kvmeter_disk_write_bytes_per_second",
                    l.disk_write_bytes_per_s,
                ),
                ("kvmeter_power_watts", l.watts),
            ]
            .into_iter()
            .filter_map(|(n, v)| v.map(|v| (n, v)))
            .collect();
            self.exporter.gauges(&key, &gauges);
            let totals: Vec<(&'static str, f64)> = [
                ("kvmeter_process_cpu_seconds", l.process_cpu_seconds),
                ("kvmeter_server_cpu_seconds", l.server_cpu_seconds),
            ]
            .into_iter()
            .filter_map(|(n, v)| v.map(|v| (n, v)))
            .collect();
            self.exporter.totals(&key, &totals);
        }
        self.exporter.interval(
            &key,
            &Interval {
                stats: row.stats,
                seconds: row.seconds,
                warmup: row.warmup,
                offered_ops_per_s: row.sched.map(|s| s.offered_ops_per_s),
                behind_s: row.sched.and_then(|s| s.behind_ms).map(|ms| ms / 1e3),
            },
        );
    }

    /// The store's latest statistics and its events so far in `phase` (driver/store_stats.rs,
    /// once per interval).
    pub(super) fn store(
        &self,
        phase: &str,
        specs: &[crate::store::stats::StatSpec],
        values: &[Option<u64>],
        events: &std::collections::BTreeMap<String, u64>,
    ) {
        let key = self.key(phase);
        self.exporter.store_stats(&key, specs, values);
        self.exporter.store_events(&key, events);
    }

    /// `sink` (events.csv), and each event counted by its kind in `phase`'s series (on the
    /// fault thread, once per event).
    pub(super) fn fault_sink(&self, phase: &str, mut sink: EventSink) -> EventSink {
        let (exporter, key) = (self.exporter.clone(), self.key(phase));
        Box::new(move |e| {
            sink(e);
            exporter.fault(&key, &e.event);
        })
    }
}
