//! What a user of the store lived through around each fault, read from the recovery timeline
//! (papers/002 §5: recovery time, and other clients' latency during recovery):
//!
//! - **unavailability**: the longest gap between two successful completions of affected
//!   operations that overlaps the time after the fault (exact: buckets keep their first and
//!   last success);
//! - **time to recover**: from the fault to the start of the first of three consecutive
//!   timeline buckets at ≥ 90 % of the median successful throughput before the fault;
//! - **detection**: when clients saw their first error, and when the cluster reported a new
//!   leader or primary (from the fault events);
//! - **latency of unaffected operations** during recovery against before the fault (all
//!   operations where the cluster does not tell affected data apart — labelled so).

use super::schedule::Event;
use crate::measure::timeline::{Bucket, ClassBucket, AFFECTED, REST};
use crate::store::ErrorKind;
use serde::Serialize;
use std::collections::BTreeMap;

#[derive(Clone, Debug, Serialize, serde::Deserialize)]
pub struct Latency {
    pub operations: u64,
    pub p50_us: Option<f64>,
    pub p99_us: Option<f64>,
    pub max_us: Option<f64>,
}

impl Latency {
    fn of(c: &ClassBucket) -> Latency {
        let us = |v: Option<u64>| v.map(|n| n as f64 / 1000.0);
        Latency {
            operations: c.ok,
            p50_us: us(c.percentile(50.0)),
            p99_us: us(c.percentile(99.0)),
            max_us: (c.ok > 0).then(|| c.max_ns as f64 / 1000.0),
        }
    }
}

#[derive(Clone, Debug, Serialize, serde::Deserialize)]
pub struct FaultReport {
    pub fault: usize,
    pub spec: String,
    pub member: String,
    pub pid: Option<u32>,
    /// When the fault fired, seconds after the phase start.
    pub at_s: f64,
    /// From the fault to the clients' first error (none: they saw no error).
    pub first_error_after_s: Option<f64>,
    /// From the fault to the cluster reporting a new leader or primary.
    pub cluster_reported_after_s: Option<f64>,
    /// The longest gap between successful completions of affected operations.
    pub unavailable_s: f64,
    /// From the fault to recovery (none: it did not recover before the phase ended).
    pub recovered_after_s: Option<f64>,
    /// Median successful operations per second per timeline bucket before the fault.
    pub before_ops_per_s: f64,
    /// Errors by kind from the fault to recovery (or the phase end).
    pub errors: BTreeMap<String, u64>,
    /// Which operations the latency figures are of.
    pub latency_of: String,
    pub latency_before: Latency,
    pub latency_during_recovery: Latency,
    /// Energy over the recovery window, or why not.
    pub energy: String,
}

/// The reports of every fault that fired, from the phase's timeline buckets (`width_s` each).
pub fn analyse(
    buckets: &[Bucket],
    width_s: f64,
    events: &[Event],
    specs: &[String],
    split: bool,
    warmup_s: f64,
) -> Vec<FaultReport> {
    let phase = Phase {
        buckets,
        w: width_s,
        split,
        warmup_s,
    };
    let mut out = vec![];
    for (k, spec) in specs.iter().enumerate() {
        let Some(fire) = events
            .iter()
            .find(|e| e.fault == k && matches!(e.event.as_str(), "kill" | "stop" | "restart"))
        else {
            continue;
        };
        let reported = events
            .iter()
            .find(|e| e.fault == k && matches!(e.event.as_str(), "leader" | "primary"))
            .map(|e| e.t_s - fire.t_s);
        out.push(phase.one(k, spec, fire, reported));
    }
    out
}

/// A phase's timeline, as the analysis of each fault reads it.
struct Phase<'a> {
    buckets: &'a [Bucket],
    /// Bucket width (s).
    w: f64,
    /// Whether the buckets tell affected data from the rest.
    split: bool,
    warmup_s: f64,
}

/// What one pass over the buckets finds around a fault (from `at` to `end`).
#[derive(Default)]
struct Scan {
    /// The longest time between consecutive successes across the fault (ns).
    longest: u64,
    first_error: Option<f64>,
    errors: BTreeMap<String, u64>,
    lat_before: ClassBucket,
    lat_during: ClassBucket,
}

fn ns(s: f64) -> u64 {
    (s * 1e9) as u64
}

impl Phase<'_> {
    fn affected(&self, b: &Bucket) -> ClassBucket {
        if self.split {
            b.class[AFFECTED].clone()
        } else {
            b.all()
        }
    }

    fn unaffected(&self, b: &Bucket) -> ClassBucket {
        if self.split {
            b.class[REST].clone()
        } else {
            b.all()
        }
    }

    fn start(&self, b: &Bucket) -> f64 {
        b.index as f64 * self.w
    }

    /// Whether `b` is a whole bucket after warm-up that ended by the fault at `at`.
    fn before(&self, b: &Bucket, at: f64) -> bool {
        let s = self.start(b);
        s >= self.warmup_s.min(at) && s + self.w <= at
    }

    /// The median rate of affected successes before the fault.
    fn median_before(&self, at: f64) -> f64 {
        let mut rates: Vec<f64> = self
            .buckets
            .iter()
            .filter(|b| self.before(b, at))
            .map(|b| self.affected(b).ok as f64 / self.w)
            .collect();
        rates.sort_by(|a, b| a.total_cmp(b));
        if rates.is_empty() {
            0.0
        } else {
            rates[rates.len() / 2]
        }
    }

    /// Recovery: the first of three consecutive buckets (starting after the fault) at ≥ 90 %
    /// of the rate before.
    fn recovered_at(&self, at: f64, median: f64) -> Option<f64> {
        let after: Vec<&Bucket> = self
            .buckets
            .iter()
            .filter(|b| self.start(b) >= at)
            .collect();
        after.windows(3).find_map(|win| {
            win.iter()
                .all(|b| self.affected(b).ok as f64 / self.w >= 0.9 * median && median > 0.0)
                .then(|| self.start(win[0]))
        })
    }

    /// Unavailability (gaps between consecutive successes, over every bucket, that end after
    /// the fault and start before `end`), the errors in the window, and the latency of the
    /// unaffected operations before and during it.
    fn scan(&self, at: f64, end: f64) -> Scan {
        let w = self.w;
        let mut r = Scan::default();
        let mut last_ok: Option<u64> = None;
        for b in self.buckets {
            let a = self.affected(b);
            let s = self.start(b);
            if let (Some(first), Some(prev)) = (a.first_ok, last_ok) {
                if first > ns(at) && prev < ns(end) {
                    r.longest = r.longest.max(first - prev);
                }
            }
            if a.last_ok.is_some() {
                last_ok = a.last_ok;
            }
            if s + w > at && s < end {
                for (i, n) in a.errors.iter().enumerate() {
                    if *n > 0 {
                        *r.errors.entry(ErrorKind::ALL[i].name().into()).or_default() += n;
                        if r.first_error.is_none() {
                            r.first_error = Some((s - at).max(0.0));
                        }
                    }
                }
            }
            if self.before(b, at) {
                r.lat_before.add(&self.unaffected(b));
            } else if s >= at && s < end {
                r.lat_during.add(&self.unaffected(b));
            }
        }
        // No success after the fault at all: unavailable until the phase ended.
        let phase_end = self
            .buckets
            .last()
            .map(|b| ns(self.start(b) + w))
            .unwrap_or(0);
        if last_ok.is_none_or(|l| l <= ns(at)) {
            r.longest = r
                .longest
                .max(phase_end.saturating_sub(last_ok.unwrap_or(ns(at))));
        }
        r
    }

    /// The report of fault `k`, which `fire` started; `reported`: when the cluster named a new
    /// leader or primary (s after the fault).
    fn one(&self, k: usize, spec: &str, fire: &Event, reported: Option<f64>) -> FaultReport {
        let at = fire.t_s;
        let median = self.median_before(at);
        let recovered_at = self.recovered_at(at, median);
        let end = recovered_at.unwrap_or_else(|| {
            self.buckets
                .last()
                .map(|b| self.start(b) + self.w)
                .unwrap_or(at)
        });
        let scan = self.scan(at, end);
        FaultReport {
            fault: k,
            spec: spec.to_string(),
            member: fire.member.clone(),
            pid: fire.pid,
            at_s: at,
            first_error_after_s: scan.first_error,
            cluster_reported_after_s: reported,
            unavailable_s: scan.longest as f64 / 1e9,
            recovered_after_s: recovered_at.map(|r| r - at),
            before_ops_per_s: median,
            errors: scan.errors,
            latency_of: if self.split {
                "operations on data the fault did not affect".into()
            } else {
                "all operations (this cluster serves every key from the member hit, so none is unaffected)".into()
            },
            latency_before: Latency::of(&scan.lat_before),
            latency_during_recovery: Latency::of(&scan.lat_during),
            energy: "unavailable: telemetry was off".into(),
        }
    }
}

/// One power sample of a phase (telemetry.csv's `time_s`, `power_w`, `power_source`; the
/// report's reader, `report::rundata::power_samples`, picks them out).
#[derive(Clone, Debug)]
pub struct PowerSample {
    /// Seconds since telemetry started.
    pub t_s: f64,
    /// None where no power source ran.
    pub power_w: Option<f64>,
    pub source: String,
}

/// Energy over each fault's window (from the fault to recovery, or to the phase end) from
/// the phase's power samples: Σ power × sample interval. A sample's time is taken from the
/// start of telemetry; the phase starts one interval before its first sample.
pub fn fill_energy(reports: &mut [FaultReport], rows: &[PowerSample], interval_s: f64) {
    let Some(first) = rows.first() else {
        return;
    };
    let phase0 = first.t_s - interval_s;
    for r in reports.iter_mut() {
        let from = r.at_s;
        let to = r
            .recovered_after_s
            .map(|x| r.at_s + x)
            .unwrap_or_else(|| rows.last().map(|x| x.t_s - phase0).unwrap_or(from));
        let window: Vec<&PowerSample> = rows
            .iter()
            // A sample covers the interval that ends at its time (1 µs slack for rounding).
            .filter(|x| x.t_s - phase0 > from + 1e-6 && x.t_s - phase0 - interval_s < to - 1e-6)
            .collect();
        if window.is_empty() || window.iter().any(|x| x.power_w.is_none()) {
            r.energy = "unavailable: no power source ran (see 'kvmeter doctor')".into();
            continue;
        }
        let joules: f64 = window
            .iter()
            .map(|x| x.power_w.unwrap_or(0.0) * interval_s)
            .sum();
        let source = &window[0].source;
        let label = if source.contains("estimate") {
            "ESTIMATE (model, not a measurement), "
        } else {
            ""
        };
        r.energy = format!("{label}{joules:.1} J over {:.1} s ({source})", to - from);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::measure::timeline::ClassBucket;

    fn bucket(i: u64, ok: u64, first: Option<u64>, last: Option<u64>, errs: u64) -> Bucket {
        let mut b = Bucket {
            index: i,
            ..Default::default()
        };
        b.class[AFFECTED] = ClassBucket {
            ok,
            first_ok: first,
            last_ok: last,
            max_ns: 1000,
            bins: if ok > 0 { vec![(5, ok as u32)] } else { vec![] },
            ..Default::default()
        };
        b.class[AFFECTED].errors[ErrorKind::Timeout as usize] = errs;
        b
    }

    #[test]
    fn gap_and_recovery_from_hand_made_buckets() {
        // 100 ms buckets, 100 ok each (1000/s); fault at 1.0 s; nothing succeeds from
        // 1.02 s (last success) to 1.53 s (first after); then full speed again.
        let ms = |m: u64| m * 1_000_000;
        let mut b = vec![];
        for i in 0..10 {
            b.push(bucket(
                i,
                100,
                Some(ms(i * 100 + 1)),
                Some(ms(i * 100 + 99)),
                0,
            ));
        }
        b.push(bucket(10, 20, Some(ms(1001)), Some(ms(1020)), 3));
        for i in 11..15 {
            b.push(bucket(i, 0, None, None, 2));
        }
        b.push(bucket(15, 50, Some(ms(1530)), Some(ms(1599)), 0));
        for i in 16..25 {
            b.push(bucket(
                i,
                100,
                Some(ms(i * 100 + 1)),
                Some(ms(i * 100 + 99)),
                0,
            ));
        }
        let ev = Event {
            t_s: 1.0,
            fault: 0,
            event: "kill".into(),
            target: "leader".into(),
            member: "member:0".into(),
            pid: Some(7),
            cluster: String::new(),
        };
        let r = analyse(&b, 0.1, &[ev], &["at=1s,kill=leader".into()], false, 0.0);
        assert_eq!(r.len(), 1);
        let r = &r[0];
        assert!(
            (r.unavailable_s - 0.510).abs() < 1e-9,
            "{}",
            r.unavailable_s
        );
        assert!((r.before_ops_per_s - 1000.0).abs() < 1e-9);
        // Buckets 16, 17, 18 are the first three at ≥ 900/s: recovered 0.6 s after.
        assert!((r.recovered_after_s.unwrap() - 0.6).abs() < 1e-9);
        assert_eq!(r.errors["timeout"], 3 + 4 * 2);
        assert_eq!(r.first_error_after_s, Some(0.0));
        assert_eq!(r.latency_before.operations, 1000);
    }

    #[test]
    fn no_success_after_the_fault_is_unavailable_to_the_end() {
        let ms = |m: u64| m * 1_000_000;
        let mut b = vec![bucket(0, 10, Some(ms(1)), Some(ms(50)), 0)];
        for i in 1..5 {
            b.push(bucket(i, 0, None, None, 1));
        }
        let ev = Event {
            t_s: 0.1,
            fault: 0,
            event: "kill".into(),
            target: "server".into(),
            member: "server:0".into(),
            pid: None,
            cluster: String::new(),
        };
        let r = &analyse(&b, 0.1, &[ev], &["x".into()], false, 0.0)[0];
        assert!(r.recovered_after_s.is_none());
        assert!((r.unavailable_s - 0.45).abs() < 1e-9, "{}", r.unavailable_s);
    }

    #[test]
    fn energy_sums_the_power_samples_of_the_window() {
        // Telemetry started 3 s before the phase; samples every 0.1 s at 100 W.
        let samples: Vec<PowerSample> = (1..=30)
            .map(|k| PowerSample {
                t_s: 3.0 + k as f64 * 0.1,
                power_w: Some(100.0),
                source: "rapl".into(),
            })
            .collect();
        let ev = Event {
            t_s: 1.0,
            fault: 0,
            event: "kill".into(),
            target: "leader".into(),
            member: "member:0".into(),
            pid: None,
            cluster: String::new(),
        };
        let b: Vec<Bucket> = (0..30)
            .map(|i| {
                bucket(
                    i,
                    100,
                    Some(i * 100_000_000 + 1),
                    Some(i * 100_000_000 + 2),
                    0,
                )
            })
            .collect();
        let mut r = analyse(&b, 0.1, &[ev], &["x".into()], false, 0.0);
        r[0].recovered_after_s = Some(0.5);
        fill_energy(&mut r, &samples, 0.1);
        // Samples at 1.1 … 1.5 s cover (1.0, 1.5]: 5 × 100 W × 0.1 s.
        assert_eq!(r[0].energy, "50.0 J over 0.5 s (rapl)");
    }
}
