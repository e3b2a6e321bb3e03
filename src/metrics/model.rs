//! The exposition as data: metric families with their samples, built once per interval from
//! the cumulative state (`series`) and rendered by `text` and `proto` from the same model, so
//! the two formats cannot disagree on names, labels or values.

use super::series::{Hist, Key, PhaseSeries};
use std::collections::BTreeMap;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
    Histogram,
}

#[derive(Clone, Debug)]
pub enum Value<'a> {
    Scalar(f64),
    Hist(&'a Hist),
}

#[derive(Clone, Debug)]
pub struct Sample<'a> {
    pub labels: Vec<(&'static str, String)>,
    pub value: Value<'a>,
}

#[derive(Clone, Debug)]
pub struct Family<'a> {
    /// Without `_total` for counters (the text renderer adds it; the protobuf names it so).
    pub name: &'static str,
    pub help: &'static str,
    pub kind: Kind,
    pub samples: Vec<Sample<'a>>,
}

/// Gauge names a phase may carry (`PhaseSeries::gauges`), with their help; docs/metrics.md
/// lists the same.
pub const GAUGES: &[(&str, &str)] = &[
    (
        "kvmeter_achieved_ops_per_second",
        "Operations per second completed in the last interval (transactions).",
    ),
    (
        "kvmeter_offered_ops_per_second",
        "Open loop: operations per second the schedule offered at the last interval's end.",
    ),
    (
        "kvmeter_behind_seconds",
        "Open loop: how far the sender was behind its schedule at the last interval's end (the backlog).",
    ),
    (
        "kvmeter_cpu_utilization",
        "Whole-machine CPU busy share over the last interval (0-1).",
    ),
    (
        "kvmeter_process_cpu_cores",
        "CPU seconds per second used by the measured process over the last interval.",
    ),
    (
        "kvmeter_disk_read_bytes_per_second",
        "The watched disk's reads over the last interval.",
    ),
    (
        "kvmeter_disk_write_bytes_per_second",
        "The watched disk's writes over the last interval.",
    ),
    (
        "kvmeter_power_watts",
        "Power over the last interval (see the source and estimate labels).",
    ),
];

/// Counters a phase may carry whole (`PhaseSeries::totals`), without `_total`, with their
/// help; docs/metrics.md lists the same.
pub const TOTALS: &[(&str, &str)] = &[
    (
        "kvmeter_process_cpu_seconds",
        "CPU seconds (user + system) of the measured process (kvmeter; an embedded store runs in it) since it started.",
    ),
    (
        "kvmeter_server_cpu_seconds",
        "CPU seconds (user + system) of the store's server processes since they started, every member of a server kvmeter manages summed (a member that was killed keeps what it had used at its last sample).",
    ),
];

/// Every family, in a fixed order, from the phases so far. `power` labels the power gauge
/// with its source and whether it is an estimate.
pub fn families<'a>(
    phases: &'a BTreeMap<Key, PhaseSeries>,
    power: &BTreeMap<Key, (String, bool)>,
) -> Vec<Family<'a>> {
    let mut all = op_families(phases);
    all.extend(phase_families(phases, power));
    all.extend(store_families(phases));
    all
}

fn scalar(labels: Vec<(&'static str, String)>, v: f64) -> Sample<'static> {
    Sample {
        labels,
        value: Value::Scalar(v),
    }
}

/// The families kept per operation type: counts, bytes, hits and misses, latencies.
fn op_families(phases: &BTreeMap<Key, PhaseSeries>) -> Vec<Family<'_>> {
    let op_labels = |k: &Key, op: &str| {
        let mut l = k.labels();
        l.push(("op", op.to_string()));
        l
    };
    let mut ops = fam(
        "kvmeter_operations",
        "Operations completed after warm-up, every status.",
        Kind::Counter,
    );
    let mut errors = fam(
        "kvmeter_errors",
        "Operations that did not succeed, by kind (not_found included).",
        Kind::Counter,
    );
    let mut hits = fam(
        "kvmeter_hits",
        "Operations answered with the key's value (ok).",
        Kind::Counter,
    );
    let mut misses = fam(
        "kvmeter_misses",
        "Operations answered that the key is not there (not_found): for a cache, an answer.",
        Kind::Counter,
    );
    let mut hit_ratio = fam(
        "kvmeter_hit_ratio",
        "hits / (hits + misses) after warm-up; absent while there is neither.",
        Kind::Gauge,
    );
    let mut missed = fam(
        "kvmeter_missed_latency_seconds",
        "Misses' latency from send (service time), apart from the hits'.",
        Kind::Histogram,
    );
    let mut bytes = fam(
        "kvmeter_bytes",
        "User data bytes moved (values written or returned).",
        Kind::Counter,
    );
    let mut send = fam(
        "kvmeter_latency_seconds",
        "Successful operations' latency from send (service time).",
        Kind::Histogram,
    );
    let mut intended = fam(
        "kvmeter_intended_latency_seconds",
        "Successful operations' latency from the intended start (paced and open-loop runs).",
        Kind::Histogram,
    );
    let hist = |labels, h| Sample {
        labels,
        value: Value::Hist(h),
    };
    for (k, p) in phases {
        for (op, s) in &p.ops {
            let l = || op_labels(k, op);
            ops.samples.push(scalar(l(), s.count() as f64));
            bytes.samples.push(scalar(l(), s.bytes as f64));
            hits.samples.push(scalar(l(), s.hits() as f64));
            misses.samples.push(scalar(l(), s.misses() as f64));
            let lookup = crate::measure::has_hit_ratio(op, s.misses());
            if let Some(r) = s.hit_ratio().filter(|_| lookup) {
                hit_ratio.samples.push(scalar(l(), r));
            }
            if let Some(h) = &s.missed {
                missed.samples.push(hist(l(), h));
            }
            for (kind, n) in s.errors() {
                let mut with_kind = l();
                with_kind.push(("kind", kind.to_string()));
                errors.samples.push(scalar(with_kind, n as f64));
            }
            send.samples.push(hist(l(), &s.send));
            if let Some(h) = &s.intended {
                intended.samples.push(hist(l(), h));
            }
        }
    }
    vec![
        ops, errors, hits, misses, hit_ratio, bytes, send, missed, intended,
    ]
}

/// The families kept per phase: the send lag, faults, intervals, gauges and whole counters.
fn phase_families<'a>(
    phases: &'a BTreeMap<Key, PhaseSeries>,
    power: &BTreeMap<Key, (String, bool)>,
) -> Vec<Family<'a>> {
    let mut lag = fam(
        "kvmeter_send_lag_seconds",
        "How late each operation was sent after its intended start.",
        Kind::Histogram,
    );
    let mut faults = fam(
        "kvmeter_fault_events",
        "Fault events injected, by kind.",
        Kind::Counter,
    );
    let mut intervals = fam(
        "kvmeter_intervals",
        "Measured intervals exported.",
        Kind::Counter,
    );
    let mut gauges: Vec<Family> = GAUGES
        .iter()
        .map(|&(n, h)| fam(n, h, Kind::Gauge))
        .collect();
    let mut totals: Vec<Family> = TOTALS
        .iter()
        .map(|&(n, h)| fam(n, h, Kind::Counter))
        .collect();
    for (k, p) in phases {
        if let Some(h) = &p.lag {
            lag.samples.push(Sample {
                labels: k.labels(),
                value: Value::Hist(h),
            });
        }
        for (kind, n) in &p.faults {
            let mut l = k.labels();
            l.push(("kind", kind.clone()));
            faults.samples.push(scalar(l, *n as f64));
        }
        intervals
            .samples
            .push(scalar(k.labels(), p.intervals as f64));
        for (g, f) in GAUGES.iter().zip(gauges.iter_mut()) {
            if let Some(v) = p.gauges.get(g.0) {
                let mut l = k.labels();
                if g.0 == "kvmeter_power_watts" {
                    let (src, est) = power.get(k).cloned().unwrap_or_default();
                    l.push(("source", src));
                    l.push(("estimate", est.to_string()));
                }
                f.samples.push(scalar(l, *v));
            }
        }
        for (c, f) in TOTALS.iter().zip(totals.iter_mut()) {
            if let Some(v) = p.totals.get(c.0) {
                f.samples.push(scalar(k.labels(), *v));
            }
        }
    }
    let mut all = vec![lag, faults, intervals];
    all.append(&mut gauges);
    all.append(&mut totals);
    all
}

/// The store's own statistics and events (issue 43): `kvmeter_store_counter` and
/// `kvmeter_store_gauge` by `statistic` and `unit` (the names of store_stats.csv's columns,
/// docs/run-directory.md), `kvmeter_store_events` by `event`.
fn store_families(phases: &BTreeMap<Key, PhaseSeries>) -> Vec<Family<'_>> {
    let mut counters = fam(
        "kvmeter_store_counter",
        "A counter the store keeps about itself, at its latest sample (store_stats.csv), by statistic and unit.",
        Kind::Counter,
    );
    let mut gauges = fam(
        "kvmeter_store_gauge",
        "A level the store reports about itself, at its latest sample (store_stats.csv), by statistic and unit.",
        Kind::Gauge,
    );
    let mut events = fam(
        "kvmeter_store_events",
        "Events the store logged in the phase (store_events.csv: flushes, compactions, stalls, latency spikes), by event.",
        Kind::Counter,
    );
    for (k, p) in phases {
        for (name, (counter, unit, v)) in &p.store {
            let mut l = k.labels();
            l.push(("statistic", name.to_string()));
            l.push(("unit", unit.to_string()));
            let f = if *counter { &mut counters } else { &mut gauges };
            f.samples.push(scalar(l, *v));
        }
        for (event, n) in &p.store_events {
            let mut l = k.labels();
            l.push(("event", event.clone()));
            events.samples.push(scalar(l, *n as f64));
        }
    }
    vec![counters, gauges, events]
}

fn fam<'a>(name: &'static str, help: &'static str, kind: Kind) -> Family<'a> {
    Family {
        name,
        help,
        kind,
        samples: vec![],
    }
}
