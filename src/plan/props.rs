//! YCSB properties as kvmeter resolves them: the built-in workload files, which property names
//! are honoured or ignored (with why), and `Props` — every value with the place it came from
//! (file and line, `-p`, or flag), read with Java's parsing rules so that a value YCSB accepts
//! is accepted here and one it rejects gets a message naming its source.

use crate::error::UsageError;
use std::collections::BTreeMap;
use std::path::Path;

pub use super::model::PropValue;

/// The workload files shipped with kvmeter (YCSB's values), usable as `-P workloada` anywhere.
pub const BUILTIN_WORKLOADS: [(&str, &str); 6] = [
    ("workloada", include_str!("../../workloads/workloada")),
    ("workloadb", include_str!("../../workloads/workloadb")),
    ("workloadc", include_str!("../../workloads/workloadc")),
    ("workloadd", include_str!("../../workloads/workloadd")),
    ("workloade", include_str!("../../workloads/workloade")),
    ("workloadf", include_str!("../../workloads/workloadf")),
];

/// Property names kvmeter honours.
const HONOURED: &[&str] = &[
    "workload",
    "threadcount",
    "target",
    // kvmeter's own: open-loop arrivals (`--arrival`, `--rate`), settable per phase in -P files.
    "arrival",
    "rate",
    "recordcount",
    "operationcount",
    "insertcount",
    "maxexecutiontime",
    "table",
    "fieldcount",
    "fieldnameprefix",
    "fieldlength",
    "minfieldlength",
    "fieldlengthdistribution",
    "fieldlengthhistogram",
    "readallfields",
    "readallfieldsbyname",
    "writeallfields",
    "dataintegrity",
    "readproportion",
    "updateproportion",
    "insertproportion",
    "scanproportion",
    "readmodifywriteproportion",
    "requestdistribution",
    "minscanlength",
    "maxscanlength",
    "scanlengthdistribution",
    "insertorder",
    "insertstart",
    "zeropadding",
    "hotspotdatafraction",
    "hotspotopnfraction",
    "exponential.percentile",
    "exponential.frac",
    "core_workload_insertion_retry_limit",
    "core_workload_insertion_retry_interval",
    "hdrhistogram.percentiles",
    // kvmeter's own: Facebook ETC's key and value sizes (docs/workloads-models.md).
    "keysizedistribution",
    "valuesizedistribution",
    "dotransactions",
];

/// YCSB properties kvmeter accepts but does not use (it has its own way), with the reason.
const IGNORED: &[(&str, &str)] = &[
    ("db", "use --store"),
    ("exporter", "use --format; summary.json is always written"),
    ("exportfile", "results go to the run directory (--out)"),
    ("measurementtype", "kvmeter always records HdrHistograms"),
    (
        "measurement.interval",
        "with --target both service and intended latencies are kept",
    ),
    ("measurement.trackjvm", "there is no JVM"),
    (
        "measurement.histogram.verbose",
        "the HDR logs in latency/ hold every bucket",
    ),
    ("histogram.buckets", "kvmeter always records HdrHistograms"),
    (
        "timeseries.granularity",
        "use --interval; intervals.csv is the time series",
    ),
    (
        "hdrhistogram.fileoutput",
        "HDR logs are always written to latency/",
    ),
    (
        "hdrhistogram.output.path",
        "HDR logs are always written to latency/",
    ),
    (
        "measurement.raw.output_file",
        "kvmeter records HdrHistograms",
    ),
    (
        "measurement.raw.no_summary",
        "kvmeter records HdrHistograms",
    ),
    (
        "reportlatencyforeacherror",
        "failed operations always get their own latency histogram",
    ),
    (
        "latencytrackederrors",
        "failed operations always get their own latency histogram",
    ),
    ("spin.sleep", "pacing sleeps with 1 ns timer slack"),
    ("status", "progress is always shown on stderr"),
    ("status.interval", "use --status-interval"),
    ("label", "use --out to name the run"),
    (
        "core_workload_insertion_keep_going_on_error",
        "kvmeter always keeps going and counts the error",
    ),
    ("basicdb.verbose", "use --store null"),
    ("basicdb.simulatedelay", "use --store null"),
    ("basicdb.randomizedelay", "use --store null"),
    ("basicdb.count", "use --store null"),
];

#[derive(Clone, Default)]
pub(super) struct Props(BTreeMap<String, PropValue>);

impl Props {
    pub(super) fn set(&mut self, k: &str, v: impl Into<String>, source: impl Into<String>) {
        self.0.insert(
            k.to_string(),
            PropValue {
                value: v.into(),
                source: source.into(),
            },
        );
    }
    pub(super) fn get(&self, k: &str) -> Option<&PropValue> {
        self.0.get(k)
    }
    pub(super) fn has(&self, k: &str) -> bool {
        self.0.contains_key(k)
    }
    /// The names of every property set.
    pub(super) fn names(&self) -> impl Iterator<Item = &str> {
        self.0.keys().map(String::as_str)
    }

    /// The complaint about property `k`, naming where it was set; a key that was never set
    /// (a value derived from others) is named without a source rather than panicking.
    pub(super) fn bad(&self, k: &str, expected: &str) -> UsageError {
        match self.0.get(k) {
            Some(p) => UsageError::new(format!(
                "{}: property '{k}'='{}': expected {expected}",
                p.source, p.value
            )),
            None => UsageError::new(format!("property '{k}' (not set): expected {expected}")),
        }
    }

    /// Java `Long.parseLong`: optional sign and digits only.
    pub(super) fn int(&self, k: &str, default: i64) -> Result<i64, UsageError> {
        match self.get(k) {
            None => Ok(default),
            Some(p) => {
                let v = &p.value;
                let digits = v.strip_prefix(['-', '+']).unwrap_or(v);
                if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(self.bad(k, "a whole number (digits only, no spaces)"));
                }
                v.parse()
                    .map_err(|_| self.bad(k, "a whole number in range"))
            }
        }
    }

    pub(super) fn int32(&self, k: &str, default: i32) -> Result<i32, UsageError> {
        let v = self.int(k, default as i64)?;
        i32::try_from(v).map_err(|_| self.bad(k, "a 32-bit whole number"))
    }

    /// Java `Double.parseDouble` (trims whitespace).
    pub(super) fn float(&self, k: &str, default: f64) -> Result<f64, UsageError> {
        match self.get(k) {
            None => Ok(default),
            Some(p) => {
                let t = p.value.trim();
                let t = t.strip_suffix(['d', 'D', 'f', 'F']).unwrap_or(t);
                t.parse::<f64>()
                    .ok()
                    .filter(|x| x.is_finite())
                    .ok_or_else(|| self.bad(k, "a finite number (for example 0.5)"))
            }
        }
    }

    /// Java's rule: true only for "true" ignoring case; kvmeter warns about anything but
    /// true/false instead of silently reading it as false.
    pub(super) fn boolean(&self, k: &str, default: bool, warnings: &mut Vec<String>) -> bool {
        match self.get(k) {
            None => default,
            Some(p) => {
                let t = p.value.eq_ignore_ascii_case("true");
                if !t && !p.value.eq_ignore_ascii_case("false") {
                    warnings.push(format!(
                        "{}: property '{k}'='{}' is read as false (YCSB accepts only true/false)",
                        p.source, p.value
                    ));
                }
                t
            }
        }
    }

    /// Every property as resolved, with its source (the plan keeps them all).
    pub(super) fn into_map(self) -> BTreeMap<String, PropValue> {
        self.0
    }

    pub(super) fn string(&self, k: &str, default: &str) -> String {
        self.get(k)
            .map(|p| p.value.clone())
            .unwrap_or_else(|| default.to_string())
    }
}

pub(super) fn load_workload_file(
    name: &str,
    inline: &[super::request::WorkloadText],
    props: &mut Props,
    warnings: &mut Vec<String>,
) -> Result<(), UsageError> {
    let path = Path::new(name);
    let read = match inline.iter().find(|w| w.name == name) {
        Some(w) => Ok(w.text.clone()),
        None => std::fs::read(path).map(|b| super::javaprops::latin1(&b)),
    };
    let (text, source) = match read {
        Ok(text) => (text, name.to_string()),
        Err(e) => {
            // Only a bare name selects a built-in: a path that does not exist is a typo, not
            // a request for the built-in of the same file name.
            match BUILTIN_WORKLOADS.iter().find(|(n, _)| *n == name) {
                Some((n, t)) if !path.exists() => (t.to_string(), format!("{n} (built-in)")),
                _ => {
                    return Err(UsageError::new(format!(
                        "-P {name}: cannot read the workload file: {e}; give a readable YCSB property file or a built-in one (workloada .. workloadf)"
                    )))
                }
            }
        }
    };
    let entries =
        super::javaprops::parse(&text).map_err(|e| UsageError::new(format!("-P {name}: {e}")))?;
    for (k, v, line) in entries {
        check_known(&k, &format!("{source}:{line}"), warnings)?;
        props.set(&k, v, format!("{source}:{line}"));
    }
    Ok(())
}

pub(super) fn check_known(
    k: &str,
    source: &str,
    warnings: &mut Vec<String>,
) -> Result<(), UsageError> {
    if HONOURED.contains(&k) || crate::workload::mixgraph::PROPERTIES.contains(&k) {
        return Ok(());
    }
    if let Some((_, why)) = IGNORED.iter().find(|(n, _)| *n == k) {
        warnings.push(format!("{source}: property '{k}' is ignored: {why}"));
        return Ok(());
    }
    Err(UsageError::new(format!(
        "{source}: unknown property '{k}'; kvmeter takes YCSB's core properties (docs/workloads.md); store settings go in --store-opt (see 'kvmeter stores')"
    )))
}
